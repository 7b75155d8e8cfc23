"""Loader throughput of torchvision's DataLoader (PIL decoding) on the same
data and the same train pipeline as bench/loader_bench.c."""
import sys
import time

import torch
import torchvision
from torchvision import transforms as T


def main():
    kind, path, workers, batch, epochs = sys.argv[1:6]
    workers, batch, epochs = int(workers), int(batch), int(epochs)
    torch.manual_seed(1)
    if kind == "fashion":
        tf = T.Compose([T.RandomCrop(28, padding=4), T.RandomHorizontalFlip(),
                        T.ToTensor(), T.Normalize((0.2860,), (0.3530,))])
        ds = torchvision.datasets.FashionMNIST(path, train=True,
                                               download=False, transform=tf)
    else:
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                        T.ToTensor(),
                        T.Normalize((0.485, 0.456, 0.406),
                                    (0.229, 0.224, 0.225))])
        ds = torchvision.datasets.ImageFolder(path, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True,
                                     num_workers=workers,
                                     persistent_workers=workers > 0)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for x, y in dl:
            n += x.shape[0]
    dt = time.perf_counter() - t0
    print(f"torchvision images/s {n / dt:.1f} ({n} images in {dt:.2f} s, "
          f"{workers} workers, batch {batch})")


if __name__ == "__main__":
    main()
