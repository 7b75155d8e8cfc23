#!/usr/bin/env bash
# Time-to-accuracy of the Fashion-MNIST recipe, classic against PyTorch, one
# after the other on this machine: the same recipe file, the same training
# images (the first LIMIT), the same epochs, both evaluated on the 10,000
# test images after each epoch.  Prints one line per evaluation with the
# training wall time so far (evaluation excluded on both sides), then a
# summary over the seeds.
#
#   bash bench/fashion_mnist_tta.sh [build/classic]
#   SEEDS="42 43 44" ...   one run of each side per seed
#   LIMIT=0 EPOCHS=6 ...   the whole training set and the recipe's schedule
#
# A seeded run is deterministic, but a change of summation order (a new
# kernel) moves its final accuracy by a few tenths at this length; with one
# seed a difference of that size between the two sides says nothing.  With
# several seeds the summary compares the means, prints the spread, the
# standard error of the difference of the means and the per-seed time ratio.
#
# LIMIT (default 12800) training images, EPOCHS (default 2: one warm-up and
# one cosine epoch) epochs, THREADS (default nproc) for both, SEEDS (default
# the recipe's).  Both sides follow the recipe's amp_level (PyTorch's O1/O2
# is torch.autocast to bfloat16); TORCH_AMP=O0|O2 overrides it on the
# PyTorch side only, to time PyTorch at whichever precision is faster for it.
set -euo pipefail
CLASSIC="${1:-build/classic}"
CONFIG="${CONFIG:-configs/resnet50_fashion_mnist.yaml}"
LIMIT="${LIMIT:-12800}"
EPOCHS="${EPOCHS:-2}"
THREADS="${THREADS:-$(nproc)}"
OUT="${OUT:-runs/tta}"
TORCH_AMP="${TORCH_AMP:-}"
SEEDS="${SEEDS:-$(sed -n 's/^seed: *\([0-9]*\).*/\1/p' "$CONFIG")}"
mkdir -p "$OUT"
lim=()
[ "$LIMIT" != 0 ] && lim=(--limit_train "$LIMIT")

for seed in $SEEDS; do
    echo "== seed $seed: classic, $CONFIG, ${LIMIT/#0/all} images, $EPOCHS epochs, $THREADS threads"
    rm -rf "$OUT/classic-$seed"
    OMP_NUM_THREADS="$THREADS" "$CLASSIC" train -c "$CONFIG" "${lim[@]}" \
        --seed "$seed" --epoch_size "$EPOCHS" \
        --ckpt_save_dir "$OUT/classic-$seed" \
        --per_print_times 100 > "$OUT/classic-$seed.log" 2>&1
    echo "== seed $seed: PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') ${TORCH_AMP:+amp $TORCH_AMP}"
    /usr/bin/python3 bench/fashion_mnist_torch.py --config "$CONFIG" \
        --threads "$THREADS" --epochs "$EPOCHS" --limit_train "$LIMIT" \
        --seed "$seed" ${TORCH_AMP:+--amp "$TORCH_AMP"} \
        --out "$OUT/torch-$seed.jsonl" > "$OUT/torch-$seed.log" 2>&1
done

python3 - "$OUT" $SEEDS <<'PYEOF'
import json, statistics, sys

out, seeds = sys.argv[1], sys.argv[2:]

def curve(path, time_key, top1_key):
    """[(train_s, top1)] of a run's evaluations, training time cumulative."""
    pts, t = [], 0.0
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") != "eval":
            continue
        if time_key == "epoch_s":  # classic: per epoch
            t += r["epoch_s"]
        else:
            t = r[time_key]
        pts.append((t, r[top1_key]))
    return pts

c_fin, t_fin, c_s, t_s = [], [], [], []
for seed in seeds:
    c = curve("%s/classic-%s/metrics.jsonl" % (out, seed), "epoch_s", "val_top1")
    t = curve("%s/torch-%s.jsonl" % (out, seed), "train_s", "top1")
    for name, pts in (("classic", c), ("torch  ", t)):
        for e, (s, a) in enumerate(pts, 1):
            print("seed %s %s: epoch=%d train_s=%.1f top1=%.4f" % (seed, name, e, s, a))
    c_fin.append(c[-1][1]); c_s.append(c[-1][0])
    t_fin.append(t[-1][1]); t_s.append(t[-1][0])

def ms(v):
    return (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)

(ca, csd), (ta, tsd) = ms(c_fin), ms(t_fin)
(ct, _), (tt, _) = ms(c_s), ms(t_s)
print("classic: final top-1 %.2f%% (sd %.2f over %d seeds) in %.1f s" % (100 * ca, 100 * csd, len(seeds), ct))
print("torch:   final top-1 %.2f%% (sd %.2f over %d seeds) in %.1f s" % (100 * ta, 100 * tsd, len(seeds), tt))
print("classic ends at %.1f%% of PyTorch's time, %+.2f points from PyTorch's mean final accuracy"
      % (100 * ct / tt, 100 * (ca - ta)))
if len(seeds) > 1:
    # The time ratio per seed: its spread says how far from the 50% line the
    # ratio of the mean times above can be trusted.
    r = [c / t for c, t in zip(c_s, t_s)]
    print("time ratio per seed: mean %.1f%%, sd %.1f, standard error %.1f, range %.1f%%-%.1f%%"
          % (100 * statistics.mean(r), 100 * statistics.stdev(r),
             100 * statistics.stdev(r) / len(r) ** 0.5, 100 * min(r), 100 * max(r)))
    # The two sides draw different numbers from the same seed, so the runs
    # are independent samples, not pairs: the standard error of the
    # difference of the means is sqrt(sd_c^2/n + sd_t^2/n).
    se = (csd ** 2 / len(seeds) + tsd ** 2 / len(seeds)) ** 0.5
    print("difference of the means %+.2f points, standard error %.2f (%.1f SE; %d seeds a side)"
          % (100 * (ca - ta), 100 * se, abs(ca - ta) / se if se else 0.0, len(seeds)))
PYEOF
