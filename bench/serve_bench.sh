#!/usr/bin/env bash
# Load-tests `classic serve` with wrk: ResNet-50 at 224 (random torchvision
# weights, 1000 classes) and the Fashion-MNIST recipe's ResNet-50 at 28 px
# (a few training steps), OMP_NUM_THREADS=2, at each concurrency with the
# default batching and with --max_batch 1; prints one table row per run
# (requests/s, p50, p99, non-2xx) and `classic bench --mode infer` beside
# it as the engine's own figure.  Modes: batch16 (the defaults, max_batch
# 16 and max_delay_ms 5), delay0 (max_delay_ms 0: a batch of whatever
# queued while the previous one ran) and batch1 (--max_batch 1).
#
#   bench/serve_bench.sh [SECONDS per run, default 10]
#   BUILD=build-serve CONC="1 4 16 64" MODELS="r50_224 fm28" \
#     MODES="batch16 delay0 batch1" MIXED=1 SOAK=600 bench/serve_bench.sh 10
#
# MIXED (on by default) adds runs with 10% bad requests at concurrency 16
# after the batch16 rows, each after a clean run (ROUNDS pairs, default
# 2); SOAK=seconds a long run whose RSS is read before and after.
#
# The figures and the machine they came from go in docs/serve.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
secs="${1:-10}"
build="${BUILD:-$root/build}"
classic="$build/classic"
conc="${CONC:-1 4 16 64}"
models="${MODELS:-r50_224 fm28}"
modes="${MODES:-batch16 delay0 batch1}"
work="${WORK:-$(mktemp -d)}"
mkdir -p "$work"
py=/usr/bin/python3
[ -x "$classic" ] || { echo "serve_bench: no $classic (BUILD=...)"; exit 1; }
command -v wrk >/dev/null || { echo "serve_bench: wrk is missing (scripts/install-deps.sh)"; exit 1; }
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
export OMP_NUM_THREADS=2
# Threads that sleep between forwards: the machine may be shared.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# The models and one image each, made once in $work.
if [ ! -f "$work/r50.pth" ]; then
  "$py" - "$work" <<'EOF'
import sys, torch, torchvision
w = sys.argv[1]
torch.manual_seed(0)
torch.save(torchvision.models.resnet50().state_dict(), w + "/r50.pth")
x = torch.arange(256 * 320 * 3).reshape(3, 256, 320)
img = ((x * 2654435761) % 251).to(torch.uint8)
torchvision.io.write_jpeg(img, w + "/cat.jpg", quality=90)
g = ((torch.arange(28 * 28).reshape(1, 28, 28) * 7) % 255).to(torch.uint8)
torchvision.io.write_png(g, w + "/item.png")
EOF
fi
if [ ! -f "$work/fm28/resnet50-last.safetensors" ]; then
  "$classic" train --config "$root/configs/resnet50_fashion_mnist.yaml" \
    --data_dir /usr/share/datasets/fashion-mnist --limit_train 256 \
    --limit_val 64 --batch_size 32 --epoch_size 1 --warmup_epochs 0 --amp_level O0 \
    --autotune false --num_parallel_workers 1 --ckpt_save_dir "$work/fm28" \
    --log_level error >/dev/null
fi

if [ ! -f "$work/bomb.png" ]; then
  # A valid PNG header claiming 100000 x 100000 pixels, and nothing else.
  "$py" - "$work/bomb.png" <<'EOF'
import struct, sys, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                              chunk(b"IDAT", b"") + chunk(b"IEND", b""))
EOF
fi

# Every 10th request bad, in turn: a truncated image, text sent as an
# image, a body over the 20 MiB limit, a decompression bomb's header.
# The requests are formatted once per wrk thread: the load generator shares
# the server's cores, and rebuilding a 21 MiB request in Lua each time took
# it a tenth of the machine, which the server's figure then paid for.
cat >"$work/mixed.lua" <<'EOF'
local function slurp(p)
  local f = assert(io.open(p, "rb")); local d = f:read("*a"); f:close()
  return d
end
local reqs = {}
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init()
  n = 0; fivexx = 0; fourxx = 0
  local good = slurp(os.getenv("IMG"))
  local bad = {good:sub(1, math.floor(#good / 2)), "this is text, not a PNG\n",
               string.rep("\0", 21 * 1024 * 1024), slurp(os.getenv("BOMB"))}
  local h = {["Content-Type"] = "application/octet-stream"}
  reqs[0] = wrk.format("POST", nil, h, good)
  for i, b in ipairs(bad) do reqs[i] = wrk.format("POST", nil, h, b) end
end
function request()
  n = n + 1
  if n % 10 == 0 then return reqs[(n / 10) % 4 + 1] end
  return reqs[0]
end
function response(status)
  if status >= 500 then fivexx = fivexx + 1 end
  if status >= 400 and status < 500 then fourxx = fourxx + 1 end
end
function done()
  local a, b = 0, 0
  for _, t in ipairs(threads) do a = a + t:get("fivexx"); b = b + t:get("fourxx") end
  io.write(string.format("mixed: 4xx %d 5xx %d\n", b, a))
end
EOF

cat >"$work/post.lua" <<'EOF'
local f = assert(io.open(os.getenv("IMG"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
EOF

# "1.23ms" / "456.00us" / "1.20s" to milliseconds.
ms() { awk -v v="$1" 'BEGIN { u = v; sub(/[0-9.]+/, "", u); n = v + 0;
  if (u == "us") n /= 1000; else if (u == "s") n *= 1000; printf "%.1f", n }'; }

echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
"$classic" check 2>/dev/null | sed 's/^/# /' || true
printf "%-8s %-9s %5s %9s %9s %9s %7s\n" model batching conc "req/s" \
  "p50 ms" "p99 ms" non2xx
for m in $models; do
  case "$m" in
    r50_224) ck="$work/r50.pth"; img="$work/cat.jpg"; size=224; stem=imagenet
             chans=3; classes=1000 ;;
    fm28) ck="$work/fm28/resnet50-last.safetensors"; img="$work/item.png"
          size=28; stem=cifar_pool; chans=1; classes=10 ;;
    *) echo "serve_bench: unknown model $m"; exit 1 ;;
  esac
  for mode in $modes; do
    case "$mode" in
      batch16) extra="" ;;                  # the defaults: 16, 5 ms
      delay0) extra="--max_delay_ms 0" ;;   # whatever queued while busy
      batch1) extra="--max_batch 1" ;;
      *) echo "serve_bench: unknown mode $mode"; exit 1 ;;
    esac
    log="$work/serve-$m-$mode.log"
    # shellcheck disable=SC2086
    "$classic" serve --model "$m=$ck" --port 0 --queue 1024 $extra \
      >"$log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 600); do
      port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
      [ -n "$port" ] && break
      sleep 0.1
    done
    [ -n "$port" ] || { cat "$log"; exit 1; }
    url="http://127.0.0.1:$port/v1/models/$m:classify"
    IMG="$img" wrk -t1 -c1 -d2s -s "$work/post.lua" "$url" >/dev/null
    for c in $conc; do
      t=2; [ "$c" -lt 2 ] && t=1
      out=$(IMG="$img" wrk -t"$t" -c"$c" -d"${secs}s" --timeout 30s --latency \
        -s "$work/post.lua" "$url")
      rps=$(echo "$out" | awk '/Requests\/sec/ { print $2 }')
      p50=$(echo "$out" | awk '$1 == "50%" { print $2 }')
      p99=$(echo "$out" | awk '$1 == "99%" { print $2 }')
      bad=$(echo "$out" | awk '/Non-2xx/ { print $5 }')
      printf "%-8s %-9s %5s %9s %9s %9s %7s\n" "$m" "$mode" "$c" "$rps" \
        "$(ms "$p50")" "$(ms "$p99")" "${bad:-0}"
    done
    if [ "$mode" = batch16 ] && [ "${MIXED:-1}" != 0 ]; then
      # Clean and mixed (10% bad requests) at concurrency 16, alternating
      # ROUNDS times: no 5xx, and the good requests' rate (9 in 10 of all
      # answered) against the clean run just before it.
      for _ in $(seq "${ROUNDS:-2}"); do
        clean=$(IMG="$img" wrk -t2 -c16 -d"${secs}s" --timeout 30s \
          -s "$work/post.lua" "$url" | awk '/Requests\/sec/ { print $2 }')
        out=$(IMG="$img" BOMB="$work/bomb.png" wrk -t2 -c16 -d"${secs}s" \
          --timeout 30s -s "$work/mixed.lua" "$url")
        rps=$(echo "$out" | awk '/Requests\/sec/ { print $2 }')
        echo "# $m mixed, conc 16: $rps req/s in all, good ones" \
          "$(awk -v a="$rps" -v c="$clean" 'BEGIN { printf "%.1f%%", 90 * a / c }')" \
          "of the clean $clean req/s just before;" \
          "$(echo "$out" | grep '^mixed:'), socket errors:" \
          "$(echo "$out" | awk '/Socket errors/ { $1 = $2 = ""; print }')"
      done
    fi
    if [ -n "${SOAK:-}" ] && [ "$mode" = batch16 ]; then
      # SOAK seconds at concurrency 16: errors and RSS after warm-up.
      rss() { awk '/VmRSS/ { print $2 }' "/proc/$pid/status"; }
      r0=$(rss)
      out=$(IMG="$img" wrk -t2 -c16 -d"${SOAK}s" --timeout 30s \
        -s "$work/post.lua" "$url")
      r1=$(rss)
      echo "# $m soak ${SOAK}s: $(echo "$out" | awk '/requests in/ { print $1 }')" \
        "requests, non-2xx $(echo "$out" | awk '/Non-2xx/ { print $5 }')," \
        "socket errors: $(echo "$out" | awk '/Socket errors/ { $1 = $2 = ""; print }')," \
        "RSS $r0 -> $r1 kB"
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    pid=""
  done
  for b in 1 16; do
    r=$("$classic" bench --mode infer --arch resnet50 --size "$size" \
      --stem "$stem" --classes "$classes" --batch "$b" --threads 2 \
      --steps 10 --warmup 3 2>/dev/null | sed -n "s/.*mode=infer img_s=\([0-9.]*\).*/\1/p" | tail -1)
    echo "# $m: classic bench --mode infer --batch $b: ${r:-?} img/s (bench feeds 3 channels; the served model takes $chans)"
  done
done
echo "# $(uptime | sed 's/.*load/load/')"
