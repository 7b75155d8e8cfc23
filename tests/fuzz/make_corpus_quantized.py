#!/usr/bin/env python3
"""Seeds for the int8 file fuzz target (tests/fuzz/corpus/quantized/): small
safetensors files as `classic quantize` writes them (docs/deploy.md) for
the fuzzer's network (conv1 3->4 3x3, bn1, relu, conv2 4->4 3x3 int8, bn2,
global pool, fc 4->2): one valid (conv2 int8 with its weight, weight_scale,
input_scale and input_signed beside it), one with a u8 input, one without
the precision key (not an int8 file), and one whose I8 weight has no
scales.  Standard library only.
Usage: make_corpus_quantized.py [OUT_DIR]"""
import json
import os
import struct
import sys


def pack(fmt, vals):
    return struct.pack("<%d%s" % (len(vals), fmt), *vals)


def safetensors(tensors, meta):
    """tensors: (name, dtype, shape, bytes) in order."""
    header, data = {"__metadata__": meta}, bytearray()
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(data)


def f32(shape, base=0.1):
    n = 1
    for d in shape:
        n *= d
    return ("F32", shape, pack("f", [base * ((i % 7) - 3) for i in range(n)]))


def bn(prefix, c, var=1.0):
    return [(prefix + ".weight",) + f32([c], 0.0)[0:1] + ([c], pack("f", [1.0] * c)),
            (prefix + ".bias",) + f32([c]),
            (prefix + ".running_mean",) + f32([c], 0.0),
            (prefix + ".running_var", "F32", [c], pack("f", [var] * c)),
            (prefix + ".num_batches_tracked", "I64", [], pack("q", [0]))]


def model(signed=1, scales=True):
    t = [("conv1.weight",) + f32([4, 3, 3, 3])]
    t += bn("bn1", 4)
    q = [((i * 37) % 255) - 127 for i in range(4 * 4 * 3 * 3)]
    t.append(("conv2.weight", "I8", [4, 4, 3, 3], pack("b", q)))
    if scales:
        t.append(("conv2.weight_scale", "F32", [4],
                  pack("f", [0.01, 0.02, 0.03, 0.04])))
        t.append(("conv2.input_scale", "F32", [1], pack("f", [0.05])))
        t.append(("conv2.input_signed", "U8", [1], bytes([signed])))
    t += bn("bn2", 4, 1.0 - 1e-5)
    t.append(("fc.weight",) + f32([2, 4]))
    t.append(("fc.bias",) + f32([2]))
    return t


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "quantized")
    os.makedirs(out, exist_ok=True)
    meta = {"arch": "resnet18", "precision": "int8", "quant.method": "minmax",
            "quant.samples": "8", "quant.weights":
            "s8 per output channel, BN folded"}
    plain = dict(meta)
    del plain["precision"]
    files = {"valid.safetensors": safetensors(model(), meta),
             "u8.safetensors": safetensors(model(signed=0), meta),
             "f32.safetensors": safetensors(model(), plain),
             "noscale.safetensors": safetensors(model(scales=False), meta)}
    for name, blob in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
