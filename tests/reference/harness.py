"""The checks every reference test runs against a PyTorch model: names/shapes of `vitc init`, `vitc forward`
logits, `vitc grad` loss and gradients, `vitc forward --features` stage maps, and parameter counts.

A test builds the reference module (float64, official state_dict names), picks random float32 weights `sd`, and
calls `run(...)` (or the single checks).  Tolerances: forward max|a-b| / max|b| <= 1e-4; loss <= 1e-4
relative; every gradient max|a-b| / max|b| <= 1e-3 and non-zero somewhere, except gradients that are zero by
construction in the reference (a bias followed by a train-mode BatchNorm, a constant cancelled by a softmax, ...):
vitc must then give round-off only (<= zero_tol, 1e-6 unless told, of the largest gradient), and `zero_ok` may
name gradients that are zero in both for a structural reason.
"""
import fnmatch

import torch
import torch.nn.functional as F

import st
from common import compare_grads, info, scalar, scale_err, vitc_ok

TOL_FWD, TOL_LOSS, TOL_GRAD = 1e-4, 1e-4, 1e-3


def check_names(rep, tmp, tag, model, ref, args):
    """`vitc init` writes exactly the reference's state_dict names and shapes (buffers included)."""
    path = tmp / f"{tag}_init.safetensors"
    if vitc_ok(rep, f"init {tag}", "init", model, "-o", path, "--seed", 0, *args) is None:
        return None
    got = {k: v.shape for k, v in st.load(path).items()}
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    rep.check(f"names {tag}", got == want,
              f"missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}, "
              f"shape diffs {[(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:5]}")
    return got


def forward(rep, tmp, tag, model, ref, w, x, args, tol=TOL_FWD):
    """`vitc forward` logits against the reference in eval mode."""
    xin, out = tmp / f"{tag}_x.safetensors", tmp / f"{tag}_y.safetensors"
    st.save(xin, {"input": x})
    if vitc_ok(rep, f"fwd {tag}", "forward", model, "--weights", w, "--input", xin, "--output", out, *args) is None:
        return None
    y = st.load(out).get("logits")
    ref.eval()
    with torch.no_grad():
        r = ref(x.double())
    if y is None or y.shape != tuple(r.shape):
        rep.check(f"fwd {tag}", False, f"logits {None if y is None else y.shape}, want {tuple(r.shape)}")
        return None
    e = scale_err(y, r)
    rep.check(f"fwd {tag}", e <= tol, f"logits rel err {e:.2e} (tol {tol:g}, max|ref| {r.abs().max():.2f})")
    return e


def grad(rep, tmp, tag, model, ref, w, x, labels, args, zero_ok=(), tol=TOL_GRAD, zero_tol=1e-6, allowance=None):
    """`vitc grad` (train mode) loss and every parameter gradient against the reference's autograd.
    allowance(ref, x, labels) -> ({name: per-element bound}, note): differences up to the bound are not counted as
    error (e.g. ReLU inputs within float32 round-off of zero, whose derivative may flip); run in train mode before the
    BatchNorm running statistics are restored."""
    xin, out = tmp / f"{tag}_xl.safetensors", tmp / f"{tag}_g.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    if vitc_ok(rep, f"grad {tag}", "grad", model, "--weights", w, "--input", xin, "--output", out, *args) is None:
        return
    res = st.load(out)
    saved = {k: v.clone() for k, v in ref.state_dict().items()}  # train mode updates BatchNorm running stats
    ref.train()
    ref.zero_grad()
    loss = F.cross_entropy(ref(x.double()), labels)
    loss.backward()
    ref_g = {k: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for k, p in ref.named_parameters()}
    slack, slack_note = allowance(ref, x, labels) if allowance else ({}, "")
    ref.load_state_dict(saved)
    if "loss" in res:
        e = abs(scalar(res["loss"]) - loss.item()) / max(1.0, abs(loss.item()))
        rep.check(f"loss {tag}", e <= TOL_LOSS, f"vitc {scalar(res['loss']):.7f} vs ref {loss.item():.7f}, rel {e:.2e}")
    else:
        rep.check(f"loss {tag}", False, "no `loss` tensor in output")
    zero, structural = compare_grads(rep, tag, res, ref_g, tol, slack=slack, zero_tol=zero_tol, note=slack_note)
    zero = [k for k in zero if k not in structural and not any(fnmatch.fnmatch(k, p) for p in zero_ok)]
    rep.check(f"grads non-zero {tag}", not zero, f"all-zero gradients: {zero[:8]}")


def features(rep, tmp, tag, model, ref_maps, w, x, args, tol=TOL_FWD):
    """`vitc forward --features` stage maps `features.{i}` against ref_maps (a list of (B, C, H, W) tensors)."""
    xin, out = tmp / f"{tag}_fx.safetensors", tmp / f"{tag}_f.safetensors"
    st.save(xin, {"input": x})
    if vitc_ok(rep, f"features {tag}", "forward", model, "--weights", w, "--input", xin, "--output", out,
               "--features", *args) is None:
        return
    got = st.load(out)
    rep.check(f"features count {tag}", sum(k.startswith("features.") for k in got) == len(ref_maps),
              f"{sorted(got)} vs {len(ref_maps)} maps")
    for i, r in enumerate(ref_maps):
        y = got.get(f"features.{i}")
        ok = y is not None and y.shape == tuple(r.shape)
        e = scale_err(y, r) if ok else float("inf")
        rep.check(f"features.{i} {tag}", ok and e <= tol,
                  f"shape {None if y is None else y.shape} want {tuple(r.shape)}, rel err {e:.2e}")


def counts(rep, name, params, args=(), gmacs=None, rel=0.01, buffers=None):
    """`vitc info --json`: exact parameter count (and buffers), GMACs within rel of the given figure."""
    j = info(rep, name, *args)
    if j is None:
        return None
    ok = j.get("params") == params and (buffers is None or j.get("buffers") == buffers)
    detail = f"params {j.get('params')} want {params}"
    if buffers is not None:
        detail += f", buffers {j.get('buffers')} want {buffers}"
    if gmacs is not None:
        ok = ok and abs(j.get("gmacs", 0) - gmacs) <= rel * gmacs
        detail += f", {j.get('gmacs'):.3f} GMACs vs {gmacs} (within {rel:.0%})"
    rep.check(f"info {name} {' '.join(map(str, args))}".strip(), ok, detail)
    return j


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def pretrained_cfg(rep, name, j, crop_pct, drop_path, resize="shorter side", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                   interpolation="bicubic"):
    """A named model's recipe fields in `vitc info --json` (j): the eval transform (`vitc predict`: resize, crop_pct,
    interpolation, normalisation) and the drop-path rate training starts from, as the official code sets them.
    crop_pct may be a callable (the official eval transform as a resize size: crop_pct -> ok), or None (not checked:
    no official figure); drop_path None: not checked."""
    if j is None:
        return
    pre = j.get("pretrained", {})
    got_crop, got_dp = pre.get("crop_pct"), j.get("drop_path")
    crop_ok = crop_pct is None or (got_crop is not None and (crop_pct(got_crop) if callable(crop_pct) else
                                                             abs(got_crop - crop_pct) < 1e-6))
    dp_ok = drop_path is None or (got_dp is not None and abs(got_dp - drop_path) < 1e-6)
    ok = (crop_ok and dp_ok and pre.get("resize") == resize and
          pre.get("interpolation") == interpolation and
          all(abs(a - b) < 1e-6 for a, b in zip(pre.get("mean", ()), mean)) and len(pre.get("mean", ())) == 3 and
          all(abs(a - b) < 1e-6 for a, b in zip(pre.get("std", ()), std)) and len(pre.get("std", ())) == 3)
    rep.check(f"cfg {name}", ok, f"drop_path {got_dp} (want {drop_path}), eval transform {pre}")


def run(rep, tmp, tag, model, ref, sd, args, img, in_chans=3, B=2, classes=10, seed=0, do_grad=True, zero_ok=(),
        maps=None):
    """names, then forward (and grad, and the stage maps when `maps` is a function x -> list) with weights sd."""
    check_names(rep, tmp, tag, model, ref, args)
    ref.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in sd.items()})
    ref.double()
    w = tmp / f"{tag}_w.safetensors"
    st.save(w, sd)
    g = torch.Generator().manual_seed(seed + 1)
    h, wd = (img, img) if isinstance(img, int) else img
    x = torch.randn(B, in_chans, h, wd, generator=g)
    forward(rep, tmp, tag, model, ref, w, x, args)
    if maps is not None:
        ref.eval()
        with torch.no_grad():
            features(rep, tmp, tag, model, maps(x.double()), w, x, args)
    if do_grad:
        labels = torch.randint(0, classes, (B,), generator=g)
        grad(rep, tmp, tag, model, ref, w, x, labels, args, zero_ok=zero_ok)
    return w
