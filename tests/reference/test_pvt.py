"""Reference test of vitc's PVT family (PVT v1, FLatten-PVT, PVTv2, FLatten-PVTv2, PVTv2-b1 + hMHSA + cFFN) against
the independent PyTorch models of pvt_ref.py (written from the official code and the specs, not from the C code).

Checks (reference in float64 from the same float32 weights and inputs; harness.py's tolerances):
  counts    `vitc info --json` of the 9 named models at 224: exact parameters, GMACs within 1% of pvt_ref.GMACS,
            drop-path rate and eval transform (FLatten's both-sides resize, the official datasets.py's crop_pct);
            the hMHSA + cFFN training form (--train-form): parameters and BatchNorm buffer elements
  reduced   every named model at widths 16/24/32/48, depths 1/2/1/2, 64 px, 7 classes (pvt_ref's REDUCED): names
            and shapes of `vitc init`, eval logits (<= 1e-4), `vitc grad` loss and every gradient (<= 1e-3;
            zero by construction and round-off only in vitc: FLatten-PVT's unused `norm`, the hMHSA biases
            attn.ihh/chh.bias, and in the cFFN training form U's BatchNorm biases), the cFFN training form with
            train-mode BatchNorm; `--features` stage maps of pvt_tiny (stage 4 without the class token), flatten_pvt_tiny,
            pvt_v2_b1 (after norm{i}) and the hMHSA model
  sizes     odd sizes the official code accepts: pvt_tiny at 72 (floor grids, SR convs dropping rows), flatten_pvt_tiny
            at 40, pvt_v2_b1 and the hMHSA model at 61 (ceil grids), with gradients; non-square PVTv2 inputs (61x37
            with gradients, 29x64, 32x96, the size taken from the input); PVT v1 built at 64 run on 96x80 (with
            gradients), 72x72, 48x160 (pos_embed{i} bilinearly resized as the official
            _get_pos_embed; 128 refused as the official stage-1-count test makes it fail); refused sizes
            (PVTv2 < 29, PVT v1 < 32, FLatten-PVTv2 not a multiple of 32, FLatten with spatial reduction, an input
            that does not match the built size) give clear errors; `vitc forward` takes PVTv2's size from its input
  attn      per-stage attention from the config: flatten_pvt_v2_b1 --attn mhsa (global softmax attention, sr 1)
  deploy    `vitc deploy` of pvt_v2_b1_hmhsa_cffn (reduced): every tensor equals pvt_ref.deploy within 1e-5, and
            the deployed model's eval logits equal the training form's (and the reference's) within 1e-5
  full      pvt_tiny at 224 / 1000 classes: names and eval logits
Run: /usr/bin/python3 tests/reference/test_pvt.py      (needs ./vitc or $VITC)
"""
import time

import torch
from torch import nn

import harness
import pvt_ref
import st
from common import Report, grad_err, have_vitc, info, scale_err, tmpdir, vitc, vitc_ok

torch.set_num_threads(1)   # small float64 models: one thread is fastest on the shared 2-core host

DIMS, DEPTHS, CLASSES = [16, 24, 32, 48], [1, 2, 1, 2], 7
HEADS = [1, 2, 2, 3]            # the heads of the attention (--heads)
HEADS_HM = [1, 1, 2, 2]         # hMHSA host heads (--heads), doubled by the model to pvt_ref's [2, 2, 4, 4]
TOL_DEPLOY = 1e-5


def lst(v):
    return ",".join(map(str, v))


def is_hm(name):
    return "hmhsa" in name


def vargs(name, img=64):
    """vitc's options for the reduced configuration of `name` at img px."""
    return ["--img-size", img, "--num-classes", CLASSES, "--dims", lst(DIMS), "--depths", lst(DEPTHS),
            "--heads", lst(HEADS_HM if is_hm(name) else HEADS)]


def ref_model(name, img=64, train_form=False, cfg_edit=None):
    heads = [2 * h for h in HEADS_HM] if is_hm(name) else HEADS
    if cfg_edit is None:
        return pvt_ref.build(name, img_size=img, num_classes=CLASSES, dims=DIMS, depths=DEPTHS, heads=heads,
                             train_form=train_form)
    cfg = pvt_ref.config(name, img_size=img, num_classes=CLASSES, dims=DIMS, depths=DEPTHS, heads=heads)
    cfg_edit(cfg)
    return (pvt_ref.PVTv1 if cfg["family"] == "v1" else pvt_ref.PVTv2)(cfg, train_form)


def ref_maps(m):
    """The stage maps (B, C, H, W) of a reference model at its built size: the stage outputs (PVTv2 after norm{i}),
    PVT v1's stage 4 without the class token."""
    def f(x):
        cfg, B, out = m.cfg, x.shape[0], []
        v1, cls = cfg["family"] == "v1", cfg["family"] == "v1" and cfg["cls_token"]
        for i in range(4):
            x, H, W = getattr(m, f"patch_embed{i + 1}")(x)
            if cls and i == 3:
                x = torch.cat([m.cls_token.expand(B, -1, -1), x], dim=1)
            if v1:
                x = x + getattr(m, f"pos_embed{i + 1}")      # built size: the official resize is the identity
            for blk in getattr(m, f"block{i + 1}"):
                x = blk(x, H, W)
            if not v1:
                x = getattr(m, f"norm{i + 1}")(x)
            t = x[:, 1:] if cls and i == 3 else x
            out.append(t.reshape(B, H, W, -1).permute(0, 3, 1, 2))
            x = out[-1]
        return out
    return f


def test_counts(rep):
    for name, want in pvt_ref.PARAMS.items():
        j = harness.counts(rep, name, want, gmacs=pvt_ref.GMACS[name])
        # the papers' count (`params_linear_conv_weights`: every Linear and Conv2d weight, the spatial-reduction convs
        # and depthwise convs included) against the reference model's modules
        saved = nn.Linear.reset_parameters, nn.Conv2d.reset_parameters
        nn.Linear.reset_parameters = nn.Conv2d.reset_parameters = lambda self: None  # counting only: no init
        try:
            m = pvt_ref.build(name)
        finally:
            nn.Linear.reset_parameters, nn.Conv2d.reset_parameters = saved
        lc = sum(mod.weight.numel() for mod in m.modules() if isinstance(mod, (nn.Linear, nn.Conv2d)))
        del m
        rep.check(f"linear+conv weights {name}", j is not None and j.get("params_linear_conv_weights") == lc,
                  f"{(j or {}).get('params_linear_conv_weights')} vs the reference's {lc}")
        # drop-path: pvt_ref.MODELS; eval transform: FLatten's data/build.py (both sides to 256, crop 224); PVT v1
        # and v2 (the hMHSA + cFFN variant its host's): the official repo's datasets.py (DeiT's: shorter side to
        # int(256 / 224 · S), bicubic, centre crop S; timm's pvt_v2 cfg says crop 0.9)
        flat = name.startswith("flatten")
        harness.pretrained_cfg(rep, name, j, 0.875,
                               pvt_ref.MODELS[name]["drop_path_rate"], resize="both sides" if flat else "shorter side")
    for name, want in pvt_ref.PARAMS_TRAIN.items():
        harness.counts(rep, name, want, args=["--train-form"], buffers=pvt_ref.BUFFERS_TRAIN[name])
        j = info(rep, name) or {}
        rep.check(f"info {name} deployed buffers", j.get("buffers") == 0, f"{j.get('buffers')} buffer elements")


def run_reduced(rep, name, seed, img=64, feats=False, do_grad=True, train_form=False, tag=None, cfg_edit=None,
                extra=(), sd_edit=None):
    tag = tag or f"{name}{'_train' if train_form else ''}@{img}"
    ref = ref_model(name, img, train_form, cfg_edit)
    sd = pvt_ref.randomize(ref, seed)
    if sd_edit:
        sd_edit(sd)
    args = vargs(name, img) + list(extra)
    if not train_form:
        return harness.run(rep, TMP, tag, name, ref, sd, args, img, 3, B=2, classes=CLASSES, seed=seed,
                           do_grad=do_grad, maps=ref_maps(ref) if feats else None)
    # the training form: init and forward take --train-form; grad always runs the training form
    w = harness.run(rep, TMP, tag, name, ref, sd, args + ["--train-form"], img, 3, B=2, classes=CLASSES, seed=seed,
                    do_grad=False)
    g = torch.Generator().manual_seed(seed + 2)
    x, labels = torch.randn(2, 3, img, img, generator=g), torch.randint(0, CLASSES, (2,), generator=g)
    harness.grad(rep, TMP, tag, name, ref, w, x, labels, args)
    return w


def test_reduced(rep):
    feats = {"pvt_tiny", "flatten_pvt_tiny", "pvt_v2_b1", "pvt_v2_b1_hmhsa_cffn"}
    for k, name in enumerate(pvt_ref.MODELS):
        # the hMHSA + cFFN model: gradients in the training form (train-mode BatchNorm), test_deploy the rest
        run_reduced(rep, name, 10 + k, feats=name in feats, do_grad=not is_hm(name))
    run_reduced(rep, "pvt_v2_b1_hmhsa_cffn", 30, train_form=True)
    # the LayerNorms after the spatial-reduction conv and the patch embeddings see inputs of variance ~1e-6 when those
    # convs are scaled by 1e-3: their eps (1e-5 in both families, where PVT v1's blocks use 1e-6) then decides the
    # output, which random weights of unit scale leave within the tolerance
    def small_convs(sd):
        for k in sd:
            if (".attn.sr." in k or (k.startswith("patch_embed") and ".proj." in k)) and sd[k].is_floating_point():
                sd[k] = sd[k] * 1e-3
    for k, name in enumerate(("pvt_tiny", "pvt_v2_b1")):
        run_reduced(rep, name, 40 + k, do_grad=False, tag=f"{name}@64 with sr and patch-embed convs ×1e-3",
                    sd_edit=small_convs)


def test_sizes(rep):
    run_reduced(rep, "pvt_tiny", 40, img=72)
    run_reduced(rep, "flatten_pvt_tiny", 41, img=40, do_grad=False)
    run_reduced(rep, "pvt_v2_b1", 42, img=61)
    run_reduced(rep, "pvt_v2_b1_hmhsa_cffn", 43, img=61, train_form=True)
    # the per-stage attention comes from the config: FLatten-PVTv2's host with S stages, which take sr_ratios
    # (8, 4, 2, 1) as flatten_pvt.py builds them, not la_sr_ratios' 1; one stage retyped keeps the others' 1
    run_reduced(rep, "flatten_pvt_v2_b1", 44, tag="flatten_pvt_v2_b1--attn-mhsa", extra=["--attn", "mhsa"],
                cfg_edit=lambda c: c.update(attn=["sra"] * 4, sr_ratios=[8, 4, 2, 1]))
    run_reduced(rep, "flatten_pvt_tiny", 45, tag="flatten_pvt_tiny--attn-mhsa,flatten,flatten,flatten",
                extra=["--attn", "mhsa,flatten,flatten,flatten"], do_grad=False,
                cfg_edit=lambda c: c.update(attn=["sra"] + ["flatten"] * 3, sr_ratios=[8, 1, 1, 1]))
    refused = [("pvt_v2_b1", ["--img-size", 28], "smaller than its spatial-reduction ratio 8"),
               ("pvt_v2_b1_hmhsa_cffn", ["--img-size", 28], "the smallest size it accepts is 29"),
               ("pvt_tiny", ["--img-size", 31], "the smallest size it accepts is 32"),
               ("flatten_pvt_v2_b1", ["--img-size", 48], "multiples of 32"),
               ("pvt_tiny", ["--attn", "flatten"], "spatial reduction (sr_ratio 8) is not supported"),
               ("pvt_v2_b1", ["--attn", "gma"], "gma"),
               ("pvt_v2_b1", ["--dims", "64,128,320,500"], "not divisible by 8 heads")]
    for model, args, want in refused:
        p = vitc("info", model, *args)
        msg = (p.stderr or "").strip()
        rep.check(f"refused {model} {' '.join(map(str, args))}", p.returncode not in (0, None) and want in msg
                  and "Segmentation" not in msg, f"rc {p.returncode}: {msg}")
    # an input that is not the built size on FLatten-PVT, whose positional encodings fix it (PVT v1 resizes its
    # pos_embed{i}: test_nonsquare)
    x = TMP / "x72.safetensors"
    st.save(x, {"input": torch.zeros(1, 3, 72, 72)})
    p = vitc("forward", "flatten_pvt_tiny", *vargs("flatten_pvt_tiny"), "--weights",
             TMP / "flatten_pvt_tiny@64_w.safetensors", "--input", x, "--output", TMP / "y.safetensors")
    msg = (p.stderr or "").strip()
    rep.check("forward flatten_pvt_tiny@64 on a 72 px input refused", p.returncode not in (0, None) and "72" in msg
              and "--img-size" in msg, f"rc {p.returncode}: {msg}")
    # PVTv2's weights fit any size: `vitc forward` takes it from a square input (72 px on weights made at 64), the
    # logits of `--img-size 72` (whose sizes the reduced and odd-size checks hold against the reference)
    x = TMP / "x72v2.safetensors"
    st.save(x, {"input": torch.randn(2, 3, 72, 72, generator=torch.Generator().manual_seed(9))})
    runs = []
    for extra in ([], ["--img-size", 72]):
        y = TMP / f"y72v2_{len(extra)}.safetensors"
        p = vitc("forward", "pvt_v2_b1", *vargs("pvt_v2_b1")[2:], *extra, "--weights",
                 TMP / "pvt_v2_b1@64_w.safetensors", "--input", x, "--output", y)
        runs.append((p.returncode, (p.stderr or "").strip(), y))
    same = all(rc == 0 for rc, _, _ in runs) and (st.load(runs[0][2])["logits"] == st.load(runs[1][2])["logits"]).all()
    rep.check("forward pvt_v2_b1@64 on a 72 px input: the size taken from the input", same,
              "; ".join(f"rc {rc}: {m}" for rc, m, _ in runs))



def test_nonsquare(rep):
    """Inputs of other sizes than the configured one through `vitc forward` / `grad` (H x W taken from the input):
    PVTv2 non-square (its weights fit any size), and PVT v1 built at 64 (--img-size 64, its weights' size) run on
    96x80, 72x72 and 48x160, pos_embed{i} bilinearly resized as the official _get_pos_embed does, forward and grads;
    128 refused as the official stage-1-count test makes it fail, FLatten-PVT (positional encodings fixed) refused
    another input size."""
    cases = (("pvt_v2_b1", 61, 37, None), ("pvt_v2_b1_hmhsa_cffn", 29, 64, None), ("pvt_v2_b1", 32, 96, None),
             ("pvt_tiny", 96, 80, None), ("pvt_tiny", 72, 72, None), ("pvt_small", 48, 160, None),
             ("pvt_tiny", 128, 128, "stage 1's built patch count 256"),
             ("flatten_pvt_tiny", 96, 80, "its weights depend on the image size"))
    for k, (name, h, w, refused) in enumerate(cases):
        ref = ref_model(name).double()
        sd = pvt_ref.randomize(ref, 50 + k)
        ref.load_state_dict({key: v.double() if v.is_floating_point() else v for key, v in sd.items()})
        wf, xf = TMP / f"ns{k}_w.safetensors", TMP / f"ns{k}_x.safetensors"
        st.save(wf, sd)
        g = torch.Generator().manual_seed(k)
        x = torch.randn(2, 3, h, w, generator=g)
        tag = f"{name}@64 on {h}x{w}"
        # v1: --img-size 64, its weights' size (not FLatten's: the size taken from the input, refused as such)
        args = vargs(name)[2:] if name.startswith(("pvt_v2", "flatten")) else vargs(name)
        if refused:
            st.save(xf, {"input": x})
            p = vitc("forward", name, *args, "--weights", wf, "--input", xf, "--output", TMP / f"ns{k}_y.safetensors")
            msg = (p.stderr or "").strip()
            rep.check(f"{tag} refused", p.returncode == 1 and refused in msg, f"rc {p.returncode}: {msg[-300:]}")
            continue
        harness.forward(rep, TMP, tag, name, ref, wf, x, args)
        if k in (0, 3):
            harness.grad(rep, TMP, tag, name, ref, wf, x, torch.randint(0, CLASSES, (2,), generator=g), args)


def test_deploy(rep):
    name = "pvt_v2_b1_hmhsa_cffn"
    args = vargs(name)
    tr = ref_model(name, train_form=True).double()
    sd = pvt_ref.randomize(tr, 60)
    tr.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in sd.items()})
    dep_ref = ref_model(name).double()
    sd_dep = pvt_ref.deploy(sd)
    dep_ref.load_state_dict({k: v.double() for k, v in sd_dep.items()})
    harness.check_names(rep, TMP, "deployed", name, dep_ref, args)
    w_tr, w_dep, xin = TMP / "dep_train.safetensors", TMP / "dep_vitc.safetensors", TMP / "dep_x.safetensors"
    st.save(w_tr, sd)
    x = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(61))
    st.save(xin, {"input": x})
    if vitc_ok(rep, "deploy", "deploy", name, *args, "--weights", w_tr, "-o", w_dep) is None:
        return
    got = st.load(w_dep)
    names_ok = set(got) == set(sd_dep)
    rep.check("deploy names", names_ok, f"missing {sorted(set(sd_dep) - set(got))[:5]}, "
                                        f"extra {sorted(set(got) - set(sd_dep))[:5]}")
    if names_ok:
        e = max(grad_err(got[k], sd_dep[k])[0] for k in sd_dep)
        rep.check("deploy weights == pvt_ref.deploy", e <= TOL_DEPLOY, f"max rel err {e:.2e}")
    ys = {}
    for form, w, extra in (("train", w_tr, ["--train-form"]), ("deployed", w_dep, [])):
        out = TMP / f"dep_y_{form}.safetensors"
        if vitc_ok(rep, f"forward {form}", "forward", name, *args, *extra, "--weights", w, "--input", xin,
                   "--output", out):
            ys[form] = st.load(out)["logits"]
    if len(ys) == 2:
        e = scale_err(ys["deployed"], ys["train"])
        rep.check("deployed vs training-form eval logits", e <= TOL_DEPLOY, f"rel err {e:.2e}")
        with torch.no_grad():
            r_dep, r_tr = dep_ref.eval()(x.double()), tr.eval()(x.double())
        e = max(scale_err(ys["deployed"], r_dep), scale_err(ys["train"], r_tr))
        rep.check("deployed / training-form logits vs reference", e <= harness.TOL_FWD, f"rel err {e:.2e}")


def test_full(rep):
    name = "pvt_tiny"
    ref = pvt_ref.build(name)
    sd = pvt_ref.randomize(ref, 70)
    harness.run(rep, TMP, f"{name}@224", name, ref, sd, [], 224, 3, B=1, classes=1000, seed=70, do_grad=False)


def main():
    global TMP
    rep = Report()
    t0 = time.time()
    if have_vitc(rep):
        TMP = tmpdir()
        for f in (test_counts, test_reduced, test_sizes, test_nonsquare, test_deploy, test_full):
            t = time.time()
            f(rep)
            print(f"# {f.__name__}: {time.time() - t:.1f} s", flush=True)
    print(f"# {time.time() - t0:.1f} s")
    rep.finish()


if __name__ == "__main__":
    main()
