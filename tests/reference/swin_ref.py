"""Independent PyTorch reference of the Swin host family, written from the Swin paper's semantics, the official
microsoft/Swin-Transformer and LeapLabTHU/FLatten-Transformer configs, torchvision 0.14's swin_t/swin_s
semantics, shared/specs/spec-flatten.md (§1.2 HEAD formula, §2) and shared/specs/spec-msf.md (§2, §3, §5), not
from vitc.  Module and parameter names equal the official state_dict keys, persistent buffers included.

Three layouts (MODELS[name]['layout'] / ['attn']):
  microsoft    SwinTransformer / FLattenSwinTransformer keys: patch_embed.proj (Conv k=s=patch), patch_embed.norm,
               layers.{i}.blocks.{j}.{attn_mask (buffer, float32 (nW, w², w²), shifted blocks only), norm1,
               attn.{relative_position_bias_table ((2w-1)², heads), relative_position_index (int64 (w², w²)), qkv,
               proj}, norm2, mlp.fc1, mlp.fc2}, layers.{i}.downsample.{reduction (no bias), norm} (i < last), norm,
               head.  FLatten 'L' blocks: attn.{scale (1,1,C), positional_encoding (1,w²,C), qkv, proj, dwc
               (d,1,5,5)+bias (d)}; no RPB, and the mask (if a buffer exists) is ignored.
               Input must be the build size; window resolution per block: if res <= window: window = res, shift 0;
               else res % window == 0 is required and odd blocks shift window//2.  Stage sizes must be even before
               every PatchMerging.
  torchvision  torchvision.models.swin_t/swin_s keys: features.0.0 (Conv), features.0.2 (LN), features.{2i+1}.{j}.
               {norm1, attn.{relative_position_bias_table, relative_position_index (int64, flattened (w⁴,)), qkv |
               qkvp, proj}, norm2, mlp.0, mlp.3}, features.{2i+2}.{reduction, norm}, norm, head.  No attn_mask
               buffer.  Any input size: each block pads its (normed) map with zeros to window multiples on the
               bottom/right, zeroes the shift per axis when window >= padded size, builds the mask on the padded
               map, crops after; PatchMerging zero-pads odd H/W at the bottom/right.  Padded tokens are NOT masked:
               they enter attention as keys/values carrying the qkv bias.
  msf          torchvision layout with attn.qkvp (Linear D->4D, or interleaved GroupLinear weight (4D, D/2) for
               g2, bias (4D) added after the interleave); chunks q,k,v,p; logits (q·kᵀ − 0.5‖k‖²)·d^-1/2 + RPB
               (+ mask); o = softmax·v − p; proj.  (spec-msf §5; inferred integration, no official code.)

API
  MODELS[name] -> config dict; PARAMS[name] -> exact parameter count; GMACS[name] -> spec figure (G MACs)
  build(name, img_size=None, num_classes=None, in_chans=None, dims=None, depths=None, heads=None, window=None,
        la_window=None) -> nn.Module   (window: int or per-stage list, replaces the softmax-window ('S') stages'
        window; la_window: FLatten's WINDOW_SIZE for the 'L' stages, which also selects the S rule 7 / 12)
  randomize(model, seed) -> float32 state_dict with every learnable tensor random, buffers canonical
  count_params(model); count_macs(model, img_size=None) (analytic: Linear/Conv/attention-matmul multiply-adds)
  model.stage_maps(x) -> per-stage (B, H_i, W_i, C_i) maps; model.cfg -> the resolved config
  traced_macs(model, x) (counts aten mm/addmm/bmm/convolution while running x; cross-check of count_macs)
Models run in float64 after .double(); DropPath / dropout are identity.  Key order equals the official
state_dicts (MSF: qkvp sits where torchvision's qkv is).  During development the same random state_dict was
loaded (strict) into the official classes (microsoft f82860b, FLatten abdb115, torchvision 0.14.1, MSF GroupLinear
ce23d1f patched into torchvision's window attention): outputs and every gradient agreed bit for bit in float64.

Self-test (/usr/bin/python3 tests/reference/swin_ref.py): exact parameter counts of every named model, MACs
within 1 % of the spec tables, analytic = traced MACs, RPB index / shift mask against dense brute-force window
attention, microsoft == torchvision layout where both are defined, float64 forward+backward of reduced models.
"""
import math
import time

import torch
import torch.nn.functional as F

import flatten_ref
from torch import nn

# Attention modules record their maps in .maps only when this is True (test_attention.py sets it); off (the
# default, as bench/compare_torch.py times the references) no block's map outlives its forward.
RECORD_MAPS = False
# True: softmax attention through torch's fused F.scaled_dot_product_attention where this torch has it (2.x, as timm
# does), unless maps are recorded; bench/compare_torch.py turns it on for its anchors (the tests: the written-out form)
USE_SDPA = False

LN_EPS = 1e-5           # every LayerNorm of every layout (nn.LayerNorm default)
MASK_NEG = -100.0       # shifted-window mask value (not -inf)
P_FOCUS, KERNEL = 3, 5  # FLatten focusing factor and DWC kernel (config.py MODEL.LA)


# ------------------------------------------------------------------------------------------------ configs

def _cfg(layout, embed, depths, heads, window, img, dpr, attn="SSSS", msf=None, la_window=None):
    return dict(layout=layout, img_size=img, patch=4, in_chans=3, num_classes=1000,
                dims=[embed * 2 ** i for i in range(4)], depths=list(depths), heads=list(heads),
                config_window=window, la_window=la_window, attn=attn, mlp_ratio=4.0, qkv_bias=True,
                ln_eps=LN_EPS, drop_path_rate=dpr, msf=msf,
                focusing_factor=P_FOCUS if "L" in attn else None, kernel_size=KERNEL if "L" in attn else None)


T, S = [2, 2, 6, 2], [2, 2, 18, 2]
H96, H128 = [3, 6, 12, 24], [4, 8, 16, 32]
MSF1 = dict(groups=1, mode="interleave", qkvp_bias=True)
MSF2 = dict(groups=2, mode="interleave", qkvp_bias=True)
MODELS = {
    # microsoft/Swin-Transformer configs/swin/*.yaml (384: the _finetune yaml, drop path 0.5; 22kto1k uses 0.2)
    "swin_tiny_patch4_window7_224": _cfg("microsoft", 96, T, H96, 7, 224, 0.2),
    "swin_small_patch4_window7_224": _cfg("microsoft", 96, S, H96, 7, 224, 0.3),
    "swin_base_patch4_window7_224": _cfg("microsoft", 128, S, H128, 7, 224, 0.5),
    "swin_base_patch4_window12_384": _cfg("microsoft", 128, S, H128, 12, 384, 0.5),
    # LeapLabTHU/FLatten-Transformer cfgs/flatten_swin_*.yaml: WINDOW_SIZE 56 / 96, ATTN_TYPE LLSS
    "flatten_swin_tiny": _cfg("microsoft", 96, T, H96, 7, 224, 0.2, "LLSS", la_window=56),
    "flatten_swin_small": _cfg("microsoft", 96, S, H96, 7, 224, 0.3, "LLSS", la_window=56),
    "flatten_swin_base": _cfg("microsoft", 128, S, H128, 7, 224, 0.5, "LLSS", la_window=56),
    "flatten_swin_base_384": _cfg("microsoft", 128, S, H128, 12, 384, 0.5, "LLSS", la_window=96),
    # torchvision 0.14 swin_t / swin_s (stochastic_depth_prob 0.2 / 0.3) and spec-msf §5 variants
    "swin_t": _cfg("torchvision", 96, T, H96, 7, 224, 0.2),
    "swin_s": _cfg("torchvision", 96, S, H96, 7, 224, 0.3),
    "swin_t_msf": _cfg("torchvision", 96, T, H96, 7, 224, 0.2, msf=MSF1),
    "swin_t_msf_g2": _cfg("torchvision", 96, T, H96, 7, 224, 0.2, msf=MSF2),
    "swin_s_msf": _cfg("torchvision", 96, S, H96, 7, 224, 0.3, msf=MSF1),
    "swin_s_msf_g2": _cfg("torchvision", 96, S, H96, 7, 224, 0.3, msf=MSF2),
}
PARAMS = {
    "swin_tiny_patch4_window7_224": 28_288_354, "swin_small_patch4_window7_224": 49_606_258,
    "swin_base_patch4_window7_224": 87_768_224, "swin_base_patch4_window12_384": 87_903_584,
    "flatten_swin_tiny": 29_192_384, "flatten_swin_small": 50_510_288,
    "flatten_swin_base": 88_972_488, "flatten_swin_base_384": 91_433_928,
    "swin_t": 28_288_354, "swin_s": 49_606_258,
    "swin_t_msf": 30_449_314, "swin_t_msf_g2": 26_136_226, "swin_s_msf": 53_541_298, "swin_s_msf_g2": 45_689_266,
}
# spec-flatten §7 "counted MACs" (G); spec-msf §6 "counted FLOPs" / 2 for the torchvision-layout rows
GMACS = {
    "swin_tiny_patch4_window7_224": 4.491, "swin_small_patch4_window7_224": 8.741,
    "swin_base_patch4_window7_224": 15.431, "swin_base_patch4_window12_384": 47.083,
    "flatten_swin_tiny": 4.483, "flatten_swin_small": 8.734, "flatten_swin_base": 15.421,
    "flatten_swin_base_384": 46.382,
    "swin_t": 8.99 / 2, "swin_s": 17.49 / 2, "swin_t_msf": 9.68 / 2, "swin_t_msf_g2": 8.30 / 2,
    "swin_s_msf": 18.88 / 2, "swin_s_msf_g2": 16.11 / 2,
}


def stage_plan(cfg, img_size, window=None, la_window=None):
    """Per stage (res, [(type, window, shift) per block]) as the official constructors resolve them.
    microsoft/FLatten: res halves exactly (must be even before each merge); torchvision: res = ceil(res/2).
    microsoft with img_size (H, W), H != W (the official PatchEmbed's to_2tuple): res is (h, w); a window of at
    least the shorter side shrinks to it (min(input_resolution), shift 0) and must divide both sides, as
    window_partition's view needs."""
    nst = len(cfg["depths"])
    if isinstance(img_size, tuple) and img_size[0] != img_size[1]:
        assert cfg["layout"] == "microsoft", "the torchvision model takes its size from the input"
        return _stage_plan_hw(cfg, img_size, window, la_window)
    if isinstance(img_size, tuple):
        img_size = img_size[0]
    res = img_size // cfg["patch"]
    lw = la_window if la_window is not None else cfg["la_window"]
    sw = cfg["config_window"] if lw is None else (7 if lw <= 56 else 12)     # FLatten's S rule
    if window is not None:
        sw = window
    sws = list(sw) if isinstance(sw, (list, tuple)) else [sw] * nst
    plan = []
    for i in range(nst):
        if res < 1:
            raise ValueError(f"image {img_size} too small: stage {i} has no tokens")
        blocks = []
        for j in range(cfg["depths"][i]):
            typ = cfg["attn"][i]
            w = lw if typ == "L" else sws[i]
            s = 0 if j % 2 == 0 else w // 2
            if cfg["layout"] == "microsoft":
                if res <= w:
                    w, s = res, 0
                elif res % w:
                    raise ValueError(f"stage {i} resolution {res} is not a multiple of window {w} "
                                     f"(the official code cannot partition it)")
            else:
                pad = -(-res // w) * w
                if w >= pad:
                    s = 0
            blocks.append((typ, w, s))
        plan.append((res, blocks))
        if i < nst - 1:
            if cfg["layout"] == "microsoft":
                if res % 2:
                    raise ValueError(f"stage {i} resolution {res} is odd (PatchMerging needs even sizes)")
                res //= 2
            else:
                res = (res + 1) // 2
    return plan


def _stage_plan_hw(cfg, img_size, window, la_window):
    nst = len(cfg["depths"])
    rh, rw = img_size[0] // cfg["patch"], img_size[1] // cfg["patch"]
    lw = la_window if la_window is not None else cfg["la_window"]
    sw = cfg["config_window"] if lw is None else (7 if lw <= 56 else 12)
    if window is not None:
        sw = window
    sws = list(sw) if isinstance(sw, (list, tuple)) else [sw] * nst
    plan = []
    for i in range(nst):
        blocks = []
        for j in range(cfg["depths"][i]):
            typ = cfg["attn"][i]
            w = lw if typ == "L" else sws[i]
            s = 0 if j % 2 == 0 else w // 2
            if min(rh, rw) <= w:
                w, s = min(rh, rw), 0
            if rh % w or rw % w:
                raise ValueError(f"stage {i} resolution {rh}x{rw} is not a multiple of window {w}")
            blocks.append((typ, w, s))
        plan.append(((rh, rw), blocks))
        if i < nst - 1:
            if rh % 2 or rw % 2:
                raise ValueError(f"stage {i} resolution {rh}x{rw} is odd (PatchMerging needs even sizes)")
            rh, rw = rh // 2, rw // 2
    return plan


def _hw(res):
    """(h, w) of a stage resolution: an int (square) or a tuple."""
    return res if isinstance(res, tuple) else (res, res)


def _fill_resolved():
    for c in MODELS.values():
        plan = stage_plan(c, c["img_size"])
        c["window"] = [blocks[-1][1] for _, blocks in plan]                 # resolved window per stage
        c["shift"] = [blocks[1][2] if len(blocks) > 1 else 0 for _, blocks in plan]   # odd blocks' shift
        c["resolution"] = [r for r, _ in plan]


_fill_resolved()


# ------------------------------------------------------------------------------------------------ helpers

def relative_position_index(w):
    """(w², w²) int64: tokens i, j in row-major window order; (dy + w-1)·(2w-1) + (dx + w-1), d = pos_i - pos_j."""
    ys = torch.arange(w).repeat_interleave(w)
    xs = torch.arange(w).repeat(w)
    dy = ys[:, None] - ys[None, :] + (w - 1)
    dx = xs[:, None] - xs[None, :] + (w - 1)
    return (dy * (2 * w - 1) + dx).to(torch.int64)


def _regions(n, w, s):
    """Region label along one axis of the (padded) map after the cyclic shift: [0, n-w) -> 0,
    [n-w, n-s) -> 1, [n-s, n) -> 2; one region when s == 0."""
    r = torch.zeros(n, dtype=torch.int64)
    if s > 0:
        r[n - w:n - s] = 1
        r[n - s:] = 2
    return r


def shift_mask(H, W, w, sh, sw=None):
    """(nW, w², w²) float32 mask of the shifted windows on an H×W map (multiples of w): 0 where both tokens
    lie in the same region, -100 otherwise.  Windows are ordered row-major; tokens row-major inside a window."""
    sw = sh if sw is None else sw
    lab = _regions(H, w, sh)[:, None] * 3 + _regions(W, w, sw)[None, :]
    lab = lab.reshape(H // w, w, W // w, w).permute(0, 2, 1, 3).reshape(-1, w * w)
    same = lab[:, :, None] == lab[:, None, :]
    return torch.where(same, torch.tensor(0.0), torch.tensor(MASK_NEG)).float()


def partition(x, w):
    """(B, H, W, C) -> (B·nW, w², C), windows row-major, batch outermost."""
    B, H, W, C = x.shape
    return x.reshape(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, C)


def unpartition(t, w, B, H, W):
    C = t.shape[-1]
    return t.reshape(B, H // w, W // w, w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)


class GroupLinear(nn.Module):
    """spec-msf §3 interleaved grouped projection: weight (E, Din/G); group g reads inputs [g·D', (g+1)·D') and
    weight rows g·E' + e; its result lands on output channel e·G + g; bias (E) is added per output channel."""

    def __init__(self, din, eout, groups, bias=True):
        super().__init__()
        self.G = groups
        self.weight = nn.Parameter(torch.empty(eout, din // groups))
        self.bias = nn.Parameter(torch.zeros(eout)) if bias else None
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x):
        G, (E, Dg) = self.G, self.weight.shape
        y = torch.einsum("...gc,gec->...eg", x.reshape(*x.shape[:-1], G, Dg), self.weight.reshape(G, E // G, Dg))
        y = y.reshape(*x.shape[:-1], E)
        return y if self.bias is None else y + self.bias


class Mlp(nn.Module):
    """microsoft layout: mlp.fc1 -> exact-erf GELU -> mlp.fc2."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class TVMlp(nn.Sequential):
    """torchvision MLP: 0 Linear, 1 GELU, 2 Dropout, 3 Linear, 4 Dropout (keys mlp.0, mlp.3)."""

    def __init__(self, dim, hidden):
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Identity(), nn.Linear(hidden, dim), nn.Identity())


# ------------------------------------------------------------------------------------------------ attention

class WindowAttention(nn.Module):
    """Softmax window attention with relative position bias.  Parameters in official order: RPB table, index
    buffer, qkv (or qkvp), proj.  flat_index: torchvision stores the index flattened to (w⁴,)."""

    def __init__(self, dim, w, heads, qkv_bias=True, flat_index=False, msf=None):
        super().__init__()
        assert dim % heads == 0, (dim, heads)
        self.w, self.heads, self.msf = w, heads, msf
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * w - 1) ** 2, heads))
        idx = relative_position_index(w)
        self.register_buffer("relative_position_index", idx.flatten() if flat_index else idx)
        if msf is None:
            self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        elif msf["groups"] == 1:
            self.qkvp = nn.Linear(dim, 4 * dim, bias=msf["qkvp_bias"])
        else:
            self.qkvp = GroupLinear(dim, 4 * dim, msf["groups"], bias=msf["qkvp_bias"])
        self.proj = nn.Linear(dim, dim)

    def bias(self):
        n = self.w * self.w
        return self.relative_position_bias_table[self.relative_position_index.reshape(-1)].reshape(n, n, -1) \
            .permute(2, 0, 1)                                                    # (heads, n, n)

    def forward(self, x, mask=None):
        Bw, N, C = x.shape
        h = self.heads
        nch = 3 if self.msf is None else 4
        t = (self.qkv(x) if self.msf is None else self.qkvp(x)).reshape(Bw, N, nch, h, C // h).permute(2, 0, 3, 1, 4)
        q, k, v = t[0], t[1], t[2]                                                # (Bw, h, N, d)
        sdpa = USE_SDPA and not RECORD_MAPS and hasattr(nn.functional, "scaled_dot_product_attention")
        if self.msf is None and sdpa:
            am = self.bias()[None]                                               # the logits' additive terms
            if mask is not None:
                nW = mask.shape[0]
                am = am[:, None] + mask[None, :, None].to(q.dtype)
                am = am.expand(Bw // nW, -1, -1, -1, -1).reshape(Bw, h, N, N)
            o = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=am)  # scale head_dim^-0.5, as self.scale
            return self.proj(o.transpose(1, 2).reshape(Bw, N, C))
        if self.msf is None:
            a = (q * self.scale) @ k.transpose(-2, -1)                           # scale q first (both officials)
        else:
            a = (q @ k.transpose(-2, -1) - 0.5 * (k * k).sum(-1)[:, :, None, :]) * self.scale
        a = a + self.bias()[None]
        if mask is not None:
            nW = mask.shape[0]
            a = (a.reshape(Bw // nW, nW, h, N, N) + mask[None, :, None].to(a.dtype)).reshape(Bw, h, N, N)
        p = torch.softmax(a, dim=-1)
        if RECORD_MAPS:
            self.maps = {"": p}                                                   # per window (test_attention.py)
        o = p @ v
        if self.msf is not None:
            o = o - t[3]
        return self.proj(o.transpose(1, 2).reshape(Bw, N, C))


class FocusedLinearAttention(nn.Module):
    """spec-flatten §1.2 (HEAD), Swin projections: own params scale (1,1,C), positional_encoding (1,n,C), then
    qkv, proj, dwc (d channels, shared by the heads).  mask is ignored."""

    def __init__(self, dim, w, heads, qkv_bias=True, focusing=P_FOCUS, kernel=KERNEL):
        super().__init__()
        self.heads, self.p = heads, focusing
        d = dim // heads
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, w * w, dim))
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.dwc = nn.Conv2d(d, d, kernel, padding=kernel // 2, groups=d)

    def forward(self, x, mask=None):
        B, N, C = x.shape
        h = self.heads
        t = self.qkv(x).reshape(B, N, 3, C)
        q, k, v = t[:, :, 0], t[:, :, 1], t[:, :, 2]
        s = F.softplus(self.scale)
        o = flatten_ref.attend(flatten_ref.focus(q, s, self.p), flatten_ref.focus(k + self.positional_encoding, s, self.p),
                               v, h)
        g = math.isqrt(N)
        vimg = flatten_ref.split_heads(v, h).reshape(B * h, g, g, C // h).permute(0, 3, 1, 2)
        o = o + self.dwc(vimg).reshape(B, C, N).transpose(1, 2)
        return self.proj(o)


# ------------------------------------------------------------------------------------------------ microsoft

class SwinBlock(nn.Module):
    def __init__(self, dim, res, heads, typ, w, s, hidden, qkv_bias=True):
        super().__init__()
        self.res, self.w, self.s, self.typ = res, w, s, typ
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        if typ == "L":
            self.attn = FocusedLinearAttention(dim, w, heads, qkv_bias)
        else:
            self.attn = WindowAttention(dim, w, heads, qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, hidden)
        # the official block stores the mask for every shifted block (FLatten 'L' ones too, where it is unused)
        self.register_buffer("attn_mask", shift_mask(*_hw(res), w, s) if s > 0 else None)

    def forward(self, x):
        B, L, C = x.shape
        H, W = _hw(self.res)
        assert L == H * W, "input feature has wrong size"
        y = self.norm1(x).reshape(B, H, W, C)
        if self.s:
            y = torch.roll(y, shifts=(-self.s, -self.s), dims=(1, 2))
        y = self.attn(partition(y, self.w), mask=self.attn_mask)
        y = unpartition(y, self.w, B, H, W)
        if self.s:
            y = torch.roll(y, shifts=(self.s, self.s), dims=(1, 2))
        x = x + y.reshape(B, L, C)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """Concatenate x[0::2,0::2], x[1::2,0::2], x[0::2,1::2], x[1::2,1::2] (row, col) -> LN(4C) -> Linear, no bias.
    pad=True (torchvision): zero-pad odd H / W at the bottom / right first."""

    def __init__(self, dim, out_dim, pad=False):
        super().__init__()
        self.pad = pad
        self.reduction = nn.Linear(4 * dim, out_dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim, eps=LN_EPS)

    def forward(self, x):                                  # (B, H, W, C)
        H, W = x.shape[1:3]
        if self.pad:
            x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        else:
            assert H % 2 == 0 and W % 2 == 0, (H, W)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.reduction(self.norm(x))


class _Stage(nn.Module):
    def __init__(self, blocks, downsample):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample


class MicrosoftSwin(nn.Module):
    """microsoft/Swin-Transformer SwinTransformer (and FLattenSwinTransformer with 'L' stages), ape=False,
    patch_norm=True.  Fixed input size."""

    def __init__(self, cfg, img_size, plan, num_classes, in_chans):
        super().__init__()
        self.cfg, self.img_size, self.plan = cfg, img_size, plan
        dims, p = cfg["dims"], cfg["patch"]
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(in_chans, dims[0], p, stride=p)
        self.patch_embed.norm = nn.LayerNorm(dims[0], eps=LN_EPS)
        self.layers = nn.ModuleList()
        n = len(plan)
        for i, (res, blocks) in enumerate(plan):
            hidden = int(dims[i] * cfg["mlp_ratio"])
            bl = [SwinBlock(dims[i], res, cfg["heads"][i], typ, w, s, hidden, cfg["qkv_bias"]) for typ, w, s in blocks]
            self.layers.append(_Stage(bl, PatchMerging(dims[i], dims[i + 1]) if i < n - 1 else None))
        self.norm = nn.LayerNorm(dims[-1], eps=LN_EPS)
        self.head = nn.Linear(dims[-1], num_classes)

    def stage_maps(self, x):
        """Token maps (B, H_i, W_i, C_i) after each stage's blocks (before its PatchMerging)."""
        assert tuple(x.shape[2:]) == _hw(self.img_size), \
            f"input {tuple(x.shape[2:])} != model size {self.img_size} (the official model is size-fixed)"
        t = self.patch_embed.norm(self.patch_embed.proj(x).flatten(2).transpose(1, 2))
        out = []
        for (res, _), st in zip(self.plan, self.layers):
            for b in st.blocks:
                t = b(t)
            m = t.reshape(t.shape[0], *_hw(res), -1)
            out.append(m)
            if st.downsample is not None:
                m = st.downsample(m)
                t = m.reshape(m.shape[0], -1, m.shape[-1])
        return out

    def forward(self, x):
        m = self.stage_maps(x)[-1]
        return self.head(self.norm(m.flatten(1, 2)).mean(1))


# ------------------------------------------------------------------------------------------------ torchvision

class TVWindowAttention(WindowAttention):
    """torchvision ShiftedWindowAttention: pad, per-axis shift rule, roll, mask, attention, unroll, crop."""

    def __init__(self, dim, w, s, heads, qkv_bias=True, msf=None):
        super().__init__(dim, w, heads, qkv_bias, flat_index=True, msf=msf)
        self.s = s

    def forward(self, x):                                  # (B, H, W, C)
        B, H, W, C = x.shape
        w = self.w
        x = F.pad(x, (0, 0, 0, (w - W % w) % w, 0, (w - H % w) % w))
        Hp, Wp = x.shape[1:3]
        sh = 0 if w >= Hp else self.s
        sw = 0 if w >= Wp else self.s
        if sh + sw > 0:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        mask = shift_mask(Hp, Wp, w, sh, sw) if sh + sw > 0 else None
        y = unpartition(super().forward(partition(x, w), mask), w, B, Hp, Wp)
        if sh + sw > 0:
            y = torch.roll(y, shifts=(sh, sw), dims=(1, 2))
        return y[:, :H, :W]


class TVBlock(nn.Module):
    def __init__(self, dim, heads, w, s, hidden, msf=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = TVWindowAttention(dim, w, s, heads, True, msf)
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = TVMlp(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims)


class TorchvisionSwin(nn.Module):
    """torchvision 0.14 SwinTransformer (v1) layout; any input size; MSF attention when cfg['msf']."""

    def __init__(self, cfg, img_size, windows, num_classes, in_chans):
        super().__init__()
        self.cfg, self.img_size = cfg, img_size
        dims, p = cfg["dims"], cfg["patch"]
        layers = [nn.Sequential(nn.Conv2d(in_chans, dims[0], p, stride=p), Permute([0, 2, 3, 1]),
                                nn.LayerNorm(dims[0], eps=LN_EPS))]
        n = len(dims)
        for i in range(n):
            w = windows[i]
            hidden = int(dims[i] * cfg["mlp_ratio"])
            layers.append(nn.Sequential(*[TVBlock(dims[i], cfg["heads"][i], w, 0 if j % 2 == 0 else w // 2, hidden,
                                                  cfg["msf"]) for j in range(cfg["depths"][i])]))
            if i < n - 1:
                layers.append(PatchMerging(dims[i], dims[i + 1], pad=True))
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=LN_EPS)
        self.head = nn.Linear(dims[-1], num_classes)

    def stage_maps(self, x):
        """Maps (B, H_i, W_i, C_i) after each stage's blocks (unpadded; before PatchMerging)."""
        out = []
        for i, m in enumerate(self.features):
            x = m(x)
            if i % 2 == 1:
                out.append(x)
        return out

    def forward(self, x):
        return self.head(self.norm(self.features(x)).mean(dim=(1, 2)))


# ------------------------------------------------------------------------------------------------ build

def _per_stage(v, n):
    return list(v) if isinstance(v, (list, tuple)) else [v] * n


def build(name, img_size=None, num_classes=None, in_chans=None, dims=None, depths=None, heads=None, window=None,
          la_window=None):
    base = MODELS[name]
    cfg = dict(base)
    if dims is not None:
        cfg["dims"] = list(dims)
    if depths is not None:
        cfg["depths"] = list(depths)
    if heads is not None:
        cfg["heads"] = list(heads)
    if la_window is not None:
        cfg["la_window"] = la_window
    img = img_size or base["img_size"]
    nc = base["num_classes"] if num_classes is None else num_classes
    ic = base["in_chans"] if in_chans is None else in_chans
    n = len(cfg["depths"])
    assert len(cfg["dims"]) == n == len(cfg["heads"]), "dims / depths / heads need one entry per stage"
    for d, h in zip(cfg["dims"], cfg["heads"]):
        assert d % h == 0, f"dim {d} not divisible by heads {h}"
    if cfg["msf"] is not None:
        for d in cfg["dims"]:
            assert d % cfg["msf"]["groups"] == 0
    if cfg["layout"] == "torchvision":
        ws = _per_stage(window if window is not None else cfg["config_window"], n)
        cfg["window"] = ws
        cfg["resolution"] = [r for r, _ in stage_plan(dict(cfg, config_window=ws[0]), img, window=ws)]
        m = TorchvisionSwin(cfg, img, ws, nc, ic)
    else:
        plan = stage_plan(cfg, img, window=window)
        cfg["window"] = [b[-1][1] for _, b in plan]
        cfg["resolution"] = [r for r, _ in plan]
        m = MicrosoftSwin(cfg, img, plan, nc, ic)
    m.name = name
    return m


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def randomize(model, seed):
    """float32 state_dict: Linear / GroupLinear / Conv weights U(±√(3/fan_in)) (fan_in = in/groups·k²; unit-variance
    outputs), biases N(0, 0.1), LayerNorm weight 1 + N(0, 0.2) and bias N(0, 0.2), relative_position_bias_table
    N(0, 0.5), FLatten scale N(0, 0.5) and positional_encoding N(0, 0.2); buffers (relative_position_index int64,
    attn_mask float32) unchanged."""
    g = torch.Generator().manual_seed(seed)
    lnames = {n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    params = {n for n, _ in model.named_parameters()}
    sd = {}
    for k, v in model.state_dict().items():
        if k not in params:
            sd[k] = v.detach().clone().float() if v.is_floating_point() else v.detach().clone()
            continue
        shape, leaf = v.shape, k.rsplit(".", 1)[-1]
        r = torch.randn(shape, generator=g)
        if k.rsplit(".", 1)[0] in lnames:
            sd[k] = 1 + 0.2 * r if leaf == "weight" else 0.2 * r
        elif leaf == "relative_position_bias_table" or leaf == "scale":
            sd[k] = 0.5 * r
        elif leaf == "positional_encoding":
            sd[k] = 0.2 * r
        elif leaf == "bias":
            sd[k] = 0.1 * r
        else:
            fan = v[0].numel()
            sd[k] = (2 * torch.rand(shape, generator=g) - 1) * math.sqrt(3.0 / fan)
    return sd


def count_macs(model, img_size=None):
    """Multiply-adds of Linear / Conv / attention matmuls (1 MAC each) for one image, as traced_macs counts them.
    img_size: int or (H, W) (torchvision layout only; the microsoft layout is fixed to its build size).
    torchvision layout: padded tokens go through qkv/proj/attention (their MACs count), not through the MLP."""
    cfg = model.cfg
    img = img_size or model.img_size
    hh, ww = (img, img) if isinstance(img, int) else tuple(img)
    dims, p, heads = cfg["dims"], cfg["patch"], cfg["heads"]
    tv = cfg["layout"] == "torchvision"
    in_ch = model.features[0][0].in_channels if tv else model.patch_embed.proj.in_channels
    if not tv:
        assert (hh, ww) == (model.img_size, model.img_size), "the microsoft-layout model is built for one input size"
    rh, rw = hh // p, ww // p
    macs = rh * rw * dims[0] * in_ch * p * p
    n = len(dims)
    for i in range(n):
        D, h = dims[i], heads[i]
        hidden = int(D * cfg["mlp_ratio"])
        blocks = [("S", b.attn.w) for b in model.features[2 * i + 1]] if tv else \
            [(b.typ, b.w) for b in model.layers[i].blocks]
        for typ, w in blocks:
            ph, pw = -(-rh // w) * w, -(-rw // w) * w          # padded sizes (torchvision); = rh, rw otherwise
            T, N, nW = ph * pw, w * w, (ph // w) * (pw // w)
            if typ == "L":                                     # qkv + proj, q·mean(k), kᵀv, q·KV, DWC
                d = D // h
                macs += T * (4 * D * D + D + 2 * D * d + D * cfg["kernel_size"] ** 2)
            else:                                              # qkv | qkvp, proj, q·kᵀ and attn·v per window
                proj_in = 3 * D * D if cfg["msf"] is None else 4 * D * D // cfg["msf"]["groups"]
                macs += T * (proj_in + D * D) + nW * 2 * N * N * D
            macs += rh * rw * 2 * D * hidden                   # MLP on the unpadded tokens
        if i < n - 1:
            rh, rw = ((rh + 1) // 2, (rw + 1) // 2) if tv else (rh // 2, rw // 2)
            macs += rh * rw * 4 * D * dims[i + 1]              # PatchMerging reduction
    return macs + dims[-1] * model.head.out_features


def traced_macs(model, x):
    """MACs of aten mm/addmm/bmm/convolution executed by model(x) (a TorchDispatchMode counter), per image."""
    from torch.utils._python_dispatch import TorchDispatchMode
    aten = torch.ops.aten
    total = [0]

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            pkt = getattr(func, "overloadpacket", None)
            if pkt in (aten.mm, aten.bmm):
                a, b = args[0], args[1]
                total[0] += a.numel() * b.shape[-1]
            elif pkt is aten.addmm:
                a, b = args[1], args[2]
                total[0] += a.numel() * b.shape[-1]
            elif pkt is aten.convolution:
                wgt = args[1]
                total[0] += out.numel() * wgt[0].numel()
            return out

    with torch.no_grad(), Counter():
        model(x)
    return total[0] // x.shape[0]


# ------------------------------------------------------------------------------------------------ self-test

def dense_block_attention(blk_attn, xn, w, s, flat=False):
    """Brute force of one (shifted) window attention on an unpadded H×W map xn (B, H, W, C) with H, W multiples
    of w: every token pair (i, j) is allowed iff same shifted window; logit gets RPB(Δ in shifted coordinates) and
    -100 unless both tokens are in the same region of the rolled map."""
    B, H, W, C = xn.shape
    h = blk_attn.heads
    tbl = blk_attn.relative_position_bias_table
    ys = torch.arange(H).repeat_interleave(W)
    xs = torch.arange(W).repeat(H)
    ysh, xsh = (ys - s) % H, (xs - s) % W                  # position on the rolled map
    win = (ysh // w) * (W // w) + xsh // w
    reg = _regions(H, w, s)[ysh] * 3 + _regions(W, w, s)[xsh]
    same_win = win[:, None] == win[None, :]
    dy = (ysh % w)[:, None] - (ysh % w)[None, :] + w - 1
    dx = (xsh % w)[:, None] - (xsh % w)[None, :] + w - 1
    rpb = tbl[(dy * (2 * w - 1) + dx).clamp(0, (2 * w - 1) ** 2 - 1)].permute(2, 0, 1)       # (h, L, L)
    tok = xn.reshape(B, H * W, C)
    nch = 3 if blk_attn.msf is None else 4
    t = blk_attn.qkv(tok) if blk_attn.msf is None else blk_attn.qkvp(tok)
    t = t.reshape(B, H * W, nch, h, C // h).permute(2, 0, 3, 1, 4)
    q, k, v = t[0], t[1], t[2]
    if blk_attn.msf is None:
        a = (q @ k.transpose(-1, -2)) * blk_attn.scale
    else:
        a = (q @ k.transpose(-1, -2) - 0.5 * (k * k).sum(-1)[:, :, None, :]) * blk_attn.scale
    a = a + rpb[None] + torch.where(reg[:, None] == reg[None, :], 0.0, MASK_NEG).to(a.dtype)
    a = a.masked_fill(~same_win, float("-inf"))
    o = torch.softmax(a, -1) @ v
    if blk_attn.msf is not None:
        o = o - t[3]
    return blk_attn.proj(o.transpose(1, 2).reshape(B, H, W, C))


def ms_to_tv(sd, n_stages):
    """microsoft-layout state_dict -> torchvision keys (attn_mask dropped, index flattened)."""
    out = {}
    for k, v in sd.items():
        if k.endswith("attn_mask"):
            continue
        parts = k.split(".")
        if parts[0] == "patch_embed":
            nk = "features.0." + ("0" if parts[1] == "proj" else "2") + "." + parts[2]
        elif parts[0] == "layers":
            i = int(parts[1])
            if parts[2] == "downsample":
                nk = f"features.{2 * i + 2}." + ".".join(parts[3:])
            else:
                rest = ".".join(parts[4:]).replace("mlp.fc1", "mlp.0").replace("mlp.fc2", "mlp.3")
                nk = f"features.{2 * i + 1}.{parts[3]}.{rest}"
        else:
            nk = k
        out[nk] = v.flatten() if k.endswith("relative_position_index") else v
    return out


REDUCED = {  # kind -> (name, build kwargs): every kind with a shifted-window block and a non-trivial mask
    "microsoft": ("swin_tiny_patch4_window7_224",
                  dict(img_size=64, num_classes=10, dims=[16, 32, 64, 128], depths=[2, 2, 2, 2],
                       heads=[2, 2, 4, 4], window=4)),
    "flatten": ("flatten_swin_tiny",
                dict(img_size=64, num_classes=10, dims=[32, 64, 128, 256], depths=[2, 2, 2, 2],
                     heads=[1, 2, 4, 8], window=2)),
    "flatten_shifted_L": ("flatten_swin_tiny",       # la_window 8: stage-1 L blocks windowed, odd ones rolled
                          dict(img_size=64, num_classes=10, dims=[32, 64, 128, 256], depths=[2, 2, 2, 2],
                               heads=[1, 2, 4, 8], la_window=8)),
    "torchvision": ("swin_t", dict(img_size=40, num_classes=10, dims=[16, 32, 64, 128], depths=[2, 2, 2, 2],
                                   heads=[2, 2, 4, 4], window=3)),
    "msf": ("swin_t_msf", dict(img_size=40, num_classes=10, dims=[16, 32, 64, 128], depths=[2, 2, 2, 2],
                               heads=[2, 2, 4, 4], window=3)),
    "msf_g2": ("swin_t_msf_g2", dict(img_size=40, num_classes=10, dims=[16, 32, 64, 128], depths=[2, 2, 2, 2],
                                     heads=[2, 2, 4, 4], window=3)),
}


class _NoInit:
    """Skip PyTorch's default Linear/Conv initialisation while building (for counting only; values stay garbage)."""

    def __enter__(self):
        self.saved = nn.Linear.reset_parameters, nn.Conv2d.reset_parameters
        nn.Linear.reset_parameters = nn.Conv2d.reset_parameters = lambda self: None

    def __exit__(self, *exc):
        nn.Linear.reset_parameters, nn.Conv2d.reset_parameters = self.saved


def _selftest():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import Report
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    rep = Report()
    t0 = time.time()
    # counts and MACs of every named model at its official size
    for name, want in PARAMS.items():
        with _NoInit():
            m = build(name)
        got = count_params(m)
        rep.check(f"params {name}", got == want, f"{got:,} vs {want:,}")
        mac = count_macs(m) / 1e9
        e = abs(mac - GMACS[name]) / GMACS[name]
        rep.check(f"macs {name}", e <= 0.01, f"{mac:.3f} G vs spec {GMACS[name]:.3f} G ({100 * e:+.2f} %)")
        del m
    c = MODELS["flatten_swin_base_384"]
    rep.check("resolved flatten_swin_base_384", c["window"] == [96, 48, 12, 12] and c["shift"] == [0, 0, 6, 0],
              f"window {c['window']} shift {c['shift']}")
    c = MODELS["swin_t"]
    rep.check("resolved swin_t", c["window"] == [7] * 4 and c["shift"] == [3, 3, 3, 0],
              f"window {c['window']} shift {c['shift']}")
    # relative position index, spot values of the official formula
    idx = relative_position_index(7)
    rep.check("relative_position_index w7", idx.dtype == torch.int64 and idx.shape == (49, 49)
              and int(idx[0, 0]) == 84 and int(idx[0, 48]) == 0 and int(idx[48, 0]) == 168 and int(idx.max()) == 168,
              f"[0,0]={int(idx[0, 0])} [0,48]={int(idx[0, 48])} [48,0]={int(idx[48, 0])}")
    torch.manual_seed(0)
    # dense brute force vs windowed block attention (microsoft: no padding; torchvision: padded, both shifted)
    for kind in ("microsoft", "msf", "msf_g2"):
        name, kw = REDUCED[kind]
        m = build(name, **kw)
        m.load_state_dict(randomize(m, 5))
        m.double()
        if kind == "microsoft":
            blk = m.layers[0].blocks[1]
            x = torch.randn(2, 16, 16, 16, dtype=torch.float64)
            ref = dense_block_attention(blk.attn, x, blk.w, blk.s)
            y = blk.attn(partition(torch.roll(x, (-blk.s, -blk.s), (1, 2)), blk.w), blk.attn_mask)
            y = torch.roll(unpartition(y, blk.w, 2, 16, 16), (blk.s, blk.s), (1, 2))
            nontriv = bool((blk.attn_mask == 0).any() and (blk.attn_mask == MASK_NEG).any())
        else:
            blk = m.features[1][1]           # 10×10 map, window 3 -> padded 12, shift 1
            x = torch.randn(2, 12, 12, 16, dtype=torch.float64)
            x[:, 10:], x[:, :, 10:] = 0, 0   # the padded rows/cols are zeros after the LN (pad follows norm1)
            ref = dense_block_attention(blk.attn, x, 3, 1)[:, :10, :10]
            y = blk.attn(x[:, :10, :10])
            nontriv = True
        e = float((y - ref).abs().max())
        rep.check(f"dense brute force == shifted-window attention ({kind})", e < 1e-12 and nontriv,
                  f"max abs diff {e:.1e}")
    # microsoft layout == torchvision layout where both are defined (no padding, last window == resolution)
    a = build("swin_tiny_patch4_window7_224", img_size=128, num_classes=10, dims=[16, 32, 64, 128],
              depths=[2, 2, 2, 2], heads=[2, 2, 4, 4], window=4)
    b = build("swin_t", img_size=128, num_classes=10, dims=[16, 32, 64, 128], depths=[2, 2, 2, 2],
              heads=[2, 2, 4, 4], window=4)
    sd = randomize(a, 7)
    a.load_state_dict(sd)
    b.load_state_dict(ms_to_tv(sd, 4), strict=True)
    x = torch.randn(2, 3, 128, 128, dtype=torch.float64)
    e = float((a.double()(x) - b.double()(x)).abs().max())
    rep.check("microsoft layout == torchvision layout (128 px, window 4)", e < 1e-12, f"max abs diff {e:.1e}")
    # reduced models: forward + backward in float64, analytic vs traced MACs
    for kind, (name, kw) in REDUCED.items():
        m = build(name, **kw)
        sd = randomize(m, 11)
        m.load_state_dict(sd, strict=True)
        m.double()
        shifted = [k for k, v in sd.items() if k.endswith("attn_mask")]
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 3, kw["img_size"], kw["img_size"], generator=g, dtype=torch.float64)
        y = m(x)
        loss = F.cross_entropy(y, torch.tensor([1, 7]))
        loss.backward()
        zero = [k for k, p in m.named_parameters() if p.grad is None or not bool((p.grad != 0).any())]
        ok = bool(torch.isfinite(y).all()) and y.shape == (2, 10) and not zero and 0.1 < float(y.abs().max()) < 1e3
        rep.check(f"fwd+bwd {kind} ({name} reduced)", ok,
                  f"loss {loss.item():.4f}, max|logit| {float(y.abs().max()):.2f}, windows {m.cfg['window']}, "
                  f"masks {len(shifted)}, zero grads {zero[:4]}")
        tm, am = traced_macs(m, x), count_macs(m)
        rep.check(f"macs analytic == traced ({kind})", tm == am, f"{am:,} vs traced {tm:,}")
    # torchvision at a non-square size with odd stage sizes
    m = build("swin_t_msf_g2", **REDUCED["msf_g2"][1])
    m.load_state_dict(randomize(m, 12))
    m.double()
    x = torch.randn(1, 3, 44, 60, dtype=torch.float64)
    y = m(x)
    tm, am = traced_macs(m, x), count_macs(m, (44, 60))
    rep.check("torchvision layout non-square 44x60", y.shape == (1, 10) and bool(torch.isfinite(y).all()) and tm == am,
              f"MACs {am:,} vs traced {tm:,}")
    print(f"# {time.time() - t0:.1f} s")
    rep.finish()


if __name__ == "__main__":
    _selftest()
