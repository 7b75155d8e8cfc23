#!/usr/bin/python3
"""Makes the golden fixture of tests/test_interop.c (golden_resnet18): a
torchvision resnet18(num_classes=3) whose every state_dict tensor is filled
from a closed formula (the C test fills classic's graph with the same one),
two seeded 3x32x32 inputs, and PyTorch's eval-mode logits on them.  Only the
inputs and the logits are committed (tests/golden/), not the 45 MB weights.

  /usr/bin/python3 tools/golden_torch.py tests/golden

The formula, per tensor `name` of numel n, element j in row-major order,
h = sum((i + 1) * ord(c) for i, c in enumerate(name)) % 997,
x = (j + 1000003 h) mod 2^32, twice x = ((x >> 16) ^ x) * 0x45d9f3b mod 2^32,
x = (x >> 16) ^ x (exact integer arithmetic) and s = 2 x / 2^32 - 1, a
pseudo-random value in [-1, 1):
  conv weight (O,I,kh,kw)  s * sqrt(6 / (I*kh*kw))   (variance 2 / fan_in)
  fc.weight (K,F)          s * sqrt(3 / F)
  fc.bias, BN bias         0.1 * s
  BN weight                1 + 0.2 * s
  BN running_mean / _var   0.1 * s / 1 + 0.5 * s^2
  num_batches_tracked      0
"""
import json
import math
import os
import sys

import torch
import torchvision


def name_hash(name):
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % 997


def fill(name, shape):
    n = 1
    for d in shape:
        n *= d
    m = 0xFFFFFFFF
    x = (torch.arange(n, dtype=torch.int64) + name_hash(name) * 1000003) & m
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & m
    x = (x >> 16) ^ x
    s = x.to(torch.float64) * (2.0 / 4294967296.0) - 1
    if name.endswith("running_mean"):
        v = 0.1 * s
    elif name.endswith("running_var"):
        v = 1 + 0.5 * s * s
    elif name == "fc.weight":
        v = s * math.sqrt(3.0 / shape[1])
    elif name == "fc.bias":
        v = 0.1 * s
    elif name.endswith(".weight") and len(shape) == 4:
        v = s * math.sqrt(6.0 / (shape[1] * shape[2] * shape[3]))
    elif name.endswith(".weight"):
        v = 1 + 0.2 * s
    elif name.endswith(".bias"):
        v = 0.1 * s
    else:
        raise ValueError(name)
    return v.to(torch.float32).reshape(shape)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    model = torchvision.models.resnet18(num_classes=3)
    sd = model.state_dict()
    with torch.no_grad():
        for name, t in sd.items():
            if name.endswith("num_batches_tracked"):
                t.zero_()
            else:
                t.copy_(fill(name, tuple(t.shape)))
    model.eval()
    g = torch.Generator().manual_seed(20261202)
    x = torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float32)
    with torch.no_grad():
        y = model(x)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "resnet18_k3_s32_input.bin"), "wb") as f:
        f.write(x.numpy().astype("<f4").tobytes())
    with open(os.path.join(out, "resnet18_k3_s32_logits.bin"), "wb") as f:
        f.write(y.numpy().astype("<f4").tobytes())
    with open(os.path.join(out, "resnet18_k3_s32.json"), "w") as f:
        json.dump({"model": "torchvision.models.resnet18(num_classes=3)",
                   "input": [2, 3, 32, 32], "input_seed": 20261202,
                   "torch": torch.__version__,
                   "torchvision": torchvision.__version__,
                   "logits": y.tolist()}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
