#!/usr/bin/python3
"""Converts a classic model checkpoint (safetensors, torchvision names) back
into a .pth state_dict that torchvision loads with strict=True:

  safetensors2torch.py model.safetensors model.pth
  # then: m = torchvision.models.resnet50(num_classes=K)
  #       m.load_state_dict(torch.load("model.pth"), strict=True)

The file is parsed by hand (u64 little-endian header length, JSON, data);
--check builds the torchvision model named by the metadata and loads the
result strictly before writing.  The CIFAR stems (`stem: cifar` or
`cifar_pool`) and other input channels load into that model after the
usual surgery: conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
(7, 2, 3 for the ImageNet stem), and for `cifar` maxpool = nn.Identity().
A checkpoint of a run with `ema: true` is written as its EMA weights (the
model classic ships); --raw writes the raw weights.
"""
import argparse
import json
import struct
import sys

import torch

import torch_models
import torchvision

DTYPES = {"F32": ("<f4", torch.float32), "F64": ("<f8", torch.float64),
          "F16": ("<f2", torch.float16), "I64": ("<i8", torch.int64),
          "I32": ("<i4", torch.int32)}


def read_safetensors(path):
    """(tensors in file order as (name, torch.Tensor), metadata dict)."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        sys.exit("%s: %d bytes, too short for a safetensors file"
                 % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        sys.exit("%s: header length %d exceeds the file (%d bytes)"
                 % (path, n, len(raw)))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = []
    for name, info in header.items():
        if info["dtype"] not in DTYPES:
            sys.exit("%s: %s has dtype %s, not supported"
                     % (path, name, info["dtype"]))
        np_dtype, _ = DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        if not 0 <= b <= e <= len(data):
            sys.exit("%s: %s: offsets [%d, %d) outside the data"
                     % (path, name, b, e))
        arr = np.frombuffer(data[b:e], dtype=np_dtype).reshape(info["shape"])
        t = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("=")).copy())
        out.append((name, t))
    return out, meta


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("inp", help="classic .safetensors model file")
    p.add_argument("out", help="output .pth")
    p.add_argument("--check", action="store_true",
                   help="load into torchvision's model with strict=True")
    p.add_argument("--raw", action="store_true",
                   help="a checkpoint of a run with ema: write its raw "
                        "weights instead of their EMA")
    a = p.parse_args()
    tensors, meta = read_safetensors(a.inp)
    # A run with `ema: true` keeps the moving average of the weights beside
    # them as "ema."-prefixed tensors; the average is the model it ships
    # (as classic eval, predict and export take it), --raw the weights.
    has_ema = any(n.startswith("ema.") for n, _ in tensors)
    if has_ema:
        keep = [(n, t) for n, t in tensors if n.startswith("ema.") != a.raw]
        tensors = [(n[4:] if n.startswith("ema.") else n, t) for n, t in keep]
        print("%s: writing its %s" % (a.inp, "raw weights" if a.raw
                                      else "EMA weights"), file=sys.stderr)
    sd = {}
    for name, t in tensors:
        # PyTorch keeps num_batches_tracked as an int64 scalar.
        if name.endswith("num_batches_tracked"):
            t = t.reshape(()).to(torch.int64)
        sd[name] = t
    if a.check:
        arch = meta.get("arch")
        if arch not in torch_models.ARCHS:
            sys.exit("%s: metadata arch %r is not a torchvision ResNet or "
                     "Swin" % (a.inp, arch))
        stem = meta.get("stem", "imagenet")
        if stem not in ("imagenet", "cifar", "cifar_pool"):
            sys.exit("%s: stem %r has no torchvision equivalent"
                     % (a.inp, stem))
        head, first = torch_models.head_of(sd)
        k = int(meta.get("num_classes", sd[head].shape[0]))
        model = torch_models.build(arch, k, sd[first].shape[1], stem)
        model.load_state_dict(sd, strict=True)
    torch.save(sd, a.out)


if __name__ == "__main__":
    main()
