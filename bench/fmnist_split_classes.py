#!/usr/bin/python3
"""Writes two IDX copies of Fashion-MNIST split by class, for fine-tuning.

A (classes 0-4: T-shirt/top, Trouser, Pullover, Dress, Coat) and B (classes
5-9: Sandal, Shirt, Sneaker, Bag, Ankle boot), each with its train and t10k
files and labels renumbered 0-4, so `classic train --dataset mnist --data_dir
OUT/A` sees a 5-class dataset.  Only the standard library is needed.

usage: fmnist_split_classes.py [SRC] OUT
"""
import gzip
import os
import struct
import sys


def read(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open if p.endswith(".gz") else open)(p, "rb") as f:
                return f.read()
    raise SystemExit("missing " + path + "[.gz]")


def main():
    args = sys.argv[1:]
    src = args[0] if len(args) == 2 else "/usr/share/datasets/fashion-mnist"
    out = args[-1]
    for split in ("train", "t10k"):
        img = read(os.path.join(src, split + "-images-idx3-ubyte"))
        lab = read(os.path.join(src, split + "-labels-idx1-ubyte"))
        magic, n, h, w = struct.unpack(">IIII", img[:16])
        assert magic == 2051 and struct.unpack(">II", lab[:8]) == (2049, n)
        px = h * w
        for name, lo in (("A", 0), ("B", 5)):
            keep = [i for i in range(n) if lo <= lab[8 + i] < lo + 5]
            d = os.path.join(out, name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, split + "-images-idx3-ubyte"), "wb") as f:
                f.write(struct.pack(">IIII", 2051, len(keep), h, w))
                for i in keep:
                    f.write(img[16 + i * px:16 + (i + 1) * px])
            with open(os.path.join(d, split + "-labels-idx1-ubyte"), "wb") as f:
                f.write(struct.pack(">II", 2049, len(keep)))
                f.write(bytes(lab[8 + i] - lo for i in keep))
            print(name, split, len(keep), "images")


if __name__ == "__main__":
    main()
