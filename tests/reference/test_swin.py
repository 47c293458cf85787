"""Reference test of vitc's Swin family (Microsoft/timm and torchvision layouts, FLatten-Swin, Swin-MSF) against the
independent PyTorch model in swin_ref.py (written from the Swin paper, the official configs and the specs
spec-flatten §2 / spec-msf §5, not from the C code).

Checks (reference in float64 from the same float32 weights/inputs):
  counts   `vitc info --json` of the 14 named models: exact params, buffers (relative_position_index, attn_mask), GMACs
           within 1% of swin_ref.GMACS; drop-path rate (swin_ref.MODELS) and eval transform (eval_crop); Linear/Conv
           weights only (params_linear_conv_weights, patch-embed conv included) against the MSF paper's Table 6
           (28.20 / 30.36 / 26.04 / 49.43 / 53.36 / 45.51 M)
  types    flatten_swin_tiny --attn with L in stages 1 / 1-2 / 1-3 / 1-4 (FLatten Table 7): params and MACs equal the
           reference built with that attn_type (retyped stages take their type's window: L WINDOW_SIZE, S 7)
  reduced  every named model at reduced widths/depths (--dims/--depths/--heads, 224 / 384 px for the Microsoft layout
           so that windows shift with non-trivial masks, 100 px for torchvision so that every stage pads): names and
           shapes of `vitc init` (buffers included), eval logits <= 1e-4, `vitc grad` loss and every gradient <= 1e-3
  buffers  `vitc init` writes the official attn_mask / relative_position_index values; a weights file whose
           attn_mask, relative_position_index (Microsoft (w², w²)) or flattened index (torchvision (w⁴,)) differs
           from the architecture's is refused, naming the tensor
  windows  FLatten stages windowed and shifted (swin_tiny --attn flatten,flatten,mhsa,mhsa = FLatten WINDOW_SIZE 7:
           56x56 maps in 7x7 windows, odd blocks rolled, the mask ignored); torchvision at 102 px (conv drops the
           remainder) with the size taken from the input
  features `vitc forward --features`: the four stage maps (B, C, H, W) of a Microsoft and a torchvision model
  nonsquare torchvision layout on 44x60 (forward and grads) and 60x44 inputs, the size taken from the input: the
           shift is zeroed per axis (stage 2's 6x8 map: rows one window, columns padded to 14 and shifted); the
           Microsoft layout built at 64x128 (windows 4: non-square masks, windows shrunk to the shorter side) and
           FLatten-Swin-T at 224x448: names, forward, gradients, stage maps; sizes its rules refuse
  full     swin_tiny_patch4_window7_224 at full size: names and eval logits
  sizes    sizes the official code refuses give clear errors (window multiples, odd maps before merging, smaller than
           a patch, an input that is not the Microsoft model's size), as do attention types a layout does not define
Run: /usr/bin/python3 tests/reference/test_swin.py      (needs ./vitc or $VITC)
"""
import json
import os
import time

# The machine is shared: OpenMP threads that spin at barriers while other processes hold the cores made a reduced
# model's `vitc forward` 10x slower (1.8 s vs 0.15 s measured). Set before torch loads its OpenMP runtime; the results
# do not depend on it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import harness  # noqa: E402
import st  # noqa: E402
import swin_ref  # noqa: E402
from common import Report, have_vitc, tmpdir, vitc, vitc_ok  # noqa: E402

DIMS = [16, 32, 64, 128]
PAPER_M = {"swin_t": 28.20, "swin_t_msf": 30.36, "swin_t_msf_g2": 26.04, "swin_s": 49.43, "swin_s_msf": 53.36,
           "swin_s_msf_g2": 45.51}   # spec-msf §6: Linear (+ patch-embed conv) weights only, M
# name -> (image size, depths, heads, stage maps?) of the reduced version
REDUCED = {
    "swin_tiny_patch4_window7_224": (224, [2, 2, 2, 2], [2, 2, 4, 4], True),
    "swin_small_patch4_window7_224": (224, [2, 2, 3, 1], [2, 2, 4, 4], False),
    "swin_base_patch4_window7_224": (224, [2, 2, 2, 2], [2, 4, 8, 8], False),
    "swin_base_patch4_window12_384": (384, [2, 2, 2, 1], [2, 4, 8, 8], False),
    "flatten_swin_tiny": (224, [2, 2, 2, 2], [1, 2, 4, 8], False),
    "flatten_swin_small": (224, [1, 2, 3, 1], [1, 2, 4, 8], False),
    "flatten_swin_base": (224, [2, 2, 2, 2], [2, 2, 4, 8], False),
    "flatten_swin_base_384": (384, [2, 1, 2, 1], [1, 2, 4, 8], False),
    "swin_t": (100, [2, 2, 2, 2], [2, 2, 4, 4], True),
    "swin_s": (100, [2, 2, 3, 1], [2, 2, 4, 4], False),
    "swin_t_msf": (100, [2, 2, 2, 2], [2, 2, 4, 4], False),
    "swin_t_msf_g2": (100, [2, 2, 2, 2], [2, 2, 4, 4], False),
    "swin_s_msf": (100, [2, 2, 3, 1], [2, 2, 4, 4], False),
    "swin_s_msf_g2": (100, [2, 2, 3, 1], [2, 2, 4, 4], False),
}


def csv(v):
    return ",".join(map(str, v))


def args_of(img, depths, heads, extra=()):
    return ["--img-size", img, "--num-classes", 10, "--dims", csv(DIMS), "--depths", csv(depths), "--heads",
            csv(heads), *extra]


def stage_maps(ref):
    return lambda x: [m.permute(0, 3, 1, 2) for m in ref.stage_maps(x)]


def eval_crop(name):
    """The official eval transform of a named model as its crop_pct: timm's swin cfgs 0.9 (1.0 at 384); FLatten's
    data/build.py both sides to 256 then a 224 crop (0.875; 384 alone at 384); torchvision's Swin_T / Swin_S weights
    resize to 232 / 246 then crop 224 (the MSF variants take their host's), checked as floor(224 / crop_pct)."""
    cfg = swin_ref.MODELS[name]
    if cfg["layout"] == "torchvision":
        size = 232 if cfg["depths"][2] == 6 else 246
        return lambda c: c > 0 and int(224 / c) == size
    if cfg["img_size"] == 384:
        return 1.0
    return 0.875 if name.startswith("flatten") else 0.9


def test_counts(rep):
    for name, want in swin_ref.PARAMS.items():
        with swin_ref._NoInit():
            m = swin_ref.build(name)
        nbuf = sum(b.numel() for b in m.buffers())
        del m
        j = harness.counts(rep, name, want, gmacs=swin_ref.GMACS[name], buffers=nbuf)
        harness.pretrained_cfg(rep, name, j, eval_crop(name), swin_ref.MODELS[name]["drop_path_rate"],
                               resize="both sides" if name.startswith("flatten") else "shorter side")
        if j and name in PAPER_M:
            got = j.get("params_linear_conv_weights", 0) / 1e6
            rep.check(f"linear+conv weights {name}", round(got, 2) == PAPER_M[name],
                      f"{got:.3f} M vs the MSF paper's {PAPER_M[name]} M")


def test_attn_types(rep):
    """FLatten-Swin-T with L in stages 1 / 1-2 / 1-3 / 1-4 (the paper's Table 7, official attn_type): --attn per stage
    gives each retyped stage its type's window (L: WINDOW_SIZE, S: 7), so params and MACs equal the reference's."""
    for types in ("LSSS", "LLSS", "LLLS", "LLLL"):
        swin_ref.MODELS["_table7"] = dict(swin_ref.MODELS["flatten_swin_tiny"], attn=types)
        with swin_ref._NoInit():
            m = swin_ref.build("_table7")
        want, macs = swin_ref.count_params(m), swin_ref.count_macs(m) / 1e9
        del m, swin_ref.MODELS["_table7"]
        attn = ",".join("flatten" if t == "L" else "mhsa" for t in types)
        harness.counts(rep, "flatten_swin_tiny", want, args=("--attn", attn), gmacs=macs, rel=0.001)


def test_reduced(rep):
    """Every named model reduced; returns the weights files of a Microsoft and a torchvision model."""
    files = {}
    for k, (name, (img, depths, heads, feats)) in enumerate(REDUCED.items()):
        ref = swin_ref.build(name, img_size=img, num_classes=10, dims=DIMS, depths=depths, heads=heads)
        sd = swin_ref.randomize(ref, 100 + k)
        files[name] = (harness.run(rep, TMP, name, name, ref, sd, args_of(img, depths, heads), img, seed=100 + k,
                                   maps=stage_maps(ref) if feats else None), ref, img, depths, heads)
    return files


def test_buffers(rep, files):
    """Canonical buffer values in `vitc init`; altered architecture buffers refused at load."""
    for name, bufs in (("swin_tiny_patch4_window7_224", ("layers.0.blocks.1.attn_mask",
                                                         "layers.2.blocks.0.attn.relative_position_index")),
                       ("swin_t", ("features.1.1.attn.relative_position_index",))):
        w, ref, img, depths, heads = files[name]
        args = args_of(img, depths, heads)
        init = st.load(TMP / f"{name}_init.safetensors")
        want = {k: v for k, v in ref.state_dict().items() if k.endswith(("attn_mask", "relative_position_index"))}
        bad = [k for k, v in want.items() if k not in init or not np.array_equal(np.asarray(init[k]), v.numpy())]
        rep.check(f"buffer values {name}", not bad and len(want) > 0,
                  f"{len(want)} buffers, differing: {bad[:4]}")
        x = TMP / f"{name}_bx.safetensors"
        st.save(x, {"input": torch.randn(1, 3, img, img)})
        sd = st.load(w)
        for b in bufs:
            t = np.array(sd[b], copy=True)
            flat = t.reshape(-1)
            flat[1] = flat[1] - 100 if b.endswith("attn_mask") else flat[0]
            changed = dict(sd, **{b: t})
            wb = TMP / f"{name}_badbuf.safetensors"
            st.save(wb, changed)
            p = vitc("forward", name, "--weights", wb, "--input", x, "--output", TMP / "bad_y.safetensors", *args)
            msg = (p.stderr or "").strip()
            rep.check(f"altered {b} refused", p.returncode not in (0, None) and b in msg, f"rc {p.returncode}: {msg}")


def test_windows(rep, files):
    # FLatten stages windowed and shifted: WINDOW_SIZE 7 for the L stages (the reference's la_window)
    depths, heads = [2, 2, 2, 2], [1, 2, 4, 8]
    ref = swin_ref.build("flatten_swin_tiny", img_size=224, num_classes=10, dims=DIMS, depths=depths, heads=heads,
                         la_window=7)
    rep.check("shifted FLatten blocks in the reference", ref.cfg["window"][:2] == [7, 7] and
              ref.layers[0].blocks[1].s == 3, f"windows {ref.cfg['window']}")
    harness.run(rep, TMP, "flatten_w7", "swin_tiny_patch4_window7_224", ref, swin_ref.randomize(ref, 7),
                args_of(224, depths, heads, ["--attn", "flatten,flatten,mhsa,mhsa"]), 224, seed=7)
    # torchvision: a size the patch conv floors (102 -> 25 tokens a side), given and taken from the input
    w, ref, img, depths, heads = files["swin_t"]
    g = torch.Generator().manual_seed(17)
    x = torch.randn(2, 3, 102, 102, generator=g)
    harness.forward(rep, TMP, "swin_t@102", "swin_t", ref, w, x, args_of(102, depths, heads))
    noimg = [a for i, a in enumerate(args_of(102, depths, heads)) if i > 1]
    harness.forward(rep, TMP, "swin_t@102 (size from the input)", "swin_t", ref, w, x, noimg)


def test_nonsquare(rep, files):
    """torchvision layout on non-square inputs (`vitc forward` / `grad` take H x W from the input): a window covering
    one axis of the padded map zeroes the shift on that axis only (44x60: stage 2 is 6x8, rows unshifted, columns
    shifted by 3; 60x44 the transpose). Square inputs cannot tell the two axes' rules apart."""
    w, ref, img, depths, heads = files["swin_t"]
    ref = ref.double()
    args = args_of(img, depths, heads)[2:]  # no --img-size: the size comes from the input
    for k, (h, wd) in enumerate(((44, 60), (60, 44))):
        g = torch.Generator().manual_seed(40 + k)
        x = torch.randn(2, 3, h, wd, generator=g)
        harness.forward(rep, TMP, f"swin_t on {h}x{wd}", "swin_t", ref, w, x, args)
        if k == 0:
            harness.grad(rep, TMP, f"swin_t on {h}x{wd}", "swin_t", ref, w, x, torch.randint(0, 10, (2,), generator=g),
                         args)


def test_nonsquare_microsoft(rep):
    """Microsoft layout built at H x W (`--img-size HxW`; the official PatchEmbed takes an (H, W) img_size): Swin at
    64x128 and 128x64 with windows of 4 (stages 16x32 and 8x16 shifted with non-square masks, 4x8 and 2x4
    whole-height windows that shrink to the shorter side and tile the longer, no shift; the transpose), and
    FLatten-Swin-T at 224x448 (two 56x56 FLatten windows in stage 1, 28x28 ones in stage 2): names, forward, every
    gradient, stage maps, the windows run (`info`); then an input of the other H x W and sizes refused."""
    depths, heads = [2, 2, 2, 2], [2, 2, 4, 4]
    for k, (name, hw, window, extra) in enumerate((
            ("swin_tiny_patch4_window7_224", (64, 128), 4, ["--windows", "4"]),
            ("swin_tiny_patch4_window7_224", (128, 64), 4, ["--windows", "4"]),
            ("flatten_swin_tiny", (224, 448), None, []))):
        ref = swin_ref.build(name, img_size=hw, num_classes=10, dims=DIMS, depths=depths, heads=heads, window=window)
        if k == 0:
            rep.check("reference plan at 64x128", ref.cfg["window"] == [4, 4, 4, 2] and
                      ref.cfg["resolution"] == [(16, 32), (8, 16), (4, 8), (2, 4)] and ref.layers[0].blocks[1].s == 2,
                      f"windows {ref.cfg['window']}, resolution {ref.cfg['resolution']}")
        args = ["--img-size", f"{hw[0]}x{hw[1]}", "--num-classes", 10, "--dims", csv(DIMS), "--depths", csv(depths),
                "--heads", csv(heads), *extra]
        w = harness.run(rep, TMP, f"{name}@{hw[0]}x{hw[1]}", name, ref, swin_ref.randomize(ref, 50 + k), args, hw,
                        seed=50 + k, maps=stage_maps(ref))
        p = vitc("info", name, "--json", *args)
        runs = [s["window_run"] for s in json.loads(p.stdout)["stages"]] if p.returncode == 0 else p.stderr
        rep.check(f"{name}@{hw[0]}x{hw[1]}: windows run {ref.cfg['window']}", runs == ref.cfg["window"], str(runs))
        if k == 0:  # a weight file recording the size (`vitc init`), given the transposed input
            x, rec = TMP / "x12864.safetensors", TMP / "rec6412.safetensors"
            st.save(x, {"input": torch.zeros(1, 3, 128, 64)})
            if vitc_ok(rep, "init at 64x128", "init", name, "-o", rec, *args) is not None:
                refused(rep, "weights made at 64x128 given a 128x64 input", ["takes 64×128 inputs, not 128×64",
                        "build it with --img-size 128x64"], "forward", name, "--weights", rec, "--input", x,
                        "--output", TMP / "y.safetensors")
    for img, words in (("224x320", ["224x320", "56x80", "window 7"]), ("224x280", ["odd 28x35"]),
                       ("224x336", ["14x21"])):
        refused(rep, f"swin_tiny at {img}", words, "info", "swin_tiny_patch4_window7_224", "--img-size", img)
    refused(rep, "cswin at 224x448", ["square inputs only"], "info", "cswin_tiny_224", "--img-size", "224x448")


def test_fmnist(rep):
    # swin_fmnist_tiny (make compare's hierarchical host): 2 stages, patch 2, 1 channel, 28 px; softmax windows of 7 in
    # both stages, and FLatten global in stage 1 (window 14 = its resolution, as the paper's L stages)
    name = "swin_fmnist_tiny"
    swin_ref.MODELS[name] = dict(swin_ref._cfg("microsoft", 48, [2, 2], [3, 6], 7, 28, 0.0, la_window=14),
                                 patch=2, in_chans=1, num_classes=10, dims=[48, 96])
    for attn, args in (("SS", ["--attn", "mhsa"]), ("LS", ["--attn", "flatten,mhsa", "--windows", "14,7"])):
        swin_ref.MODELS[name].update(attn=attn, focusing_factor=3.0 if "L" in attn else None,
                                     kernel_size=5 if "L" in attn else None)
        ref = swin_ref.build(name)
        harness.run(rep, TMP, f"fmnist_{attn}", name, ref, swin_ref.randomize(ref, 21), args, 28, in_chans=1, seed=21)


def test_full(rep):
    name = "swin_tiny_patch4_window7_224"
    torch.manual_seed(0)
    ref = swin_ref.build(name)
    harness.run(rep, TMP, "full", name, ref, swin_ref.randomize(ref, 3), [], 224, B=1, classes=1000, seed=3,
                do_grad=False)


def refused(rep, tag, words, *args):
    p = vitc(*args)
    msg = (p.stderr or "").strip()
    rep.check(f"refused: {tag}", p.returncode not in (0, None) and all(wd in msg for wd in words),
              f"rc {p.returncode}: {msg}")


def test_sizes(rep):
    for img, words in ((200, ["multiple of its window 7"]), (112, ["odd", "even"])):
        try:
            swin_ref.stage_plan(swin_ref.MODELS["swin_tiny_patch4_window7_224"], img)
            ref_refuses = False
        except ValueError:
            ref_refuses = True
        rep.check(f"reference refuses {img} px", ref_refuses)
        refused(rep, f"swin_tiny at {img} px", words, "info", "swin_tiny_patch4_window7_224", "--img-size", img)
    refused(rep, "swin_t at 3 px", ["smaller than one 4x4 patch"], "info", "swin_t", "--img-size", 3)
    refused(rep, "hmhsa in Swin", ["'hmhsa' is not defined"], "info", "swin_tiny_patch4_window7_224", "--attn", "hmhsa")
    refused(rep, "flatten in the torchvision layout", ["'flatten' is not defined", "torchvision"], "info", "swin_t",
            "--attn", "flatten")
    refused(rep, "cffn in Swin", ["MLP FFN"], "info", "swin_t", "--ffn", "cffn")
    x = TMP / "x256.safetensors"
    st.save(x, {"input": torch.zeros(1, 3, 256, 256)})
    refused(rep, "Microsoft model on another input size",
            ["takes 224×224 inputs, not 256×256", "depend on the image size"], "forward", "swin_tiny_patch4_window7_224",
            "--weights", TMP / "full_w.safetensors", "--input", x, "--output", TMP / "y.safetensors")


def main():
    global TMP
    rep = Report()
    t0 = time.time()
    if have_vitc(rep):
        TMP = tmpdir()
        test_counts(rep)
        test_attn_types(rep)
        files = test_reduced(rep)
        test_buffers(rep, files)
        test_windows(rep, files)
        test_nonsquare(rep, files)
        test_nonsquare_microsoft(rep)
        test_fmnist(rep)
        test_full(rep)
        test_sizes(rep)
    print(f"# {time.time() - t0:.1f} s")
    rep.finish()


if __name__ == "__main__":
    main()
