"""Reference test of vitc's GroupMixFormer / Group-Mix Attention against the independent PyTorch model in
gmf_ref.py (written from shared/specs/spec-groupmixformer.md, not from the C code).

Checks (reference in float64 from the same float32 weights/inputs):
  counts  `vitc info --json` params (and BN buffer elements) of groupmixformer_{m,t,s,b,l} at 224 and the
          aliases groupmixformer_{miny,tiny,small,base,large}; the reference modules agree
  names   `vitc init` of groupmixformer_test and groupmixformer_m (--img-size 64 --num-classes 10): names and
          shapes equal the reference state_dict (BN running stats and num_batches_tracked included)
  fwd     random weights (every LN/BN affine and BN running stats randomised), eval logits,
          max|a-b| / max(1, max|b|) <= 1e-4: groupmixformer_m at 64 px / 10 classes, groupmixformer_test,
          groupmixformer_test at 96 px (same weights), vit_fmnist_tiny_gap --attn gma
  grad    `vitc grad` (train mode: BN batch statistics over the 3B stacked Q/K/V images): loss <= 1e-4
          relative, every parameter gradient max|a-b| / max|b| <= 1e-3, every gradient non-zero somewhere,
          except those that are analytically zero (a bias followed by a train-mode BatchNorm: conv_stem.proj1/2.bias,
          the last block's mlp.fc2.bias before norm4), which must be round-off only (<= 1e-6 of the largest
          gradient); groupmixformer_test, groupmixformer_m at 64 px, vit_fmnist_tiny_gap --attn gma
  sizes   a size that is not a multiple of 32 (200) is refused with a clear message; --attn gma on a host with a
          class token (vit_fmnist_tiny) is refused with a clear message
Run: /usr/bin/python3 tests/reference/test_gma.py      (needs ./vitc or $VITC)
"""
import time

import numpy as np
import torch
import torch.nn.functional as F

import gmf_ref
import st
from common import Report, have_vitc, info, scalar, scale_err, grad_err, tmpdir, vitc, vitc_ok

ALIASES = {"groupmixformer_m": "groupmixformer_miny", "groupmixformer_t": "groupmixformer_tiny",
           "groupmixformer_s": "groupmixformer_small", "groupmixformer_b": "groupmixformer_base",
           "groupmixformer_l": "groupmixformer_large"}
BUFFERS = {"groupmixformer_m": 6087, "groupmixformer_t": 9095, "groupmixformer_s": 12207,
           "groupmixformer_b": 22111, "groupmixformer_l": 35543}
TEST_CFG = ([20, 30, 40, 50], [1, 2, 1, 1], [2.0, 3.0, 2.0, 1.5])   # groupmixformer_test (64 px, 10 classes)
TOL_FWD, TOL_LOSS, TOL_GRAD = 1e-4, 1e-4, 1e-3


def test_counts(rep):
    for name, want in gmf_ref.PARAMS.items():
        for n in (name, ALIASES[name]):
            j = info(rep, n)
            if j is None:
                continue
            got = (j.get("params"), j.get("buffers"), j.get("img_size"), j.get("num_classes"))
            exp = (want, BUFFERS[name], 224, 1000)
            rep.check(f"info {n}", got == exp, f"(params, buffers, img, classes) = {got}, want {exp}")
        m = gmf_ref.build(name)
        nb = sum(b.numel() for b in m.buffers())
        rep.check(f"reference count {name}", (gmf_ref.count_params(m), nb) == (want, BUFFERS[name]))


def check_names(rep, tag, model, ref, args):
    init = vitc_ok(rep, f"init {tag}", "init", model, "-o", TMP / f"{tag}_init.safetensors", "--seed", 0, *args)
    if init is None:
        return
    got = {k: v.shape for k, v in st.load(TMP / f"{tag}_init.safetensors").items()}
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    rep.check(f"names {tag}", got == want,
              f"missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}, "
              f"shape diffs {[k for k in want if k in got and got[k] != want[k]][:5]}")


def forward(rep, tag, model, ref, w, x, args):
    xin, out = TMP / f"{tag}_x.safetensors", TMP / f"{tag}_y.safetensors"
    st.save(xin, {"input": x})
    if vitc_ok(rep, f"fwd {tag}", "forward", model, "--weights", w, "--input", xin, "--output", out, *args) is None:
        return
    y = st.load(out).get("logits")
    ref.eval()
    with torch.no_grad():
        r = ref(x.double())
    if y is None or y.shape != tuple(r.shape):
        rep.check(f"fwd {tag}", False, f"logits {None if y is None else y.shape}, want {tuple(r.shape)}")
        return
    e = scale_err(y, r)
    rep.check(f"fwd {tag}", e <= TOL_FWD, f"logits rel err {e:.2e} (tol {TOL_FWD:g}, max|ref| {r.abs().max():.2f})")


def grad(rep, tag, model, ref, w, x, labels, args):
    xin, out = TMP / f"{tag}_xl.safetensors", TMP / f"{tag}_g.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    if vitc_ok(rep, f"grad {tag}", "grad", model, "--weights", w, "--input", xin, "--output", out, *args) is None:
        return
    res = st.load(out)
    ref.train()
    ref.zero_grad()
    loss = F.cross_entropy(ref(x.double()), labels)
    loss.backward()
    ref_g = {k: p.grad for k, p in ref.named_parameters()}
    if "loss" in res:
        e = abs(scalar(res["loss"]) - loss.item()) / max(1.0, abs(loss.item()))
        rep.check(f"loss {tag}", e <= TOL_LOSS, f"vitc {scalar(res['loss']):.7f} vs ref {loss.item():.7f}, rel {e:.2e}")
    else:
        rep.check(f"loss {tag}", False, "no `loss` tensor in output")
    extra = sorted(k for k in res if k.startswith("grad/") and k[5:] not in ref_g)
    rep.check(f"grad names {tag}", not extra, f"unexpected tensors {extra[:5]}")
    worst, bad, zero, structural = (0.0, ""), 0, [], []
    gscale = max(float(r.abs().max()) for r in ref_g.values())
    for k, r in ref_g.items():
        a = res.get("grad/" + k)
        if a is None or a.shape != tuple(r.shape):
            bad += 1
            rep.check(f"grad {tag} {k}", False, "missing" if a is None else f"shape {a.shape}, want {tuple(r.shape)}")
            continue
        if float(r.abs().max()) <= 1e-12 * gscale:
            # Analytically zero (a bias followed by a train-mode BatchNorm, e.g. conv_stem.proj*.bias, the last
            # block's mlp.fc2.bias before norm4): vitc must give round-off only.
            structural.append(k)
            e = float(np.abs(a).max()) / gscale
            if e > 1e-6:
                bad += 1
                rep.check(f"grad {tag} {k}", False, f"reference gradient is 0 but vitc has max|g| {e:.2e}·max|grad|")
            continue
        e, idx, av, bv = grad_err(a, r)
        worst = max(worst, (e, k))
        if e > TOL_GRAD:
            bad += 1
            rep.check(f"grad {tag} {k}", False, f"rel err {e:.2e} at {idx}: vitc {av:.4e} vs ref {bv:.4e}")
        if not np.any(a != 0):
            zero.append(k)
    if not bad:
        rep.check(f"grads {tag}", True, f"{len(ref_g)} tensors, worst {worst[0]:.2e} in {worst[1]}; "
                  f"zero by construction (round-off only in vitc): {structural}")
    rep.check(f"grads non-zero {tag}", not zero, f"all-zero gradients: {zero[:8]}")


def features(rep, tag, model, ref, w, x, args):
    """`vitc forward --features` writes the four stage maps; each must match the reference backbone."""
    xin, out = TMP / f"{tag}_fx.safetensors", TMP / f"{tag}_f.safetensors"
    st.save(xin, {"input": x})
    if vitc_ok(rep, f"features {tag}", "forward", model, "--weights", w, "--input", xin, "--output", out,
               "--features", *args) is None:
        return
    got = st.load(out)
    ref.eval()
    with torch.no_grad():
        maps = ref.features(x.double())
    for i, r in enumerate(maps):
        y = got.get(f"features.{i}")
        ok = y is not None and y.shape == tuple(r.shape)
        e = scale_err(y, r) if ok else float("inf")
        rep.check(f"features.{i} {tag}", ok and e <= TOL_FWD,
                  f"shape {None if y is None else y.shape} want {tuple(r.shape)}, rel err {e:.2e}")


def run_model(rep, tag, model, ref, args, img, in_chans, B, seed, do_grad=True, extra_sizes=(), feats=False):
    check_names(rep, tag, model, ref, args)
    sd = gmf_ref.randomize(ref, seed)
    ref.load_state_dict(sd)
    ref.double()
    w = TMP / f"{tag}_w.safetensors"
    st.save(w, sd)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(B, in_chans, img, img, generator=g)
    forward(rep, tag, model, ref, w, x, args)
    if feats:
        features(rep, tag, model, ref, w, x, args)
    for s in extra_sizes:
        xs = torch.randn(B, in_chans, s, s, generator=g)
        forward(rep, f"{tag}@{s}", model, ref, w, xs, ["--img-size", s] + [a for a in args if a != "--img-size"])
    if do_grad:
        labels = torch.randint(0, 10, (B,), generator=g)
        grad(rep, tag, model, ref, w, x, labels, args)


def test_sizes(rep):
    p = vitc("info", "groupmixformer_m", "--img-size", 200)
    msg = (p.stderr or "").strip()
    rep.check("size 200 refused", p.returncode not in (0, None) and "multiple of 32" in msg, f"rc {p.returncode}: {msg}")
    p = vitc("info", "vit_fmnist_tiny", "--attn", "gma")
    msg = (p.stderr or "").strip()
    rep.check("gma with class token refused", p.returncode not in (0, None) and "class token" in msg,
              f"rc {p.returncode}: {msg}")
    j = info(rep, "groupmixformer_m") or {}
    rep.check("gmacs M@224", 1.30 <= j.get("gmacs", 0) <= 1.36, f"{j.get('gmacs')} GMACs (paper 1.4 GFLOPs)")


def main():
    global TMP
    rep = Report()
    t0 = time.time()
    if have_vitc(rep):
        TMP = tmpdir()
        test_counts(rep)
        test_sizes(rep)
        torch.manual_seed(0)
        run_model(rep, "test", "groupmixformer_test", gmf_ref.GroupMixFormer(*TEST_CFG, num_classes=10), [],
                  64, 3, 3, seed=10, extra_sizes=(96,), feats=True)
        run_model(rep, "m64", "groupmixformer_m", gmf_ref.build("groupmixformer_m", num_classes=10),
                  ["--img-size", 64, "--num-classes", 10], 64, 3, 2, seed=20)
        run_model(rep, "vit_gap_gma", "vit_fmnist_tiny_gap", gmf_ref.ViTGMA(28, 4, 80, 4, 160, 1, 10),
                  ["--attn", "gma"], 28, 1, 4, seed=30)
    print(f"# {time.time() - t0:.1f} s")
    rep.finish()


if __name__ == "__main__":
    main()
