"""Reference test of vitc's MSF attention and SimpleViT host against an independent PyTorch model written from
../shared/specs/spec-msf.md (GroupLinear, AttentionMSF / Attention, SimpleViTflexAtt), not from the C code.

Checks (reference in float64 from the same float32 weights/inputs):
  (map)   the GroupLinear interleave/block index mapping (spec §3) equals a brute-force dense expansion built
          element by element, and the MSF logits equal softmax_j(-0.5·s·‖q_i - k_j‖²)
  (count) every named simplevit model at 224 / 1000 classes: `vitc info --json` params and
          params_linear_conv_weights equal the spec §6 table (and the reference module's counts), plus 2·MACs (G)
          within 0.01 of the spec's counted FLOPs where the spec gives them; alias SimpleViTS_msf-g2 resolves
  (names) `vitc init` names/shapes equal the reference state_dict (simplevit_ti_* at 32 px / 10 classes)
  (fwd)   named models (default: all 16, ViT-B at depth 2 but simplevit_b_msf_g2 at its full depth 12; --quick: the
          four attention types of ViT-Ti plus ss_msf_g2 and s_msf)
          at --img-size 32 --num-classes 10 (2x2 tokens), random weights with non-trivial LN:
          `vitc forward` logits max|a-b| / max|b| <= 1e-4
  (grad)  `vitc grad`: loss <= 1e-4 relative, every grad/<param> max|a-b| / max|b| <= 1e-3, each non-zero
  (nonsquare) simplevit_ti_msf (depth 1) on 32x48 and 48x32 inputs (the size taken from the input): the position
          embedding of the input's own grid, the same forward / grad checks
  (vit)   vit_fmnist_tiny with --attn msf, msf_g2 and msf_g2_block (ViT host: qkv replaced by qkvp with bias, proj, as
          in the Swin integration of spec §5; blocks.{i}.attn.*):
          the same forward / grad checks
Run: /usr/bin/python3 tests/reference/test_msf.py [--quick | --models a,b]    (needs ./vitc or $VITC)
"""
import argparse
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import st
import vit_ref
from common import Report, compare_grads, have_vitc, info, scalar, scale_err, tmpdir, vitc_ok

os.environ.setdefault("OMP_NUM_THREADS", "1")        # tiny graphs: one thread avoids spinning on a shared machine
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

TOL_FWD, TOL_LOSS, TOL_GRAD = 1e-4, 1e-4, 1e-3
SIZES = {"ti": dict(dim=192, depth=12, heads=3), "ss": dict(dim=384, depth=6, heads=6),
         "s": dict(dim=384, depth=12, heads=6), "b": dict(dim=768, depth=12, heads=12)}
ATTS = {"orig": (False, 1), "msf": (True, 1), "msf_g2": (True, 2), "orig_g2": (False, 2)}
# spec §6: (all params, Linear weights only, counted FLOPs = 2·MACs in G); None where the spec has no row
SPEC = {
    "simplevit_ti_orig": (5_672_104, 5_647_872, 2.49), "simplevit_ti_msf": (6_114_472, 6_090_240, 2.67),
    "simplevit_ti_msf_g2": (5_229_736, 5_205_504, 2.32), "simplevit_ss_orig": (11_320_936, 11_295_744, 4.63),
    "simplevit_ss_msf": (12_205_672, 12_180_480, 4.98), "simplevit_ss_msf_g2": (10_436_200, 10_411_008, 4.29),
    "simplevit_s_orig": (21_958_504, 21_912_576, 9.15), "simplevit_s_msf": (23_727_976, 23_682_048, 9.84),
    "simplevit_s_msf_g2": (20_189_032, 20_143_104, 8.45), "simplevit_s_orig_g2": (19_304_296, 19_258_368, 8.11),
    "simplevit_b_orig": (86_381_800, 86_292_480, 34.94), "simplevit_b_msf": (93_459_688, 93_370_368, 37.72),
    "simplevit_b_msf_g2": (79_303_912, 79_214_592, 32.17),
}
ALIASES = {"SimpleViTS_orig": "simplevit_s_orig", "SimpleViTS_msf": "simplevit_s_msf",
           "SimpleViTS_msf-g2": "simplevit_s_msf_g2", "SimpleViTS_orig-g2": "simplevit_s_orig_g2"}


# ------------------------------------------------------------------------------------------ reference (spec)

class GroupLinear(nn.Module):
    """spec §3: weight (E, Din/G); group g reads inputs [g·D', (g+1)·D') and weight rows g·E' + e;
    output channel e·G + g (interleave) or g·E' + e (block)."""

    def __init__(self, din, eout, groups, mode="interleave", bias=False):
        super().__init__()
        self.G, self.mode = groups, mode
        self.weight = nn.Parameter(torch.empty(eout, din // groups))
        self.bias = nn.Parameter(torch.empty(eout)) if bias else None

    def forward(self, x):
        G = self.G
        E, Dg = self.weight.shape
        xg = x.reshape(*x.shape[:-1], G, Dg)                               # (..., g, c)
        y = torch.einsum("...gc,gec->...ge", xg, self.weight.reshape(G, E // G, Dg))
        if self.mode == "interleave":
            y = y.transpose(-1, -2)                                        # (..., e, g) -> o = e·G + g
        y = y.reshape(*x.shape[:-1], E)
        return y if self.bias is None else y + self.bias                   # bias after the (interleaved) product


def proj(din, eout, groups, mode="interleave"):
    return nn.Linear(din, eout, bias=False) if groups == 1 else GroupLinear(din, eout, groups, mode)


class Attn(nn.Module):
    """AttentionMSF (probe=True) / Attention (probe=False), spec §2; optional inner LayerNorm `norm`."""

    def __init__(self, dim, heads, dim_head, probe, groups, norm=True, eps=1e-5, mode="interleave"):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dh, self.probe, self.scale = heads, dim_head, probe, dim_head ** -0.5
        if norm:
            self.norm = nn.LayerNorm(dim, eps=eps)
        self.has_norm = norm
        if probe:
            self.to_qkvp = proj(dim, 4 * inner, groups, mode)
        else:
            self.to_qkv = proj(dim, 3 * inner, groups, mode)
        self.to_out = nn.Linear(inner, dim, bias=False)

    def forward(self, x):
        if self.has_norm:
            x = self.norm(x)
        t = self.to_qkvp(x) if self.probe else self.to_qkv(x)
        B, n, _ = t.shape
        chunks = [c.reshape(B, n, self.heads, self.dh).transpose(1, 2) for c in t.chunk(4 if self.probe else 3, -1)]
        q, k, v = chunks[:3]
        dots = q @ k.transpose(-1, -2)
        if self.probe:
            dots = dots - 0.5 * (k * k).sum(-1)[:, :, None, :]
        attn = torch.softmax(dots * self.scale, dim=-1)
        o = attn @ v
        if self.probe:
            o = o - chunks[3]
        return self.to_out(o.transpose(1, 2).reshape(B, n, self.heads * self.dh))


class HostAttn(nn.Module):
    """MSF in a host with a packed qkv projection (spec-msf §5, the Swin integration; vitc's ViT host uses it too):
    `qkvp` (4C, grouped per the name, bias), Gaussian-kernel logits scaled as a whole, o = P·v − p, `proj` (bias)."""

    def __init__(self, dim, heads, groups, mode="interleave"):
        super().__init__()
        self.heads, self.dh = heads, dim // heads
        self.qkvp = nn.Linear(dim, 4 * dim) if groups == 1 else GroupLinear(dim, 4 * dim, groups, mode, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        t = self.qkvp(x)
        B, n, C4 = t.shape
        q, k, v, p = [c.reshape(B, n, self.heads, self.dh).transpose(1, 2) for c in t.chunk(4, -1)]
        dots = q @ k.transpose(-1, -2) - 0.5 * (k * k).sum(-1)[:, :, None, :]
        a = torch.softmax(dots * self.dh ** -0.5, dim=-1)
        o = a @ v - p
        # the maps (test_attention.py): Gaussian-kernel probabilities, and plain softmax logits of the same q, k
        self.maps = {"": a, "softmax_qk": torch.softmax(q @ k.transpose(-1, -2) * self.dh ** -0.5, dim=-1)}
        return self.proj(o.transpose(1, 2).reshape(B, n, C4 // 4))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        return self.net(x)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp, probe, groups):
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleList([Attn(dim, heads, dim_head, probe, groups), FeedForward(dim, mlp)])
                                    for _ in range(depth))

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x


def posemb_sincos_2d(h, w, dim, temperature=10000):
    """spec §4.2 step 3, in float32 as the official code: x (column) terms first, ω denominator dim/4 − 1."""
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    omega = torch.arange(dim // 4) / (dim // 4 - 1)
    omega = 1.0 / (temperature ** omega)
    y = y.flatten()[:, None] * omega[None, :]
    x = x.flatten()[:, None] * omega[None, :]
    return torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1).float()


class Patchify(nn.Module):
    """'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.p
        return x.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1).reshape(B, (H // p) * (W // p), p * p * C)


class SimpleViT(nn.Module):
    def __init__(self, size, att, img=224, classes=1000, patch=16, channels=3, depth=None):
        super().__init__()
        c = dict(SIZES[size], **({"depth": depth} if depth else {}))
        probe, groups = ATTS[att]
        D, pd = c["dim"], channels * patch * patch
        self.to_patch_embedding = nn.Sequential(Patchify(patch), nn.LayerNorm(pd), nn.Linear(pd, D), nn.LayerNorm(D))
        self.grid = img // patch
        self.D = D
        self.transformer = Transformer(D, c["depth"], c["heads"], 64, 4 * D, probe, groups)
        self.linear_head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, classes))

    def forward(self, img):
        x = self.to_patch_embedding(img)
        p = self.to_patch_embedding[0].p          # the grid of this input (rows, columns), = self.grid when square
        x = x + posemb_sincos_2d(img.shape[-2] // p, img.shape[-1] // p, self.D).to(x.dtype)
        x = self.transformer(x)
        return self.linear_head(x.mean(dim=1))


class MSFViT(vit_ref.ViT):
    """timm ViT host (vit_ref) with each block's qkv replaced by MSF's qkvp (HostAttn, dim_head = D/heads)."""

    def __init__(self, cfg, groups, mode="interleave"):
        super().__init__(cfg)
        D, H = cfg["embed_dim"], cfg["num_heads"]
        for b in self.blocks:
            b.attn = HostAttn(D, H, groups, mode=mode)


def linear_weight_count(model):
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, (nn.Linear, GroupLinear, nn.Conv2d)))


def random_state_dict(model, seed):
    """float32 weights: Linear/Group weights U(±√3/√fan_in) (unit-variance outputs), biases N(0, .1),
    LayerNorm weight 1 + N(0, .2), bias N(0, .2); ViT tokens N(0, .1)."""
    rng = np.random.default_rng(seed)
    lnames = {n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    out = {}
    for k, v in model.state_dict().items():
        shape = tuple(v.shape)
        mod = k.rsplit(".", 1)[0]
        if mod in lnames:
            r = rng.standard_normal(shape, dtype=np.float32)
            a = 1 + 0.2 * r if k.endswith("weight") else 0.2 * r
        elif len(shape) >= 2 and k not in ("cls_token", "pos_embed"):
            fan = int(np.prod(shape[1:]))
            a = (rng.random(shape, dtype=np.float32) * 2 - 1) * np.float32(math.sqrt(3.0 / fan))
        else:
            a = 0.1 * rng.standard_normal(shape, dtype=np.float32)
        out[k] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    return out


# ------------------------------------------------------------------------------------------ checks

def test_mapping(rep):
    g = torch.Generator().manual_seed(3)
    ok, worst = True, 0.0
    for din, eout, G in [(8, 12, 2), (12, 36, 3), (384, 1536, 2)]:
        for mode in ("interleave", "block"):
            m = GroupLinear(din, eout, G, mode).double()
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.weight.shape, generator=g, dtype=torch.float64))
            W = m.weight.detach()
            Dp, Ep = din // G, eout // G
            Wd = torch.zeros(eout, din, dtype=torch.float64)
            for gi in range(G):
                for e in range(Ep):
                    o = e * G + gi if mode == "interleave" else gi * Ep + e
                    for c in range(0, Dp, max(1, Dp // 16)) if din > 64 else range(Dp):
                        Wd[o, gi * Dp + c] = W[gi * Ep + e, c]
            if din > 64:   # big case: fill the rest vectorised, the loop above spot-checked the formula
                for gi in range(G):
                    rows = torch.arange(Ep) * G + gi if mode == "interleave" else gi * Ep + torch.arange(Ep)
                    Wd[rows, gi * Dp:(gi + 1) * Dp] = W[gi * Ep:(gi + 1) * Ep]
            x = torch.randn(5, din, generator=g, dtype=torch.float64)
            err = float((m(x) - x @ Wd.T).abs().max())
            worst = max(worst, err)
            ok &= err < 1e-10
    # spec §3 consequence for MSF-g2: q chunk (o < I) takes even outputs from group 0 rows 0..I/2-1
    I_ = 8
    m = GroupLinear(8, 4 * I_, 2).double()
    with torch.no_grad():
        m.weight.copy_(torch.arange(m.weight.numel(), dtype=torch.float64).reshape(m.weight.shape))
    x = torch.zeros(1, 8, dtype=torch.float64)
    x[0, 0] = 1.0                                           # picks column 0 of group 0's rows
    y = m(x)[0]
    ok &= bool(torch.equal(y[0:I_:2], m.weight[0:I_ // 2, 0]) and torch.all(y[1:I_:2] == 0))
    rep.check("(map) GroupLinear interleave/block = dense expansion", ok, f"max err {worst:.1e}")
    # Gaussian logits identity
    q, k = torch.randn(2, 3, 5, 8, dtype=torch.float64), torch.randn(2, 3, 6, 8, dtype=torch.float64)
    a = torch.softmax((q @ k.transpose(-1, -2) - 0.5 * (k * k).sum(-1)[:, :, None, :]) * 8 ** -0.5, -1)
    b = torch.softmax(-0.5 * 8 ** -0.5 * torch.cdist(q, k) ** 2, -1)
    rep.check("(map) MSF logits = Gaussian kernel", float((a - b).abs().max()) < 1e-12)
    pe = posemb_sincos_2d(14, 14, 384)
    rep.check("(map) posemb spot values", abs(pe[1, 0] - 0.84147) < 1e-5 and abs(pe[1, 1] - 0.78803) < 1e-5
              and pe[14, 96] == 1.0, f"{float(pe[1, 0]):.5f} {float(pe[1, 1]):.5f} {float(pe[14, 96])}")


def test_counts(rep):
    for size in SIZES:
        for att in ATTS:
            name = f"simplevit_{size}_{att}"
            j = info(rep, name)
            if j is None:
                continue
            ref = SimpleViT(size, att)
            full = sum(v.numel() for v in ref.state_dict().values())
            lin = linear_weight_count(ref)
            want = SPEC.get(name)
            got = (j.get("params"), j.get("params_linear_conv_weights"))
            ok = got == (full, lin) and (want is None or got == want[:2])
            det = f"vitc {got}, reference {(full, lin)}" + (f", spec {want[:2]}" if want else " (no spec row)")
            if want and "gmacs" in j:
                fl = 2 * j["gmacs"]
                ok &= abs(fl - want[2]) <= 0.0101
                det += f"; 2·GMACs {fl:.3f} vs spec {want[2]}"
            rep.check(f"(count) {name}", ok, det)
            # the eval transform of the MSF README's torchvision train.py: resize 256 (shorter side), crop 224,
            # its --interpolation default bilinear, ImageNet mean and std
            pre = j.get("pretrained", {})
            got = (pre.get("crop_pct"), pre.get("interpolation"), pre.get("resize"))
            rep.check(f"(cfg) {name} eval transform", got == (0.875, "bilinear", "shorter side"),
                      f"{got}, want (0.875, 'bilinear', 'shorter side')")
    for al, name in ALIASES.items():
        j = info(rep, al)
        rep.check(f"(count) alias {al}", j is not None and j.get("name") == name, f"-> {j and j.get('name')}")


def run_model(rep, tmp, tag, name, ref, extra_args, seed, B=2, img=32, chans=3, classes=10):
    """random weights -> vitc forward + grad vs the float64 reference module (img: a side, or (height, width))."""
    sd = random_state_dict(ref, seed)
    init = tmp / "init.safetensors"
    if vitc_ok(rep, f"{tag} init", "init", name, "-o", init, *extra_args) is None:
        return
    got = {k: v.shape for k, v in st.load(init).items()}
    want = {k: tuple(v.shape) for k, v in sd.items()}
    if not rep.check(f"{tag} names/shapes", got == want,
                     f"missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}, "
                     f"shape diffs {[(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:5]}"):
        return
    w = tmp / "w.safetensors"
    st.save(w, sd)
    g = torch.Generator().manual_seed(seed + 100)
    h, wd = (img, img) if isinstance(img, int) else img
    x = torch.randn(B, chans, h, wd, generator=g)
    labels = torch.randint(0, classes, (B,), generator=g)
    xin, out = tmp / "x.safetensors", tmp / "y.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    ref = ref.double()
    ref.load_state_dict({k: v.double() for k, v in sd.items()}, strict=True)
    ref.zero_grad()
    logits = ref(x.double())
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    ref_g = {k: p.grad.detach() for k, p in ref.named_parameters()}
    if vitc_ok(rep, f"{tag} forward", "forward", name, "--weights", w, "--input", xin, "--output", out,
               *extra_args) is not None:
        y = st.load(out).get("logits")
        if y is None or y.shape != tuple(logits.shape):
            rep.check(f"{tag} forward", False, f"logits {None if y is None else y.shape}")
        else:
            e = scale_err(y, logits)
            rep.check(f"{tag} forward", e <= TOL_FWD, f"rel err {e:.2e}")
    gout = tmp / "g.safetensors"
    if vitc_ok(rep, f"{tag} grad", "grad", name, "--weights", w, "--input", xin, "--output", gout,
               *extra_args) is not None:
        res = st.load(gout)
        if "loss" not in res:
            rep.check(f"{tag} loss", False, "no `loss` in output")
        else:
            lv, rl = scalar(res["loss"]), float(loss)
            e = abs(lv - rl) / max(1.0, abs(rl))
            rep.check(f"{tag} loss", e <= TOL_LOSS, f"vitc {lv:.7f} vs ref {rl:.7f}")
        zero, _ = compare_grads(rep, tag, res, ref_g, TOL_GRAD)
        rep.check(f"{tag} grads non-zero", not zero, f"all-zero: {zero[:8]}")


# Quick sweep (--quick): every attention type on ViT-Ti, plus ViT-SS MSF-g2 and ViT-S MSF. The default (make test)
# runs all 16 named models; ViT-B at depth 2 (`--depths 2`) except MSF-g2, the full-size one: the four full ViT-B
# runs took 55 of the file's 84 s (each moves ~350 MB of weights).
FULL_B = "simplevit_b_msf_g2"
QUICK = ["simplevit_ti_orig", "simplevit_ti_msf", "simplevit_ti_msf_g2", "simplevit_ti_orig_g2",
         "simplevit_ss_msf_g2", "simplevit_s_msf"]


def test_models(rep, tmp, names):
    for i, name in enumerate(names):
        _, size, att = name.split("_", 2)
        t0 = time.time()
        depth = 2 if size == "b" and name != FULL_B else None
        run_model(rep, tmp, f"(simplevit) {name}" + (f" depth {depth}" if depth else ""), name,
                  SimpleViT(size, att, img=32, classes=10, depth=depth),
                  ["--img-size", 32, "--num-classes", 10] + (["--depths", depth] if depth else []), seed=10 + i)
        print(f"# {name}: {time.time() - t0:.1f} s", flush=True)


def test_vit_host(rep, tmp):
    name = "vit_fmnist_tiny"
    j = info(rep, name)
    if j is None:
        return
    cfg = dict(patch_size=j["patch_size"], embed_dim=j["embed_dim"], depth=j["depth"], num_heads=j["num_heads"],
               img_size=j["img_size"], in_chans=j["in_chans"], num_classes=j["num_classes"],
               mlp_hidden=None)
    init = tmp / "vit_init.safetensors"
    if vitc_ok(rep, "(vit) init", "init", name, "-o", init) is None:
        return
    cfg["mlp_hidden"] = st.load(init)["blocks.0.mlp.fc1.weight"].shape[0]
    for groups, att, mode in [(1, "msf", None), (2, "msf_g2", "interleave"), (2, "msf_g2_block", "block")]:
        ref = MSFViT(cfg, groups, mode)
        run_model(rep, tmp, f"(vit) {name} --attn {att}", name, ref, ["--attn", att], seed=50 + groups, B=3,
                  img=cfg["img_size"], chans=cfg["in_chans"], classes=cfg["num_classes"])


def test_nonsquare(rep, tmp):
    """SimpleViT on 32x48 and 48x32 inputs (`vitc forward` / `grad` take H x W from the input): the position
    embedding's columns x = t mod w and rows y = t div w of the input's own grid (spec §4.2 step 3)."""
    name = "simplevit_ti_msf"
    for k, (h, wd) in enumerate(((32, 48), (48, 32))):
        run_model(rep, tmp, f"(nonsquare) {name} on {h}x{wd}", name,
                  SimpleViT("ti", "msf", img=32, classes=10, depth=1), ["--depths", 1, "--num-classes", 10],
                  seed=77 + k, img=(h, wd))


def test_many_keys(rep, tmp):
    """192 px (144 tokens): MSF's attention past the small-key tiles (at most 112 keys), the path of the named models
    at 224 px; depth 1."""
    for k, att in enumerate(("msf", "msf_g2")):
        name = f"simplevit_ti_{att}"
        run_model(rep, tmp, f"(144 keys) {name}", name, SimpleViT("ti", att, img=192, classes=10, depth=1),
                  ["--img-size", 192, "--depths", 1, "--num-classes", 10], seed=90 + k, img=192)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="forward/grad on 6 of the 16 named models")
    ap.add_argument("--models", default=None, help="comma-separated simplevit names for forward/grad")
    args = ap.parse_args()
    torch.set_num_threads(2)
    names = (args.models.split(",") if args.models else QUICK if args.quick
             else [f"simplevit_{s}_{a}" for s in SIZES for a in ATTS])
    rep = Report()
    test_mapping(rep)
    if have_vitc(rep):
        tmp = tmpdir()
        test_counts(rep)
        test_vit_host(rep, tmp)
        test_nonsquare(rep, tmp)
        test_many_keys(rep, tmp)
        test_models(rep, tmp, names)
    rep.finish()


if __name__ == "__main__":
    main()
