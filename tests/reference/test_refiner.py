"""Reference test of vitc's Refined-ViT (refiner_vit_{s,m,l}[_dense]) against an independent PyTorch model
written from shared/specs/spec-refiner.md (§2-§6), not from the C code.

Reference model (float64): conv stem (conv1 7x7/2 + bn1 + ReLU, conv2/bn2, conv3/bn3, proj 8x8/8 with bias),
class token, pos_embed, blocks alternating plain / shared Refined_Attention, residual branches on 0.5·x added ×2,
MLP ratio 3 with mlp.scale_channel, norm (LN eps 1e-6), head on token 0; with aux_head the eval output is
cls + 0.5·max over the patch tokens of aux_head. Plain attention: softmax(√s·q (√s·k)ᵀ) + s·A_in; shared:
s·adapt_bn(DLA(A_in)) on V = qkv(x) (C→C), A_in passed on; DLA = 1x1 H→3H, BN, ReLU6, dw3x3, BN, ReLU6, 1x1 3H→H,
BN, + identity, on the raw N×N maps (class token included). Train mode (vitc grad): BN batch statistics, loss =
cross-entropy of the class-head logits (aux_head is not used in training without token labels, so its gradient is 0
by design and it is left out of the non-zero check) plus, for refiner_vit_s/m, the official cos_reg term
(SoftTargetCrossEntropyCosReg: 0.1/n · mean CosineSimilarity(dim=1) summed over the first n = 2 pairs of block maps,
a shared block passing its incoming map on); also with --cos-reg 0 (S) and 3 (M). Structural zero: in train mode every
blocks.{odd}.attn.DLA.bn3.bias has an exactly zero gradient (adapt_bn's batch mean removes any per-channel shift
added before it), so it is checked as max|vitc| <= 1e-6 · (largest reference gradient of the model) instead.

Plain ViT host, `--attn refiner` (vit_fmnist_tiny, 28x28x1, batch 4): every block's MHSA map is refined,
A = adapt_bn(DLA(softmax(q·kᵀ·s))) (expansion 3, no × scale, no attention chain; the official apply_transform
path without A_in), o = A·v; the rest is vit_ref.py's ViT. Checked: names/shapes, forward, loss, gradients.

Cost: the M/L weights are 55-81M parameters even at 32 px (the blocks dominate), so by default M and L run at depth
4 (`--depths 4`: two [plain, shared] pairs, their full widths and heads; S is the full-size check), the gradient is
checked for the three non-dense models and refiner_vit_s_dense (a *_dense train graph is the non-dense one: the
aux_head is eval-only), and the forward for all six, with one random state dict per size shared by the two
variants; --full runs M and L at their 32 blocks and checks every gradient.

Checks:
  counts  `vitc info --json` params of all six models at 224 (spec §8) and refiner_vit_s / refiner_vit_l_dense
          at 384 / 448; the spec's §6.4 formulas agree; the reference module at 224 agrees for S; the eval
          transform (spec §7: crop_pct 0.9 / 1.0 / 1.13, mean = std = 0.5, bicubic)
  names   `vitc init MODEL --img-size 32 --num-classes 10`: names and shapes equal the reference state_dict
  fwd     random weights (every LN/BN affine, BN running stats, scale_channel randomised; a quarter of each BN's
          running variances near its eps: common.eps_sensitive), eval logits,
          max|a-b| / max|b| <= 1e-4
  grad    `vitc grad` loss <= 1e-4 relative, every parameter gradient max|a-b| / max|b| <= 1e-3,
          every gradient non-zero somewhere (aux_head excepted)
  size    refiner_vit_s also at 14 px more (46 for 32, same weights): fwd and grad as above; the stem's 8x8/8 proj
          cuts those pixels as the official code's does (it runs every size but 16k + 15)
Run: /usr/bin/python3 tests/reference/test_refiner.py [--models refiner_vit_s,...] [--img-size 32]
"""
import argparse
import copy
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import harness
import st
import vit_ref
from common import Report, compare_grads, eps_sensitive, have_vitc, info, scalar, scale_err, tmpdir, vitc_ok

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)   # tiny tensors (32 px): one thread is fastest, and robust on a loaded machine
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # for the vitc subprocesses

ARCH = {"s": (16, 384, 12), "m": (32, 420, 12), "l": (32, 512, 16)}   # depth, C, heads
MODELS = [f"refiner_vit_{v}{d}" for d in ("", "_dense") for v in "sml"]
PARAMS_224 = {"refiner_vit_s": 25_023_656, "refiner_vit_m": 55_029_932, "refiner_vit_l": 80_637_192,
              "refiner_vit_s_dense": 25_408_656, "refiner_vit_m_dense": 55_450_932,
              "refiner_vit_l_dense": 81_150_192}
PARAMS_OTHER = [("refiner_vit_s", 384, 25_169_576), ("refiner_vit_l_dense", 448, 81_451_248)]
TOL_FWD, TOL_LOSS, TOL_GRAD = 1e-4, 1e-4, 1e-3
# the cos_reg pairs of each named model's training loss (spec-refiner §7: refiner_s/m.yaml set cos_reg_component 12,
# whose plain-label loss SoftTargetCrossEntropyCosReg() keeps n_comn = 2; refiner_l.yaml 0; the _dense models train
# with token labelling, which vitc refuses)
COS_REG = {"refiner_vit_s": 2, "refiner_vit_m": 2}
REDUCED_DEPTH = 4   # M and L run two [plain, shared] pairs (--full: all 32 blocks); S, the full-size check, all 16
LN_EPS = 1e-6


def arch(name):
    depth, C, H = ARCH[name.split("_")[2]]
    return depth, C, H, name.endswith("_dense")


def formula_count(name, img):
    """spec §6.4."""
    depth, C, H, aux = arch(name)
    n = (img // 16) ** 2
    plain, shared = 10 * C * C + 13 * C, 8 * C * C + 11 * C + 6 * H * H + 43 * H
    head = 1000 * C + 1000
    return depth // 2 * (plain + shared) + 97_312 + 8_193 * C + C + (n + 1) * C + 2 * C + head + (head if aux else 0)


# ------------------------------------------------------------------------------------------ reference model

class DLA(nn.Module):
    def __init__(self, H, ratio=3):
        super().__init__()
        He = round(H * ratio)
        self.conv_exp = nn.Conv2d(H, He, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(He)
        self.depth_sep_conv = nn.Conv2d(He, He, 3, padding=1, groups=He, bias=False)
        self.bn2 = nn.BatchNorm2d(He)
        self.conv_pro = nn.Conv2d(He, H, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(H)

    def forward(self, a):
        t = F.relu6(self.bn1(self.conv_exp(a)))
        t = F.relu6(self.bn2(self.depth_sep_conv(t)))
        return self.bn3(self.conv_pro(t)) + a


class Attn(nn.Module):
    def __init__(self, C, H, shared):
        super().__init__()
        self.H, self.shared, self.scale = H, shared, (C // H) ** -0.5
        if shared:
            self.DLA = DLA(H)
            self.adapt_bn = nn.BatchNorm2d(H)
        self.qkv = nn.Linear(C, C if shared else 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x, a_in):
        B, N, C = x.shape
        H, hd = self.H, C // self.H
        if self.shared:
            attn = self.adapt_bn(self.DLA(a_in)) * self.scale
            v = self.qkv(x).reshape(B, N, H, hd).permute(0, 2, 1, 3)
            a_out = a_in
            self.maps = {"before": a_in, "refined": attn}        # the incoming map and the refined one

        else:
            q, k, v = self.qkv(x).reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4)
            s = math.sqrt(self.scale)
            attn = ((s * q) @ (s * k).transpose(-2, -1)).softmax(-1)
            self.maps = {"": attn}                                # the softmax map (test_attention.py)
            if a_in is not None:
                attn = attn + self.scale * a_in
            a_out = attn
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C)), a_out


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.scale_channel = nn.Parameter(1e-5 * torch.ones(C))
        self.fc1 = nn.Linear(C, 3 * C)
        self.fc2 = nn.Linear(3 * C, C)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))) * self.scale_channel


class Block(nn.Module):
    def __init__(self, C, H, shared):
        super().__init__()
        self.norm1 = nn.LayerNorm(C, eps=LN_EPS)
        self.attn = Attn(C, H, shared)
        self.norm2 = nn.LayerNorm(C, eps=LN_EPS)
        self.mlp = Mlp(C)

    def forward(self, x, a):
        o, a = self.attn(self.norm1(x * 0.5), a)
        x = x + o / 0.5
        x = x + self.mlp(self.norm2(x * 0.5)) / 0.5
        return x, a


class Stem(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(128)
        self.proj = nn.Conv2d(128, C, 8, stride=8)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.proj(x)


class RefinedViT(nn.Module):
    def __init__(self, name, img=224, classes=1000, depth=None):
        super().__init__()
        full, C, H, aux = arch(name)
        depth = depth or full
        self.aux = aux
        self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img // 16) ** 2 + 1, C))
        self.patch_embed = Stem(C)
        self.blocks = nn.ModuleList([Block(C, H, i % 2 == 1) for i in range(depth)])
        self.norm = nn.LayerNorm(C, eps=LN_EPS)
        self.head = nn.Linear(C, classes)
        if aux:
            self.aux_head = nn.Linear(C, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        a = None
        self.atten = []   # the map after each block (a shared block passes its incoming one on): atten_list
        for b in self.blocks:
            x, a = b(x, a)
            self.atten.append(a)
        x = self.norm(x)
        out = self.head(x[:, 0])
        if self.aux and not self.training:
            out = out + 0.5 * self.aux_head(x[:, 1:]).max(1)[0]
        return out


def randomise(model, seed):
    """Every tensor random: fan-in scaled weights, O(1) affine params, positive running variances."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            sd[k] = torch.tensor(int(torch.randint(0, 100, (1,), generator=g)), dtype=torch.int64)
            continue
        u = torch.rand(v.shape, generator=g, dtype=torch.float32)
        if k.endswith("running_var"):
            t = 0.5 + u
        elif k.endswith("running_mean"):
            t = 0.2 * (2 * u - 1)
        elif k.endswith("scale_channel") or (k.endswith(".weight") and v.dim() == 1):   # LN/BN gamma
            t = 0.5 + u
        elif k.endswith(".bias") or k in ("cls_token", "pos_embed"):
            t = 0.2 * (2 * u - 1)
        else:   # Linear / Conv weights: U(±√3/√fan_in) -> unit variance outputs
            fan_in = v[0].numel()
            t = (2 * u - 1) * math.sqrt(3.0 / fan_in)
        sd[k] = t.to(torch.float32)
    return sd


# ------------------------------------------------------------------------------------------ checks

def test_counts(rep):
    for name, want in PARAMS_224.items():
        f = formula_count(name, 224)
        j = info(rep, name)
        got = j and j.get("params")
        rep.check(f"count {name}@224", got == want and f == want, f"vitc {got}, spec formula {f}, want {want}")
        # the eval transform of the official default_cfg (spec §7): bicubic, mean = std = 0.5, crop_pct 0.9 (S),
        # 1.0 (M), 1.13 (L: the crop pads); the drop-path of the yaml files (spec §7: S 0.1, M 0.2; the relabel
        # files, those with aux_head: S 0.2, M 0.25, L 0.25; plain L has no file of its own: L-relabel's)
        size, dense = name.split("_")[2], name.endswith("_dense")
        dp = {"s": 0.2 if dense else 0.1, "m": 0.25 if dense else 0.2, "l": 0.25}[size]
        harness.pretrained_cfg(rep, name, j, {"s": 0.9, "m": 1.0, "l": 1.13}[size], dp,
                               mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    for name, img, want in PARAMS_OTHER:
        p = vitc_ok(rep, f"count {name}@{img}", "info", name, "--img-size", img, "--json")
        got = p and __import__("json").loads(p.stdout).get("params")
        f = formula_count(name, img)
        rep.check(f"count {name}@{img}", got == want and f == want, f"vitc {got}, spec formula {f}, want {want}")
    n = sum(p.numel() for p in RefinedViT("refiner_vit_s").parameters())
    rep.check("reference module count refiner_vit_s@224", n == PARAMS_224["refiner_vit_s"], f"{n}")
    # MACs: spec §8 counts LayerNorm (5/element) and BatchNorm (2/element) too, vitc conv and matmul multiply-adds
    # only: S@224's conv + matmul split (2.20 + 4.54 G) within 1%; each named model between 97% and 100% of the
    # spec's norm-inclusive count (no aux head: the plain models; aux: _dense)
    j = info(rep, "refiner_vit_s")
    g = j.get("gmacs", 0) if j else 0
    rep.check("GMACs refiner_vit_s@224 (conv + matmul)", abs(g - 6.74) <= 0.01 * 6.74, f"{g}, spec split 2.20 + 4.54")
    for name, spec in (("refiner_vit_s", 6.82), ("refiner_vit_s_dense", 6.89), ("refiner_vit_m", 13.57),
                       ("refiner_vit_m_dense", 13.65), ("refiner_vit_l", 19.28), ("refiner_vit_l_dense", 19.38)):
        j = info(rep, name)
        g = j.get("gmacs", 0) if j else 0
        rep.check(f"GMACs {name}@224", 0.97 * spec <= g <= spec, f"{g}, spec {spec} with norms counted")


def kink_margin(m, x):
    """Smallest distance of any ReLU (stem) or ReLU6 (DLA) argument to a kink (0, and 6 for ReLU6) in a float64
    train-mode forward (batch statistics) of a copy of m. An argument within float32 rounding of a kink can fall on
    the other side in vitc, which moves every upstream gradient by ~1% (seen for the stem of L, and for one DLA
    entry of M at 1.1e-6 when vitc's bias summation order changed); such inputs are skipped."""
    low = [float("inf")]

    def relu(t, *a, **k):
        low[0] = min(low[0], float(t.abs().min()))
        return torch.relu(t)

    def relu6(t, *a, **k):
        low[0] = min(low[0], float(torch.minimum(t.abs(), (t - 6).abs()).min()))
        return torch.clamp(t, 0, 6)

    saved = F.relu, F.relu6
    F.relu, F.relu6 = relu, relu6
    try:
        with torch.no_grad():
            copy.deepcopy(m).train()(x.double())
    finally:
        F.relu, F.relu6 = saved
    return low[0]


def ref_grads(m, x, labels, cos_n=0):
    """The reference m's train-mode loss and parameter gradients (zeros where none), its BN running statistics kept;
    cos_n > 0: the loss adds the official SoftTargetCrossEntropyCosReg term over the first cos_n pairs of block maps
    (m.atten)."""
    saved = {k: b.clone() for k, b in m.named_buffers()}   # train mode updates the BN running statistics
    m.train()
    m.zero_grad()
    loss = F.cross_entropy(m(x.double()), labels)
    if cos_n:   # the official loss: 0.1 * cos_loss.mean() / n_comn, cos_loss = sum of CosineSimilarity(dim=1) maps
        cos_loss = sum(F.cosine_similarity(m.atten[i], m.atten[i + 1], dim=1) for i in range(cos_n))
        loss = loss + 0.1 * cos_loss.mean() / cos_n
    loss.backward()
    m.load_state_dict(saved, strict=False)
    return loss, {k: p.grad.clone() if p.grad is not None else torch.zeros_like(p) for k, p in m.named_parameters()}


def check_grads(rep, name, res, m, x, labels, cos_n=0):
    """Compare `vitc grad` output res with the reference m in train mode (ref_grads)."""
    loss, g = ref_grads(m, x, labels, cos_n)
    ref_g = {k: v for k, v in g.items() if m.aux or not k.startswith("aux_head.")}
    if "loss" in res:
        e = abs(scalar(res["loss"]) - loss.item()) / max(1.0, abs(loss.item()))
        rep.check(f"loss {name}", e <= TOL_LOSS, f"vitc {scalar(res['loss']):.7f} vs ref {loss.item():.7f}, rel {e:.2e}")
    else:
        rep.check(f"loss {name}", False, "no `loss` tensor in output")
    # DLA.bn3.bias is zero by construction in train mode (see the docstring): round-off only in both
    zero, structural = compare_grads(rep, name, res, ref_g, TOL_GRAD, zero_by=lambda k: k.endswith("DLA.bn3.bias"))
    zero = [k for k in zero if k not in structural and not k.startswith("aux_head.")]
    rep.check(f"grads non-zero {name}", not zero, f"all-zero gradients: {zero[:8]}")


def test_cos_term(rep, tmp, name, w, x, labels, ref, common, n):
    """The cos_reg term's own gradient: vitc's --cos-reg n minus --cos-reg 0 against the reference's difference (the
    term moves the total by ~1%, under the total's tolerance), within 1% of the difference's largest element."""
    xin = tmp / "ct_xl.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    got = []
    for k in (n, 0):
        out = tmp / f"ct_g{k}.safetensors"
        if vitc_ok(rep, f"grad {name} --cos-reg {k}", "grad", name, "--weights", w, "--input", xin, "--output", out,
                   *common, "--cos-reg", k) is None:
            return
        got.append(st.load(out))
        out.unlink()
    rg = [ref_grads(ref, x, labels, k)[1] for k in (n, 0)]
    diff = {k: (rg[0][k] - rg[1][k]).numpy() for k in rg[0] if "grad/" + k in got[0]}   # (no aux_head here)
    scale = max(float(np.abs(d).max()) for d in diff.values())
    err = max(float(np.abs((got[0]["grad/" + k] - got[1]["grad/" + k]) - d).max()) for k, d in diff.items())
    rep.check(f"cos_reg term's gradient {name} n={n}", scale > 0 and err <= 1e-2 * scale,
              f"max |vitc - ref| of the difference {err:.3g}, its largest element {scale:.3g}")


def run_checks(rep, tmp, tag, name, w, x, labels, ref, common, do_grad, cos_n=None):
    """`vitc forward` logits against the reference in eval mode; with do_grad `vitc grad` against its train mode,
    whose loss has the named model's cos_reg term (COS_REG), or cos_n pairs' given as --cos-reg."""
    harness.forward(rep, tmp, tag, name, ref, w, x, common)
    if do_grad:
        xin, out = tmp / "rc_xl.safetensors", tmp / "rc_g.safetensors"
        st.save(xin, {"input": x, "labels": labels})
        extra = [] if cos_n is None else ["--cos-reg", cos_n]
        if vitc_ok(rep, f"grad {tag}", "grad", name, "--weights", w, "--input", xin, "--output", out,
                   *common, *extra) is not None:
            check_grads(rep, tag, st.load(out), ref, x, labels, COS_REG.get(name, 0) if cos_n is None else cos_n)
        out.unlink(missing_ok=True)


def test_size(rep, tmp, size, img, classes, batch, names, full):
    """Both variants of one size share one random state dict (the dense one adds aux_head)."""
    t0 = time.time()
    depth = None if size == "s" or full else REDUCED_DEPTH
    common = ["--img-size", img, "--num-classes", classes] + (["--depths", depth] if depth else [])
    dense = f"refiner_vit_{size}_dense"
    ref = RefinedViT(dense, img, classes, depth)
    sd_dense = eps_sensitive(randomise(ref, seed=ord(size)), ord(size) + 1)
    ref.load_state_dict({k: (v if v.dtype == torch.int64 else v.double()) for k, v in sd_dense.items()})
    for seed in range(7, 57):   # an input whose ReLUs are not within float32 noise of a kink (see kink_margin)
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(batch, 3, img, img, generator=g, dtype=torch.float32)
        labels = torch.randint(0, classes, (batch,), generator=g)
        if kink_margin(ref, x) > 1e-5:
            break
    s2 = img + 14
    for _ in range(50):
        x2 = torch.randn(batch, 3, s2, s2, generator=g, dtype=torch.float32)
        if kink_margin(ref, x2) > 1e-5:
            break
    for name in names:
        is_dense = name.endswith("_dense")
        sd = sd_dense if is_dense else {k: v for k, v in sd_dense.items() if not k.startswith("aux_head.")}
        ref.aux = is_dense
        if size == "s":   # names/shapes of `vitc init` (for M/L the strict loader of `vitc forward` checks them)
            init = tmp / f"{name}_init.safetensors"
            if vitc_ok(rep, f"init {name}", "init", name, "-o", init, *common) is not None:
                got = {k: tuple(v.shape) for k, v in st.load(init).items()}
                want = {k: tuple(v.shape) for k, v in sd.items()}
                rep.check(f"names/shapes {name}", got == want,
                          f"missing {sorted(set(want) - set(got))[:6]}, extra {sorted(set(got) - set(want))[:6]}, "
                          f"shape diffs {[k for k in want if k in got and got[k] != want[k]][:6]}")
                init.unlink()
        w = tmp / f"{size}_w.safetensors"
        st.save(w, sd)
        run_checks(rep, tmp, name, name, w, x, labels, ref, common, full or not is_dense or size == "s")
        if name == "refiner_vit_s":   # 14 px more: the stem's 8x8/8 proj cuts them, the official code's rule
            run_checks(rep, tmp, f"{name}@{s2}", name, w, x2, labels, ref, ["--img-size", s2] + common[2:], True)
            run_checks(rep, tmp, f"{name} --cos-reg 0", name, w, x, labels, ref, common, True, cos_n=0)
            # one pair, one map: the term is the constant 0.1 (no gradient), as the official loss adds it
            run_checks(rep, tmp, f"{name} --cos-reg 1", name, w, x, labels, ref, common, True, cos_n=1)
            test_cos_term(rep, tmp, name, w, x, labels, ref, common, 2)
        if name == "refiner_vit_m":   # every pair of the 4 blocks, two of them the map a shared block passed on
            run_checks(rep, tmp, f"{name} --cos-reg 3", name, w, x, labels, ref, common, True, cos_n=3)
            test_cos_term(rep, tmp, name, w, x, labels, ref, common, 3)
        w.unlink()
    print(f"# refiner_vit_{size}{f' depth {depth}' if depth else ''}: {time.time() - t0:.1f}s", flush=True)


class TransformAttn(nn.Module):
    """Refined_Attention with apply_transform=True and no incoming map (vitc's `--attn refiner` in the ViT host)."""

    def __init__(self, C, H):
        super().__init__()
        self.H, self.scale = H, (C // H) ** -0.5
        self.qkv = nn.Linear(C, 3 * C)
        self.DLA = DLA(H)
        self.adapt_bn = nn.BatchNorm2d(H)
        self.proj = nn.Linear(C, C)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
        a = ((q * self.scale) @ k.transpose(-2, -1)).softmax(-1)
        attn = self.adapt_bn(self.DLA(a))
        self.maps = {"": a, "refined": attn}                  # before and after refinement (test_attention.py)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


def test_vit_attn_refiner(rep, tmp, model="vit_fmnist_tiny"):
    j = info(rep, model) or {}
    init = tmp / "fmr_init.safetensors"
    if vitc_ok(rep, "init --attn refiner", "init", model, "--attn", "refiner", "-o", init) is None:
        return
    sd0 = st.load(init)
    heads = j.get("num_heads") or sd0["blocks.0.attn.adapt_bn.weight"].shape[0]
    cfg = vit_ref.config_from_state_dict(sd0, heads)
    m = vit_ref.ViT(cfg)
    for b in m.blocks:
        b.attn = TransformAttn(cfg["embed_dim"], heads)
    got = {k: tuple(v.shape) for k, v in sd0.items()}
    want = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    rep.check(f"names/shapes {model} --attn refiner", got == want,
              f"missing {sorted(set(want) - set(got))[:6]}, extra {sorted(set(got) - set(want))[:6]}")
    sd = eps_sensitive(randomise(m, seed=3), 4)
    m.load_state_dict({k: (v if v.dtype == torch.int64 else v.double()) for k, v in sd.items()})
    w, xin = tmp / "fmr_w.safetensors", tmp / "fmr_x.safetensors"
    st.save(w, sd)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, cfg["in_chans"], cfg["img_size"], cfg["img_size"], generator=g, dtype=torch.float32)
    labels = torch.randint(0, cfg["num_classes"], (4,), generator=g)
    st.save(xin, {"input": x, "labels": labels})
    out = tmp / "fmr_y.safetensors"
    tag = f"{model} --attn refiner"
    if vitc_ok(rep, f"fwd {tag}", "forward", model, "--attn", "refiner", "--weights", w, "--input", xin,
               "--output", out):
        m.eval()
        with torch.no_grad():
            r = m(x.double())
        e = scale_err(st.load(out)["logits"], r)
        rep.check(f"fwd {tag}", e <= TOL_FWD, f"logits rel err {e:.2e}")
    out = tmp / "fmr_g.safetensors"
    if vitc_ok(rep, f"grad {tag}", "grad", model, "--attn", "refiner", "--weights", w, "--input", xin,
               "--output", out) is not None:
        m.aux = False
        check_grads(rep, tag, st.load(out), m, x, labels)


def test_apply_transform(rep, tmp):
    """--apply-transform (spec §5.1, the paper's refine-every-block mode): every block is plain attention followed by
    adapt_bn(DLA(·)) with expand ratio head_expand (6 for S), qkv (3C). Checks the count from that formula, and that
    `vitc grad` runs with finite loss and gradients (no PyTorch reference for this unused official option yet)."""
    depth, C, H, _ = arch("refiner_vit_s")
    plain = 10 * C * C + 13 * C
    Hx = 6 * H
    dla = H * Hx + 2 * Hx + 9 * Hx + 2 * Hx + Hx * H + 2 * H
    want = formula_count("refiner_vit_s", 224) - depth // 2 * (plain + 8 * C * C + 11 * C + 6 * H * H + 43 * H) \
        + depth * (plain + dla + 2 * H)
    j = info(rep, "refiner_vit_s", "--apply-transform") or {}
    rep.check("count refiner_vit_s --apply-transform", j.get("params") == want, f"{j.get('params')} vs {want}")
    common = ["--img-size", 32, "--num-classes", 10, "--apply-transform"]
    w, xin, out = tmp / "at_w.safetensors", tmp / "at_x.safetensors", tmp / "at_g.safetensors"
    g = torch.Generator().manual_seed(3)
    st.save(xin, {"input": torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float32), "labels": torch.tensor([1, 7])})
    if vitc_ok(rep, "init --apply-transform", "init", "refiner_vit_s", "-o", w, *common) is None:
        return
    if vitc_ok(rep, "grad --apply-transform", "grad", "refiner_vit_s", "--weights", w, "--input", xin,
               "--output", out, *common) is None:
        return
    res = st.load(out)
    bad = [k for k, v in res.items() if not np.isfinite(np.asarray(v)).all()]
    rep.check("grad --apply-transform finite", not bad and "grad/blocks.0.attn.DLA.conv_exp.weight" in res,
              f"non-finite: {bad[:5]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--img-size", type=int, default=32)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="M and L at full depth, and the gradients of refiner_vit_{m,l}_dense")
    args = ap.parse_args()
    rep = Report()
    if have_vitc(rep):
        tmp = tmpdir()
        test_counts(rep)
        test_vit_attn_refiner(rep, tmp)
        test_apply_transform(rep, tmp)
        names = args.models.split(",")
        for size in "sml":
            sel = [n for n in MODELS if n in names and n.split("_")[2] == size]
            if sel:
                test_size(rep, tmp, size, args.img_size, args.num_classes, args.batch, sel, args.full)
    rep.finish()


if __name__ == "__main__":
    main()
