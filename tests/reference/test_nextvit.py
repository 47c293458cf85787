"""Reference test of vitc's Next-ViT family (nextvit_small/base/large, nextvit_small_hmhsa_cffn) against the
independent PyTorch model of nextvit_ref.py (written from shared/specs/spec-nextvit.md and spec-hmhsa-cffn.md, not
from the C code; checked against the official classes to round-off when written).

Checks (reference in float64 from the same float32 weights and inputs; harness.py's tolerances). Weights: random
(nextvit_ref.randomize), BatchNorm running statistics drawn around a train-mode forward's batch statistics
(nextvit_ref.calibrate) so eval-mode activations stay O(1) through the deep stacks, then a quarter of each BN's
running variances near its eps, the affine weight rescaled to match, so that the eps shows (common.eps_sensitive).
  counts   `vitc info --json` of the 4 named models at 224: exact parameters (31,763,368 / 44,818,856 / 57,874,344 /
           27,252,844 deployed), GMACs within 1% of the spec's counted MACs, BatchNorm buffer elements (running stats
           + num_batches_tracked); the hMHSA + cFFN training form (--train-form) against the reference's count;
           the blocks with attention per stage (`attn_blocks`) against the reference's NTBs; the official
           path_dropout (drop-path rate) per model
  names    `vitc init nextvit_small` (full size, 472 keys) and the reduced models' training and deployed forms: the
           official state_dict names and shapes, BN buffers included
  small    nextvit_small at depths 1,2,10,1 (NCB and NTB with stride-2 patch embeds, the stride-1 512->384 patch
           embed, sr 4/2/1) at 72 px: odd maps (ceil pools), AvgPool1d windows wrapping across rows with dropped
           tails (stage 2: 81 tokens -> 5 keys); training form (--train-form) eval logits (<= 1e-4), `vitc grad`
           (train-mode BatchNorm) loss and every gradient (<= 1e-3; the last block's mlp.conv2.bias is zero by
           construction before the final train-mode BatchNorm: vitc must give round-off only; plus, per element,
           what flipping a ReLU whose input is within float32 round-off of 0 can move: flip_allowance), `--features`
           maps
  hmhsa    nextvit_small_hmhsa_cffn at depths 1,1,5,1, 64 px (IHH key grids 2x2 / 2x2 / real 2x2): the same, in the
           cFFN training form (BN branches in train mode; ihh/chh biases and U's BN biases zero by construction)
  deploy   for both: `vitc deploy` weights equal nextvit_ref.deploy (cFFN merge, then merge_bn) within 1e-5 relative,
           the file records vitc_form = deployed and keeps the training form's key set (plain Next-ViT), its eval
           logits equal the training form's within 1e-5 and the reference's merged model within 1e-4
  forms    a file recording the training form builds the model in it (forward without --train-form: the training
           form's logits, a notice); a file without a form record (official checkpoints) is refused by the deployed
           form; a deployed file is refused by --train-form; messages say what to do
  hostile  a negative BatchNorm running_var in the weights is refused, naming the tensor
  sizes    24 px refused (stage 2 has fewer tokens than the AvgPool1d window; smallest 25), 25 px runs (eval logits),
           a 24x24 input to a model built for 64 is refused; --depths with a stage-3 depth not a multiple of 5 and
           --dims refused with clear messages
Run: /usr/bin/python3 tests/reference/test_nextvit.py      (needs ./vitc or $VITC)
"""
import json
import os
import struct
import time

import torch
import torch.nn.functional as F

import harness
import nextvit_ref as R
import st
from common import Report, eps_sensitive, grad_err, have_vitc, scale_err, tmpdir, vitc, vitc_ok

torch.set_num_threads(2)
CLASSES, TOL_DEPLOY = 10, 1e-5
PATH_DROPOUT = {"nextvit_small": 0.1, "nextvit_base": 0.2, "nextvit_large": 0.2, "nextvit_small_hmhsa_cffn": 0.1}
BUFFERS = {"nextvit_small": 40_381, "nextvit_base": 60_377, "nextvit_large": 80_373,
           "nextvit_small_hmhsa_cffn": 40_381}


def lst(v):
    return ",".join(map(str, v))


def metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def test_counts(rep):
    for name, params in R.PARAMS.items():
        j = harness.counts(rep, name, params, gmacs=R.GMACS[name], buffers=BUFFERS[name])
        # the blocks with attention per stage, as `info` reports them: the reference's NTBs between stage ends
        m, start, want = R.build(name), 0, []
        # the spec's counts (R.PARAMS, BUFFERS) held by the reference model itself, not only by vitc
        got_p, got_b = R.count_params(m), sum(b.numel() for b in m.buffers())
        rep.check(f"reference {name}: {params:,} params, {BUFFERS[name]:,} buffer elements",
                  got_p == params and got_b == BUFFERS[name], f"{got_p:,} params, {got_b:,} buffer elements")
        for end in m.ends:
            want.append(sum(isinstance(b, R.NTB) for b in list(m.features)[start:end + 1]))
            start = end + 1
        got = [s.get("attn_blocks") for s in j["stages"]] if j else None
        rep.check(f"info {name}: NTBs (attention blocks) per stage", got == want, f"{got} want {want}")
        # the official per-model path_dropout (spec §1: S 0.1, B 0.2, L 0.2; the hMHSA + cFFN variant its host's) and
        # the eval transform of the official classification/datasets.py (DeiT's: shorter side to int(256 / 224 · S),
        # bicubic, centre crop S, ImageNet mean and std)
        harness.pretrained_cfg(rep, name, j, 0.875, PATH_DROPOUT[name])
    m = R.build("nextvit_small_hmhsa_cffn", train_form=True)
    nb = sum(b.numel() for b in m.buffers())
    harness.counts(rep, "nextvit_small_hmhsa_cffn", R.count_params(m), args=("--train-form",), buffers=nb)
    got = harness.check_names(rep, TMP, "full", "nextvit_small", R.build("nextvit_small"), [])
    rep.check("full-size key count", got is not None and len(got) == 472, f"{None if got is None else len(got)} keys")


def expect_error(rep, name, args, *words):
    p = vitc(*args)
    msg = (p.stderr or "").strip()
    rep.check(name, p.returncode not in (0, None) and all(w in msg for w in words), f"rc {p.returncode}: {msg[:300]}")


def test_sizes(rep):
    expect_error(rep, "size 24 refused", ["info", "nextvit_small", "--img-size", 24], "AvgPool1d",
                 "smallest size it accepts is 25")
    expect_error(rep, "stage-3 depth 3 refused", ["info", "nextvit_small", "--depths", "1,1,3,1"], "multiple of 5")
    expect_error(rep, "--dims refused", ["info", "nextvit_small", "--dims", "64,128,256,512"], "fixed")
    expect_error(rep, "--attn flatten refused", ["info", "nextvit_small", "--attn", "flatten"], "mhsa")


def flip_allowance(ref, x, labels, tau=1e-5, cap=256):
    """harness.grad's allowance: ReLU inputs within tau of zero (relative to the largest input of that ReLU call) may
    land on the other side in vitc's float32 forward, which flips that unit's derivative and moves the gradients that
    pass through it by a discrete step (seen: one such unit put 1.4e-2 relative error on one block's norm and
    mlp.conv1 gradients, every other tensor within 1e-5). For each such unit u (at most cap), |dL/dy_u|·|dz_u/dθ| per
    parameter element, the most its flip can change the gradient. More than cap units: the rest get no allowance."""
    seen = []

    def record(z, y):
        y.retain_grad()
        seen.append((z, y))

    R.RELU_HOOK.append(record)
    try:
        ref.zero_grad()
        F.cross_entropy(ref(x.double()), labels).backward(retain_graph=True)
    finally:
        R.RELU_HOOK.remove(record)
    names, params = zip(*ref.named_parameters())
    units = [(z, y, tuple(i.tolist())) for z, y in seen
             for i in (z.detach().abs() <= tau * z.detach().abs().max()).nonzero()]
    allow = {k: torch.zeros_like(p) for k, p in zip(names, params)}
    for z, y, i in units[:cap]:
        for k, dz in zip(names, torch.autograd.grad(z[i], params, retain_graph=True, allow_unused=True)):
            if dz is not None:
                allow[k] += (y.grad[i] * dz).abs()
    ref.zero_grad()
    return allow, f"{len(units)} ReLU inputs within {tau:g} of 0 given their flip's reach"


def run_model(rep, tag, name, depths, img, seed, maps=False, env=None):
    args = ["--depths", lst(depths), "--num-classes", CLASSES, "--img-size", img]
    ref = R.build(name, depths, CLASSES, train_form=True).double()
    sd = eps_sensitive(R.calibrate(ref, R.randomize(ref, seed), seed + 2, img), seed + 3)
    harness.check_names(rep, TMP, tag + " training form", name, ref, args + ["--train-form"])
    ref.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in sd.items()})
    w = TMP / f"{tag}_w.safetensors"
    st.save(w, sd)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(2, 3, img, img, generator=g)
    harness.forward(rep, TMP, tag, name, ref, w, x, args + ["--train-form"])
    if maps:
        ref.eval()
        with torch.no_grad():
            harness.features(rep, TMP, tag, name, R.stage_maps(ref, x.double()), w, x, args + ["--train-form"])
    labels = torch.randint(0, CLASSES, (2,), generator=g)
    t = time.time()
    # zero by construction (a shift before a train-mode BatchNorm), summed over 2·H·W positions in float32: 1e-5
    harness.grad(rep, TMP, tag, name, ref, w, x, labels, args, zero_tol=1e-5, allowance=flip_allowance)
    print(f"# grad {tag}: {time.time() - t:.1f} s")
    if env:  # the same forward and gradients with vitc under env (another stem layout, other GEMM kernels)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            harness.forward(rep, TMP, f"{tag} {env}", name, ref, w, x, args + ["--train-form"])
            harness.grad(rep, TMP, f"{tag} {env}", name, ref, w, x, labels, args, zero_tol=1e-5,
                         allowance=flip_allowance)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    test_deploy(rep, tag, name, depths, args, ref, sd, w, x)
    return w, args


def test_deploy(rep, tag, name, depths, args, ref, sd, w_tr, x):
    """vitc deploy against the reference's merges; deployed vs training-form logits; the form record."""
    dep = TMP / f"{tag}_dep.safetensors"
    if vitc_ok(rep, f"deploy {tag}", "deploy", name, *args, "--weights", w_tr, "-o", dep) is None:
        return
    want = R.deploy(sd, ref)
    got = st.load(dep)
    if set(got) != set(want):
        rep.check(f"deploy names {tag}", False, f"missing {sorted(set(want) - set(got))[:6]}, "
                                                f"extra {sorted(set(got) - set(want))[:6]}")
        return
    if ".rep." not in " ".join(sd):
        rep.check(f"deploy keeps the key set {tag}", set(got) == set(sd), "")
    e = max((grad_err(got[k], want[k])[0] for k in want if not k.endswith("num_batches_tracked")), default=0.0)
    rep.check(f"deploy weights {tag}", e <= TOL_DEPLOY, f"max rel err {e:.2e} (tol {TOL_DEPLOY:g})")
    meta = metadata(dep)
    rep.check(f"deploy form record {tag}", meta.get("vitc_form") == "deployed", f"metadata {meta}")
    xin, yt, yd = TMP / f"{tag}_dx.safetensors", TMP / f"{tag}_yt.safetensors", TMP / f"{tag}_yd.safetensors"
    st.save(xin, {"input": x})
    if (vitc_ok(rep, f"fwd train form {tag}", "forward", name, *args, "--train-form", "--weights", w_tr, "--input",
                xin, "--output", yt) is None or
            vitc_ok(rep, f"fwd deployed {tag}", "forward", name, *args, "--weights", dep, "--input", xin, "--output",
                    yd) is None):
        return
    y_tr, y_dep = st.load(yt)["logits"], st.load(yd)["logits"]
    e = scale_err(y_dep, y_tr)
    rep.check(f"deployed == training form {tag}", e <= TOL_DEPLOY, f"eval logits {e:.2e} (tol {TOL_DEPLOY:g})")
    merged = R.build(name, depths, CLASSES, merged=True).double()
    merged.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in want.items()})
    merged.eval()
    with torch.no_grad():
        r = merged(x.double())
    e = scale_err(y_dep, r)
    rep.check(f"deployed vs reference merged model {tag}", e <= 1e-4, f"logits rel err {e:.2e}")
    # a file recording the training form builds the model in it; wrong-form loads are refused
    w_rec, y_rec = TMP / f"{tag}_trrec.safetensors", TMP / f"{tag}_yrec.safetensors"
    st.save(w_rec, st.load(w_tr), metadata={"vitc_form": "training"})
    r = vitc("forward", name, *args, "--weights", w_rec, "--input", xin, "--output", y_rec)
    rep.check(f"recorded training form taken {tag}", r.returncode == 0 and "holds the training form" in r.stderr and
              bool((st.load(y_rec)["logits"] == y_tr).all()), f"rc {r.returncode}: {r.stderr[-300:]}")
    expect_error(rep, f"training file refused by the deployed form {tag}",
                 ["forward", name, *args, "--weights", w_tr, "--input", xin, "--output", yd], "vitc deploy",
                 "--train-form", "training-form")
    expect_error(rep, f"deployed file refused by --train-form {tag}",
                 ["forward", name, *args, "--train-form", "--weights", dep, "--input", xin, "--output", yd],
                 "deployed-form", "twice")


def sized_from_input(name, depths, w, args):
    """args without --img-size (the size then comes from the input) and the reference holding the weights file w."""
    args = [a for i, a in enumerate(args) if a != "--img-size" and (i == 0 or args[i - 1] != "--img-size")]
    ref = R.build(name, depths, CLASSES, train_form=True).double()
    ref.load_state_dict({k: torch.from_numpy(v).double() if v.dtype.kind == "f" else torch.from_numpy(v)
                         for k, v in st.load(w).items()})
    return ref, args


def test_small_sizes(rep, w, args):
    """25 px runs with the same weights (size taken from the input: no --img-size); a 24x24 input is refused."""
    ref, args = sized_from_input("nextvit_small", [1, 2, 10, 1], w, args)
    g = torch.Generator().manual_seed(5)
    harness.forward(rep, TMP, "small@25", "nextvit_small", ref, w, torch.randn(2, 3, 25, 25, generator=g),
                    args + ["--train-form"])
    # non-square, as the official code runs them: 40x88 (forward), and 16x64, whose square sides are both refused
    # or not (16x16: stage 2's 2x2 map has fewer tokens than the AvgPool1d window 16, 2x8 has enough)
    harness.forward(rep, TMP, "small@40x88", "nextvit_small", ref, w, torch.randn(2, 3, 40, 88, generator=g),
                    args + ["--train-form"])
    x = torch.randn(2, 3, 16, 64, generator=g)
    harness.grad(rep, TMP, "small@16x64", "nextvit_small", ref, w, x, torch.randint(0, CLASSES, (2,), generator=g),
                 args, zero_tol=1e-5, allowance=flip_allowance)
    xin = TMP / "x24.safetensors"
    st.save(xin, {"input": torch.randn(1, 3, 24, 24, generator=g)})
    expect_error(rep, "24x24 input refused", ["forward", "nextvit_small", *args, "--train-form", "--weights", w,
                                              "--input", xin, "--output", TMP / "y24.safetensors"],
                 "fewer tokens", "AvgPool1d")
    # a negative running variance (NaN in every BatchNorm form, training and folded) is refused at load
    bad = st.load(w)
    bad["features.1.mhca.norm.running_var"][3] = -0.5
    wb, x32 = TMP / "negvar.safetensors", TMP / "x32.safetensors"
    st.save(wb, bad)
    st.save(x32, {"input": torch.randn(1, 3, 32, 32, generator=g)})
    expect_error(rep, "negative running_var refused", ["forward", "nextvit_small", *args, "--train-form", "--weights",
                                                        wb, "--input", x32, "--output", TMP / "yv.safetensors"],
                 "features.1.mhca.norm.running_var", "running variance")


def main():
    global TMP
    rep = Report()
    t0 = time.time()
    if have_vitc(rep):
        TMP = tmpdir()
        test_counts(rep)
        test_sizes(rep)
        # VITC_GEMM=openblas: the training-form stem NCHW (channels-last where oneDNN's AVX-512 tier trains it)
        w, args = run_model(rep, "small", "nextvit_small", [1, 2, 10, 1], 72, seed=10, maps=True,
                            env={"VITC_GEMM": "openblas"})
        test_small_sizes(rep, w, args)
        w, args = run_model(rep, "hmhsa_cffn", "nextvit_small_hmhsa_cffn", [1, 1, 5, 1], 64, seed=20, maps=True)
        # non-square: the reduced keys of stage 2 (a 6x10 map: 60 tokens, 3 keys) on a 1x3 grid for the IHH conv
        ref, args = sized_from_input("nextvit_small_hmhsa_cffn", [1, 1, 5, 1], w, args)
        harness.forward(rep, TMP, "hmhsa_cffn@48x80", "nextvit_small_hmhsa_cffn", ref, w,
                        torch.randn(2, 3, 48, 80, generator=torch.Generator().manual_seed(6)), args + ["--train-form"])
        # 96 px: stages 2 and 3 reduce to 3x3 key grids, the smallest the IHH conv's fast kernels take
        g = torch.Generator().manual_seed(7)
        x96 = torch.randn(2, 3, 96, 96, generator=g)
        harness.forward(rep, TMP, "hmhsa_cffn@96", "nextvit_small_hmhsa_cffn", ref, w, x96, args + ["--train-form"])
        harness.grad(rep, TMP, "hmhsa_cffn@96", "nextvit_small_hmhsa_cffn", ref, w, x96,
                     torch.randint(0, CLASSES, (2,), generator=g), args, zero_tol=1e-5, allowance=flip_allowance)
    print(f"# {time.time() - t0:.1f} s")
    rep.finish()


if __name__ == "__main__":
    main()
