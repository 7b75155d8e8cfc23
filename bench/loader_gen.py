"""Writes an ImageFolder of N random-textured 224x224 JPEGs in 10 classes
for the loader benchmark."""
import os
import random
import sys

from PIL import Image, ImageDraw


def main():
    root, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(0)
    for i in range(n):
        cls = os.path.join(root, f"class{i % 10}")
        os.makedirs(cls, exist_ok=True)
        img = Image.new("RGB", (224, 224),
                        tuple(rng.randrange(256) for _ in range(3)))
        d = ImageDraw.Draw(img)
        for _ in range(40):
            x0, y0 = rng.randrange(224), rng.randrange(224)
            d.ellipse([x0, y0, x0 + rng.randrange(8, 80),
                       y0 + rng.randrange(8, 80)],
                      fill=tuple(rng.randrange(256) for _ in range(3)))
        img.save(os.path.join(cls, f"img{i:04d}.jpg"), quality=90)


if __name__ == "__main__":
    main()
