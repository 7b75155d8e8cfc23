#!/usr/bin/env python3
"""PyTorch side of bench/vs_pytorch.sh: a torchvision ResNet or Swin
(tools/torch_models.py) training step (forward, cross-entropy, backward,
momentum SGD) and inference throughput on
synthetic data, with the same knobs as `classic bench`.  Prints one line
`torch: mode=... img_s=... rss_mb=...` per mode."""
import argparse
import resource
import time

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import torch_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--mode", choices=["train", "infer", "both"],
                   default="both")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = torch_models.build(a.arch, a.classes)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, a.classes, (a.batch,))
    modes = ["train", "infer"] if a.mode == "both" else [a.mode]
    for mode in modes:
        if mode == "train":
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            lossf = torch.nn.CrossEntropyLoss()

            def step():
                opt.zero_grad(set_to_none=True)
                loss = lossf(model(x), y)
                loss.backward()
                opt.step()
        else:
            model.eval()

            def step():
                with torch.inference_mode():
                    model(x)
        for _ in range(a.warmup):
            step()
        t = time.perf_counter()
        for _ in range(a.steps):
            step()
        dt = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print("torch: mode=%s img_s=%.3f step_s=%.4f rss_mb=%.1f threads=%d"
              % (mode, a.batch * a.steps / dt, dt / a.steps, rss,
                 torch.get_num_threads()), flush=True)


if __name__ == "__main__":
    main()
