#!/bin/sh
# Fine-tuning end to end on Fashion-MNIST, as the MindSpore ResNet
# tutorials do it, and the trained networks as retrieval backbones
# (docs/interop.md, "Fine-tuning from a .pth, shown on Fashion-MNIST"):
#
#   1. split Fashion-MNIST by class into A (0-4) and B (5-9), IDX copies;
#   2. pretrain on A (results/finetune_fashion_mnist/pretrain.yaml);
#   3. save its weights as a PyTorch .pth through PyTorch (what users hold);
#   4. fine-tune on 1920 images of B from that .pth with a new head, and
#      train from scratch for the same steps (finetune.yaml);
#   5. compare the two runs (classic report --compare);
#   6. embed B's training set (the gallery) and B's test set (the queries)
#      with each network and print recall@1 and recall@5.
#
# usage: bench/finetune_fashion_mnist.sh [STEP...]   (default: all steps:
#        data pretrain pth finetune scratch report retrieval)
# Runs from the repository root with the build in bd/ (CLASSIC=path to use
# another binary); work files go to runs/, results to
# results/finetune_fashion_mnist/.
set -eu
CLASSIC=${CLASSIC:-bd/classic}
PY=${PY:-/usr/bin/python3}
R=results/finetune_fashion_mnist
W=runs/finetune_fashion_mnist
DATA=runs/fashion_mnist_ab
STEPS=${*:-data pretrain pth finetune scratch report retrieval}
mkdir -p "$R" "$W"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# The last checkpoint of a run directory.
last() { ls "$1"/*-last.safetensors; }

for step in $STEPS; do
    case $step in
    data)
        $CLASSIC check | tee $R/check.txt
        $PY bench/fmnist_split_classes.py "$DATA" ;;
    pretrain)
        rm -rf "$W/pretrain"
        $CLASSIC train -c $R/pretrain.yaml --ckpt_save_dir "$W/pretrain" \
            2>&1 | tee $R/pretrain.log ;;
    pth)
        $PY tools/safetensors2torch.py --check "$(last "$W/pretrain")" \
            "$W/pretrain_A.pth" 2>&1 | tee $R/pth.log ;;
    finetune)
        rm -rf "$W/finetune"
        $CLASSIC train -c $R/finetune.yaml --pretrained "$W/pretrain_A.pth" \
            --ckpt_save_dir "$W/finetune" 2>&1 | tee $R/finetune.log ;;
    scratch)
        rm -rf "$W/scratch"
        $CLASSIC train -c $R/finetune.yaml --ckpt_save_dir "$W/scratch" \
            2>&1 | tee $R/scratch.log ;;
    report)
        for run in pretrain finetune scratch; do
            mkdir -p $R/$run
            cp "$W/$run/metrics.jsonl" "$W/$run/config.yaml" \
                "$W/$run/report.html" $R/$run/
        done
        $CLASSIC report --compare "$W/finetune" "$W/scratch" \
            --out $R/finetune_vs_scratch.html 2>&1 | tee $R/report.log ;;
    retrieval)
        : > $R/retrieval.txt
        : > $R/retrieval.jsonl
        for net in pretrain finetune scratch; do
            ck=$(last "$W/$net")
            for split in train test; do
                $CLASSIC embed --checkpoint "$ck" --dataset mnist \
                    --data_dir $DATA/B --split $split --batch 250 \
                    --out "$W/$net-B-$split.safetensors" 2>&1 |
                    tee -a $R/retrieval.txt
            done
            echo "$net: B test queries against the B training gallery" |
                tee -a $R/retrieval.txt
            $CLASSIC retrieve --gallery "$W/$net-B-train.safetensors" \
                --queries "$W/$net-B-test.safetensors" --recall 1,5 |
                tee -a $R/retrieval.txt
            printf '{"network":"%s",' "$net" >> $R/retrieval.jsonl
            $CLASSIC retrieve --gallery "$W/$net-B-train.safetensors" \
                --queries "$W/$net-B-test.safetensors" --recall 1,5 --json |
                cut -c2- >> $R/retrieval.jsonl
        done
        # Three queries as files, to show names and labels.
        $PY - "$DATA/B" "$W/queries" <<'EOF'
import os, struct, sys, zlib
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
img = open(os.path.join(src, "t10k-images-idx3-ubyte"), "rb").read()
for i in (0, 1, 2):
    px = img[16 + i * 784:16 + (i + 1) * 784]
    raw = b"".join(b"\0" + px[y * 28:(y + 1) * 28] for y in range(28))
    def chunk(t, d):
        c = struct.pack(">I", zlib.crc32(t + d))
        return struct.pack(">I", len(d)) + t + d + c
    png = (b"\x89PNG\r\n\x1a\n" +
           chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    open(os.path.join(out, "test%d.png" % i), "wb").write(png)
EOF
        $CLASSIC retrieve --gallery "$W/finetune-B-train.safetensors" \
            --top 3 "$W"/queries/test0.png "$W"/queries/test1.png \
            "$W"/queries/test2.png 2>&1 | tee $R/retrieve_images.txt ;;
    *)
        echo "unknown step $step" >&2
        exit 2 ;;
    esac
done
