#!/usr/bin/env python3
"""Seeds for the features-file fuzz target (tests/fuzz/corpus/gallery/):
small files laid out as `classic embed` writes them (safetensors written by
hand: u64 header length, JSON header padded to 8 bytes, data).
Usage: make_corpus_gallery.py [OUT_DIR]"""
import json
import os
import struct
import sys


def write(path, tensors, meta):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "gallery")
    os.makedirs(out, exist_ok=True)
    n, d = 4, 3
    feat = struct.pack("<%df" % (n * d), 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1)
    lab = struct.pack("<4q", 0, 1, 2, 0)
    ind = struct.pack("<4q", 0, 1, 2, 3)
    base = [("features", "F32", [n, d], feat), ("labels", "I64", [n], lab),
            ("indices", "I64", [n], ind)]
    write(os.path.join(out, "plain"), base, None)
    meta = {"dataset": "mnist", "split": "test", "data_dir": "d",
            "class_names": '["a","b","c"]', "checkpoint": "m.safetensors"}
    write(os.path.join(out, "idx"), base, meta)
    names = b"x/a/0.png\0x/b/1.png\0x/c/2.png\0x/a/3.png\0"
    write(os.path.join(out, "names"),
          base + [("names", "U8", [len(names)], names)], meta)
    half = struct.pack("<%de" % (n * d), 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1)
    lab32 = struct.pack("<4i", 0, 1, 2, 0)
    write(os.path.join(out, "f16-i32"),
          [("features", "F16", [n, d], half), ("labels", "I32", [n], lab32),
           ("indices", "I64", [n], ind)], meta)


if __name__ == "__main__":
    main()
