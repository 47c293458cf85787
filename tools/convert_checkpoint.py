#!/usr/bin/python3
"""Converts a PyTorch checkpoint of one of the papers' official models to safetensors for vitc.

vitc uses the official state_dict names and shapes, so no tensor is renamed: the script only unwraps the state dict
(the entry --key names, else the first of 'model', 'state_dict', 'model_ema', 'state_dict_ema' that holds one, else
the file itself), strips the wrappers' prefixes ('module.' of DataParallel / DistributedDataParallel, '_orig_mod.' of
torch.compile, in any order) and then a --strip prefix where a name starts with it (e.g. --strip model. for a PyTorch
Lightning checkpoint whose LightningModule holds the network as self.model; a prefix that starts no name is refused),
drops the tensors named by or under a --drop prefix (e.g.
--drop n_averaged: the step counter torchvision's EMA saves beside the weights; a prefix that matches nothing is
refused), and writes floating tensors as F32 (float64 narrowed: a finite value past float32's range is refused, not
written as inf) and integer ones (BatchNorm's num_batches_tracked) as I64, with --form
the form record (Next-ViT saved after merge_bn: --form deployed; without it vitc takes the training form). vitc's
loader then names any missing, extra or wrong-shape tensor.
The checkpoint is read as tensors, plain containers and scalars only, and nothing it names is imported or called:
the zip archive torch.save writes (PyTorch 1.6 and later) is read by this script's own unpickler (Python's pure-Python
one cut down to data: read_zip), not by torch.load, whose weights-only mode PyTorch 1.13 does not make safe and
which refuses floats there (every training checkpoint's optimiser settings). A training script's argparse.Namespace
(DeiT's and timm's checkpoints hold one) is read as an inert record, a yacs CfgNode (the config Swin's, FLatten's and
GroupMixFormer's hold) as a plain dict. A checkpoint that pickles other Python objects, or is in the legacy pre-1.6
format, is refused, naming what it holds; --trust-pickle reads it with torch.load's full unpickler, which runs
whatever code the file names: for trusted files only.
A regular file's archive entries are read one at a time and the tensors are written one by one (views of their
storages until then), so the script holds about the checkpoint's size; a pipe's bytes are held whole.
Every refusal is one line "convert_checkpoint: ..." and exit status 1 (Ctrl-C, SIGTERM or SIGHUP: 128 + its number,
no file left); the output is written atomically (a temporary file in its folder, then a rename, with the replaced file's
mode or a new file's) and never over a folder, a device, a FIFO, a write-protected file or the checkpoint itself, its
folder checked before the checkpoint is read; a symlink's destination is written. A pipe is
read to its end, refused at its first bytes when they begin no torch.save file, and past half the memory this
process may use (the machine's, or its control group's limit).
Usage: /usr/bin/python3 tools/convert_checkpoint.py CKPT.pth OUT.safetensors [--key K] [--strip PREFIX ...]
       [--drop PREFIX ...] [--form training|deployed] [--trust-pickle]
Example: tools/convert_checkpoint.py deit_tiny_patch16_224-a1311bcf.pth deit_tiny.safetensors
         vitc predict deit_tiny_patch16_224 --weights deit_tiny.safetensors cat.jpg
"""
import argparse
import collections
import fcntl
import io
import json
import os
import pickle
import select
import signal
import stat
import struct
import sys
import tempfile
import zipfile

import torch

ENTRIES = ("model", "state_dict", "model_ema", "state_dict_ema")


class Refused(Exception):
    """A checkpoint or output the script will not take; the message is the whole explanation."""


def shown(x, n=80):
    """A name or value from the file as messages print it: ASCII with escapes, one line, at most about n characters."""
    t = ascii(x) if isinstance(x, str) else str(x) if type(x) is int and abs(x) < 10 ** 20 else f"<{type(x).__name__}>"
    return t if len(t) <= n else t[:n] + "...'"


def a_type(x):
    """'a list', 'an int': x's type with its article (a record as the class it was pickled as)."""
    n = x.name if type(x) is _Record else "torch type" if type(x) in (_TensorType, _RecordType) else type(x).__name__
    return ("an " if n[:1].lower() in "aeiou" else "a ") + n


def kind_of(mode):
    """What a non-regular file is, in words."""
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def memory_bytes():
    """The memory this process may use, in bytes: the machine's, or its control group's limit where lower (a bound
    on what a pipe may stream in)."""
    try:
        limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        limit = 1 << 40
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = min(limit, int(f.read().strip()))
        except (OSError, ValueError):  # no such file, or "max"
            pass
    return limit


def refuse_head(path, head):
    """Refuses a stream whose first bytes no torch.save file starts with, before reading the rest of it."""
    if head[:6] == b"\x93NUMPY":
        raise Refused(f"{path} is a NumPy array file, not a PyTorch checkpoint")
    if head[:4] != b"PK\x03\x04" and head[:1] != b"\x80" and head[8:9] != b"{":  # zip, pickle, safetensors
        raise Refused(f"{path} is not a PyTorch checkpoint (torch.save writes a zip archive or a pickle)")


def read_input(path):
    """The checkpoint: a regular file opened (binary, read where needed: the archive's entries one by one), or a pipe's
    bytes read to its end (a named pipe: once a writer has opened it, as `cat` reads one); a stream is refused as soon
    as its first bytes show it is no checkpoint, or once it holds more than half the memory this process may use."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a device is never opened blocking
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}")
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise Refused(f"{path} is {kind_of(st.st_mode)}, not a checkpoint file")
        if stat.S_ISREG(st.st_mode):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            f, fd = os.fdopen(fd, "rb"), -1  # the file object owns the descriptor now
            return f
        if stat.S_ISFIFO(st.st_mode):  # this descriptor waited on (never a second open by name) until a writer has
            # written or come and gone, as `cat` waits: Linux reports no hang-up on a FIFO before its first writer
            waiter = select.poll()
            waiter.register(fd, select.POLLIN)
            waiter.poll()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        data, cap = bytearray(), memory_bytes() // 2  # half: bytes(data) copies it once
        while True:
            b = os.read(fd, 1 << 24)
            if not b:
                break
            if len(data) < 9 <= len(data) + len(b):
                refuse_head(path, (bytes(data) + b)[:9])
            data += b
            if len(data) > cap:
                raise Refused(f"{path} holds more than half of the {2 * cap / 2**30:.1f} GiB of memory this process "
                              "may use: not read further")
        return bytes(data)  # io.BytesIO shares a bytes object's buffer (it copies a bytearray's)
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}")
    finally:
        if fd >= 0:
            os.close(fd)


def as_file(src):
    """A seekable binary file of the checkpoint read_input gave (its bytes, or the regular file), at its start."""
    if isinstance(src, bytes):
        return io.BytesIO(src)  # shares the bytes object's buffer
    src.seek(0)
    return src


def head_of(src, n):
    """The checkpoint's first n bytes (fewer in a shorter one) and its length."""
    if isinstance(src, bytes):
        return src[:n], len(src)
    src.seek(0)
    return src.read(n), os.fstat(src.fileno()).st_size


def sniff(path, src):
    """Refuses what is not a torch.save file, saying what it is; TorchScript archives included."""
    data, size = head_of(src, 16)
    if not data:
        raise Refused(f"{path} is empty")
    if data[:6] == b"\x93NUMPY":
        raise Refused(f"{path} is a NumPy array file, not a PyTorch checkpoint")
    if size >= 10 and data[8:9] == b"{" and struct.unpack("<Q", data[:8])[0] <= size - 8:
        raise Refused(f"{path} is already safetensors: give it to vitc as it is (--weights)")
    if data[:4] == b"PK\x03\x04":
        try:
            z = zipfile.ZipFile(as_file(src))
            names = z.namelist()
        except zipfile.BadZipFile:
            raise Refused(f"{path} is a truncated or damaged torch.save archive (its zip directory is unreadable)")
        if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
            raise Refused(f"{path} is a TorchScript archive (torch.jit.save): save the model's state_dict() with "
                          "torch.save and convert that")
        if not any(n.endswith("/data.pkl") for n in names):
            raise Refused(f"{path} is a zip archive without a pickled object (data.pkl): not a torch.save file")
        if any(i.compress_type != zipfile.ZIP_STORED for i in z.infolist()):
            raise Refused(f"{path} is a zip archive with compressed entries, which torch.save does not write")
        return
    if data[:1] != b"\x80":  # a pickle of protocol 2 or later (torch.save's legacy format)
        raise Refused(f"{path} is not a PyTorch checkpoint (torch.save writes a zip archive or a pickle)")


class _OtherTensors(Exception):
    """Tensors torch.save can write and vitc has no use for (complex, quantized, sparse): what they are."""


# torch.save's storage classes (GLOBAL torch.<Name>) and their element types
STORAGES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
            "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
            "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
            "BoolStorage": torch.bool}


class _StorageType:
    """What GLOBAL torch.<Name>Storage gives: an element type, not callable."""

    def __init__(self, dtype):
        self.dtype = dtype


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    """torch._utils._rebuild_tensor_v2's meaning, on a storage this reader made: the strided view (not a copy: the
    writer copies one tensor at a time), its extent checked against the storage."""
    if not (isinstance(storage, torch.Tensor) and isinstance(offset, int) and isinstance(size, tuple)
            and isinstance(stride, tuple) and len(size) == len(stride)
            and all(isinstance(v, int) and v >= 0 for v in size + stride) and offset >= 0):
        raise pickle.UnpicklingError("a tensor's offset, size or stride is malformed")
    if any(v >= 1 << 48 for v in size + stride + (offset,)) or len(size) > 16:
        raise pickle.UnpicklingError("a tensor's offset, size or stride is out of range")
    if any(v == 0 for v in size):
        return torch.empty(size, dtype=storage.dtype)
    numel = 1
    for n in size:
        numel *= n
    if numel > storage.numel() or any(st == 0 and n > 1 for n, st in zip(size, stride)):
        raise pickle.UnpicklingError("a tensor repeats its storage's values (a zero stride or more elements than "
                                     "its storage), which no state dict holds")
    if offset + sum((n - 1) * st for n, st in zip(size, stride)) >= storage.numel():
        raise pickle.UnpicklingError("a tensor reaches past the end of its storage")
    return torch.as_strided(storage, size, stride, offset)


def _rebuild_parameter(data, requires_grad=False, hooks=None, state=None):
    return data


class _TensorType:
    """What GLOBAL torch.Tensor or torch.nn.parameter.Parameter gives: a name, not callable."""


class _Record:
    """What a pickled plain object of RECORDS becomes (a training script's argparse.Namespace): inert, its attributes
    kept as a dict (state); nothing of the class it names is imported or called."""

    def __init__(self, name):
        self.name, self.state, self.built = name, {}, False


class _DictRecord(dict):
    """What a pickled dict subclass of DICT_RECORDS becomes (the yacs CfgNode of a Swin-style checkpoint's 'config'):
    a dict of its items; the instance attributes its BUILD gives (the class's own flags) are dropped."""

    def __init__(self, name):
        super().__init__()
        self.name, self.built = name, False


class _RecordType:
    """What GLOBAL of a RECORDS or DICT_RECORDS class gives: NEWOBJ with no arguments makes a _Record or a
    _DictRecord of it."""

    def __init__(self, name, as_dict=False):
        self.name, self.as_dict = name, as_dict


def _rebuild_from_type(func, new_type, args, state):
    """torch._tensor._rebuild_from_type_v2, which PyTorch 2 writes for a tensor carrying Python attributes: the tensor
    that func (one of this reader's) rebuilds from args; the attributes (state) are dropped."""
    if not (func is _rebuild_tensor or func is _rebuild_parameter) or not isinstance(new_type, _TensorType) \
            or not isinstance(args, tuple) or not isinstance(state, (dict, tuple, type(None))):
        raise pickle.UnpicklingError("Unsupported operation _rebuild_from_type_v2 of another kind than a tensor's")
    return func(*args)


def _set_of(*args):
    """set(items), as protocol 2 pickles a set (REDUCE of builtins.set with one list, or none): of names and 64-bit
    integers only, as dict keys."""
    items = args[0] if len(args) == 1 else ()
    if len(args) > 1 or type(items) not in (list, tuple) or \
            not all(type(k) is str or (type(k) is int and -(1 << 63) <= k < 1 << 63) for k in items):
        raise pickle.UnpicklingError("Unsupported operation set() of other than one list of names")
    return set(items)


# the only callables a checkpoint read without --trust-pickle may name: this reader's own
CALLABLES = {"builtins.set": _set_of, "__builtin__.set": _set_of,
             "torch._utils._rebuild_tensor_v2": _rebuild_tensor, "torch._utils._rebuild_parameter": _rebuild_parameter,
             "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
             "torch._tensor._rebuild_from_type_v2": _rebuild_from_type,
             "collections.OrderedDict": collections.OrderedDict}
TENSOR_TYPES = {"torch.Tensor", "torch.nn.parameter.Parameter"}
# plain objects a training checkpoint holds besides its state dicts, read as inert records (NEWOBJ, then BUILD of a
# dict of their attributes)
RECORDS = {"argparse.Namespace"}
# dict subclasses read as inert dicts (NEWOBJ, SETITEMS, then BUILD of their attributes): the training config that
# Swin's, FLatten's and GroupMixFormer's checkpoints save
DICT_RECORDS = {"yacs.config.CfgNode"}


class _DataUnpickler(pickle._Unpickler):
    """Python's own (pure-Python) unpickler, cut down to data: scalars, strings, lists, tuples, dicts, sets (of names
    and integers also as protocol 2 writes them, REDUCE of set), the
    tensors of a torch.save zip archive (storages read from its data/ entries by persistent_load), OrderedDicts and
    inert records of RECORDS (argparse.Namespace) and DICT_RECORDS (yacs CfgNode, read as a dict). GLOBAL names only
    CALLABLES, TENSOR_TYPES, RECORDS, DICT_RECORDS and torch's storage classes; REDUCE calls only CALLABLES; NEWOBJ
    makes only records, without arguments; BUILD only fills a record's attribute dict (a dict record's is dropped) or
    drops an OrderedDict's state dict metadata; APPEND(S), SETITEM(S) and ADDITEMS work on lists, dicts (dict records
    included) and sets only; INST, OBJ, NEWOBJ_EX and the extension registry are refused. Nothing the file names is
    imported or called."""
    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data, storage_bytes):
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.storage_bytes, self.storages = storage_bytes, {}
        self.stored = self.made = 0  # elements read from storages, and in the tensors made of them
        self.record_items = 0  # attributes given to records, over the file (capped: each is checked once)

    def find_class(self, module, name):
        if module == "torch" and name in STORAGES:
            return _StorageType(STORAGES[name])
        obj = CALLABLES.get(f"{module}.{name}")
        if obj is not None:
            return obj
        if f"{module}.{name}" in TENSOR_TYPES:
            return _TensorType()
        full = f"{module}.{name}"
        if full in RECORDS or full in DICT_RECORDS:
            return _RecordType(full, full in DICT_RECORDS)
        if module == "torch" and name.endswith("Storage"):  # torch's, of elements no vitc weight has
            raise _OtherTensors(f"{shown(name[:-7] or 'untyped')} tensors (e.g. complex or quantized), which vitc's "
                                "weights are not")
        if module == "torch._utils" and name.startswith("_rebuild_"):  # torch's, of a layout other than strided
            raise _OtherTensors(f"a tensor of another layout ({shown(name)}: sparse, quantized, ...): store it dense and "
                                "float (.to_dense(), .dequantize()) before converting")
        raise pickle.UnpicklingError(f"Unsupported class {shown(module + '.' + name)[1:-1]}")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and type(pid[0]) is str and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str) and isinstance(pid[4], int)):
            raise pickle.UnpicklingError(f"a persistent id that is no tensor storage ({a_type(pid)})")
        kind, key, numel = pid[1], pid[2], pid[4]
        if key not in self.storages:
            raw = self.storage_bytes(key)
            width = torch.empty(0, dtype=kind.dtype).element_size()
            if raw is None or len(raw) != numel * width:
                raise pickle.UnpicklingError(f"storage {shown(key)} is missing or not {numel} elements long")
            self.storages[key] = torch.frombuffer(bytearray(raw), dtype=kind.dtype) if numel else \
                torch.empty(0, dtype=kind.dtype)
            self.stored += numel
        return self.storages[key]

    def _refuse(self, what):
        raise pickle.UnpicklingError(f"Unsupported operation {what}")

    def load_reduce(self):
        args, func = self.stack.pop(), self.stack[-1]
        if not any(func is f for f in CALLABLES.values()) or type(args) is not tuple:
            self._refuse(f"REDUCE of {type(func).__name__}")
        if func is collections.OrderedDict and args:  # torch.save writes OrderedDict() and then SETITEMS
            self._refuse("REDUCE of OrderedDict with arguments (a copy of another mapping)")
        self.stack[-1] = out = func(*args)
        if func is _rebuild_tensor or (func is _rebuild_from_type and args[0] is _rebuild_tensor):
            # tied weights share a storage; a file naming one many times is no state dict
            self.made += out.numel()
            if self.made > 4 * self.stored + (1 << 20):
                self._refuse("of tensors repeating their storages' values more than four times over")

    def load_newobj(self):
        args, cls = self.stack.pop(), self.stack.pop()
        if not isinstance(cls, _RecordType) or type(args) is not tuple or len(args):
            self._refuse(f"NEWOBJ of {type(cls).__name__}")
        self.stack.append(_DictRecord(cls.name) if cls.as_dict else _Record(cls.name))

    def load_build(self):
        state, inst = self.stack.pop(), self.stack[-1]
        if type(inst) in (_Record, _DictRecord):  # a Namespace's attributes: kept as data (the dict itself, not a
            # copy), set on nothing; a CfgNode's (its flags): dropped
            self.record_items += len(state) if type(state) is dict else 0
            if inst.built or type(state) is not dict or self.record_items > 1 << 16 \
                    or not all(type(k) is str for k in state):
                self._refuse(f"BUILD on {inst.name} (once, with a dict of names, at most 65536 in all)")
            if type(inst) is _Record:
                inst.state = state
            inst.built = True
            return
        if type(inst) is not collections.OrderedDict or not isinstance(state, dict) or set(state) - {"_metadata"}:
            self._refuse(f"BUILD on {type(inst).__name__}")
        # the state dict's _metadata (module versions) is not needed: dropped

    def load_append(self):
        value, lst = self.stack.pop(), self.stack[-1]
        if type(lst) is not list:
            self._refuse(f"APPEND to {type(lst).__name__}")
        lst.append(value)

    def load_appends(self):
        items = self.pop_mark()
        if type(self.stack[-1]) is not list:
            self._refuse(f"APPENDS to {type(self.stack[-1]).__name__}")
        self.stack[-1].extend(items)

    def _key(self, key):
        """Keys are names or small integers (a state dict's, an optimiser state's): nothing costly to hash."""
        if not (type(key) is str or (type(key) is int and -(1 << 63) <= key < 1 << 63)):
            self._refuse(f"a dict key that is {a_type(key)}")
        return key

    def load_dict(self):
        """DICT: a dict of the pairs since the mark, its keys checked as SETITEMS checks them."""
        items = self.pop_mark()
        d = {}
        for i in range(0, len(items), 2):
            d[self._key(items[i])] = items[i + 1]
        self.stack.append(d)

    def load_setitem(self):
        value, key = self.stack.pop(), self.stack.pop()
        if type(self.stack[-1]) not in (dict, collections.OrderedDict, _DictRecord):
            self._refuse(f"SETITEM on {type(self.stack[-1]).__name__}")
        self.stack[-1][self._key(key)] = value

    def load_setitems(self):
        items = self.pop_mark()
        d = self.stack[-1]
        if type(d) not in (dict, collections.OrderedDict, _DictRecord):
            self._refuse(f"SETITEMS on {type(d).__name__}")
        for i in range(0, len(items), 2):
            d[self._key(items[i])] = items[i + 1]

    def load_additems(self):
        items = self.pop_mark()
        if type(self.stack[-1]) is not set:
            self._refuse(f"ADDITEMS to {type(self.stack[-1]).__name__}")
        self.stack[-1].update(self._key(k) for k in items)

    for _op, _fn in ((pickle.REDUCE, load_reduce), (pickle.BUILD, load_build), (pickle.NEWOBJ, load_newobj),
                     (pickle.DICT, load_dict), (pickle.APPEND, load_append),
                     (pickle.APPENDS, load_appends), (pickle.SETITEM, load_setitem), (pickle.SETITEMS, load_setitems),
                     (pickle.ADDITEMS, load_additems)):
        dispatch[_op[0]] = _fn
    for _op in (pickle.INST, pickle.OBJ, pickle.NEWOBJ_EX, pickle.EXT1, pickle.EXT2, pickle.EXT4,
                pickle.FROZENSET, pickle.BYTEARRAY8, pickle.NEXT_BUFFER, pickle.READONLY_BUFFER):
        dispatch[_op[0]] = lambda self, _n=_op: self._refuse(f"opcode {_n!r}")
    del _op, _fn


def zip_layout(path, src):
    """The zip archive of a torch.save file, the folder of its data.pkl and its names; refuses big-endian tensors
    (PyTorch 2.1 and later record the byte order; torch.load of older releases ignores the record)."""
    z = zipfile.ZipFile(as_file(src))
    pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
    prefix = pkl[:-len("data.pkl")]
    names = set(z.namelist())
    if f"{prefix}byteorder" in names and z.read(f"{prefix}byteorder").strip() != b"little":
        raise Refused(f"{path} stores big-endian tensors, which this script does not read")
    return z, prefix, names


class _NoObjects(pickle.Unpickler):
    """An unpickler of plain values only (the legacy format's header: magic number, protocol, sys_info)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"Unsupported class {module}.{name}")


def check_legacy_order(path, src):
    """Refuses a legacy torch.save file whose sys_info says big-endian (torch.load reads its bytes as little-endian
    whatever the record says)."""
    u = _NoObjects(as_file(src))
    u.load(), u.load()  # the magic number and the protocol version
    info = u.load()
    if isinstance(info, dict) and info.get("little_endian") is False:
        raise Refused(f"{path} stores big-endian tensors, which this script does not read")


def read_zip(path, src):
    """The object of a torch.save zip archive, read by _DataUnpickler."""
    z, prefix, names = zip_layout(path, src)

    def storage_bytes(key):
        name = f"{prefix}data/{key}"
        return z.read(name) if name in names else None
    return _DataUnpickler(z.read(f"{prefix}data.pkl"), storage_bytes).load()


def refused_object(path, err):
    """The refusal of a file naming a class or function outside CALLABLES (err: _DataUnpickler's 'Unsupported class
    NAME')."""
    why = str(err).splitlines()[0].strip()
    return Refused(f"{path} pickles more than tensors, plain containers and scalars ({why}); reading it would run code "
                   "the file names. If you trust its source, add --trust-pickle")


def load(path, src, trust):
    """The checkpoint object; without trust, tensors, plain containers and scalars only, read by this script's own
    unpickler (a refusal names the object)."""
    try:
        if trust:  # weights_only=False said outright: PyTorch 2.6 and later default to True
            if head_of(src, 4)[0] == b"PK\x03\x04":
                zip_layout(path, src)
            else:
                check_legacy_order(path, src)
            try:
                return torch.load(as_file(src), map_location="cpu", weights_only=False)
            except TypeError:  # before 1.13: the full unpickler is the only one
                return torch.load(as_file(src), map_location="cpu")
        if head_of(src, 4)[0] != b"PK\x03\x04":
            raise Refused(f"{path} is in the legacy torch.save format (PyTorch before 1.6, or "
                          "_use_new_zipfile_serialization=False), which this script reads only with --trust-pickle: "
                          "if you trust its source, add it, or save the state dict again with a newer torch.save")
        return read_zip(path, src)
    except _OtherTensors as e:
        raise Refused(f"{path} holds {e}")
    except ModuleNotFoundError as e:  # --trust-pickle: a class of a package not installed here
        raise Refused(f"{path} pickles objects of the Python module {shown(e.name)}, which --trust-pickle must import "
                      "to read it: install that package, or save the state dict alone with torch.save")
    except Refused:
        raise
    except pickle.UnpicklingError as e:
        if "Unsupported class" in str(e):
            raise refused_object(path, e)
        if "Unsupported operation" in str(e):
            raise Refused(f"{path} holds more than a state dict's data ({str(e).split('Unsupported operation ')[-1]}): "
                          "not what torch.save writes of tensors, containers and scalars")
        raise Refused(f"{path} is not a readable torch.save file ({str(e).splitlines()[0] if str(e) else e!r})")
    except (RuntimeError, EOFError, ValueError, KeyError, IndexError, TypeError, AttributeError, struct.error,
            zipfile.BadZipFile, UnicodeDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Refused(f"{path} is truncated or not a torch.save file ({type(e).__name__}: {first})")


def state_dict(obj, key, path):
    """(the state dict, where it was found)."""
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            keys = list(obj)[:10] if isinstance(obj, dict) else None
            raise Refused(f"{path} has no entry {shown(key)} (--key)" +
                          (f"; its top-level keys: {', '.join(shown(k, 40) for k in keys)}" if keys is not None
                           else f"; it holds {a_type(obj)}"))
        if not isinstance(obj[key], dict):
            raise Refused(f"{path}'s entry {shown(key)} (--key) is {a_type(obj[key])}, not a state dict")
        return obj[key], f"entry {shown(key)}"
    if not isinstance(obj, dict):
        hint = " (a whole pickled model: save its state_dict() instead)" if hasattr(obj, "state_dict") else ""
        raise Refused(f"{path} holds {a_type(obj)}, not a state dict (a dict of tensors){hint}")
    for k in ENTRIES:
        if isinstance(obj.get(k), dict):  # the others that hold one (the EMA's weights) named for --key
            also = [shown(o) for o in ENTRIES if o != k and isinstance(obj.get(o), dict)]
            return obj[k], f"entry {shown(k)}" + (f"; also there: {', '.join(also)} (--key)" if also else "")
    return obj, "the top level"


WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DataParallel / DistributedDataParallel, torch.compile


def unwrapped(name):
    """name without the leading prefixes that wrapping a model adds to its state_dict names (DDP around a compiled
    model: 'module._orig_mod.')."""
    while name.startswith(WRAPPER_PREFIXES):
        name = name.split(".", 1)[1]
    return name


def stripped(name, strip, used):
    """name without the first --strip prefix (a module path: 'model' or 'model.') that it starts with, that prefix
    added to used; name itself when none does."""
    for p in strip:
        q = p.rstrip(".") + "."
        if name.startswith(q) and len(name) > len(q):
            used.add(p)
            return name[len(q):]
    return name


def tensors_of(sd, strip, drop, path, where):
    """name -> tensor of the state dict sd: the wrappers' prefixes stripped (unwrapped), then a --strip prefix where
    one starts the name, the tensors under a --drop prefix left out (each --strip and --drop prefix must match one),
    every value checked."""
    out, origin, used, stripped_by = {}, {}, set(), set()
    for name, t in sd.items():
        if not isinstance(name, str):
            raise Refused(f"{path}: the state dict ({where}) has a key {shown(name)} ({a_type(name)}), not a "
                          "tensor name")
        short = stripped(unwrapped(name), strip, stripped_by)
        hit = [p for p in drop if under(name, p) or under(short, p)]  # before the checks: --drop takes any entry
        for p in hit:
            used.add(p)
        if hit:
            continue
        if not isinstance(t, torch.Tensor):
            raise Refused(f"{path}: {shown(name)} ({where}) is {a_type(t)}, not a tensor (choose another --key, or "
                          "leave it out with --drop)")
        if t.layout != torch.strided:
            raise Refused(f"{path}: {shown(name)} is a {t.layout} tensor: store it dense (.to_dense()) before converting")
        if t.is_quantized:
            raise Refused(f"{path}: {shown(name)} is a quantized tensor ({t.dtype}): store it dense and float "
                          "(.dequantize()) before converting")
        if t.device.type == "meta":
            raise Refused(f"{path}: {shown(name)} is a meta tensor, which holds no values")
        if t.is_complex():
            raise Refused(f"{path}: {shown(name)} is complex ({t.dtype}): vitc's weights are real")
        if short == "__metadata__":
            raise Refused(f"{path}: {shown(name)} would be named __metadata__, the safetensors header's own entry")
        if t.dtype == torch.float64:  # narrowed to F32: a finite value past its range is refused, not made inf
            big = torch.isfinite(t) & ~torch.isfinite(t.to(torch.float32))
            if bool(big.any()):
                v = float(t[big].flatten()[0])
                raise Refused(f"{path}: {shown(name)} is float64 and holds {v:g}, past float32's range (3.4e38): "
                              "vitc's weights are float32")
        if short in out:
            raise Refused(f"{path}: {shown(origin[short])} and {shown(name)} are both {shown(short)} once the "
                          "wrappers' prefixes ('module.', '_orig_mod.')" + (" and --strip's" if strip else "") +
                          " are stripped")
        out[short], origin[short] = t, name
    unstripped = [p for p in strip if p not in stripped_by]
    if unstripped:
        first = next(iter(sd), None)
        raise Refused(f"{path}: --strip {shown(unstripped[0])} starts no tensor name ({where}" +
                      (f"; names such as {shown(unwrapped(first))})" if first is not None else ")"))
    unused = [p for p in drop if p not in used]
    if unused:
        raise Refused(f"{path}: --drop {shown(unused[0])} matches no tensor ({where}; a prefix drops the tensors named "
                      "it or under it, e.g. --drop head: head.weight and head.bias, not head_dist.weight)")
    if not out:
        raise Refused(f"{path}: no tensor left to write ({where}" + (f", after --drop {' '.join(drop)})" if drop
                                                                      else ")"))
    return out


def under(name, prefix):
    """True when tensor name is prefix itself or lies under it as a module path (blocks.1: blocks.1.x, not
    blocks.10.x)."""
    p = prefix.rstrip(".")
    return name == p or name.startswith(p + ".")


def check_output(path, src):
    """Refuses an output that exists and is no regular file, is write-protected or is the checkpoint itself, or whose
    folder is missing or not writable: before the checkpoint is read."""
    folder = os.path.dirname(os.path.realpath(path) if os.path.islink(path) else path) or "."
    try:
        if not stat.S_ISDIR(os.stat(folder).st_mode):
            raise Refused(f"cannot write {path}: {folder} is not a folder")
    except FileNotFoundError:
        raise Refused(f"cannot write {path}: its folder {folder} does not exist (create it first)")
    except OSError as e:
        raise Refused(f"cannot write {path}: {e.strerror}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise Refused(f"cannot write {path}: its folder {folder} is not writable")
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
    if not os.access(path, os.W_OK):  # as vitc and the shell's > refuse it (the rename would replace it)
        raise Refused(f"refusing to write {path}: it is write-protected (mode {stat.S_IMODE(st.st_mode):04o}); make it "
                      "writable (chmod u+w) or remove it first")


def write_safetensors(path, tensors, metadata=None):
    """Writes name -> tensor (F32 or I64) to path atomically (a temporary file in its folder, then a rename), with
    metadata (str -> str) as its __metadata__ when given; the temporary file is removed on any failure."""
    header, off = ({"__metadata__": metadata} if metadata else {}), 0
    for name, t in tensors.items():  # the header from the shapes; each tensor's bytes made as it is written
        dtype = "I64" if not t.is_floating_point() else "F32"
        n = 8 * t.numel() if dtype == "I64" else 4 * t.numel()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    if os.path.islink(path):  # a link's destination is written, the link kept (as vitc's own writer does)
        path = os.path.realpath(path)
    folder, base = os.path.split(path)
    tmp = None
    try:  # a new file of its own (O_EXCL: no planted link is followed), renamed over path once complete
        fd, tmp = tempfile.mkstemp(prefix=f".{base[:200]}.", suffix=".tmp", dir=folder or ".")
        try:  # mkstemp's 0600 would hide the weights from other users: the replaced file's mode, else open()'s
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mask = os.umask(0)
            os.umask(mask)
            mode = 0o666 & ~mask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for t in tensors.values():
                t = t.detach().cpu()
                f.write((t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float32)).contiguous()
                        .numpy().tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        dfd = os.open(folder or ".", os.O_RDONLY)  # the rename itself made durable
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException as e:  # an interrupt or a tensor that cannot be written too: no partial file stays
        try:
            if tmp:
                os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise Refused(f"cannot write {path}: {e.strerror}")
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("output")
    ap.add_argument("--key", help="entry of the checkpoint dict that holds the state dict (it must exist)")
    ap.add_argument("--strip", action="append", default=[],
                    help="remove this leading module path from the names that start with it, after the wrappers' "
                    "(--strip model.: a PyTorch Lightning checkpoint whose LightningModule holds the network as "
                    "self.model); it must start at least one name")
    ap.add_argument("--drop", action="append", default=[],
                    help="leave out the tensors named this or under it (--drop head: head.weight, head.bias)")
    ap.add_argument("--form", choices=("training", "deployed"),
                    help="record the weights' form (metadata vitc_form) for a model whose two forms share their names "
                    "(Next-ViT): training for an official checkpoint, which forward, predict and eval then run in that "
                    "form (a file without the record is the training form too, but they build the deployed form and "
                    "ask for --train-form or vitc deploy); deployed for one saved after the official merge_bn()")
    ap.add_argument("--trust-pickle", action="store_true",
                    help="read a checkpoint that pickles other Python objects too (runs code it names: trusted files "
                    "only)")
    a = ap.parse_args()

    caught = [signal.SIGINT]

    def stop(signum, frame):  # SIGTERM / SIGHUP as Ctrl-C: the temporary file removed, no partial output
        caught[0] = signum
        raise KeyboardInterrupt
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, stop)
    try:
        check_output(a.output, a.checkpoint)
        src = read_input(a.checkpoint)
        sniff(a.checkpoint, src)
        sd, where = state_dict(load(a.checkpoint, src, a.trust_pickle), a.key, a.checkpoint)
        out = tensors_of(sd, a.strip, a.drop, a.checkpoint, where)
        branches = [n for n in out if ".rep." in n]
        if a.form == "deployed" and branches:
            raise Refused(f"{a.checkpoint} holds {len(branches)} tensors of training branches (e.g. "
                          f"{shown(branches[0])}: cFFN's '.rep.' conv + BN pairs), which a merged (deployed) "
                          "checkpoint has none of: convert it without --form deployed (--form training)")
        write_safetensors(a.output, out, {"vitc_form": a.form} if a.form else None)
    except Refused as e:
        sys.exit(f"convert_checkpoint: {e}")
    except KeyboardInterrupt:
        print(f"convert_checkpoint: interrupted; {a.output} not written", file=sys.stderr)
        sys.exit(128 + caught[0])
    except (Exception, RecursionError, MemoryError) as e:  # whatever else a damaged or hostile file raises: one line
        first = str(e).splitlines()[0][:200] if str(e) else ""
        sys.exit(f"convert_checkpoint: {a.checkpoint} cannot be read ({type(e).__name__}{': ' if first else ''}"
                 f"{ascii(first)[1:-1]}): a damaged file, or not a torch.save state dict")
    narrowed = sum(t.dtype == torch.float64 for t in out.values())
    print(f"wrote {a.output}: {len(out)} tensors, {sum(t.numel() for t in out.values()):,} values (from {where})" +
          (f"; {narrowed} float64 tensor{'s' * (narrowed != 1)} narrowed to float32" if narrowed else ""))


if __name__ == "__main__":
    main()
