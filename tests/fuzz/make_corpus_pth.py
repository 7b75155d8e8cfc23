#!/usr/bin/env python3
"""Seeds for the .pth fuzz target (tests/fuzz/corpus/pth/): small files as
torch.save writes them, each twice in the target's input layout (see
fuzz_pth.c): "<name>.file" (flags 1, the whole file) and "<name>.pkl"
(flags 0, le16 length, data.pkl, the storages as le32 length + bytes).  Needs Debian's
python3-torch; the committed seeds were written by torch 1.13.
Usage: make_corpus_pth.py [OUT_DIR]"""
import argparse
import collections
import os
import struct
import sys
import tempfile
import zipfile

import torch


def save(obj, out, name):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.pth")
        torch.save(obj, path)
        raw = open(path, "rb").read()
        z = zipfile.ZipFile(path)
        pkl = z.read("x/data.pkl")
        data = b""
        k = 0
        while "x/data/%d" % k in z.namelist():
            d = z.read("x/data/%d" % k)
            data += struct.pack("<I", len(d)) + d
            k += 1
    open(os.path.join(out, name + ".file"), "wb").write(b"\x01" + raw)
    open(os.path.join(out, name + ".pkl"), "wb").write(
        b"\x00" + struct.pack("<H", len(pkl)) + pkl + data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "pth")
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, generator=g)
    sd = collections.OrderedDict()
    sd["conv1.weight"] = a.reshape(1, 3, 2, 2)
    sd["bn1.running_mean"] = a[0]
    sd["bn1.num_batches_tracked"] = torch.tensor(7)
    save(sd, out, "state_dict")
    views = collections.OrderedDict()
    views["t"] = a.t()
    views["slice"] = a[1:, 2:]
    views["half"] = a.half()
    views["bf16"] = a[:, 0].bfloat16()
    views["f64"] = a.double()
    views["i32"] = torch.arange(3, dtype=torch.int32)
    views["exp"] = a[0:1, 0:1].expand(2, 3)
    views["scalar"] = a[1, 1]
    save(views, out, "views")
    save({"epoch": 2, "best": 0.25, "name": "x", "flags": [True, None],
                "state_dict": collections.OrderedDict(
                    ("module." + k, v) for k, v in sd.items()),
                "args": argparse.Namespace(lr=0.1)},
               out, "training")
    fc = torch.nn.Linear(4, 2)
    save({"model": fc.state_dict()}, out, "model")


if __name__ == "__main__":
    main()
