#!/usr/bin/python3
"""Converts a PyTorch checkpoint of one of the papers' official models to safetensors for vitc.

vitc uses the official state_dict names and shapes, so no tensor is renamed: the script only unwraps the state dict
(the entry --key names, else the first of 'model', 'state_dict', 'model_ema', 'state_dict_ema' that holds one, else
the file itself), strips a DataParallel 'module.' prefix, drops tensors whose names start with a --drop prefix (e.g.
an extra head the vitc model does not have), and writes floating tensors as F32 and integer ones
(BatchNorm's num_batches_tracked) as I64. vitc's loader then names any missing, extra or wrong-shape tensor.
The checkpoint is read as tensors, plain containers and scalars only, no code from the file: torch.load's
weights-only unpickler, or where that PyTorch's cannot read a plain value (1.13 refuses floats, e.g. a training
checkpoint's optimiser settings or max_accuracy) an unpickler with the same allowed classes. One that also pickles
other Python objects (e.g. the training's argparse.Namespace) is refused, naming the object; --trust-pickle reads it
with the full unpickler, which runs whatever code the file names: for trusted files only.
Every refusal is one line "convert_checkpoint: ..." and exit status 1; the output is written atomically (a temporary
file in its folder, then a rename) and never over a folder, a device, a FIFO or the checkpoint itself.
Usage: /usr/bin/python3 tools/convert_checkpoint.py CKPT.pth OUT.safetensors [--key K] [--drop PREFIX ...]
       [--trust-pickle]
Example: tools/convert_checkpoint.py deit_tiny_patch16_224-a1311bcf.pth deit_tiny.safetensors
         vitc predict deit_tiny_patch16_224 --weights deit_tiny.safetensors cat.jpg
"""
import argparse
import fcntl
import io
import json
import os
import pickle
import stat
import struct
import sys
import zipfile

import torch

ENTRIES = ("model", "state_dict", "model_ema", "state_dict_ema")


class Refused(Exception):
    """A checkpoint or output the script will not take; the message is the whole explanation."""


def a_type(x):
    """'a list', 'an int': x's type with its article."""
    n = type(x).__name__
    return ("an " if n[:1].lower() in "aeiou" else "a ") + n


def kind_of(mode):
    """What a non-regular file is, in words."""
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def read_input(path):
    """The checkpoint's bytes: a regular file, or a pipe read to its end (a FIFO nobody writes reads as empty)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}")
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise Refused(f"{path} is {kind_of(mode)}, not a checkpoint file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        chunks = []
        while True:
            b = os.read(fd, 1 << 24)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}")
    finally:
        os.close(fd)


def sniff(path, data):
    """Refuses what is not a torch.save file, saying what it is; TorchScript archives included."""
    if not data:
        raise Refused(f"{path} is empty")
    if data[:6] == b"\x93NUMPY":
        raise Refused(f"{path} is a NumPy array file, not a PyTorch checkpoint")
    if len(data) >= 10 and data[8:9] == b"{" and struct.unpack("<Q", data[:8])[0] <= len(data) - 8:
        raise Refused(f"{path} is already safetensors: give it to vitc as it is (--weights)")
    if data[:4] == b"PK\x03\x04":
        try:
            names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        except zipfile.BadZipFile:
            raise Refused(f"{path} is a truncated or damaged torch.save archive (its zip directory is unreadable)")
        if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
            raise Refused(f"{path} is a TorchScript archive (torch.jit.save): save the model's state_dict() with "
                          "torch.save and convert that")
        if not any(n.endswith("/data.pkl") for n in names):
            raise Refused(f"{path} is a zip archive without a pickled object (data.pkl): not a torch.save file")
        return
    if data[:1] != b"\x80":  # a pickle of protocol 2 or later (torch.save's legacy format)
        raise Refused(f"{path} is not a PyTorch checkpoint (torch.save writes a zip archive or a pickle)")


def allowed_globals():
    """The classes and functions the weights-only unpickler of this PyTorch allows, by 'module.name'."""
    try:
        from torch import _weights_only_unpickler
        return dict(_weights_only_unpickler._get_allowed_globals())
    except (ImportError, AttributeError):  # PyTorch before 1.13: tensors, storages, dtypes and OrderedDict
        import collections
        g = {"collections.OrderedDict": collections.OrderedDict, "torch.Size": torch.Size,
             "torch._utils._rebuild_tensor_v2": torch._utils._rebuild_tensor_v2,
             "torch._utils._rebuild_parameter": torch._utils._rebuild_parameter}
        g.update({f"torch.{n}": getattr(torch, n) for n in dir(torch)
                  if n.endswith("Storage") or isinstance(getattr(torch, n), torch.dtype)})
        return g


class _Restricted(pickle.Unpickler):
    """Python's unpickler (every opcode: floats, sets, ...) with only allowed_globals() to call."""
    allowed = None

    def find_class(self, module, name):
        obj = self.allowed.get(f"{module}.{name}")
        if obj is None:
            raise pickle.UnpicklingError(f"Unsupported class {module}.{name}")
        return obj


class RestrictedPickle:
    """A pickle module for torch.load whose Unpickler allows only what the weights-only unpickler allows."""
    Unpickler = _Restricted
    UnpicklingError = pickle.UnpicklingError

    @staticmethod
    def load(f, **kw):
        return _Restricted(f, **kw).load()


def refused_object(path, err):
    why = next((ln.rsplit("error:", 1)[-1].strip() for ln in str(err).splitlines() if "Unsupported" in ln),
               str(err).splitlines()[0].strip() if str(err) else type(err).__name__)
    return Refused(f"{path} pickles more than tensors, plain containers and scalars ({why}); reading it would run code "
                   "the file names. If you trust its source, add --trust-pickle")


def load(path, data, trust):
    """The checkpoint object; without trust, tensors, plain containers and scalars only (a refusal names the object)."""
    buf = io.BytesIO(data)
    try:
        if trust:  # weights_only=False said outright: PyTorch 2.6 and later default to True
            try:
                return torch.load(buf, map_location="cpu", weights_only=False)
            except TypeError:  # before 1.13: the full unpickler is the only one
                buf.seek(0)
                return torch.load(buf, map_location="cpu")
        try:
            return torch.load(buf, map_location="cpu", weights_only=True)
        except TypeError:  # before 1.13: no weights-only unpickler
            pass
        except pickle.UnpicklingError as e:
            if "Unsupported operand" not in str(e):  # a class or function outside the allowed ones
                raise refused_object(path, e)
        _Restricted.allowed = allowed_globals()  # a plain value this PyTorch's own unpickler cannot read
        buf.seek(0)
        try:
            return torch.load(buf, map_location="cpu", pickle_module=RestrictedPickle, weights_only=False)
        except TypeError:
            buf.seek(0)
            return torch.load(buf, map_location="cpu", pickle_module=RestrictedPickle)
    except Refused:
        raise
    except pickle.UnpicklingError as e:
        if "Unsupported class" in str(e):
            raise refused_object(path, e)
        raise Refused(f"{path} is not a readable torch.save file ({str(e).splitlines()[0] if str(e) else e!r})")
    except (RuntimeError, EOFError, ValueError, KeyError, IndexError, struct.error, zipfile.BadZipFile) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Refused(f"{path} is truncated or not a torch.save file ({first})")


def state_dict(obj, key, path):
    """(the state dict, where it was found)."""
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            keys = list(obj)[:10] if isinstance(obj, dict) else None
            raise Refused(f"{path} has no entry '{key}' (--key)" +
                          (f"; its top-level keys: {', '.join(map(str, keys))}" if keys is not None
                           else f"; it holds {a_type(obj)}"))
        if not isinstance(obj[key], dict):
            raise Refused(f"{path}'s entry '{key}' (--key) is {a_type(obj[key])}, not a state dict")
        return obj[key], f"entry '{key}'"
    if not isinstance(obj, dict):
        hint = " (a whole pickled model: save its state_dict() instead)" if hasattr(obj, "state_dict") else ""
        raise Refused(f"{path} holds {a_type(obj)}, not a state dict (a dict of tensors){hint}")
    for k in ENTRIES:
        if isinstance(obj.get(k), dict):
            return obj[k], f"entry '{k}'"
    return obj, "the top level"


def tensors_of(sd, drop, path, where):
    """name -> tensor of the state dict sd: 'module.' stripped, --drop prefixes left out, every value checked."""
    out, origin = {}, {}
    for name, t in sd.items():
        if not isinstance(name, str):
            raise Refused(f"{path}: the state dict ({where}) has a key {name!r} ({a_type(name)}), not a "
                          "tensor name")
        if not isinstance(t, torch.Tensor):
            raise Refused(f"{path}: '{name}' ({where}) is {a_type(t)}, not a tensor (choose another --key)")
        if t.layout != torch.strided:
            raise Refused(f"{path}: '{name}' is a {t.layout} tensor: store it dense (.to_dense()) before converting")
        if t.device.type == "meta":
            raise Refused(f"{path}: '{name}' is a meta tensor, which holds no values")
        if t.is_complex():
            raise Refused(f"{path}: '{name}' is complex ({t.dtype}): vitc's weights are real")
        short = name[len("module."):] if name.startswith("module.") else name
        if any(short.startswith(p) for p in drop):
            continue
        if short in out:
            raise Refused(f"{path}: '{origin[short]}' and '{name}' are both '{short}' once the DataParallel 'module.' "
                          "prefix is stripped")
        out[short], origin[short] = t, name
    if not out:
        raise Refused(f"{path}: no tensor left to write ({where}" + (f", after --drop {' '.join(drop)})" if drop
                                                                      else ")"))
    return out


def check_output(path, src):
    """Refuses an output that exists and is no regular file, or is the checkpoint itself."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise Refused(f"cannot write {path}: {e.strerror}")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"refusing to write {path}: it exists and is {kind_of(st.st_mode)}")
    try:
        same = os.path.samefile(path, src)
    except OSError:
        same = False
    if same:
        raise Refused(f"refusing to write {path}: it is the checkpoint being converted (the output would destroy it)")


def write_safetensors(path, tensors):
    """Writes name -> tensor (F32 or I64) to path atomically (a temporary file in its folder, then a rename); the
    temporary file is removed on any failure."""
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
    folder, base = os.path.split(path)
    tmp = os.path.join(folder, f".{base[:200]}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for b in blobs:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Refused(f"cannot write {path}: {e.strerror}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("output")
    ap.add_argument("--key", help="entry of the checkpoint dict that holds the state dict (it must exist)")
    ap.add_argument("--drop", action="append", default=[], help="leave out tensors whose name starts with this")
    ap.add_argument("--trust-pickle", action="store_true",
                    help="read a checkpoint that pickles other Python objects too (runs code it names: trusted files "
                    "only)")
    a = ap.parse_args()
    try:
        check_output(a.output, a.checkpoint)
        data = read_input(a.checkpoint)
        sniff(a.checkpoint, data)
        sd, where = state_dict(load(a.checkpoint, data, a.trust_pickle), a.key, a.checkpoint)
        out = tensors_of(sd, a.drop, a.checkpoint, where)
        write_safetensors(a.output, out)
    except Refused as e:
        sys.exit(f"convert_checkpoint: {e}")
    print(f"wrote {a.output}: {len(out)} tensors, {sum(t.numel() for t in out.values()):,} values (from {where})")


if __name__ == "__main__":
    main()
