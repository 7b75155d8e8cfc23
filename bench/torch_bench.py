#!/usr/bin/env python3
"""PyTorch side of bench/vs_pytorch.sh: a torchvision ResNet or Swin
(tools/torch_models.py) training step (forward, cross-entropy, backward,
momentum SGD) and inference throughput on
synthetic data, with the same knobs as `classic bench`.  --amp bf16 runs
forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (the
backward follows the forward's dtypes; weights and optimizer stay f32);
--channels_last puts model and input in torch.channels_last.  Where
LayerNorm takes no bf16 input with f32 weights (PyTorch 1.13 on CPU), it
runs in f32 and returns the input's dtype, as later versions do.  Prints one
line `torch: mode=... img_s=... rss_mb=... precision=... layout=...` per
mode.  --profile also prints where the timed steps' time goes, as
torch.profiler counts it (self CPU time per aten op, per step), to set
beside `classic bench --profile on`."""
import argparse
import contextlib
import resource
import time

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import torch_models  # noqa: E402


def layer_norm_takes_bf16():
    """Whether F.layer_norm accepts a bf16 input with f32 weights."""
    try:
        torch.nn.functional.layer_norm(
            torch.ones(1, 4, dtype=torch.bfloat16), (4,), torch.ones(4),
            torch.zeros(4))
        return True
    except RuntimeError:
        return False


def layer_norms_in_f32(model):
    """Each LayerNorm of model computes in f32 and returns its input's
    dtype: autocast leaves layer_norm alone, so in PyTorch 1.13 a bf16
    activation meets the f32 weights and the call fails."""
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            def forward(x, fwd=m.forward):
                return fwd(x.float()).to(x.dtype)
            m.forward = forward


def print_profile(prof, mode, steps):
    """The ops by self CPU time, in ms per timed step (the profiler's own
    overhead included, so the steps run a little slower than unprofiled)."""
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops)
    print("torch profile: %s, ms per timed step by op (the 12 largest):"
          % mode)
    for e in ops[:12]:
        print("  %9.2f ms %5.1f%%  %s (%d calls)"
              % (e.self_cpu_time_total / 1e3 / steps,
                 100.0 * e.self_cpu_time_total / total, e.key,
                 e.count // steps))
    print("  %9.2f ms total" % (total / 1e3 / steps), flush=True)


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
    p.add_argument("--amp", choices=["none", "bf16"], default="none",
                   help="none: f32; bf16: autocast to bfloat16")
    p.add_argument("--channels_last", action="store_true",
                   help="model and input in torch.channels_last")
    p.add_argument("--profile", action="store_true",
                   help="print self CPU time per op over the timed steps")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = torch_models.build(a.arch, a.classes)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, a.classes, (a.batch,))
    if a.amp == "bf16" and not layer_norm_takes_bf16():
        layer_norms_in_f32(model)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)

    # A fresh context each step: autocast's cast cache lives as long as
    # the context, as in a training loop that enters it per step.
    def amp():
        if a.amp == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    modes = ["train", "infer"] if a.mode == "both" else [a.mode]
    for mode in modes:
        if mode == "train":
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            lossf = torch.nn.CrossEntropyLoss()

            def step():
                opt.zero_grad(set_to_none=True)
                with amp():
                    loss = lossf(model(x), y)
                loss.backward()
                opt.step()
        else:
            model.eval()

            def step():
                with torch.inference_mode(), amp():
                    model(x)
        for _ in range(a.warmup):
            step()
        prof = (torch.profiler.profile() if a.profile
                else contextlib.nullcontext())
        with prof:
            t = time.perf_counter()
            for _ in range(a.steps):
                step()
            dt = time.perf_counter() - t
        if a.profile:
            print_profile(prof, mode, a.steps)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print("torch: mode=%s img_s=%.3f step_s=%.4f rss_mb=%.1f threads=%d "
              "precision=%s layout=%s"
              % (mode, a.batch * a.steps / dt, dt / a.steps, rss,
                 torch.get_num_threads(),
                 "bf16" if a.amp == "bf16" else "f32",
                 "channels_last" if a.channels_last else "nchw"), flush=True)


if __name__ == "__main__":
    main()
