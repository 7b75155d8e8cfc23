#!/usr/bin/env python3
"""The recipe of configs/resnet50_fashion_mnist.yaml in PyTorch, for the
time-to-accuracy comparison of bench/fashion_mnist_tta.sh: torchvision resnet50 with the same stem, initialisation
options, augmentation, optimizer, schedule and evaluation as `classic
train`, trained for a wall-clock budget or a number of epochs.

Reads the recipe from a classic config file (--config, default the
Fashion-MNIST one) so both sides run the same hyper-parameters, and writes
JSON lines (--out): one per evaluation, with the training wall time spent
so far (evaluation excluded, as in classic's metrics.jsonl `train_s`) and
the test accuracy.

    /usr/bin/python3 bench/fashion_mnist_torch.py --threads 2 \\
        --budget 3600 --out results/torch_fashion_mnist.jsonl

Data: Debian's dataset-fashion-mnist IDX files, held in memory as uint8;
augmentation (pad + random crop, horizontal flip; random erasing when the
recipe sets re_prob) is done on tensors held in memory, so the data path
costs next to nothing (as classic's loader, which runs beside the model and
is measured by its data-wait share).
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torchvision
import yaml

FMNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.reshape(dims)


def find(d, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    sys.exit("%s: no %s[.gz]" % (d, stem))


def load(d, split):
    pre = "train" if split == "train" else "t10k"
    x = read_idx(find(d, pre + "-images-idx3-ubyte"))
    y = read_idx(find(d, pre + "-labels-idx1-ubyte")).long()
    return x.unsqueeze(1), y  # (N, 1, 28, 28) uint8, (N,)


def build_model(c):
    arch = c.get("model", "resnet50")
    model = getattr(torchvision.models, arch)(
        num_classes=int(c["num_classes"]),
        zero_init_residual=bool(c.get("zero_init_residual", False)))
    stem = c.get("stem", "imagenet")
    cin = int(c.get("in_channels", 3))
    if stem in ("cifar", "cifar_pool"):
        model.conv1 = nn.Conv2d(cin, 64, 3, 1, 1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out",
                                nonlinearity="relu")
        if stem == "cifar":
            model.maxpool = nn.Identity()
    elif cin != 3:
        model.conv1 = nn.Conv2d(cin, 64, 7, 2, 3, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out",
                                nonlinearity="relu")
    return model


def lr_at(c, i, spe):
    """classic's cl_lr_at (mindcv's refined per-step lists): linear warm-up
    from lr*factor, then cosine decay to min_lr over the remaining epochs."""
    lr = float(c["lr"])
    w = float(c.get("warmup_epochs", 0))
    f = float(c.get("warmup_factor", 0.0))
    lo = float(c.get("min_lr", 0.0))
    epochs = float(c["epoch_size"])
    if i < w * spe:
        e = i / spe
        return lr * f + min(e, w) / w * (lr - lr * f)
    if c.get("scheduler", "cosine_decay") not in ("cosine_decay", "cosine"):
        sys.exit("only the cosine schedule is mirrored here")
    d = epochs - w
    j = i - w * spe
    if j >= d * spe:
        return lo
    t = j / spe
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * t / d))


def augment(xb, pad, flip, gen):
    """RandomCrop(size, padding=pad) with zero fill, then horizontal flip
    with probability `flip`, on a uint8 (B, C, H, W) batch."""
    b, _, h, w = xb.shape
    if pad > 0:
        xp = torch.nn.functional.pad(xb, (pad, pad, pad, pad))
        oy = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
        ox = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
        out = torch.empty_like(xb)
        for k in range(b):
            out[k] = xp[k, :, oy[k]:oy[k] + h, ox[k]:ox[k] + w]
        xb = out
    if flip > 0:
        m = torch.rand(b, generator=gen) < flip
        xb = torch.where(m[:, None, None, None], xb.flip(3), xb)
    return xb


def normalize(xb, mean, std):
    return (xb.float() / 255.0 - mean) / std


def erase(xb, prob):
    """torchvision's RandomErasing(p=prob, scale=(0.02, 0.33),
    ratio=(0.3, 3.3), value=0) on each normalized image, as classic's
    re_prob does after normalization."""
    if prob <= 0:
        return xb
    re = torchvision.transforms.RandomErasing(p=prob, value=0)
    return torch.stack([re(img) for img in xb])


def evaluate(model, x, y, mean, std, bs, lossf, bf16):
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.inference_mode():
        for s in range(0, x.shape[0], bs):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(normalize(x[s:s + bs], mean, std)).float()
            loss_sum += lossf(out, y[s:s + bs]).item() * out.shape[0]
            correct += (out.argmax(1) == y[s:s + bs]).sum().item()
    model.train()
    return correct / x.shape[0], loss_sum / x.shape[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/resnet50_fashion_mnist.yaml")
    p.add_argument("--data_dir", default=FMNIST)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget", type=float, default=0,
                   help="stop after this many seconds of training (0: none)")
    p.add_argument("--epochs", type=int, default=0,
                   help="override epoch_size (the schedule's length)")
    p.add_argument("--limit_train", type=int, default=0)
    p.add_argument("--limit_val", type=int, default=0)
    p.add_argument("--seed", type=int, default=None,
                   help="override the config's seed")
    p.add_argument("--out", default="")
    p.add_argument("--amp", default="", choices=["", "O0", "O1", "O2"],
                   help="override amp_level: O1/O2 run forward and loss "
                   "under torch.autocast(cpu, bfloat16), PyTorch's own "
                   "mixed precision (fp32 weights and optimizer state)")
    a = p.parse_args()

    with open(a.config) as f:
        c = yaml.safe_load(f)
    if a.epochs:
        c["epoch_size"] = a.epochs
    if a.amp:
        c["amp_level"] = a.amp
    if a.seed is not None:
        c["seed"] = a.seed
    bf16 = c.get("amp_level", "O0") in ("O1", "O2")
    torch.set_num_threads(a.threads)
    torch.manual_seed(int(c.get("seed", 42)))
    gen = torch.Generator().manual_seed(int(c.get("seed", 42)))

    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "test")
    if a.limit_train:
        xtr, ytr = xtr[:a.limit_train], ytr[:a.limit_train]
    if a.limit_val:
        xte, yte = xte[:a.limit_val], yte[:a.limit_val]
    mean = torch.tensor(c["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(c["std"]).view(1, -1, 1, 1)
    bs = int(c["batch_size"])
    spe = xtr.shape[0] // bs  # drop_remainder
    epochs = int(c["epoch_size"])

    model = build_model(c)
    decay, no_decay = [], []
    for n, q in model.named_parameters():
        exempt = c.get("filter_bias_and_bn", False) and q.ndim <= 1
        (no_decay if exempt else decay).append(q)
    wd = float(c.get("weight_decay", 0.0))
    opt = torch.optim.SGD([{"params": decay, "weight_decay": wd},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=float(c["lr"]), momentum=float(c["momentum"]),
                          nesterov=bool(c.get("nesterov", False)))
    lossf = nn.CrossEntropyLoss(
        label_smoothing=float(c.get("label_smoothing", 0.0)))
    plain = nn.CrossEntropyLoss()
    pad = int(c.get("random_crop_padding", 0))
    flip = float(c.get("hflip", 0.0))
    re_prob = float(c.get("re_prob", 0.0))
    out = open(a.out, "w") if a.out else None

    def log(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    log({"kind": "config", "torch": torch.__version__, "threads":
         torch.get_num_threads(), "steps_per_epoch": spe, "epochs": epochs,
         "budget_s": a.budget, "bf16_autocast": bf16})
    train_s, step, stop = 0.0, 0, False
    model.train()
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(xtr.shape[0], generator=gen)
        t0 = time.perf_counter()
        loss_sum = 0.0
        for k in range(spe):
            idx = perm[k * bs:(k + 1) * bs]
            xb = normalize(augment(xtr[idx], pad, flip, gen), mean, std)
            xb = erase(xb, re_prob)
            for g in opt.param_groups:
                g["lr"] = lr_at(c, step, spe)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = lossf(model(xb).float(), ytr[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            step += 1
            if step % 50 == 0:
                now = train_s + time.perf_counter() - t0
                print("epoch %d step %d/%d loss %.4f %.1f img/s" %
                      (epoch, k + 1, spe, loss.item(), step * bs / now),
                      file=sys.stderr, flush=True)
            if a.budget and train_s + time.perf_counter() - t0 >= a.budget:
                stop = True
                break
        train_s += time.perf_counter() - t0
        top1, vloss = evaluate(model, xte, yte, mean, std, 256, plain,
                               bf16)
        log({"kind": "eval", "epoch": epoch, "step": step,
             "train_s": round(train_s, 2), "top1": top1, "loss": vloss,
             "train_loss_avg": loss_sum / max(1, k + 1)})
        if stop:
            break


if __name__ == "__main__":
    main()
