#!/usr/bin/python3
"""Converts a PyTorch checkpoint of one of the papers' official models to safetensors for vitc.

vitc uses the official state_dict names and shapes, so no tensor is renamed: the script only unwraps the state dict
(the first of --key, 'model', 'state_dict', 'model_ema', 'state_dict_ema' that holds one, else the file itself),
strips a DataParallel 'module.' prefix, drops tensors whose names start with a --drop prefix (e.g. a DeiT
distillation 'head_dist.' for the plain model), and writes floating tensors as F32 and integer ones (BatchNorm's
num_batches_tracked) as I64. vitc's loader then names any missing, extra or wrong-shape tensor.
The checkpoint is read with torch.load(weights_only=True): tensors and plain containers only, no code from the file.
One that also pickles other Python objects (e.g. the training's argparse.Namespace) is refused, naming the object;
--trust-pickle reads it with the full unpickler, which runs whatever code the file names: for trusted files only.
Usage: /usr/bin/python3 tools/convert_checkpoint.py CKPT.pth OUT.safetensors [--key K] [--drop PREFIX ...]
       [--trust-pickle]
Example: tools/convert_checkpoint.py deit_tiny_patch16_224-a1311bcf.pth deit_tiny.safetensors
         vitc predict deit_tiny_patch16_224 --weights deit_tiny.safetensors cat.jpg
"""
import argparse
import json
import os
import pickle
import struct
import sys

import torch


def state_dict(obj, key):
    for k in ([key] if key else []) + ["model", "state_dict", "model_ema", "state_dict_ema"]:
        if isinstance(obj, dict) and isinstance(obj.get(k), dict):
            return obj[k]
    if key:
        sys.exit(f"convert_checkpoint: no state dict under '{key}' (top-level keys: {list(obj)[:10]})")
    return obj


def load(path, trust):
    """The checkpoint object; without trust, through the weights-only unpickler (a refusal names the object)."""
    if trust:  # weights_only=False said outright: PyTorch 2.6 and later default to True
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except TypeError:  # before 1.13: the full unpickler is the only one
            return torch.load(path, map_location="cpu")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # PyTorch before 1.13 has no weights-only unpickler
        sys.exit(f"convert_checkpoint: PyTorch {torch.__version__} cannot read {path} without running code it may "
                 "name (weights_only needs 1.13 or later); if you trust its source, add --trust-pickle")
    except pickle.UnpicklingError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if "Unsupported" in ln]
        why = lines[0].rsplit("error:", 1)[-1].split(" was not an allowed")[0].strip() if lines else \
            str(e).splitlines()[0].strip()
        sys.exit(f"convert_checkpoint: {path} pickles more than tensors and plain containers ({why}); reading it would "
                 "run code the file names. If you trust its source, add --trust-pickle")


def write_safetensors(path, tensors):
    """Writes name -> tensor (F32 or I64) to path atomically (temporary file + rename)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        dtype = "I64" if not t.is_floating_point() else "F32"
        b = (t.to(torch.int64) if dtype == "I64" else t.to(torch.float32)).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("output")
    ap.add_argument("--key", help="entry of the checkpoint dict that holds the state dict")
    ap.add_argument("--drop", action="append", default=[], help="leave out tensors whose name starts with this")
    ap.add_argument("--trust-pickle", action="store_true",
                    help="read a checkpoint that pickles other Python objects too (runs code it names: trusted files "
                    "only)")
    a = ap.parse_args()
    sd = state_dict(load(a.checkpoint, a.trust_pickle), a.key)
    out = {}
    for name, t in sd.items():
        if not isinstance(t, torch.Tensor):
            sys.exit(f"convert_checkpoint: '{name}' is a {type(t).__name__}, not a tensor (choose another --key)")
        name = name[len("module."):] if name.startswith("module.") else name
        if not any(name.startswith(p) for p in a.drop):
            out[name] = t
    write_safetensors(a.output, out)
    print(f"wrote {a.output}: {len(out)} tensors, {sum(t.numel() for t in out.values()):,} values")


if __name__ == "__main__":
    main()
