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
tensors its forward creates), vitc in float32 with --threads.

Official code: compare_official.py's OFFICIAL table (the four papers' repositories, --repo NAME=DIR, with the
run-time fixes described there), and the plain hosts of HOSTS: timm 0.4.12 (DeiT's and Swin's reference code),
torchvision (vitc's swin_t / swin_s use its names) and the FLatten repository's PVT, PVTv2 and CSwin classes with
attn_type SSSS (every stage the host's own softmax attention: the code FLatten took from PVT and CSwin).
Each model runs in a fresh interpreter (--python: torch, timm 0.4.x, einops, PyYAML, packaging; torchvision for
the torchvision rows). The markdown table goes to stdout at the end, progress to stderr.
Usage: /usr/bin/python3 bench/check_official.py --python V/bin/python --repo gma=DIR --repo refiner=DIR
       --repo msf=DIR --repo flatten=DIR [--models a,b | --all] [--eval-only] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

from compare_official import OFFICIAL, EVAL_ONLY, TIMM_HELP, build_official, _import_timm, run_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

TOL_FWD, TOL_LOSS, TOL_GRAD, TOL_ZERO = 1e-4, 1e-4, 1e-3, 1e-6

# vitc's plain hosts -> (source, what): timm model name, torchvision builder, FLatten repo builder with attn_type SSSS
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
    "pvt_tiny": ("flatten", "flatten_pvt_tiny"),
    "pvt_small": ("flatten", "flatten_pvt_small"),
    "pvt_v2_b1": ("flatten", "flatten_pvt_v2_b1"),
    "pvt_v2_b2": ("flatten", "flatten_pvt_v2_b2"),
    "cswin_tiny_224": ("flatten", "FLatten_CSWin_64_24181_tiny_224"),
    "cswin_small_224": ("flatten", "FLatten_CSWin_64_24322_small_224"),
    "cswin_base_224": ("flatten", "FLatten_CSWin_96_36292_base_224"),
    "cswin_base_384": ("flatten", "FLatten_CSWin_96_36292_base_384"),
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
    if src == "torchvision":
        import torchvision
        return getattr(torchvision.models, what)(weights=None, stochastic_depth_prob=0.0)
    sys.path.insert(0, spec["repo"])  # flatten
    import models as fm
    kw = {"img_size": spec["img_size"]} if what.startswith("FLatten_CSWin") else {}
    return getattr(fm.build, what)(drop_path_rate=0.0, attn_type="SSSS", **kw)


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


def vitc(spec, *args):
    cmd = [spec["vitc"], *map(str, args), "--threads", str(spec["threads"])]
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
        sys.exit(f"{e}\n" + TIMM_HELP.format(py=sys.executable))
    m.eval()
    kept = perturb(m, spec["seed"])
    cls = f"{type(m).__module__.split('.')[-1]}.{type(m).__name__}"
    out = {"class": cls, "params": sum(p.numel() for p in m.parameters()), "kept": kept, "torch": torch.__version__}
    tmp = spec["tmp"]
    ckpt, w = os.path.join(tmp, "official.pth"), os.path.join(tmp, "official.safetensors")
    torch.save(m.state_dict(), ckpt)
    p = subprocess.run([spec["convert_python"], os.path.join(ROOT, "tools", "convert_checkpoint.py"), ckpt, w],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"convert_checkpoint: {p.stderr.strip()[-600:]}")
    os.unlink(ckpt)
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    img = spec["img_size"]
    x = torch.randn(2, 3, img, img, generator=g)
    labels = torch.randint(0, 1000, (2,), generator=g)
    xin, yout, gout = (os.path.join(tmp, f) for f in ("x.safetensors", "y.safetensors", "g.safetensors"))
    st.save(xin, {"input": x, "labels": labels})

    torch.set_default_dtype(torch.float64)
    m.double()
    vitc(spec, "forward", spec["name"], "--weights", w, "--input", xin, "--output", yout)
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
                    help="an official checkout: gma, refiner, msf or flatten (repeat the option)")
    ap.add_argument("--models", help="vitc names, comma-separated; known: " + ", ".join(known))
    ap.add_argument("--all", action="store_true", help="every known model but the 384-pixel ones: " + ", ".join(SLOW))
    ap.add_argument("--eval-only", action="store_true", help="no training check")
    ap.add_argument("--threads", type=int, default=2, help="threads of vitc and of torch (default 2)")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter of the official side (torch, timm 0.4)")
    ap.add_argument("--convert-python", help="interpreter for tools/convert_checkpoint.py (default: --python)")
    ap.add_argument("--vitc", default=os.path.join(ROOT, "vitc"), help="the vitc binary")
    ap.add_argument("--json", help="also write the results (one object per model) to this file")
    a = ap.parse_args()
    repos = {}
    for r in a.repo:
        k, sep, path = r.partition("=")
        if not sep or k not in ("gma", "refiner", "msf", "flatten") or not os.path.isdir(path):
            ap.error(f"--repo {r}: expected NAME=DIR with NAME gma, refiner, msf or flatten and an existing DIR")
        repos[k] = os.path.abspath(path)
    if a.all == bool(a.models):
        ap.error("give --models or --all")
    names = [n for n in known if n not in SLOW] if a.all else a.models.split(",")
    rows, notes, results, torch_v = [], [], {}, None
    for name in names:
        if name not in OFFICIAL and name not in HOSTS:
            sys.exit(f"{name}: no official code known (known: {', '.join(known)})")
        src, what = OFFICIAL[name] if name in OFFICIAL else HOSTS[name]
        repo_kind = src if name in OFFICIAL else ("flatten" if src == "flatten" else None)
        if repo_kind and repo_kind not in repos:
            notes.append(f"{name}: skipped, no --repo {repo_kind}=DIR")
            continue
        info = run_json([a.vitc, "info", name, "--json"], f"vitc info {name}")
        train = not a.eval_only and name not in EVAL_ONLY
        if not a.eval_only and name in EVAL_ONLY:
            notes.append(f"{name}: eval only, {EVAL_ONLY[name]}")
        with tempfile.TemporaryDirectory(prefix="vitc-official-") as tmp:
            spec = {"name": name, "source": src, "what": what, "repo": repos.get(repo_kind),
                    "img_size": info["img_size"], "seed": zlib.crc32(name.encode()) & 0xFFFF, "threads": a.threads,
                    "vitc": os.path.abspath(a.vitc), "convert_python": a.convert_python or a.python, "tmp": tmp,
                    "train": train}
            log(f"{name}: {'eval + train' if train else 'eval'} ...")
            p = subprocess.run([a.python, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                               capture_output=True, text=True)
        if p.returncode != 0:
            err = (p.stderr.strip().splitlines() or ["?"])[-1][:300]
            log(f"  FAILED: {p.stderr.strip()[-2000:]}")
            rows.append(f"| {name} | ? | error: {err} | | | FAIL | |")
            results[name] = {"error": p.stderr.strip()[-2000:]}
            continue
        o = json.loads(p.stdout.strip().splitlines()[-1])
        results[name] = o
        torch_v = torch_v or o["torch"]
        if o["params"] != info["params"]:
            notes.append(f"{name}: official {o['params']} parameters, vitc info {info['params']}")
        if o["kept"]:
            notes.append(f"{name}: float buffers kept as built (structural): {', '.join(sorted(set(k.split('.')[-1] for k in o['kept'])))}")
        tr = ("| - | - " if not train else
              f"| {o['loss_err']:.1e} | {o['grad_worst'][0]:.1e} ({o['grad_worst'][1]}) ")
        rows.append(f"| {name} | {o['class']} | {o['eval_err']:.1e} {tr}| {'pass' if o['ok'] else 'FAIL'} | "
                    f"{o['seconds']:.0f} |")
        log(f"  {rows[-1]}")
        if train:
            for k in ("grad_missing", "grad_extra", "grad_zero_bad"):
                if o[k]:
                    notes.append(f"{name}: {k.replace('_', ' ')}: {', '.join(o[k][:8])}")
            if o["grad_bad"]:
                notes.append(f"{name}: gradients over {TOL_GRAD:g}: "
                             + ", ".join(f"{k} {e:.1e}" for e, k in o["grad_bad"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"# {time.strftime('%Y-%m-%d')}: official side torch {torch_v} (float64), vitc float32, "
          f"{a.threads} threads; batch 2, random perturbed weights through tools/convert_checkpoint.py")
    print(f"# eval: max|vitc - official| / max|official logit| (pass <= {TOL_FWD:g}); train: loss relative error "
          f"(<= {TOL_LOSS:g}), worst parameter gradient max|diff| / max|official| (<= {TOL_GRAD:g})")
    print("| model | official class | eval rel err | train loss rel err | worst gradient rel err (tensor) | result | "
          "s |")
    print("|---|---|---:|---:|---|---|---:|")
    for row in rows:
        print(row)
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
