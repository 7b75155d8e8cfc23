"""The torchvision networks classic builds, by classic's arch names: the
ResNets with their stems, swin_t, and swin_micro (classic's small Swin:
patch 2, window 4, embed 64, depths 2-2-6, heads 2-4-8), for the tools
that convert and check weights."""
import torch
import torchvision
from torchvision.models.swin_transformer import SwinTransformer

RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
SWINS = ("swin_t", "swin_micro")
ARCHS = RESNETS + SWINS


def build(arch, num_classes, in_channels=3, stem="imagenet"):
    """A freshly initialised network of classic's arch `arch`."""
    if arch == "swin_micro":
        model = SwinTransformer(patch_size=[2, 2], embed_dim=64,
                                depths=[2, 2, 6], num_heads=[2, 4, 8],
                                window_size=[4, 4],
                                stochastic_depth_prob=0.1,
                                num_classes=num_classes)
    else:
        model = getattr(torchvision.models, arch)(num_classes=num_classes)
    if arch in SWINS:
        if in_channels != 3:
            old = model.features[0][0]
            model.features[0][0] = torch.nn.Conv2d(
                in_channels, old.out_channels, old.kernel_size, old.stride)
        return model
    if stem != "imagenet":
        # The CIFAR stems are torchvision's with a 3x3/1 conv1 (and, for
        # cifar, no maxpool): the usual surgery in PyTorch.
        model.conv1 = torch.nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        if stem == "cifar":
            model.maxpool = torch.nn.Identity()
    elif in_channels != 3:
        model.conv1 = torch.nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    return model


def head_of(sd):
    """(classifier weight name, first conv weight name) of a state_dict."""
    if "head.weight" in sd:
        return "head.weight", "features.0.0.weight"
    return "fc.weight", "conv1.weight"


def swin_arch_of(sd):
    """classic's Swin arch whose shapes the state_dict has, or None."""
    if "features.0.0.weight" not in sd:
        return None
    for arch in SWINS:
        ref = build(arch, sd["head.weight"].shape[0],
                    sd["features.0.0.weight"].shape[1]).state_dict()
        if set(ref) == set(sd) and all(
                tuple(ref[k].shape) == tuple(sd[k].shape) for k in ref):
            return arch
    return None
