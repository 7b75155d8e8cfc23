#!/usr/bin/env bash
# The int8 accuracy table (#46) for one trained checkpoint, the short
# form (five calibrations) used for swin_micro: top-1 on the
# 10,000 Fashion-MNIST test images at f32 and int8 (each method, 128, 512
# and 2048 calibration images from the train split), and the agreement
# with ONNX Runtime 1.30 on the QDQ export of the default file.
#   accuracy.sh CKPT OUTDIR
set -u
C=/work/main/build/classic
CK=$1; OUT=$2; mkdir -p "$OUT"
export OMP_NUM_THREADS=2
top1() { sed -n 's/.*top-1 \([0-9.]*\)%.*/\1/p' "$1" | head -1; }
echo "# $(date -u +%FT%TZ) $CK $(uptime | sed 's/.*load/load/')"
$C eval --checkpoint "$CK" --precision f32 > "$OUT/f32.log" 2>&1
echo "f32 $(top1 "$OUT/f32.log")"
$C eval --checkpoint "$CK" --precision bf16 > "$OUT/bf16.log" 2>&1 ||
  echo "bf16 refused: $(tail -1 "$OUT/bf16.log")"
for mn in "percentile 128" "percentile 512" "percentile 2048" "minmax 512" "entropy 512"; do
  m=${mn% *}; n=${mn#* }
  q="$OUT/q-$m-$n.safetensors"
  /usr/bin/time -f "%e s %M kB" $C quantize --checkpoint "$CK" \
    --calib /usr/share/datasets/fashion-mnist --samples $n --method $m \
    --out "$q" > "$OUT/q-$m-$n.log" 2>&1
  $C eval --checkpoint "$q" > "$OUT/e-$m-$n.log" 2>&1
  echo "int8 $m $n $(top1 "$OUT/e-$m-$n.log") (quantize: $(tail -1 "$OUT/q-$m-$n.log"))"
done
ls -la "$CK" "$OUT"/q-percentile-512.safetensors | awk '{print "size", $5, $9}'
CLASSIC=$C ORT_VERSION=1.30.0 ORT_PREFIX=/work/main/build/ort-1.30.0 \
  sh /work/main/bench/int8_agreement.sh "$OUT/q-percentile-512.safetensors" \
  > "$OUT/agreement.log" 2>&1
tail -4 "$OUT/agreement.log"
echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
# 7-bit weights (--weight_bits 7): what a CPU without VNNI runs as written.
q7="$OUT/q7-percentile-512.safetensors"
$C quantize --checkpoint "$CK" --calib /usr/share/datasets/fashion-mnist \
  --samples 512 --weight_bits 7 --out "$q7" > "$OUT/q7.log" 2>&1
$C eval --checkpoint "$q7" > "$OUT/e7.log" 2>&1
echo "int8 7-bit weights percentile 512 $(top1 "$OUT/e7.log")"
echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
