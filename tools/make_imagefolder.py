#!/usr/bin/python3
"""Writes image folders for `vitc train --data DIR` (DIR/train/<class>/<image>, DIR/val/<class>/<image>).

  make_imagefolder.py fmnist OUT [--train N] [--val M] [--src DIR]
      the first N training and M test images of Fashion-MNIST (Debian's dataset-fashion-mnist) as grayscale PNG
      (OUT/png) and JPEG (OUT/jpg, quality 90); class folders "<k>_<name>", files "<index>.png" named by their IDX
      index (some under a nested folder, some with an upper-case extension, and a text file that is not an image,
      to exercise the ImageFolder rules)
  make_imagefolder.py synthetic OUT [--n N] [--size WxH] [--classes K]
      N random smooth RGB JPEGs of W×H pixels (quality 90) in K classes, 80% train and 20% val (for benchmarks)
"""
import argparse
import gzip
import os
import sys

import numpy as np
from PIL import Image

NAMES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xFF)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def fmnist(args):
    splits = []
    for split, prefix, count in (("train", "train", args.train), ("val", "t10k", args.val)):  # checked before writing
        images = read_idx(os.path.join(args.src, prefix + "-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(args.src, prefix + "-labels-idx1-ubyte.gz"))
        if count > min(len(images), len(labels)):
            sys.exit("make_imagefolder: --%s %d: the %s split has %d images" % (split, count, prefix,
                                                                              min(len(images), len(labels))))
        empty = [k for k in range(len(NAMES)) if not (labels[:count] == k).any()]
        if empty:  # vitc train refuses a class folder without images (as torchvision does)
            sys.exit("make_imagefolder: --%s %d: the first %d images of the %s split hold no image of class%s %s, "
                     "whose folder would be empty; give a larger --%s" % (
                         split, count, count, prefix, "es" if len(empty) > 1 else "",
                         ", ".join("%d_%s" % (k, NAMES[k]) for k in empty), split))
        splits.append((split, images[:count], labels[:count]))
    for split, images, labels in splits:
        for fmt in ("png", "jpg"):
            for k, name in enumerate(NAMES):
                os.makedirs(os.path.join(args.out, fmt, split, "%d_%s" % (k, name)), exist_ok=True)
            if split == "train":  # not an image: ImageFolder ignores it
                with open(os.path.join(args.out, fmt, split, "0_" + NAMES[0], "notes.txt"), "w") as f:
                    f.write("not an image\n")
        for i, (img, lab) in enumerate(zip(images, labels)):
            cls = "%d_%s" % (lab, NAMES[lab])
            sub = "more" if i % 5 == 0 else ""  # nested folders are walked (os.walk order)
            for fmt in ("png", "jpg"):
                ext = fmt.upper() if i % 7 == 0 else fmt  # extensions match case-insensitively
                d = os.path.join(args.out, fmt, split, cls, sub)
                os.makedirs(d, exist_ok=True)
                path = os.path.join(d, "%05d.%s" % (i, ext))
                if fmt == "png":
                    Image.fromarray(img, "L").save(path, format="PNG")
                else:
                    Image.fromarray(img, "L").save(path, format="JPEG", quality=90)
    print("wrote %s/png and %s/jpg: %d train, %d val images" % (args.out, args.out, args.train, args.val))


def size_arg(text):
    """WxH with positive integers (argparse's type for --size)."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError("expected WIDTHxHEIGHT, e.g. 400x300, got %r" % text)
    return int(parts[0]), int(parts[1])


def synthetic(args):
    w, h = args.size
    rng = np.random.default_rng(0)
    for i in range(args.n):
        split = "val" if (i // args.classes) % 5 == 4 else "train"
        cls = "c%02d" % (i % args.classes)
        d = os.path.join(args.out, split, cls)
        os.makedirs(d, exist_ok=True)
        small = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(small, "RGB").resize((w, h), Image.BILINEAR)
        img.save(os.path.join(d, "%05d.jpg" % i), format="JPEG", quality=90)
    print("wrote %d %dx%d JPEGs under %s" % (args.n, w, h, args.out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="cmd", required=True)
    f = sp.add_parser("fmnist")
    f.add_argument("out")
    f.add_argument("--train", type=int, default=2000)
    f.add_argument("--val", type=int, default=500)
    f.add_argument("--src", default=os.environ.get("VITC_FMNIST_DIR") or "/usr/share/datasets/fashion-mnist")
    s = sp.add_parser("synthetic")
    s.add_argument("out")
    s.add_argument("--n", type=int, default=500)
    s.add_argument("--size", type=size_arg, default=(400, 300), help="WIDTHxHEIGHT (default 400x300)")
    s.add_argument("--classes", type=int, default=10)
    args = p.parse_args()
    counts = (("--train", args.train), ("--val", args.val)) if args.cmd == "fmnist" else \
        (("--n", args.n), ("--classes", args.classes))
    for opt, v in counts:
        if v < 1:
            p.error("%s must be at least 1, got %d" % (opt, v))
    if args.cmd == "synthetic" and args.n < 5 * args.classes:  # every 5th round of --classes images goes to val/
        p.error("--n %d leaves classes without a validation image (every fifth of each class's images goes to val/): "
                "give --n at least %d for %d classes" % (args.n, 5 * args.classes, args.classes))
    if os.path.isdir(args.out) and os.listdir(args.out):  # images of an earlier run would mix with these
        p.error("%s exists and is not empty: give a new folder, or remove it first" % args.out)
    fmnist(args) if args.cmd == "fmnist" else synthetic(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
