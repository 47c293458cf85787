#!/usr/bin/python3
"""Output equality of vitc against the official PyTorch model classes, through tools/convert_checkpoint.py.

For each model: the official model (drop path 0) is built, given non-trivial random weights (its own init, then
every parameter perturbed: norm weights by N(0, 0.2^2), other 1-D parameters by N(0, 0.1^2), the rest by half their
standard deviation (0.1 where the init is constant), BatchNorm running_mean N(0, 0.2^2) and running_var
U(0.5, 1.5); integer buffers and structural float buffers such as Swin's attn_mask are kept and listed), and its
state_dict is torch.save'd and converted with tools/convert_checkpoint.py as a user would. Then, on one random
batch of 2 at the model's image size:
  eval   `vitc forward` logits against the official eval forward: max|vitc - official| / max|official| <= 1e-4;
  train  `vitc grad` (train mode, BatchNorm on batch statistics) against the official train forward +
         cross-entropy (mean, no smoothing) + backward on the same labels: loss relative error <= 1e-4 and, for every
         parameter, max|g_vitc - g_official| / max|g_official| <= 1e-3 (a tensor whose official gradient is zero,
         e.g. a bias before a train-mode BatchNorm, must be round-off in vitc: <= 1e-6 of the largest gradient).
The official side runs in float64 (the float32 checkpoint's values, torch's default dtype set to float64 for
tensors its forward creates), vitc in float32 with --threads. Where a gradient is over the tolerance the official
code also runs in float32 (its own error on that tensor) and again in float64 with the ReLU / ReLU6 / Hardswish
branches its float32 run took; the result is "round-off" when each such gradient is no further from float64 than
the official float32 one, or within the tolerance once the branches agree (see verdict). --kink-free moves the
norms that feed those activations onto one linear piece of them first, so that no branch is in doubt.

Official code: compare_official.py's OFFICIAL table (the four papers' repositories, with the run-time fixes
described there) and the plain hosts of HOSTS: timm 0.4.12 (DeiT's and Swin's code), torchvision (vitc's swin_t /
swin_s use its names), whai362/PVT (branch v2: pvt.py, pvt_v2.py), microsoft/CSWin-Transformer and
bytedance/Next-ViT, each checkout passed with --repo NAME=DIR (NAME: gma, refiner, msf, flatten, pvt, cswin,
nextvit). Each model runs in a fresh interpreter (--python: torch, timm 0.4.x, einops, PyYAML, packaging;
torchvision for the torchvision rows). The markdown table goes to stdout at the end, progress to stderr.
Usage: /usr/bin/python3 bench/check_official.py --python V/bin/python --repo gma=DIR ... [--models a,b | --all]
       [--eval-only] [--kink-free] [--img-size N] [--threads 2] [--json OUT] | --from-json OUT
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

import benchenv
from compare_official import OFFICIAL, EVAL_ONLY, build_official, _import_timm, import_help, run_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

# the last three are the plain hosts' official code: bytedance/Next-ViT, whai362/PVT, microsoft/CSWin-Transformer
REPOS = ("gma", "refiner", "msf", "flatten", "nextvit", "pvt", "cswin")
TOL_FWD, TOL_LOSS, TOL_GRAD, TOL_ZERO = 1e-4, 1e-4, 1e-3, 1e-6
ROUNDOFF = 3  # two float32 orders of summation: errors of one size, in no fixed order (see verdict)

# vitc's plain hosts -> (source, what): timm model name, torchvision builder, official repository's builder
HOSTS = {
    "deit_tiny_patch16_224": ("timm", "deit_tiny_patch16_224"),
    "deit_small_patch16_224": ("timm", "deit_small_patch16_224"),
    "deit_base_patch16_224": ("timm", "deit_base_patch16_224"),
    "swin_tiny_patch4_window7_224": ("timm", "swin_tiny_patch4_window7_224"),
    "swin_small_patch4_window7_224": ("timm", "swin_small_patch4_window7_224"),
    "swin_base_patch4_window7_224": ("timm", "swin_base_patch4_window7_224"),
    "swin_base_patch4_window12_384": ("timm", "swin_base_patch4_window12_384"),
    "swin_t": ("torchvision", "swin_t"),
    "swin_s": ("torchvision", "swin_s"),
    # whai362/PVT (branch v2) classification/pvt.py and pvt_v2.py
    "pvt_tiny": ("pvt", "pvt.pvt_tiny"),
    "pvt_small": ("pvt", "pvt.pvt_small"),
    "pvt_v2_b1": ("pvt", "pvt_v2.pvt_v2_b1"),
    "pvt_v2_b2": ("pvt", "pvt_v2.pvt_v2_b2"),
    # microsoft/CSWin-Transformer models/cswin.py
    "cswin_tiny_224": ("cswin", "CSWin_64_12211_tiny_224"),
    "cswin_small_224": ("cswin", "CSWin_64_24322_small_224"),
    "cswin_base_224": ("cswin", "CSWin_96_24322_base_224"),
    "cswin_base_384": ("cswin", "CSWin_96_24322_base_384"),
    # bytedance/Next-ViT classification/nextvit.py: NextViT with the registered configs' stems and depths (their
    # builders fix path_dropout, which must be 0 here); vitc's eval runs on the file merged by `vitc deploy`
    "nextvit_small": ("nextvit", [3, 4, 10, 3]),
    "nextvit_base": ("nextvit", [3, 4, 20, 3]),
    "nextvit_large": ("nextvit", [3, 4, 30, 3]),
}
# left out of --all: 384-pixel models (about 3x the time of their 224 twins, same code)
SLOW = {"flatten_swin_base_384", "flatten_cswin_base_384", "swin_base_patch4_window12_384", "cswin_base_384"}


# ---------------------------------------------------------------- official side (runs under --python)

def build(spec):
    name, src, what = spec["name"], spec["source"], spec["what"]
    if name in OFFICIAL:
        return build_official(name, spec["repo"], 0.0, spec["img_size"])
    _import_timm()
    if src == "timm":
        import timm
        return timm.create_model(what, pretrained=False, drop_path_rate=0.0)
    if src == "torchvision":  # its builders fix stochastic_depth_prob: set every StochasticDepth to 0
        import torchvision
        m = getattr(torchvision.models, what)(weights=None)
        for mod in m.modules():
            if isinstance(mod, torchvision.ops.StochasticDepth):
                mod.p = 0.0
        return m
    if src == "nextvit":
        sys.path.insert(0, os.path.join(spec["repo"], "classification"))
        import nextvit
        return nextvit.NextViT(stem_chs=[64, 32, 64], depths=what, path_dropout=0.0)
    if src == "pvt":
        sys.path.insert(0, os.path.join(spec["repo"], "classification"))
        module, fn = what.split(".")
        return getattr(importlib.import_module(module), fn)(drop_path_rate=0.0)
    sys.path.insert(0, spec["repo"])  # cswin
    from models import cswin
    return getattr(cswin, what)(drop_path_rate=0.0, img_size=spec["img_size"])


def perturb(model, seed):
    """Every parameter and BatchNorm statistic moved off its init (see the module doc); returns the float buffers
    left as they are."""
    import torch
    g = torch.Generator().manual_seed(seed)
    kept = []
    with torch.no_grad():
        for k, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if p.dim() == 1:
                p.add_(r * (0.2 if k.endswith("weight") else 0.1))
            else:
                s = float(p.std()) if p.numel() > 1 else 0.0
                p.add_(r * (0.5 * s if s > 1e-3 else 0.1))
        for k, b in model.named_buffers():
            if k.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif k.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
            elif b.is_floating_point():
                kept.append(k)
    return kept


def kink_margin(m, x, clear=False):
    """Smallest distance of any ReLU / ReLU6 (hardtanh) / Hardswish argument to a kink (0 and 6; -3 and 3) in a
    train-mode float64 forward of m. clear: first move every norm whose output goes straight into such an activation
    onto one linear piece of it (weight 0.25 with random signs; bias 2 before a ReLU, 3 before a ReLU6, 0 before a
    Hardswish: kinks 8 standard deviations of the normalised values away), and shift the bias of a convolution or
    linear map that feeds a ReLU to 6 standard deviations of each channel above 0; returns (margin, names moved)."""
    import torch
    import torch.nn.functional as F
    low, fed = [float("inf")], {}
    outputs = {}
    kinds = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.Conv2d,
             torch.nn.Linear)
    hooks = [mod.register_forward_hook(lambda mod, i, o, k=k: outputs.__setitem__(id(o), (k, o.detach().clone())))
             for k, mod in m.named_modules() if isinstance(mod, kinds)]

    def watch(kind, fn):
        def f(t, *a, **k):
            kinks = {"relu": [0.0], "hardtanh": [0.0, 6.0], "hardswish": [-3.0, 3.0]}[kind]
            if id(t) in outputs:
                fed[outputs[id(t)][0]] = (kind, outputs[id(t)][1])
            d = torch.stack([(t.detach() - c).abs() for c in kinks]).amin(0)
            low[0] = min(low[0], float(d.min()))
            return fn(t, *a, **k)
        return f

    saved = {k: getattr(F, k) for k in ("relu", "hardtanh", "hardswish")}
    for k, fn in saved.items():
        setattr(F, k, watch(k, fn))
    state, training = {k: v.clone() for k, v in m.state_dict().items()}, m.training
    try:
        m.train()
        with torch.no_grad():
            m(x.double())
    finally:
        for k, fn in saved.items():
            setattr(F, k, fn)
        for h in hooks:
            h.remove()
        m.load_state_dict(state)
        m.train(training)
    if clear:
        g = torch.Generator().manual_seed(1)
        mods = dict(m.named_modules())
        with torch.no_grad():
            for k, (kind, o) in fed.items():
                w, b = mods[k].weight, mods[k].bias
                if isinstance(mods[k], (torch.nn.Conv2d, torch.nn.Linear)):
                    if b is None or kind != "relu":
                        continue
                    # a ReLU after a convolution or linear map: its bias shifts each channel 6 standard deviations
                    # above 0 (train-mode batch of this probe)
                    conv = o.dim() == 4 and isinstance(mods[k], torch.nn.Conv2d)
                    dims = [0, 2, 3] if conv else list(range(o.dim() - 1))
                    b.add_(6 * o.std(dims) - o.mean(dims))
                    continue
                w.copy_(0.25 * torch.sign(torch.randn(w.shape, generator=g)))
                b.fill_({"relu": 2.0, "hardtanh": 3.0, "hardswish": 0.0}[kind])
        return kink_margin(m, x)[0], sorted(fed)
    return low[0], sorted(fed)


class branches:
    """Context: F.relu, F.hardtanh (ReLU6) and F.hardswish either record which linear piece each element of each call
    falls on ("record"), or compute with the recorded pieces instead of their own comparisons ("replay", same call
    order; `flipped` counts the elements whose piece differs from the one their own value would take)."""

    def __init__(self, mode, regions=None):
        self.mode, self.regions, self.flipped, self.i = mode, regions if regions is not None else [], 0, 0

    def __enter__(self):
        import torch
        import torch.nn.functional as F
        self.saved = {k: getattr(F, k) for k in ("relu", "hardtanh", "hardswish")}

        def wrap(kind, fn):
            def f(t, *a, **k):
                lo = a[0] if len(a) > 0 else k.get("min_val", -1.0)
                hi = a[1] if len(a) > 1 else k.get("max_val", 1.0)
                kinks = {"relu": [0.0], "hardtanh": [lo, hi], "hardswish": [-3.0, 3.0]}[kind]
                own = torch.bucketize(t.detach(), torch.tensor(kinks, dtype=t.dtype))
                if self.mode == "record":
                    self.regions.append(own)
                    return fn(t, *a, **k)
                r = self.regions[self.i]
                self.i += 1
                self.flipped += int((r != own).sum())
                if kind == "relu":
                    return t * (r == 1)
                if kind == "hardtanh":
                    return torch.where(r == 0, torch.full_like(t, lo), torch.where(r == 1, t, torch.full_like(t, hi)))
                return torch.where(r == 0, torch.zeros_like(t), torch.where(r == 1, t * (t + 3) / 6, t))
            return f

        for k, fn in self.saved.items():
            setattr(F, k, wrap(k, fn))
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F
        for k, fn in self.saved.items():
            setattr(F, k, fn)


def vitc(spec, *args):
    cmd = [spec["vitc"], *map(str, args), "--img-size", str(spec["img_size"])]
    if args[0] != "deploy":  # (single-threaded)
        cmd += ["--threads", str(spec["threads"])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"vitc {args[0]}: {(p.stderr or p.stdout).strip()[-600:]}")


def worker(spec):
    """Runs in a fresh interpreter: builds, perturbs, saves and converts the official model, runs vitc and compares;
    prints one JSON line."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import st
    t0 = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    try:
        m = build(spec).float()
    except ImportError as e:
        sys.exit(import_help(e, spec["repo"]))
    m.eval()
    kept = perturb(m, spec["seed"])
    cls = f"{type(m).__module__.split('.')[-1]}.{type(m).__name__}"
    out = {"img_size": spec["img_size"], "class": cls, "params": sum(p.numel() for p in m.parameters()),
           "kept": kept, "torch": torch.__version__}
    img = spec["img_size"]
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    x = torch.randn(2, 3, img, img, generator=g)
    labels = torch.randint(0, 1000, (2,), generator=g)
    if spec["kink_free"]:  # see --kink-free
        m.double()
        out["kink_margin"], out["kinks_cleared"] = kink_margin(m, x, clear=True)
        m.float()
    tmp = spec["tmp"]
    ckpt, w = os.path.join(tmp, "official.pth"), os.path.join(tmp, "official.safetensors")
    torch.save(m.state_dict(), ckpt)
    p = subprocess.run([spec["convert_python"], os.path.join(ROOT, "tools", "convert_checkpoint.py"), ckpt, w],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"convert_checkpoint: {p.stderr.strip()[-600:]}")
    os.unlink(ckpt)
    xin, yout, gout = (os.path.join(tmp, f) for f in ("x.safetensors", "y.safetensors", "g.safetensors"))
    st.save(xin, {"input": x, "labels": labels})

    sd32 = {k: v.clone() for k, v in m.state_dict().items()}
    torch.set_default_dtype(torch.float64)
    m.double()
    wf = w
    if spec["source"] == "nextvit":  # vitc's Next-ViT runs deployed: merge the converted file as a user must
        wf = os.path.join(tmp, "deployed.safetensors")
        vitc(spec, "deploy", spec["name"], "--weights", w, "-o", wf)
    vitc(spec, "forward", spec["name"], "--weights", wf, "--input", xin, "--output", yout)
    y = st.load(yout)["logits"]
    with torch.no_grad():
        r = m(x.double()).numpy()
    if y.shape != r.shape:
        raise RuntimeError(f"logits {y.shape}, official {r.shape}")
    out["max_logit"] = float(np.abs(r).max())
    out["eval_err"] = float(np.abs(y - r).max()) / out["max_logit"]
    out["ok"] = out["eval_err"] <= TOL_FWD
    if spec["train"]:
        vitc(spec, "grad", spec["name"], "--weights", w, "--input", xin, "--output", gout)
        res = st.load(gout)
        m.train()
        m.zero_grad()
        loss = F.cross_entropy(m(x.double()), labels)
        loss.backward()
        ref = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).numpy() for k, p in m.named_parameters()}
        lv = float(np.asarray(res["loss"]).reshape(()))
        out["loss"] = [lv, loss.item()]
        out["loss_err"] = abs(lv - loss.item()) / abs(loss.item())
        gscale = max(float(np.abs(a).max()) for a in ref.values())
        missing = [k for k in ref if "grad/" + k not in res or res["grad/" + k].shape != ref[k].shape]
        extra = [k[5:] for k in res if k.startswith("grad/") and k[5:] not in ref]
        worst, zero_bad, structural, errs = (0.0, ""), [], [], {}
        for k, a in ref.items():
            if k in missing:
                continue
            v = res["grad/" + k]
            s = float(np.abs(a).max())
            if s <= 1e-12 * gscale:  # zero by construction in the official model
                structural.append(k)
                e = float(np.abs(v).max()) / gscale
                if e > TOL_ZERO:
                    zero_bad.append(f"{k} ({e:.1e} of max grad)")
                continue
            e = float(np.abs(v - a).max()) / s
            errs[k] = e
            worst = max(worst, (e, k))
        out.update(grad_worst=worst, grad_missing=missing, grad_extra=extra, grad_zero_bad=zero_bad,
                   structural=structural, n_grads=len(ref),
                   grad_bad=sorted(((e, k) for k, e in errs.items() if e > TOL_GRAD), reverse=True)[:12])
        out["ok"] = (out["ok"] and out["loss_err"] <= TOL_LOSS and worst[0] <= TOL_GRAD and not missing
                     and not extra and not zero_bad)
        zero_names = {z.split(" (")[0] for z in zero_bad}
        if out["grad_bad"] or zero_bad:
            # (1) how far float32 itself is from float64 on those tensors: the official code in float32;
            # (2) the float64 gradients again, every ReLU/ReLU6/Hardswish taking the branch the float32 run took
            torch.set_default_dtype(torch.float32)
            m.float()
            m.load_state_dict(sd32)
            m.zero_grad()
            with branches("record") as rec:
                F.cross_entropy(m(x), labels).backward()
            bad = {k for _, k in out["grad_bad"]}
            out["official_fp32"] = {k: float(np.abs(p.grad.double().numpy() - ref[k]).max() / np.abs(ref[k]).max())
                                    for k, p in m.named_parameters() if k in bad}
            out["official_fp32_zero"] = {k: float(p.grad.abs().max()) / gscale for k, p in m.named_parameters()
                                         if k in zero_names and p.grad is not None}
            torch.set_default_dtype(torch.float64)
            m.double()
            m.load_state_dict(sd32)
            m.zero_grad()
            with branches("replay", rec.regions) as rep:
                F.cross_entropy(m(x.double()), labels).backward()
            errs32 = {}
            for k, p in m.named_parameters():
                a, s = p.grad.numpy() if p.grad is not None else 0 * ref[k], np.abs(ref[k]).max()
                if k not in missing and s > 1e-12 * gscale:
                    errs32[k] = float(np.abs(res["grad/" + k] - a).max() / np.abs(a).max())
            out["fp32_branches"] = {"kinks": len(rec.regions), "flipped": rep.flipped,
                                    "worst": max((e, k) for k, e in errs32.items()),
                                    "bad": {k: errs32[k] for k in bad if k in errs32}}
    out["seconds"] = time.perf_counter() - t0
    print(json.dumps(out))


# ---------------------------------------------------------------- driver (any python3)

def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    known = list(OFFICIAL) + list(HOSTS)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", action="append", default=[], metavar="NAME=PATH",
                    help="an official checkout: " + ", ".join(REPOS) + " (repeat the option)")
    ap.add_argument("--models", help="vitc names, comma-separated; known: " + ", ".join(known))
    ap.add_argument("--all", action="store_true", help="every known model but the 384-pixel ones: " + ", ".join(SLOW))
    ap.add_argument("--eval-only", action="store_true", help="no training check")
    ap.add_argument("--img-size", type=int, help="input size instead of the model's (official models that take one)")
    ap.add_argument("--kink-free", action="store_true",
                    help="move every norm that feeds a ReLU, ReLU6 or Hardswish onto one linear piece of it (see "
                    "kink_margin), so that no activation argument lies within float32 noise of a kink, where float32 "
                    "and float64 may take different branches and move every gradient upstream")
    ap.add_argument("--threads", type=int, default=2, help="threads of vitc and of torch (default 2)")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter of the official side (torch, timm 0.4)")
    ap.add_argument("--convert-python", help="interpreter for tools/convert_checkpoint.py (default: --python)")
    ap.add_argument("--vitc", default=os.path.join(ROOT, "vitc"), help="the vitc binary")
    ap.add_argument("--json", help="also write the results (one object per model) to this file")
    ap.add_argument("--from-json", help="print the table of an earlier run's --json file and exit")
    a = ap.parse_args()
    repos = {}
    for r in a.repo:
        k, sep, path = r.partition("=")
        if not sep or k not in REPOS or not os.path.isdir(path):
            ap.error(f"--repo {r}: expected NAME=DIR with NAME one of {', '.join(REPOS)} and an existing DIR")
        repos[k] = os.path.abspath(path)
    if a.all == bool(a.models) and not a.from_json:
        ap.error("give --models or --all")
    if a.from_json:  # the run's own date and threads (a file from before they were recorded: "?")
        with open(a.from_json) as f:
            j = json.load(f)
        run = j if "results" in j else {"results": j, "date": "?", "threads": "?"}
        return report(run["results"], [], run["threads"], run["date"])
    names = [n for n in known if n not in SLOW] if a.all else a.models.split(",")
    for name in names:  # every name checked before anything runs
        if name not in OFFICIAL and name not in HOSTS:
            sys.exit(f"{name}: no official code known (known: {', '.join(known)})")
    benchenv.need_program(a.vitc)
    benchenv.need_program(a.python, "give --python an interpreter with torch and timm")
    notes, results, date = [], {}, time.strftime('%Y-%m-%d')
    for name in names:
        src, what = OFFICIAL[name] if name in OFFICIAL else HOSTS[name]
        repo_kind = src if name in OFFICIAL or src in REPOS else None
        if repo_kind and repo_kind not in repos:
            notes.append(f"{name}: skipped, no --repo {repo_kind}=DIR")
            continue
        info = run_json([a.vitc, "info", name, "--json"], f"vitc info {name}")
        train = not a.eval_only and name not in EVAL_ONLY
        with tempfile.TemporaryDirectory(prefix="vitc-official-") as tmp:
            spec = {"name": name, "source": src, "what": what, "repo": repos.get(repo_kind),
                    "img_size": a.img_size or info["img_size"], "kink_free": a.kink_free,
                    "seed": zlib.crc32(name.encode()) & 0xFFFF, "threads": a.threads,
                    "vitc": os.path.abspath(a.vitc), "convert_python": a.convert_python or a.python, "tmp": tmp,
                    "train": train}
            log(f"{name}: {'eval + train' if train else 'eval'} ...")
            p = subprocess.run([a.python, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                               capture_output=True, text=True)
        if p.returncode != 0:
            log(f"  FAILED: {p.stderr.strip()[-2000:]}")
            results[name] = {"error": p.stderr.strip()[-2000:]}
            continue
        results[name] = dict(json.loads(p.stdout.strip().splitlines()[-1]), train=train, vitc_params=info["params"])
        log("  " + row(name, results[name])[0])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": date, "threads": a.threads, "results": results}, f, indent=1)
    report(results, notes, a.threads, date)


def verdict(o):
    """pass; round-off: eval, loss and names right, and on every gradient over the tolerance either vitc's error is
    within ROUNDOFF times the official code's own float32 error (a sum that cancels, e.g. a bias or the weight of a
    BatchNorm followed by a train-mode BatchNorm), or vitc is within the tolerance of the float64 gradients computed
    with the branches (ReLU, ReLU6, Hardswish pieces) that the official code took in float32; likewise a gradient zero
    by construction may be up to ROUNDOFF times the official float32 one; kinks: not decided, some activation
    arguments are within float32 noise of a kink (the official float32 run took other branches than float64 there,
    and vitc may take others again, which moves every gradient upstream): rerun with --kink-free; else FAIL."""
    if o["ok"]:
        return "pass"
    f32, br = o.get("official_fp32", {}), o.get("fp32_branches", {}).get("bad", {})
    f32z = o.get("official_fp32_zero", {})
    zero = [(float(z.split(" (")[1].split()[0]), z.split(" (")[0]) for z in o.get("grad_zero_bad", [])]
    if (o["eval_err"] > TOL_FWD or o.get("loss_err", 0) > TOL_LOSS or o.get("grad_missing")
            or o.get("grad_extra")):
        return "FAIL"
    if (all(e <= ROUNDOFF * f32z.get(k, 0) for e, k in zero)
            and all(e <= ROUNDOFF * f32.get(k, 0) or br.get(k, 1) <= TOL_GRAD for e, k in o.get("grad_bad", []))):
        return "round-off"
    return "kinks" if o.get("fp32_branches", {}).get("flipped") else "FAIL"


def row(name, o):
    """(markdown row, notes) of one model's result."""
    if "error" in o:
        return f"| {name} | ? | error: {o['error'].splitlines()[-1][:300]} | | | FAIL | |", []
    notes = []
    train = o.get("train", "loss_err" in o)
    if o.get("vitc_params", o["params"]) != o["params"]:
        notes.append(f"{name}: official {o['params']} parameters, vitc info {o['vitc_params']}")
    if o["kept"]:
        notes.append(f"{name}: float buffers kept as built (structural): "
                     + ", ".join(sorted(set(k.split('.')[-1] for k in o['kept']))))
    if name in EVAL_ONLY:
        notes.append(f"{name}: eval only, {EVAL_ONLY[name]}")
    if "kink_margin" in o:
        notes.append(f"{name}: --kink-free at {o['img_size']} px: {len(o['kinks_cleared'])} norms moved, "
                     f"smallest distance of an activation argument to a kink {o['kink_margin']:.1e}")
    tr = "| - | - " if not train else f"| {o['loss_err']:.1e} | {o['grad_worst'][0]:.1e} ({o['grad_worst'][1]}) "
    if train:
        for k in ("grad_missing", "grad_extra", "grad_zero_bad"):
            if o[k]:
                notes.append(f"{name}: {k.replace('_', ' ')}: {', '.join(o[k][:8])}")
        if o.get("fp32_branches"):
            b = o["fp32_branches"]
            notes.append(f"{name}: with the official float32 run's activation branches ({b['flipped']} elements of "
                         f"{b['kinks']} calls flipped from float64's own), worst gradient rel err "
                         f"{b['worst'][0]:.1e} ({b['worst'][1]})")
        if o.get("official_fp32_zero"):
            notes.append(f"{name}: the official code in float32 on the gradients zero by construction: "
                         + ", ".join(f"{k} {e:.1e} of max grad" for k, e in o["official_fp32_zero"].items()))
        if o["grad_bad"]:
            f32 = o.get("official_fp32", {})
            notes.append(f"{name}: gradients over {TOL_GRAD:g}, vitc (the official code in float32): "
                         + ", ".join(f"{k} {e:.1e} ({f32.get(k, float('nan')):.1e})" for e, k in o["grad_bad"]))
    return f"| {name} | {o['class']} | {o['eval_err']:.1e} {tr}| {verdict(o)} | {o['seconds']:.0f} |", notes


def report(results, notes, threads, date):
    torch_v = next((o["torch"] for o in results.values() if "torch" in o), None)
    rows = []
    for name, o in results.items():
        r, n = row(name, o)
        rows.append(r)
        notes += n
    print(f"# {date}: official side torch {torch_v} (float64), vitc float32, "
          f"{threads} threads; batch 2, random perturbed weights through tools/convert_checkpoint.py")
    print(f"# eval: max|vitc - official| / max|official logit| (pass <= {TOL_FWD:g}); train: loss relative error "
          f"(<= {TOL_LOSS:g}), worst parameter gradient max|diff| / max|official| (<= {TOL_GRAD:g})")
    print("| model | official class | eval rel err | train loss rel err | worst gradient rel err (tensor) | result | "
          "s |")
    print("|---|---|---:|---:|---|---|---:|")
    for r in rows:
        print(r)
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
