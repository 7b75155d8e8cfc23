#!/usr/bin/python3
"""Eval-mode logits of a torchvision network (classic's arch names:
tools/torch_models.py) on raw float32 input, for the
interop tests: loads a .pth with strict=True, reads (N,C,H,W) little-endian
float32 from --input, writes (N,K) float32 logits to --output.

  torch_infer.py --arch resnet18 --num-classes 5 --pth m.pth \\
      --input x.bin --shape 2,3,64,64 --output logits.bin
"""
import argparse

import torch

import torch_models


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--arch", required=True, choices=torch_models.ARCHS)
    p.add_argument("--in-channels", type=int, default=3)
    p.add_argument("--stem", default="imagenet")
    p.add_argument("--num-classes", type=int, required=True)
    p.add_argument("--pth", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--shape", required=True, help="N,C,H,W")
    p.add_argument("--output", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    shape = [int(v) for v in a.shape.split(",")]
    model = torch_models.build(a.arch, a.num_classes, a.in_channels, a.stem)
    model.load_state_dict(torch.load(a.pth, map_location="cpu"), strict=True)
    model.eval()
    with open(a.input, "rb") as f:
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    x = x.reshape(shape)
    with torch.no_grad():
        y = model(x).to(torch.float32).contiguous()
    with open(a.output, "wb") as f:
        f.write(y.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
