"""Reference test of vitc's GroupMixFormer / Group-Mix Attention against the independent PyTorch model in
gmf_ref.py (written from shared/specs/spec-groupmixformer.md, not from the C code).

Checks (reference in float64 from the same float32 weights/inputs):
  counts  `vitc info --json` params (and BN buffer elements) of groupmixformer_{m,t,s,b,l} at 224 and the
          aliases groupmixformer_{miny,tiny,small,base,large}; the reference modules agree
  names   `vitc init` of groupmixformer_test and groupmixformer_m (--img-size 64 --num-classes 10): names and
          shapes equal the reference state_dict (BN running stats and num_batches_tracked included)
  fwd     random weights (every LN/BN affine and BN running stats randomised, a quarter of each BN's running
          variances near its eps so that the eps shows: common.eps_sensitive), eval logits,
          max|a-b| / max|b| <= 1e-4: groupmixformer_m at 64 px / 10 classes, groupmixformer_test,
          groupmixformer_test at 96 and 93 px (same weights; 93 is not a multiple of 32 but runs in the official
          code, whose stride-2 convs round up), vit_fmnist_tiny_gap --attn gma; groupmixformer_test at 61 px and
          on 61x93 inputs (the size taken from the input; forward, stage maps, grad)
  grad    `vitc grad` (train mode: BN batch statistics over the 3B stacked Q/K/V images): loss <= 1e-4
          relative, every parameter gradient max|a-b| / max|b| <= 1e-3, every gradient non-zero somewhere,
          except those that are analytically zero (a bias followed by a train-mode BatchNorm: conv_stem.proj1/2.bias,
          the last block's mlp.fc2.bias before norm4), which must be round-off only (<= 1e-6 of the largest
          gradient); groupmixformer_test, groupmixformer_m at 64 px, groupmixformer_{t,s,b,l} at 64 px with one
          block a stage (--depths 1,1,1,1), vit_fmnist_tiny_gap --attn gma
  sizes   a size the official code cannot run (200: stage-1 grid 50, not a multiple of 8) is refused with the rule,
          221, 223 and 253 accepted, a 64x80 input refused naming the size and the rule; --attn gma on a
          host with a class token (vit_fmnist_tiny) is refused with a clear message
Run: /usr/bin/python3 tests/reference/test_gma.py      (needs ./vitc or $VITC)
"""
import time

import torch

import gmf_ref
import harness
import st
from common import Report, eps_sensitive, have_vitc, info, tmpdir, vitc

ALIASES = {"groupmixformer_m": "groupmixformer_miny", "groupmixformer_t": "groupmixformer_tiny",
           "groupmixformer_s": "groupmixformer_small", "groupmixformer_b": "groupmixformer_base",
           "groupmixformer_l": "groupmixformer_large"}
BUFFERS = {"groupmixformer_m": 6087, "groupmixformer_t": 9095, "groupmixformer_s": 12207,
           "groupmixformer_b": 22111, "groupmixformer_l": 35543}
YAML_DROP_PATH = {"groupmixformer_m": 0.1, "groupmixformer_t": 0.1, "groupmixformer_s": 0.2, "groupmixformer_b": 0.5,
                  "groupmixformer_l": 0.1}
TEST_CFG = ([20, 30, 40, 50], [1, 2, 1, 1], [2.0, 3.0, 2.0, 1.5])   # groupmixformer_test (64 px, 10 classes)


def test_counts(rep):
    for name, want in gmf_ref.PARAMS.items():
        for n in (name, ALIASES[name]):
            j = info(rep, n)
            if j is None:
                continue
            # drop-path: the yaml files' rates (spec §7: M 0.1, T 0.1, S 0.2, B 0.5, L 0.1)
            got = (j.get("params"), j.get("buffers"), j.get("img_size"), j.get("num_classes"), j.get("drop_path"))
            exp = (want, BUFFERS[name], 224, 1000, YAML_DROP_PATH[name])
            rep.check(f"info {n}", got[:4] == exp[:4] and abs((got[4] or -1) - exp[4]) < 1e-6,
                      f"(params, buffers, img, classes, drop_path) = {got}, want {exp}")
        m = gmf_ref.build(name)
        nb = sum(b.numel() for b in m.buffers())
        rep.check(f"reference count {name}", (gmf_ref.count_params(m), nb) == (want, BUFFERS[name]))


def run_model(rep, tag, model, ref, args, img, in_chans, B, seed, do_grad=True, extra_sizes=(), feats=False):
    sd = eps_sensitive(gmf_ref.randomize(ref, seed), seed + 1)
    w = harness.run(rep, TMP, tag, model, ref, sd, args, img, in_chans, B, classes=10, seed=seed, do_grad=do_grad,
                    maps=ref.features if feats else None)
    g = torch.Generator().manual_seed(seed + 7)
    for s in extra_sizes:  # given with --img-size, and taken from the input (conv-only positions: any size fits)
        xs = torch.randn(B, in_chans, s, s, generator=g)
        harness.forward(rep, TMP, f"{tag}@{s}", model, ref, w, xs,
                        ["--img-size", s] + [a for a in args if a != "--img-size"])
        harness.forward(rep, TMP, f"{tag}@{s} (size from the input)", model, ref, w, xs, args)


def test_sizes(rep):
    p = vitc("info", "groupmixformer_m", "--img-size", 200)
    msg = (p.stderr or "").strip()
    rep.check("size 200 refused", p.returncode not in (0, None) and "positive multiple of 8" in msg,
              f"rc {p.returncode}: {msg}")
    for s in (221, 223, 253):  # the official code runs these too: the stride-2 convs round up
        j = info(rep, "groupmixformer_t", "--img-size", s) or {}
        rep.check(f"size {s} accepted", j.get("img_size") == s, f"info {s}: {j.get('img_size')}")
    w, x = TMP / "init_t.safetensors", TMP / "x64x80.safetensors"
    vitc("init", "groupmixformer_test", "-o", w)
    st.save(x, {"input": torch.randn(1, 3, 64, 80)})  # stage-1 grid 16x20: 20 is not a multiple of 8
    p = vitc("forward", "groupmixformer_test", "--weights", w, "--input", x, "--output", TMP / "y64x80.safetensors")
    msg = (p.stderr or "").strip()
    rep.check("64x80 input refused", p.returncode not in (0, None) and "64x80" in msg and "multiple of 8" in msg,
              f"rc {p.returncode}: {msg}")
    p = vitc("info", "vit_fmnist_tiny", "--attn", "gma")
    msg = (p.stderr or "").strip()
    rep.check("gma with class token refused", p.returncode not in (0, None) and "class token" in msg,
              f"rc {p.returncode}: {msg}")
    # the spec's counted FLOPs include LayerNorm (5/element) and BatchNorm (2/element), vitc's conv and matmul
    # multiply-adds only: each named model between 98% and 100% of the spec's figure at 224
    for name, spec in (("groupmixformer_m", 1.35), ("groupmixformer_t", 3.72), ("groupmixformer_s", 5.16),
                       ("groupmixformer_b", 17.55), ("groupmixformer_l", 36.12)):
        j = info(rep, name) or {}
        g = j.get("gmacs", 0)
        rep.check(f"gmacs {name}@224", 0.98 * spec <= g <= spec, f"{g} GMACs, spec {spec} with norms counted")


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
                  64, 3, 3, seed=10, extra_sizes=(96, 93), feats=True)
        # 61 px: a size the official code runs, but not multiples of 32 (its stride-2 convs round up), forward and grad
        run_model(rep, "test@61", "groupmixformer_test", gmf_ref.GroupMixFormer(*TEST_CFG, num_classes=10), [],
                  61, 3, 2, seed=30, feats=True)
        # non-square, as the official code runs them (spec §2: the rule holds per side): forward, maps and grads
        run_model(rep, "test@61x93", "groupmixformer_test", gmf_ref.GroupMixFormer(*TEST_CFG, num_classes=10), [],
                  (61, 93), 3, 2, seed=40, feats=True)
        run_model(rep, "m64", "groupmixformer_m", gmf_ref.build("groupmixformer_m", num_classes=10),
                  ["--img-size", 64, "--num-classes", 10], 64, 3, 2, seed=20)
        # T, S, B and L at one block a stage (their widths and MLP ratios: B's and L's 2 in some stages), 64 px
        for i, name in enumerate(("groupmixformer_t", "groupmixformer_s", "groupmixformer_b", "groupmixformer_l")):
            dims, _, ratios = gmf_ref.CONFIGS[name]
            run_model(rep, f"{name[15:]} depths 1", name, gmf_ref.GroupMixFormer(dims, [1] * 4, ratios, 10),
                      ["--img-size", 64, "--num-classes", 10, "--depths", "1,1,1,1"], 64, 3, 2, seed=50 + 2 * i)
        run_model(rep, "vit_gap_gma", "vit_fmnist_tiny_gap", gmf_ref.ViTGMA(28, 4, 80, 4, 160, 1, 10),
                  ["--attn", "gma"], 28, 1, 4, seed=30)
    print(f"# {time.time() - t0:.1f} s")
    rep.finish()


if __name__ == "__main__":
    main()
