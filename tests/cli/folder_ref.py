#!/usr/bin/python3
"""Independent references for tests/cli/test_folder.sh (torchvision 0.14, numpy).

  folder_ref.py idx ROOT SRC OUT      writes Fashion-MNIST IDX files (train = ROOT/train, t10k = ROOT/val) holding the
                                      images in torchvision ImageFolder's sample order (files are named by their
                                      index in SRC's IDX files) and its labels (the class_to_idx of ROOT/train)
  folder_ref.py pixels X.safetensors SRC MEAN STD N
                                      checks that the first N preprocessed inputs in X (vitc predict --output on
                                      ROOT/val's PNGs in ImageFolder order, crop_pct 1) are the IDX pixels
"""
import gzip
import os
import struct
import sys

import numpy as np
from torchvision.datasets import ImageFolder

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import st  # noqa: E402  (the tests' safetensors reader)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from make_imagefolder import read_idx  # noqa: E402  (the IDX reader that made the folders)


def samples(split_dir, class_to_idx=None):
    ds = ImageFolder(split_dir)
    if class_to_idx is None:
        return ds.samples, ds.class_to_idx
    return [(p, class_to_idx[ds.classes[y]]) for p, y in ds.samples], class_to_idx


def write_idx(path, arr, magic):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape) + arr.tobytes())


def idx_cmd(root, src, out):
    os.makedirs(out, exist_ok=True)
    train, c2i = samples(os.path.join(root, "train"))
    val, _ = samples(os.path.join(root, "val"), c2i)
    for smp, prefix in ((train, "train"), (val, "t10k")):
        images = read_idx(os.path.join(src, prefix + "-images-idx3-ubyte.gz"))
        order = [int(os.path.basename(p).split(".")[0]) for p, _ in smp]
        labels = np.array([y for _, y in smp], np.uint8)
        write_idx(os.path.join(out, prefix + "-images-idx3-ubyte.gz"), np.ascontiguousarray(images[order]), 0x803)
        write_idx(os.path.join(out, prefix + "-labels-idx1-ubyte.gz"), labels, 0x801)
    print("wrote IDX files of %d train and %d val images in ImageFolder order to %s" % (len(train), len(val), out))


def pixels_cmd(x_path, src, mean, std, n):
    root = os.path.dirname(x_path)
    x = st.load(x_path)["input"][:, 0]
    names = [line.strip() for line in open(os.path.join(root, "images.txt"))]
    images = read_idx(os.path.join(src, "t10k-images-idx3-ubyte.gz"))
    want = np.stack([images[int(os.path.basename(p).split(".")[0])] for p in names[:n]]).astype(np.float64)
    got = (x[:n].astype(np.float64) * std + mean) * 255.0
    err = np.abs(got - want).max()
    print(("PASS" if err < 1e-3 else "FAIL") + " decoded PNG pixels equal the IDX pixels (%d images, max |diff| %.2g)"
          % (n, err))


if __name__ == "__main__":
    if sys.argv[1] == "idx":
        idx_cmd(*sys.argv[2:5])
    else:
        pixels_cmd(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
