#!/usr/bin/python3
"""tools/convert_checkpoint.py on what users hand it (the DeiT-Ti end-to-end case is in test_deit.py (e)):
  read   a training checkpoint holding floats (optimiser state, max_accuracy: Debian's torch 1.13 weights-only
         unpickler refuses the opcode), a DeiT main.py checkpoint with its args Namespace (model and --key
         model_ema), PyTorch 2's tensors with Python attributes, the legacy (non-zip) torch.save format, a pipe and a
         named pipe whose writer comes late convert, values exact; the line printed names the entry the state dict came from
         a Swin training checkpoint with its yacs CfgNode config converts (the line names the EMA's entry too);
         with --trust-pickle and yacs not installed, the refusal names the module
  strip  --strip model. takes a PyTorch Lightning checkpoint's module attribute off its names (after 'module.');
         without it the names keep it; a --strip that starts no name is refused
  form   --form deployed records vitc_form in the metadata; without it no metadata is written
  key    an explicit --key that is missing or not a dict is refused (never another entry silently)
  refuse each of these gives one line "convert_checkpoint: ..." naming what it is, exit 1, no traceback and no
         output: a Namespace holding a Path (unless --trust-pickle), a pickled module, a list, a bare tensor, a
         TorchScript archive, a safetensors file, a NumPy file, text, a truncated archive, an empty file, a missing
         file, a folder, int keys, a sparse tensor, a complex tensor, two names equal once 'module.' is stripped,
         nothing left after --drop, a zero-stride view, a tuple key (also through DICT), compressed entries, an
         OrderedDict made from another mapping, a Namespace built twice, an endless pipe of zeros (at its first
         bytes); with --trust-pickle big-endian tensors (a zip's byteorder record, a legacy file's sys_info) and a
         quantized tensor; a float64 value past float32's range, a tensor named __metadata__, an entry that is no
         tensor (the message names --drop, which then converts it); a reduce calling os.system runs nothing;
         float64 is narrowed and the line says so
  output never written over a folder, a FIFO or the checkpoint itself (also through a hard link), nor a write-protected
         file; a missing folder refused before the checkpoint is read; no temporary file is left behind, also when the
         folder is not writable or SIGTERM / SIGHUP comes mid-write
  round  GroupMixFormer (fp32, fp16) and a merged Next-ViT (--form deployed) saved as published: tensors exact and
         `vitc forward` as the reference models
Run: /usr/bin/python3 tests/reference/test_convert.py
"""
import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import st
from common import Report, tmpdir

ROOT = Path(__file__).resolve().parents[2]
CONV = [sys.executable, str(ROOT / "tools" / "convert_checkpoint.py")]


def convert(*args, stdin=None):
    return subprocess.run(CONV + [str(a) for a in args], capture_output=True, text=True, timeout=300, stdin=stdin)


def one_line_refusal(p, words):
    err = p.stderr.strip()
    return (p.returncode == 1 and err.startswith("convert_checkpoint: ") and "\n" not in err
            and "Traceback" not in err and words in err)


def leftovers(folder, keep):
    return sorted(n for n in os.listdir(folder) if n not in keep)


def main():
    rep = Report()
    tmp = tmpdir()
    g = torch.Generator().manual_seed(0)
    sd = {"blocks.0.fc.weight": torch.randn(3, 4, generator=g), "blocks.0.fc.bias": torch.randn(3, generator=g),
          "norm.num_batches_tracked": torch.tensor(7)}

    # read: floats next to the weights, as every training checkpoint has them
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.ones(1, 4)).sum().backward()
    opt.step()
    torch.save({"model": sd, "optimizer": opt.state_dict(), "epoch": 3, "max_accuracy": 81.5}, tmp / "train.pth")
    p = convert(tmp / "train.pth", tmp / "train.safetensors")
    got = st.load(tmp / "train.safetensors") if p.returncode == 0 else {}
    rep.check("read: a checkpoint holding floats (optimiser state, max_accuracy) converts, values exact",
              p.returncode == 0 and set(got) == set(sd) and all(np.array_equal(got[k], sd[k].numpy()) for k in sd),
              p.stderr.strip()[-300:])
    rep.check("read: ... the line printed names the entry", "(from entry 'model')" in p.stdout, p.stdout.strip())
    torch.save({"state_dict": {"module." + k: v for k, v in sd.items()}}, tmp / "legacy.pth",
               _use_new_zipfile_serialization=False)
    p = convert(tmp / "legacy.pth", tmp / "legacy.safetensors")
    rep.check("read: the legacy torch.save format refused without --trust-pickle",
              one_line_refusal(p, "legacy torch.save format") and not (tmp / "legacy.safetensors").exists(),
              p.stderr.strip())
    p = convert(tmp / "legacy.pth", tmp / "legacy.safetensors", "--trust-pickle")
    rep.check("read: ... and read with it, 'module.' stripped",
              p.returncode == 0 and set(st.load(tmp / "legacy.safetensors")) == set(sd), p.stderr.strip()[-300:])
    # the prefixes torch.compile ('_orig_mod.') and DDP around it ('module._orig_mod.') add: stripped too
    wrapped = {("_orig_mod." if i % 2 else "module._orig_mod.") + k: v for i, (k, v) in enumerate(sd.items())}
    torch.save({"model": wrapped}, tmp / "compiled.pth")
    p = convert(tmp / "compiled.pth", tmp / "compiled.safetensors")
    got = st.load(tmp / "compiled.safetensors") if p.returncode == 0 else {}
    rep.check("read: a compiled model's names ('_orig_mod.', 'module._orig_mod.') stripped, values exact",
              p.returncode == 0 and set(got) == set(sd) and all(np.array_equal(got[k], sd[k].numpy()) for k in sd),
              p.stderr.strip()[-300:])
    # a PyTorch Lightning checkpoint: the LightningModule's state_dict names the network's tensors under its attribute
    # ('model.'), beside the trainer's entries; --strip model. takes it off (after DDP's 'module.'), and a --strip
    # that starts no name (a typo) is refused
    lit = {("module.model." if i % 2 else "model.") + k: v for i, (k, v) in enumerate(sd.items())}
    torch.save({"epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.4.0", "state_dict": lit,
                "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": 3}}}}}, tmp / "lightning.pth")
    p = convert(tmp / "lightning.pth", tmp / "lightning.safetensors", "--strip", "model.")
    got = st.load(tmp / "lightning.safetensors") if p.returncode == 0 else {}
    rep.check("--strip model.: a Lightning checkpoint's names without the module's attribute, values exact",
              p.returncode == 0 and set(got) == set(sd) and all(np.array_equal(got[k], sd[k].numpy()) for k in sd),
              p.stderr.strip()[-300:] + str(sorted(got)))
    p = convert(tmp / "lightning.pth", tmp / "lightning_kept.safetensors")
    got = st.load(tmp / "lightning_kept.safetensors") if p.returncode == 0 else {}
    rep.check("... without --strip the names keep 'model.' (vitc's loader then names them as extra)",
              p.returncode == 0 and set(got) == {"model." + k for k in sd}, p.stderr.strip()[-300:] + str(sorted(got)))
    p = convert(tmp / "lightning.pth", tmp / "lightning_typo.safetensors", "--strip", "modle")
    rep.check("refuse: a --strip that starts no tensor name",
              one_line_refusal(p, "--strip 'modle' starts no tensor name") and "names such as 'model." in p.stderr
              and not (tmp / "lightning_typo.safetensors").exists(), p.stderr.strip())
    # tensors as torch.save lays them out: views into one storage, shared storages, half and bfloat16
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = {"t": base.t(), "slice": base[1:3, ::2], "shared": base, "half": torch.randn(3, generator=g).half(),
             "bf16": torch.randn(3, generator=g).bfloat16(), "empty": torch.zeros(0, 5)}
    torch.save(views, tmp / "views.pth")
    p = convert(tmp / "views.pth", tmp / "views.safetensors")
    got = st.load(tmp / "views.safetensors") if p.returncode == 0 else {}
    rep.check("read: strided views, shared storages, half and bfloat16 values exact",
              p.returncode == 0 and set(got) == set(views) and
              all(np.array_equal(got[k], views[k].float().numpy()) for k in views), p.stderr.strip()[-300:])
    # no code runs: a float first (where torch 1.13's weights-only reader stops), then an object whose reduce calls
    # os.system, in the zip format; nothing it names is called
    marker = tmp / "CODE_RAN"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    torch.save({"max_accuracy": 81.5, "model": sd, "x": Evil()}, tmp / "evil.pth")
    p = convert(tmp / "evil.pth", tmp / "evil.safetensors")
    rep.check("refuse: a reduce calling os.system after a float: refused, nothing ran",
              one_line_refusal(p, "posix.system") and not marker.exists() and not (tmp / "evil.safetensors").exists(),
              p.stderr.strip())
    # a DeiT main.py checkpoint: the weights, the EMA's, the optimiser's state and the run's argparse.Namespace (an
    # inert record: argparse is not called); a Namespace holding another object is still refused
    torch.save({"model": sd, "model_ema": {k: v + 1 for k, v in sd.items()}, "optimizer": opt.state_dict(),
                "epoch": 299, "args": argparse.Namespace(lr=5e-4, model="deit_tiny_patch16_224", drop_path=0.1,
                                                         input_size=224, repeated_aug=True, output_dir="out")},
               tmp / "deit_ckpt.pth")
    for key, add in ((None, 0), ("model_ema", 1)):
        out = tmp / f"deit_{key}.safetensors"
        p = convert(tmp / "deit_ckpt.pth", out, *(["--key", key] if key else []))
        got = st.load(out) if p.returncode == 0 else {}
        rep.check(f"read: a DeiT training checkpoint with its args Namespace, {key or 'model'} entry, values exact",
                  p.returncode == 0 and set(got) == set(sd) and
                  all(np.array_equal(got[k], (sd[k] + add).numpy()) for k in sd), p.stderr.strip()[-300:])
    torch.save({"model": sd, "args": argparse.Namespace(out=Path("x"))}, tmp / "ns_path.pth")
    p = convert(tmp / "ns_path.pth", tmp / "ns_path.safetensors")
    rep.check("refuse: a Namespace holding another object (a Path) refused, naming it",
              one_line_refusal(p, "pathlib.PosixPath") and not (tmp / "ns_path.safetensors").exists(), p.stderr.strip())
    # PyTorch 2 pickles a tensor carrying Python attributes through torch._tensor._rebuild_from_type_v2 (torch 1.13
    # drops them): written here as PyTorch 2 writes it; the attributes are dropped, the values kept
    reduce_ex = torch.Tensor.__reduce_ex__

    def reduce_with_attrs(self, proto):
        func, args = self._reduce_ex_internal(proto)
        return (torch._tensor._rebuild_from_type_v2, (func, torch.Tensor, args, {"tag": "head"}))
    torch.Tensor.__reduce_ex__ = reduce_with_attrs
    try:
        torch.save({"model": sd}, tmp / "attrs.pth")
    finally:
        torch.Tensor.__reduce_ex__ = reduce_ex
    p = convert(tmp / "attrs.pth", tmp / "attrs.safetensors")
    got = st.load(tmp / "attrs.safetensors") if p.returncode == 0 else {}
    rep.check("read: PyTorch 2's tensors with Python attributes (_rebuild_from_type_v2), values exact",
              p.returncode == 0 and set(got) == set(sd) and all(np.array_equal(got[k], sd[k].numpy()) for k in sd),
              p.stderr.strip()[-300:])
    with open(tmp / "train.pth", "rb") as f:
        p = subprocess.run(CONV + ["/dev/stdin", str(tmp / "pipe.safetensors")], stdin=f, capture_output=True,
                           text=True, timeout=300)
    rep.check("read: from a pipe", p.returncode == 0 and (tmp / "pipe.safetensors").exists(), p.stderr.strip()[-300:])
    # an endless stream that is no checkpoint: refused at its first bytes (it was read until memory ran out)
    zeros = subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE)
    try:
        p = subprocess.run(CONV + ["/dev/stdin", str(tmp / "zeros.safetensors")], stdin=zeros.stdout,
                           capture_output=True, text=True, timeout=120)
        rep.check("refuse: an endless pipe of zeros at its first bytes", p.returncode == 1 and
                  "is not a PyTorch checkpoint" in p.stderr and not (tmp / "zeros.safetensors").exists(),
                  p.stderr.strip()[-300:])
    except subprocess.TimeoutExpired:
        rep.check("refuse: an endless pipe of zeros at its first bytes", False, "read on")
    zeros.kill()
    zeros.wait()
    # a named pipe whose writer came first and is gone (a small checkpoint fits the pipe): read, not waited on
    os.mkfifo(tmp / "early_fifo")
    writer = subprocess.Popen(["sh", "-c", f"cat '{tmp / 'train.pth'}' > '{tmp / 'early_fifo'}'"])
    time.sleep(0.5)
    try:
        p = subprocess.run(CONV + [str(tmp / "early_fifo"), str(tmp / "early.safetensors")], capture_output=True,
                           text=True, timeout=120)
        rep.check("read: a named pipe whose writer came first", p.returncode == 0 and (tmp / "early.safetensors").exists(),
                  p.stderr.strip()[-300:])
    except subprocess.TimeoutExpired:
        rep.check("read: a named pipe whose writer came first", False, "hung")
    writer.kill()

    # a named pipe whose writer comes after the converter opened it: waited for (it had read as empty)
    os.mkfifo(tmp / "late_fifo")
    proc = subprocess.Popen(CONV + [str(tmp / "late_fifo"), str(tmp / "late.safetensors")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    fifo, t0 = str(tmp / "late_fifo"), time.time()

    def fifo_open():  # the converter holds the pipe open (after its imports): only then the writer comes
        try:
            return any(os.readlink(f"/proc/{proc.pid}/fd/{n}") == fifo for n in os.listdir(f"/proc/{proc.pid}/fd"))
        except OSError:
            return False
    while not fifo_open() and proc.poll() is None and time.time() - t0 < 120:
        time.sleep(0.05)
    time.sleep(0.3)
    try:  # not blocking: a converter that gave up on the pipe (it read as empty) has left no reader
        wfd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(wfd, True)
        with os.fdopen(wfd, "wb") as f:
            f.write((tmp / "train.pth").read_bytes())
    except OSError:  # ENXIO (no reader), EPIPE: the check below fails on the converter's exit and message
        pass
    _, err = proc.communicate(timeout=300)
    got = st.load(tmp / "late.safetensors") if proc.returncode == 0 else {}
    rep.check("read: a named pipe written after the converter started", proc.returncode == 0 and set(got) == set(sd),
              err.strip()[-300:])

    # key: an explicit entry must exist and be a state dict
    torch.save({"model": sd, "state_dict": 5}, tmp / "keys.pth")
    p = convert(tmp / "keys.pth", tmp / "k.safetensors", "--key", "model_ema")
    rep.check("key: a missing --key refused, naming the entries there",
              one_line_refusal(p, "has no entry 'model_ema' (--key); its top-level keys: 'model', 'state_dict'")
              and not (tmp / "k.safetensors").exists(), p.stderr.strip())
    p = convert(tmp / "keys.pth", tmp / "k.safetensors", "--key", "state_dict")
    rep.check("key: a --key that is no state dict refused", one_line_refusal(p, "'state_dict' (--key) is an int"),
              p.stderr.strip())

    # refuse: one line each, nothing written
    cases = {}
    torch.save(m, tmp / "module.pth")
    cases["a pickled module"] = ("module.pth", "torch.nn.modules.linear.Linear")
    torch.save([sd], tmp / "list.pth")
    cases["a list"] = ("list.pth", "holds a list, not a state dict")
    torch.save(torch.zeros(3), tmp / "tensor.pth")
    cases["a bare tensor"] = ("tensor.pth", "holds a Tensor, not a state dict")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), str(tmp / "script.pt"))
    cases["a TorchScript archive"] = ("script.pt", "is a TorchScript archive")
    cases["a safetensors file"] = ("train.safetensors", "is already safetensors")
    np.save(tmp / "arr.npy", np.zeros(3))
    cases["a NumPy file"] = ("arr.npy", "is a NumPy array file")
    (tmp / "text.pth").write_text("hello world " * 10)
    cases["text"] = ("text.pth", "is not a PyTorch checkpoint")
    data = (tmp / "train.pth").read_bytes()
    (tmp / "trunc.pth").write_bytes(data[:len(data) // 2])
    cases["a truncated archive"] = ("trunc.pth", "truncated or damaged")
    (tmp / "empty.pth").write_bytes(b"")
    cases["an empty file"] = ("empty.pth", "is empty")
    cases["a missing file"] = ("missing.pth", "cannot read")
    (tmp / "folder").mkdir()
    cases["a folder"] = ("folder", "is a folder, not a checkpoint file")
    torch.save({1: torch.zeros(1)}, tmp / "intkey.pth")
    cases["an int key"] = ("intkey.pth", "has a key 1 (an int), not a tensor name")
    torch.save({"a": torch.eye(3).to_sparse()}, tmp / "sparse.pth")
    cases["a sparse tensor"] = ("sparse.pth", "store it dense and float")
    torch.save({"a": torch.zeros(2, dtype=torch.complex64)}, tmp / "complex.pth")
    cases["a complex tensor"] = ("complex.pth", "'ComplexFloat' tensors")
    torch.save({"module.a": torch.zeros(2), "a": torch.ones(2)}, tmp / "dupe.pth")
    cases["two names equal once 'module.' is stripped"] = ("dupe.pth", "'module.a' and 'a' are both 'a'")
    torch.save({"a": torch.zeros(1).expand(1000)}, tmp / "stride0.pth")
    cases["a zero-stride view (values repeated)"] = ("stride0.pth", "repeats its storage's values")
    torch.save({(1, 2): torch.zeros(1)}, tmp / "tuplekey.pth")
    cases["a tuple as a dict key"] = ("tuplekey.pth", "a dict key that is a tuple")
    import zipfile
    with zipfile.ZipFile(tmp / "train.pth") as zin, zipfile.ZipFile(tmp / "deflated.pth", "w",
                                                                   zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    cases["compressed zip entries (a zip bomb's way)"] = ("deflated.pth", "compressed entries")

    def crafted(name, pkl):
        """train.pth with its data.pkl replaced by the hand-written pickle pkl (stored, as torch.save writes)."""
        with zipfile.ZipFile(tmp / "train.pth") as zin, zipfile.ZipFile(tmp / name, "w") as zout:
            for info in zin.infolist():
                zout.writestr(info.filename, pkl if info.filename.endswith("/data.pkl") else zin.read(info.filename))
        return name
    # what only a crafted file holds, each once cheap to refuse and costly (or fatal) to read: a tuple key through
    # the DICT opcode (nested tuples hash for hours; a deep one crashed the interpreter), an OrderedDict made from
    # another mapping (copied every time the memo names it), a Namespace record built twice (its attributes copied)
    cases["a tuple key through the DICT opcode"] = (crafted("dict_tuple.pth", b"\x80\x02((K\x01K\x02tK\x03d."),
                                                    "a dict key that is a tuple")
    cases["an OrderedDict made from another mapping"] = (
        crafted("od_args.pth", b"\x80\x02ccollections\nOrderedDict\n}\x85R."), "OrderedDict with arguments")
    cases["a Namespace record built twice"] = (
        crafted("ns_twice.pth", b"\x80\x02cargparse\nNamespace\n)\x81}b}b."), "BUILD on argparse.Namespace")
    for what, (src, words) in cases.items():
        out = tmp / f"out_{src}.safetensors"
        p = convert(tmp / src, out)
        rep.check(f"refuse: {what}", one_line_refusal(p, words) and not out.exists(), p.stderr.strip()[-300:])
    p = convert(tmp / "ns_path.pth", tmp / "ns_path.safetensors", "--trust-pickle")
    rep.check("refuse: ... the Namespace with a Path read with --trust-pickle", p.returncode == 0,
              p.stderr.strip()[-300:])
    # with --trust-pickle (torch.load) too: big-endian bytes (a zip's byteorder record, a legacy file's sys_info),
    # which Debian's torch.load reads as little-endian; a quantized tensor; and, read either way, a float64 value past
    # float32's range (it was written as inf), a tensor named __metadata__ (it replaced the header's entry)
    with zipfile.ZipFile(tmp / "train.pth") as zin, zipfile.ZipFile(tmp / "bigend.pth", "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, b"big" if info.filename.endswith("/byteorder") else zin.read(info.filename))
        if not any(n.endswith("/byteorder") for n in zin.namelist()):
            zout.writestr(zin.namelist()[0].split("/")[0] + "/byteorder", b"big")
    legacy_be = bytearray((tmp / "legacy.pth").read_bytes())
    at = legacy_be.index(b"\x88", legacy_be.index(b"little_endian"))  # the key's value: NEWTRUE (after its BINPUT)
    legacy_be[at:at + 1] = b"\x89"  # NEWFALSE
    (tmp / "legacy_be.pth").write_bytes(bytes(legacy_be))
    torch.save({"a": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)}, tmp / "quant.pth")
    torch.save({"a": torch.tensor([1e39, 0.5], dtype=torch.float64)}, tmp / "f64big.pth")
    torch.save({"__metadata__": torch.zeros(1), "a": torch.ones(1)}, tmp / "metaname.pth")
    for what, src, words, trust in (("big-endian tensors (zip, --trust-pickle)", "bigend.pth", "big-endian", 1),
                                    ("big-endian tensors (legacy, --trust-pickle)", "legacy_be.pth", "big-endian", 1),
                                    ("a quantized tensor (--trust-pickle)", "quant.pth", "is a quantized tensor", 1),
                                    ("a float64 value past float32's range", "f64big.pth", "past float32's range", 0),
                                    ("a tensor named __metadata__", "metaname.pth", "named __metadata__", 0)):
        out = tmp / f"out_{src}.safetensors"
        p = convert(tmp / src, out, *(["--trust-pickle"] if trust else []))
        rep.check(f"refuse: {what}", one_line_refusal(p, words) and not out.exists() and
                  not [n for n in os.listdir(tmp) if n.endswith(".tmp")], p.stderr.strip()[-300:])
    torch.save({"a": torch.tensor([0.25, 1e-50], dtype=torch.float64)}, tmp / "f64.pth")
    p = convert(tmp / "f64.pth", tmp / "f64.safetensors")
    got = st.load(tmp / "f64.safetensors") if p.returncode == 0 else {}
    rep.check("read: float64 narrowed to float32, the line says so",
              p.returncode == 0 and list(got.get("a", [])) == [0.25, 0.0] and "1 float64 tensor narrowed" in p.stdout,
              p.stdout.strip() + p.stderr.strip()[-300:])
    # entries that are no tensors (a module's _extra_state, a counter): --drop leaves them out before any check
    torch.save({"model": {"a.weight": torch.ones(2), "a._extra_state": None, "step": 5}}, tmp / "nontensor.pth")
    p = convert(tmp / "nontensor.pth", tmp / "nontensor.safetensors")
    rep.check("refuse: an entry that is no tensor, naming --drop", one_line_refusal(p, "or leave it out with --drop"),
              p.stderr.strip())
    p = convert(tmp / "nontensor.pth", tmp / "nontensor.safetensors", "--drop", "a._extra_state", "--drop", "step")
    rep.check("read: ... converted with --drop naming them",
              p.returncode == 0 and set(st.load(tmp / "nontensor.safetensors")) == {"a.weight"}, p.stderr.strip())
    p = convert(tmp / "train.pth", tmp / "none.safetensors", "--drop", "blocks", "--drop", "norm")
    rep.check("refuse: nothing left after --drop", one_line_refusal(p, "no tensor left to write"), p.stderr.strip())
    # --drop takes module paths: blocks.1 is not blocks.10, head is not head_dist; written with DataParallel's
    # module. too; a prefix that matches nothing (a typo) is refused
    sd10 = {"module." + k: torch.ones(2) for k in ("blocks.1.w", "blocks.10.w", "head.weight", "head_dist.weight")}
    torch.save(sd10, tmp / "ten.pth")
    p = convert(tmp / "ten.pth", tmp / "ten.safetensors", "--drop", "blocks.1", "--drop", "module.head")
    got = st.load(tmp / "ten.safetensors") if p.returncode == 0 else {}
    rep.check("--drop: the tensors under blocks.1 and (module.)head only", set(got) == {"blocks.10.w", "head_dist.weight"},
              p.stderr.strip()[-300:] + str(sorted(got)))
    # a Swin-style training checkpoint: its 'config' is a yacs CfgNode (a dict subclass with flags as attributes),
    # pickled by a module made here (yacs is not installed); read as a plain dict, no module imported; the EMA's entry
    # beside the weights named in the line printed
    (tmp / "yacs").mkdir(exist_ok=True)
    (tmp / "yacs" / "__init__.py").write_text("")
    (tmp / "yacs" / "config.py").write_text(
        "class CfgNode(dict):\n"
        "    def __init__(self, d=None):\n"
        "        super().__init__(d or {})\n"
        "        self.__dict__['__immutable__'] = False\n"
        "        self.__dict__['__deprecated_keys__'] = set()\n")
    save_cfg = ("import sys, torch; sys.path.insert(0, sys.argv[1]); from yacs.config import CfgNode; "
                "sd = torch.load(sys.argv[2]); "
                "cfg = CfgNode({'MODEL': CfgNode({'TYPE': 'swin', 'DROP_PATH_RATE': 0.2}), "
                "'DATA': CfgNode({'IMG_SIZE': 224})}); "
                "torch.save({'model': sd, 'model_ema': sd, 'epoch': 299, 'config': cfg}, sys.argv[3])")
    torch.save(sd, tmp / "sd.pth")
    subprocess.run([sys.executable, "-c", save_cfg, str(tmp), str(tmp / "sd.pth"), str(tmp / "swin_ckpt.pth")],
                   check=True)
    p = convert(tmp / "swin_ckpt.pth", tmp / "swin_ckpt.safetensors")
    got = st.load(tmp / "swin_ckpt.safetensors") if p.returncode == 0 else {}
    rep.check("read: a Swin training checkpoint with its yacs CfgNode config converts, values exact",
              p.returncode == 0 and set(got) == set(sd) and all(np.array_equal(got[k], sd[k].numpy()) for k in sd),
              p.stderr.strip()[-300:])
    rep.check("read: ... the line printed names the EMA's entry for --key",
              "also there: 'model_ema' (--key)" in p.stdout, p.stdout.strip())
    p = convert(tmp / "swin_ckpt.pth", tmp / "swin_trust.safetensors", "--trust-pickle")
    rep.check("refuse: ... with --trust-pickle and no yacs installed, the message names the module",
              one_line_refusal(p, "pickles objects of the Python module 'yacs'"), p.stderr.strip()[-300:])
    # --form: the form record (Next-ViT's forms share their names; a merge_bn export is the deployed form)
    def meta_of(path):
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            return json.loads(f.read(n)).get("__metadata__")
    p = convert(tmp / "train.pth", tmp / "dep.safetensors", "--form", "deployed")
    rep.check("--form deployed: recorded as vitc_form, tensors as without it",
              p.returncode == 0 and meta_of(tmp / "dep.safetensors") == {"vitc_form": "deployed"} and
              set(st.load(tmp / "dep.safetensors")) == set(sd) and meta_of(tmp / "train.safetensors") is None,
              p.stderr.strip()[-300:])
    p = convert(tmp / "ten.pth", tmp / "typo.safetensors", "--drop", "head_dst")
    rep.check("refuse: a --drop that matches no tensor", one_line_refusal(p, "--drop 'head_dst' matches no tensor")
              and not (tmp / "typo.safetensors").exists(), p.stderr.strip())

    # output: never over a folder, a FIFO or the input; no temporary file left
    os.mkfifo(tmp / "fifo")
    (tmp / "outdir").mkdir()
    os.link(tmp / "keys.pth", tmp / "hardlink.pth")
    for what, dst, words in (("a folder", "outdir", "it exists and is a folder"),
                             ("a FIFO", "fifo", "it exists and is a FIFO"),
                             ("the checkpoint itself", "keys.pth", "it is the checkpoint being converted"),
                             ("the checkpoint through a hard link", "hardlink.pth", "it is the checkpoint being")):
        before = (tmp / "keys.pth").read_bytes()
        p = convert(tmp / "keys.pth", tmp / dst)
        rep.check(f"output: {what} refused, the checkpoint intact",
                  one_line_refusal(p, words) and (tmp / "keys.pth").read_bytes() == before, p.stderr.strip())
    ro = tmp / "readonly"
    ro.mkdir()
    ro.chmod(0o500)
    p = convert(tmp / "train.pth", ro / "w.safetensors")
    ro.chmod(0o700)
    if os.geteuid() != 0:  # root writes anyway
        rep.check("output: an unwritable folder refused in one line, nothing left there",
                  one_line_refusal(p, "cannot write") and leftovers(ro, []) == [], p.stderr.strip())
    # the output's mode: a new file's is open()'s (0666 less the umask), a replaced file's is kept (mkstemp's 0600 hid
    # the weights from other users); a symlink's destination is written and the link kept
    old = os.umask(0o022)
    p = convert(tmp / "train.pth", tmp / "mode.safetensors")
    new_mode = stat.S_IMODE(os.stat(tmp / "mode.safetensors").st_mode) if p.returncode == 0 else None
    os.chmod(tmp / "mode.safetensors", 0o640)
    p2 = convert(tmp / "train.pth", tmp / "mode.safetensors")
    os.umask(old)
    rep.check("output: a new file 0644 under umask 022, a replaced one keeps its 0640",
              new_mode == 0o644 and p2.returncode == 0 and stat.S_IMODE(os.stat(tmp / "mode.safetensors").st_mode) == 0o640,
              f"{oct(new_mode or 0)} {oct(stat.S_IMODE(os.stat(tmp / 'mode.safetensors').st_mode))}")
    (tmp / "target.safetensors").write_bytes(b"old")
    os.symlink("target.safetensors", tmp / "link.safetensors")
    p = convert(tmp / "train.pth", tmp / "link.safetensors")
    rep.check("output: a symlink's destination written, the link kept",
              p.returncode == 0 and os.path.islink(tmp / "link.safetensors")
              and set(st.load(tmp / "target.safetensors")) == set(sd), p.stderr.strip()[-300:])
    rep.check("output: no temporary file left in the working folder",
              not [n for n in os.listdir(tmp) if n.startswith(".") and n.endswith(".tmp")], str(os.listdir(tmp)))
    review_additions(rep, tmp, sd)
    rep.finish()


def review_additions(rep, tmp, sd):
    """A missing output folder and a write-protected output refused before the checkpoint is read; SIGTERM and SIGHUP
    mid-write leave no temporary file; --form deployed on training branches refused; converted checkpoints of two
    BatchNorm families (GroupMixFormer, Next-ViT merged with --form deployed) forward as the reference models."""
    # a FIFO nobody writes: the converter would wait on it forever if it read the checkpoint before the output checks
    os.mkfifo(tmp / "nowriter")
    try:
        p = subprocess.run(CONV + [str(tmp / "nowriter"), str(tmp / "nodir" / "w.safetensors")], capture_output=True,
                           text=True, timeout=20)
    except subprocess.TimeoutExpired:
        p = subprocess.CompletedProcess([], None, "", "waited on the checkpoint before checking the output's folder")
    rep.check("output: a missing folder refused before the checkpoint is read, naming the folder",
              one_line_refusal(p, "does not exist") and "nodir" in p.stderr, p.stderr.strip())
    # a write-protected output: refused as vitc and the shell's > refuse it (root writes any file: run as nobody)
    wp = tmp / "wp"
    wp.mkdir()
    wp.chmod(0o777)
    (wp / "ro.safetensors").write_bytes(b"keep")
    (wp / "ro.safetensors").chmod(0o444)
    (tmp / "train.pth").chmod(0o644)
    as_user = {"user": 65534} if os.geteuid() == 0 else {}
    tmp.chmod(0o711)  # nobody passes through the test's folder
    # ... and runs a copy of the converter there: the checkout may sit in a folder only its owner enters (mktemp -d)
    shutil.copy(CONV[1], tmp / "convert_checkpoint.py")
    (tmp / "convert_checkpoint.py").chmod(0o644)
    p = subprocess.run([CONV[0], str(tmp / "convert_checkpoint.py"), str(tmp / "train.pth"),
                        str(wp / "ro.safetensors")], capture_output=True, text=True, timeout=300, **as_user)
    rep.check("output: a write-protected output refused, left as it was",
              one_line_refusal(p, "write-protected") and (wp / "ro.safetensors").read_bytes() == b"keep",
              p.stderr.strip())
    # SIGTERM / SIGHUP while the output is written: the temporary file removed, 128 + the signal's number
    torch.save({"model": {f"b.{i}.w": torch.zeros(1024, 4096, dtype=torch.float16) for i in range(48)}},
               tmp / "large.pth")
    import signal
    for sig in (signal.SIGTERM, signal.SIGHUP):
        out = tmp / "sig"
        out.mkdir(exist_ok=True)
        q = subprocess.Popen(CONV + [str(tmp / "large.pth"), str(out / "w.safetensors")], stderr=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, text=True)
        t0 = time.time()
        while not os.listdir(out) and q.poll() is None and time.time() - t0 < 60:
            time.sleep(0.01)
        q.send_signal(sig)
        _, err = q.communicate(timeout=60)
        rep.check(f"output: {signal.Signals(sig).name} mid-write leaves no file, exit {128 + sig}",
                  q.returncode == 128 + sig and leftovers(out, []) == [] and "not written" in err,
                  f"rc {q.returncode}, {leftovers(out, [])}, {err.strip()}")
    (tmp / "large.pth").unlink()
    # --form deployed on a checkpoint with cFFN training branches (which a merged one has none of)
    torch.save({"model": {"features.0.mlp.conv2_u.rep.0.conv.weight": torch.zeros(2, 2, 1, 1), **sd}},
               tmp / "rep.pth")
    p = convert(tmp / "rep.pth", tmp / "rep.safetensors", "--form", "deployed")
    rep.check("refuse: --form deployed on training branches ('.rep.')",
              one_line_refusal(p, "training branches") and not (tmp / "rep.safetensors").exists(), p.stderr.strip())
    # converted checkpoints as published (DDP's prefix, the EMA beside, the optimiser, args; fp16) forward as the
    # reference models: GroupMixFormer (BatchNorms with I64 counters) and Next-ViT saved after merge_bn (--form
    # deployed)
    from common import VITC, scale_err
    if not (VITC.is_file() and os.access(VITC, os.X_OK)):
        rep.check("round trip: vitc binary", False, f"{VITC} missing (run make first)")
        return
    import gmf_ref
    import nextvit_ref
    ref = gmf_ref.GroupMixFormer([20, 30, 40, 50], [1, 2, 1, 1], [2.0, 3.0, 2.0, 1.5], num_classes=10)
    gsd = gmf_ref.randomize(ref, 1)
    nv_args = ["--depths", "1,2,5,1", "--num-classes", "10", "--img-size", "64"]
    nv = nextvit_ref.build("nextvit_small", [1, 2, 5, 1], 10)
    nsd = nextvit_ref.calibrate(nv, nextvit_ref.randomize(nv, 4), 4, 64)
    merged = nextvit_ref.build("nextvit_small", [1, 2, 5, 1], 10, merged=True)
    msd = {k: v.float() if v.is_floating_point() else v for k, v in nextvit_ref.merge_bn(nsd, merged).items()}
    cases = (("GroupMixFormer", "groupmixformer_test", ref, gsd, [], [], False),
             ("GroupMixFormer fp16", "groupmixformer_test", ref, gsd, [], [], True),
             ("Next-ViT merged", "nextvit_small", merged, msd, nv_args, ["--form", "deployed"], False))
    for tag, model, net, w, args, extra, half in cases:
        if half:
            w = {k: v.half() if v.is_floating_point() else v for k, v in w.items()}
        torch.save({"model": {"module." + k: v for k, v in w.items()}, "model_ema": w, "epoch": 9, "max_accuracy": 1.5,
                    "args": argparse.Namespace(model=model, lr=1e-3)}, tmp / "rt.pth")
        p = convert(tmp / "rt.pth", tmp / "rt.safetensors", *extra)
        got = st.load(tmp / "rt.safetensors") if p.returncode == 0 else {}
        want = {k: (v.float() if v.is_floating_point() else v).numpy() for k, v in w.items()}
        rep.check(f"round trip {tag}: the tensors exact, names and dtypes kept",
                  set(got) == set(want) and all(got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k])
                                                for k in want), p.stderr.strip()[-300:])
        x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
        st.save(tmp / "rt_x.safetensors", {"input": x})
        q = subprocess.run([str(VITC), "forward", model, "--weights", str(tmp / "rt.safetensors"), "--input",
                            str(tmp / "rt_x.safetensors"), "--output", str(tmp / "rt_y.safetensors"), *args],
                           capture_output=True, text=True, timeout=600)
        if not rep.check(f"round trip {tag}: vitc forward runs", q.returncode == 0, q.stderr.strip()[-300:]):
            continue
        net.load_state_dict({k: torch.from_numpy(v).double() if v.dtype != np.int64 else torch.from_numpy(v)
                             for k, v in want.items()})
        net.double().eval()
        with torch.no_grad():
            r = net(x.double())
        e = scale_err(st.load(tmp / "rt_y.safetensors")["logits"], r)
        rep.check(f"round trip {tag}: logits as the reference model's", e <= 1e-4, f"rel err {e:.2e}")


if __name__ == "__main__":
    main()
