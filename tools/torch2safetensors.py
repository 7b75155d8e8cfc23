#!/usr/bin/python3
"""Converts a torchvision ResNet or Swin state_dict (.pth) into a classic model
checkpoint: safetensors with torchvision's tensor names, F32 (the BN
num_batches_tracked counters as I64 scalars) and the metadata `classic
predict`, `classic eval` and `--pretrained` read (arch, stem, in_channels,
num_classes, image_size, mean/std, class_names, and an eval config).

The file is written by hand (u64 little-endian header length, JSON header,
raw little-endian data), so only torch is needed.

  torch2safetensors.py resnet50-0676ba61.pth out.safetensors --arch resnet50
  torch2safetensors.py --arch resnet18 --random --seed 7 --num-classes 5 \\
      out.safetensors --save-pth out.pth
"""
import argparse
import json
import struct
import sys

import torch
import torchvision

import torch_models

ARCHS = torch_models.ARCHS
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def load_state_dict(path):
    """A state_dict from a .pth: a plain dict, a training checkpoint holding
    one under "state_dict" / "model", or a pickled nn.Module."""
    obj = torch.load(path, map_location="cpu")
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
        # DataParallel / DDP checkpoints prefix every name with "module.".
        if obj and all(k.startswith("module.") for k in obj):
            obj = {k[len("module."):]: v for k, v in obj.items()}
        return obj
    sys.exit("%s: not a state_dict (found %s)" % (path, type(obj).__name__))


def arch_of(sd):
    """The torchvision depth whose blocks per stage the names show."""
    blocks = []
    for layer in range(1, 5):
        prefix = "layer%d." % layer
        idx = {int(k[len(prefix):].split(".")[0]) for k in sd
               if k.startswith(prefix)}
        blocks.append(len(idx))
    bottleneck = "layer1.0.conv3.weight" in sd
    table = {(2, 2, 2, 2, False): "resnet18", (3, 4, 6, 3, False): "resnet34",
             (3, 4, 6, 3, True): "resnet50", (3, 4, 23, 3, True): "resnet101",
             (3, 8, 36, 3, True): "resnet152"}
    return table.get(tuple(blocks) + (bottleneck,))


def perturb_bn(model, seed):
    """Gives every BN non-trivial affine and running statistics (every
    LayerNorm a non-trivial affine, every Swin bias table values of 0.5),
    so a check of a freshly initialised model exercises the normalisation
    and the attention bias."""
    g = torch.Generator().manual_seed(seed + 1)
    for name, t in model.named_parameters():
        if name.endswith("relative_position_bias_table"):
            with torch.no_grad():
                t.copy_(0.5 * torch.randn(t.shape, generator=g))
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            n = m.normalized_shape[0]
            with torch.no_grad():
                m.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
                m.bias.copy_(0.1 * torch.randn(n, generator=g))
        if isinstance(m, torch.nn.BatchNorm2d):
            n = m.num_features
            with torch.no_grad():
                m.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
                m.bias.copy_(0.1 * torch.randn(n, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
                m.num_batches_tracked.fill_(100)


def eval_config(a, num_classes, depth_name):
    """The YAML classic stores in "config": the eval pipeline (resize to
    image_size / crop_pct, centre crop, normalise) of the weights."""
    mean = ", ".join(repr(v) for v in a.mean)
    std = ", ".join(repr(v) for v in a.std)
    return ("dataset: imagefolder\n"
            "data_dir: ./images\n"
            "num_classes: %d\n"
            "image_size: %d\n"
            "crop_pct: %r\n"
            "random_resized_crop: true\n"
            "mean: [%s]\n"
            "std: [%s]\n"
            "model: %s\n"
            "stem: imagenet\n"
            "in_channels: %d\n" % (num_classes, a.image_size, a.crop_pct,
                                   mean, std, depth_name, a.in_channels))


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch.Tensor), written in that order."""
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, t in tensors:
        t = t.detach().cpu().contiguous()
        if t.dtype in (torch.int64, torch.int32):
            dtype, np_dtype = "I64", "<i8"
        else:
            dtype, np_dtype = "F32", "<f4"
        data = t.numpy().astype(np_dtype).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def class_names_of(spec):
    """A file of one name per line, or a comma-separated list."""
    if spec is None:
        return None
    try:
        with open(spec, encoding="utf-8") as f:
            names = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        names = [s.strip() for s in spec.split(",")]
    return names


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("pth", nargs="?", help="state_dict .pth (or --random)")
    p.add_argument("out", help="output .safetensors")
    p.add_argument("--arch", choices=ARCHS, help="default: from the weights")
    p.add_argument("--pretrained-file", help="same as the positional .pth")
    p.add_argument("--random", action="store_true",
                   help="a freshly initialised torchvision model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--perturb-bn", action="store_true",
                   help="with --random: non-trivial BN statistics, "
                   "LayerNorm affines and Swin bias tables")
    p.add_argument("--num-classes", type=int)
    p.add_argument("--in-channels", type=int, default=3)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--crop-pct", type=float, default=0.875)
    p.add_argument("--mean", type=float, nargs=3, default=IMAGENET_MEAN)
    p.add_argument("--std", type=float, nargs=3, default=IMAGENET_STD)
    p.add_argument("--class-names", help="file (one per line) or a,b,c")
    p.add_argument("--save-pth", help="also save the state_dict used")
    a = p.parse_args()

    src = a.pretrained_file or a.pth
    if a.random:
        if src:
            p.error("--random takes no input .pth")
        if not a.arch:
            p.error("--random needs --arch")
        torch.manual_seed(a.seed)
        model = torch_models.build(a.arch, a.num_classes or 1000,
                                   a.in_channels)
        if a.perturb_bn:
            perturb_bn(model, a.seed)
        sd = model.state_dict()
    else:
        if not src:
            p.error("give a .pth, --pretrained-file or --random")
        sd = load_state_dict(src)
    head, first = torch_models.head_of(sd)
    if head not in sd or first not in sd:
        sys.exit("%s: no conv1.weight / fc.weight (ResNet) nor "
                 "features.0.0.weight / head.weight (Swin): not a torchvision "
                 "ResNet or Swin" % (src or "model"))
    num_classes = sd[head].shape[0]
    if a.num_classes and a.num_classes != num_classes:
        sys.exit("%s: fc.weight has %d classes, --num-classes says %d"
                 % (src, num_classes, a.num_classes))
    in_c = sd[first].shape[1]
    if in_c != a.in_channels:
        sys.exit("%s: %s takes %d channels, --in-channels says %d"
                 % (src, first, in_c, a.in_channels))
    swin = head == "head.weight"
    if not swin and tuple(sd["conv1.weight"].shape[2:]) != (7, 7):
        sys.exit("%s: conv1 is %s, not the 7x7 ImageNet stem"
                 % (src, tuple(sd["conv1.weight"].shape)))
    # Infer the depth from the blocks, then check every name and shape
    # against a torchvision model of that depth.
    arch = a.arch or (torch_models.swin_arch_of(sd) if swin else arch_of(sd))
    if arch is None:
        sys.exit("%s: the blocks match no torchvision %s; give --arch"
                 % (src, "Swin" if swin else "ResNet"))
    ref = torch_models.build(arch, num_classes, in_c)
    ref_sd = ref.state_dict()
    missing = [k for k in ref_sd if k not in sd]
    extra = [k for k in sd if k not in ref_sd]
    if missing or extra:
        sys.exit("%s: not a torchvision %s state_dict: missing %s; "
                 "unexpected %s" % (src, arch, missing[:8], extra[:8]))
    for k, v in ref_sd.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            sys.exit("%s: %s is %s, %s has %s" % (src, k,
                     tuple(sd[k].shape), arch, tuple(v.shape)))
    names = class_names_of(a.class_names)
    if names is not None and len(names) != num_classes:
        sys.exit("--class-names gives %d names for %d classes"
                 % (len(names), num_classes))

    meta = {
        "arch": arch,
        "in_channels": str(in_c),
        "num_classes": str(num_classes),
        "image_size": str(a.image_size),
        "mean": ",".join(repr(v) for v in a.mean),
        "std": ",".join(repr(v) for v in a.std),
        "config": eval_config(a, num_classes, arch),
        "dataset": "torchvision",
        "source": "torch2safetensors.py (torch %s, torchvision %s)"
                  % (torch.__version__, torchvision.__version__),
    }
    if not swin:
        meta["stem"] = "imagenet"
    if names is not None:
        meta["class_names"] = json.dumps(names)
    # torchvision's state_dict order, which is also classic's graph order.
    write_safetensors(a.out, [(k, sd[k]) for k in ref_sd], meta)
    if a.save_pth:
        torch.save({k: sd[k] for k in ref_sd}, a.save_pth)


if __name__ == "__main__":
    main()
