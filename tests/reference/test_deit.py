"""Reference test of vitc's ViT/DeiT against the independent PyTorch model in vit_ref.py.

Checks (reference computed in float64 from the same float32 weights/inputs):
  info     `vitc info --json`: deit_tiny 5,717,416 and deit_small 22,050,664 params, 224 px, 1000 classes
  (a) deit_tiny_patch16_224, Python random weights (seed 0; N(0,.02), random LayerNorm affine),
      input 2x3x224x224: `vitc forward` logits, max|a-b| / max|b| <= 1e-4
  (b) vit_fmnist_tiny (architecture read from the shapes `vitc init` writes; heads from
      --heads, the HEADS table, `vitc info --json` num_heads, else D // 32), Python random
      weights, batch 4 with labels: forward logits <= 1e-4; `vitc grad` loss <= 1e-4 relative,
      every grad/<param> within 1e-4 relative as a whole (‖a-b‖ / ‖b‖) and 1e-3 at its worst element
      (max|a-b| / max|b|); each failing tensor reported
  (c) `vitc grad --steps 10 --lr 1e-3 --weight-decay 0.05`: losses before each step vs
      torch.optim.AdamW (no decay for dim<=1 params, cls_token, pos_embed), each <= 1e-4 relative
      (max(1, |ref|)); (c2) the same with --steps 5 --weight-decay 10, which exposes the grouping
  (d) every gradient vitc returns is non-zero somewhere
  (a2, b2) sizes that are not a multiple of the patch (deit_tiny at 239 px, vit_fmnist_tiny at 31 px with the same
      weights): the patch conv drops the last pixels as timm's does; forward, and (b2) loss and gradients as (b)
  (e) tools/convert_checkpoint.py: a torch.save'd DeiT-Ti checkpoint ({'model': ..., 'epoch'}, 'module.' prefixes,
      an extra 'head_dist.*') converted with --drop head_dist gives the (a) logits; without --drop vitc names
      the extra tensor; one that also pickles its training args (an argparse.Namespace) converts as it is
  (f) the other named ViTs (DeiT-T/S/B shrunk to 64 px, 10 classes and 1-2 blocks; vit_fmnist_small, _p7 and _tiny_gap
      whole, the last with no class token): names/shapes, forward, loss and gradients as (b)
Run: /usr/bin/python3 tests/reference/test_deit.py [--heads N]     (needs ./vitc or $VITC)
"""
import argparse

import numpy as np
import torch

import st
import vit_ref
from common import Report, compare_grads, have_vitc, info, scalar, scale_err, tmpdir, vitc_ok

FMNIST = "vit_fmnist_tiny"
HEADS = {FMNIST: None}     # heads of vit_fmnist_tiny: None = ask `vitc info --json`, else D // 32
PARAMS = {"deit_tiny_patch16_224": 5_717_416, "deit_small_patch16_224": 22_050_664}
TOL_FWD, TOL_LOSS, TOL_GRAD_NORM, TOL_GRAD = 1e-4, 1e-4, 1e-4, 1e-3


def fmt(v):
    return "[" + " ".join(f"{float(a):.5f}" for a in v) + "]"


def test_info(rep):
    for name, want in PARAMS.items():
        j = info(rep, name)
        if j is not None:
            got = (j.get("params"), j.get("img_size"), j.get("num_classes"))
            rep.check(f"info {name}", got == (want, 224, 1000), f"(params, img_size, num_classes) = {got}, want {(want, 224, 1000)}")


def forward(rep, tag, model, w, x, tmp, sd, heads, args=()):
    """Write x, run `vitc forward` (with args), compare logits with the float64 reference."""
    xin, out = tmp / f"{model}_x.safetensors", tmp / f"{model}_y.safetensors"
    st.save(xin, {"input": x})
    if vitc_ok(rep, tag, "forward", model, "--weights", w, "--input", xin, "--output", out, *args) is None:
        return
    y = st.load(out).get("logits")
    with torch.no_grad():
        ref = vit_ref.build(sd, heads)(x.double())
    if y is None or y.shape != tuple(ref.shape):
        rep.check(tag, False, f"logits {None if y is None else y.shape}, want {tuple(ref.shape)}")
        return
    e = scale_err(y, ref)
    rep.check(tag, e <= TOL_FWD, f"logits rel err {e:.2e} (tol {TOL_FWD:g})")


def test_deit_tiny(rep, tmp):
    name = "deit_tiny_patch16_224"
    sd = vit_ref.random_state_dict(vit_ref.model_config(name), seed=0)
    st.save(tmp / "deit_w.safetensors", sd)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    forward(rep, "(a) deit_tiny forward", name, tmp / "deit_w.safetensors", x, tmp, sd,
            vit_ref.MODELS[name]["num_heads"])
    # 239 px: the stride-16 patch conv drops the last 15 rows and columns, as timm's does; same 14x14 grid and weights
    x = torch.randn(2, 3, 239, 239, generator=torch.Generator().manual_seed(3))
    forward(rep, "(a2) deit_tiny forward at 239 px", name, tmp / "deit_w.safetensors", x, tmp, sd,
            vit_ref.MODELS[name]["num_heads"], ("--img-size", 239))


def test_convert(rep, tmp):
    import subprocess
    import sys
    from common import ROOT, vitc
    name = "deit_tiny_patch16_224"
    sd = vit_ref.random_state_dict(vit_ref.model_config(name), seed=0)
    ckpt = {"model": {"module." + k: torch.as_tensor(v) for k, v in sd.items()}, "epoch": 3}
    ckpt["model"]["module.head_dist.weight"] = torch.zeros(1000, 192)
    torch.save(ckpt, tmp / "ckpt.pth")
    ckpt["args"] = argparse.Namespace(model=name, lr=5e-4)  # as DeiT's main.py saves them: read as an inert record
    torch.save(ckpt, tmp / "ckpt_args.pth")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "convert_checkpoint.py"), str(tmp / "ckpt_args.pth"),
                        str(tmp / "args.safetensors"), "--drop", "head_dist"], capture_output=True, text=True)
    got = st.load(tmp / "args.safetensors") if p.returncode == 0 else {}
    rep.check("(e) a checkpoint with its training args (argparse.Namespace) converts without --trust-pickle",
              p.returncode == 0 and set(got) == set(sd) and all(np.array_equal(got[k], np.asarray(sd[k])) for k in sd),
              p.stderr.strip()[-300:])
    for tag, extra in (("converted", ["--drop", "head_dist"]), ("unconverted", [])):
        out = tmp / f"{tag}.safetensors"
        p = subprocess.run([sys.executable, str(ROOT / "tools" / "convert_checkpoint.py"), str(tmp / "ckpt.pth"),
                            str(out)] + extra, capture_output=True, text=True)
        if not rep.check(f"(e) convert_checkpoint {tag}", p.returncode == 0, p.stderr.strip()[-300:]):
            return
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    forward(rep, "(e) deit_tiny forward from a converted checkpoint", name, tmp / "converted.safetensors", x, tmp, sd,
            vit_ref.MODELS[name]["num_heads"])
    p = vitc("forward", name, "--weights", tmp / "unconverted.safetensors", "--input", tmp / f"{name}_x.safetensors",
             "--output", tmp / "bad.safetensors")
    rep.check("(e) extra checkpoint tensor named", p.returncode == 1 and "head_dist.weight" in p.stderr,
              p.stderr.strip()[-200:])


def grads(rep, tag, w, x, labels, xin, tmp, sd, heads, args=(), model=FMNIST):
    """(b) `vitc grad` loss and gradients against the reference, (d) every gradient non-zero somewhere."""
    out = tmp / "fm_g.safetensors"
    if not vitc_ok(rep, f"{tag} grad", "grad", model, "--weights", w, "--input", xin, "--output", out, *args):
        return
    res = st.load(out)
    ref_loss, ref_g = vit_ref.loss_and_grads(vit_ref.build(sd, heads), x.double(), labels)
    if "loss" in res:
        e = abs(scalar(res["loss"]) - ref_loss) / max(1.0, abs(ref_loss))
        rep.check(f"{tag} loss", e <= TOL_LOSS,
                  f"vitc {scalar(res['loss']):.7f} vs ref {ref_loss:.7f}, rel {e:.2e}")
    else:
        rep.check(f"{tag} loss", False, "no `loss` tensor in output")
    zero, _ = compare_grads(rep, f"{tag}", res, ref_g, TOL_GRAD, TOL_GRAD_NORM)
    rep.check(f"{tag} (d) grads non-zero", not zero, f"all-zero gradients: {zero}")


def test_fmnist(rep, tmp, heads_arg):
    j = info(rep, FMNIST) or {}
    init = tmp / "fm_init.safetensors"
    if vitc_ok(rep, f"init {FMNIST}", "init", FMNIST, "-o", init, "--seed", 0) is None:
        return
    sd0 = st.load(init)
    D = sd0["cls_token"].shape[-1]
    heads = heads_arg or HEADS.get(FMNIST) or j.get("num_heads") or j.get("heads") or D // 32
    cfg = vit_ref.config_from_state_dict(sd0, heads)
    print(f"# {FMNIST}: {cfg}")
    want = {k: tuple(v.shape) for k, v in vit_ref.ViT(cfg).state_dict().items()}
    got = {k: v.shape for k, v in sd0.items()}
    rep.check(f"init {FMNIST} names/shapes", got == want,
              f"missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}, "
              f"shape diffs {[k for k in want if k in got and got[k] != want[k]]}")
    n = sum(int(np.prod(s)) for s in want.values())
    diff = {k: (j.get(k), v) for k, v in dict(cfg, params=n).items() if k in j and j[k] != v}
    rep.check(f"info {FMNIST}", "params" in j and not diff, f"info {j} vs weights {cfg}, {n} params: differ {diff}")

    sd = vit_ref.random_state_dict(cfg, seed=1, std="fan_in")   # O(1) activations
    w = tmp / "fm_w.safetensors"
    st.save(w, sd)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, cfg["in_chans"], cfg["img_size"], cfg["img_size"], generator=g)
    labels = torch.randint(0, cfg["num_classes"], (4,), generator=g)
    forward(rep, "(b) fmnist forward", FMNIST, w, x, tmp, sd, heads)
    xin = tmp / "fm_xl.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    grads(rep, "(b)", w, x, labels, xin, tmp, sd, heads)
    # (b2) at 31 px: the stride-4 patch conv drops the last 3 rows and columns (timm's rule), forward and backward
    p = cfg["patch_size"]
    s = cfg["img_size"] + p - 1
    x2 = torch.randn(4, cfg["in_chans"], s, s, generator=g)
    xin2 = tmp / "fm_xl2.safetensors"
    st.save(xin2, {"input": x2, "labels": labels})
    grads(rep, f"(b2) {s} px", w, x2, labels, xin2, tmp, sd, heads, ("--img-size", s))
    # (b3) at 28x44 (timm's (H, W) img_size: pos_embed of 7x11 patch rows), forward and backward; the token order is
    # row-major over the 7x11 grid, so a transposed grid would differ
    hw = (28, 44)
    cfg3 = dict(cfg, num_patches=(hw[0] // p) * (hw[1] // p))
    sd3 = vit_ref.random_state_dict(cfg3, seed=5, std="fan_in")
    w3 = tmp / "fm_w3.safetensors"
    st.save(w3, sd3)
    x3 = torch.randn(4, cfg["in_chans"], *hw, generator=g)
    xin3 = tmp / "fm_xl3.safetensors"
    st.save(xin3, {"input": x3, "labels": labels})
    size = ("--img-size", f"{hw[0]}x{hw[1]}")
    forward(rep, "(b3) fmnist forward at 28x44", FMNIST, w3, x3, tmp, sd3, heads, size)
    grads(rep, "(b3) 28x44", w3, x3, labels, xin3, tmp, sd3, heads, size)
    # (c) 10 AdamW steps on the same batch (c2: heavy decay, so a wrong no-decay grouping shows)
    for tag, steps, lr, wd in [("(c) adamw", 10, "1e-3", "0.05"), ("(c2) adamw decay groups", 5, "1e-3", "10")]:
        out = tmp / "fm_adamw.safetensors"
        if vitc_ok(rep, tag, "grad", FMNIST, "--weights", w, "--input", xin, "--output", out,
                   "--steps", steps, "--lr", lr, "--weight-decay", wd) is None:
            continue
        losses = st.load(out).get("losses")
        ref, _ = vit_ref.adamw_run(vit_ref.build(sd, heads), x.double(), labels, steps, float(lr), float(wd))
        if losses is None or losses.shape != (steps,):
            rep.check(tag, False, f"`losses` {None if losses is None else losses.shape}, want ({steps},)")
            continue
        e = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(losses.tolist(), ref))
        rep.check(tag, e <= TOL_LOSS, f"losses max rel err {e:.2e}; vitc {fmt(losses)} vs ref {fmt(ref)}")


# (f) the other named ViTs, forward and gradients: DeiT-T/S/B shrunk (64 px, 10 classes, depth 1 or 2), the
# Fashion-MNIST ViTs whole (vit_fmnist_tiny_gap: no class token, the mean of the normed tokens)
NAMED = [("deit_tiny_patch16_224", ("--img-size", 64, "--num-classes", 10, "--depths", 2)),
         ("deit_small_patch16_224", ("--img-size", 64, "--num-classes", 10, "--depths", 1)),
         ("deit_base_patch16_224", ("--img-size", 64, "--num-classes", 10, "--depths", 1)),
         ("vit_fmnist_small", ()), ("vit_fmnist_p7", ()), ("vit_fmnist_tiny_gap", ())]


def test_named(rep, tmp):
    for k, (name, args) in enumerate(NAMED):
        j = info(rep, name) or {}
        init = tmp / "named_init.safetensors"
        if vitc_ok(rep, f"(f) init {name}", "init", name, "-o", init, *args) is None:
            continue
        heads = vit_ref.MODELS[name]["num_heads"] if name in vit_ref.MODELS else j.get("num_heads")
        cfg = vit_ref.config_from_state_dict(st.load(init), heads)
        sd = vit_ref.random_state_dict(cfg, seed=20 + k, std="fan_in")
        want = {kk: tuple(v.shape) for kk, v in sd.items()}
        got = {kk: v.shape for kk, v in st.load(init).items()}
        rep.check(f"(f) {name} names/shapes", got == want, f"differ: {sorted(set(got) ^ set(want))[:6]}")
        w = tmp / "named_w.safetensors"
        st.save(w, sd)
        g = torch.Generator().manual_seed(30 + k)
        x = torch.randn(2, cfg["in_chans"], cfg["img_size"], cfg["img_size"], generator=g)
        labels = torch.randint(0, cfg["num_classes"], (2,), generator=g)
        forward(rep, f"(f) {name} forward", name, w, x, tmp, sd, heads, args)
        xin = tmp / "named_xl.safetensors"
        st.save(xin, {"input": x, "labels": labels})
        grads(rep, f"(f) {name}", w, x, labels, xin, tmp, sd, heads, args, model=name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=None, help=f"attention heads of {FMNIST}")
    args = ap.parse_args()
    rep = Report()
    rep.check("vit_ref param counts", all(vit_ref.count_params(vit_ref.model_config(k)) == v for k, v in PARAMS.items()))
    if have_vitc(rep):
        tmp = tmpdir()
        test_info(rep)
        test_deit_tiny(rep, tmp)
        test_convert(rep, tmp)
        test_fmnist(rep, tmp, args.heads)
        test_named(rep, tmp)
    rep.finish()


if __name__ == "__main__":
    main()
