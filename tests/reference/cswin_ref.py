"""Independent PyTorch reference of the CSwin host family: official CSWin Transformer (cross-shaped window
self-attention with LePE) and FLatten-CSwin (spec-flatten.md §1.2, §5: focused linear attention in the L stages),
written from shared/specs/spec-flatten.md and the official architectures, not from vitc.  Module and parameter names
and shapes equal the official state_dict keys:

  stage1_conv_embed.0  Conv2d(in, C1, 7, stride 4, pad 2) -> tokens (row-major) -> stage1_conv_embed.2 LN
  stage{s}.{j}         CSWinBlock: qkv Linear(C, 3C, bias), norm1, proj Linear(C, C), attns.{0[,1]}, mlp.fc1/fc2, norm2
                       x += proj(attn(norm1(x)));  x += fc2(GELU(fc1(norm2(x))))
  merge{1,2,3}         conv Conv2d(C, 2C, 3, stride 2, pad 1) on the (H, W) grid -> tokens -> norm LN
  norm, mean over tokens, head
LayerNorm eps 1e-5 everywhere, exact (erf) GELU, DropPath/dropout identity (rates only recorded in MODELS).

Block attention (qkv = Linear_qkv(norm1(x)) viewed (B, N, 3, C): q = [:, :, 0], k = [:, :, 1], v = [:, :, 2]):
  * two branches unless the stage resolution R equals the split size s, or the stage is stage 4 ("last stage"):
    branch 0 takes channels [0, C/2) of q, k and v with h/2 heads, branch 1 channels [C/2, C); outputs concatenated
    (branch 0 first) before proj.  Branch 0 windows: R rows x s columns (vertical stripes, tokens with equal x // s);
    branch 1 windows: s rows x R columns (horizontal stripes, equal y // s).
  * single branch: one window of R x R with all C channels and h heads.
  * S attention (LePEAttention) per window, per head (head i = channels [i d, (i+1) d) of the branch):
        softmax((q * d^-1/2) k^T) v  +  LePE,   LePE = get_v(v as the window image): depthwise 3x3 + bias, ZERO
    PADDING AT THE WINDOW (stripe) BORDERS, i.e. a stripe never sees its neighbour stripe.
  * L attention (FocusedLinearAttention), FLatten-CSwin stages 1-2 only, always one global window (the official
    code only runs when the L split equals the stage resolution): spec §1.2 steps 2-15 with n = N = R^2, the
    positional encoding (1, R^2, C) on k only, DWC 5x5 over d channels shared by the heads, plus LePE over all C:
        o = linear_attention + DWC(v) + LePE(v).
Sizes (sizes_ok, checked against the official code for every size 32..480): stage resolutions are img//4, img//8,
img//16, img//32 (hard-coded by the official Rearrange and block asserts) and the stem/merge conv outputs must equal
them, i.e. img = 32k, 32k+1 or 32k+2; a two-branch stage needs s | R, h even and (C/2) % (h/2) == 0.  With the
official splits [1,2,7,7] only 224 and 448 (+1, +2) run; with [1,2,12,12] only 192 and 384 (+1, +2).
Official init (not needed here, randomize() replaces it): Linear trunc_normal(std .02, cut at +-2 absolute) bias 0;
LN 1/0; every Conv2d (stem, merge, get_v, dwc) PyTorch default U(+-1/sqrt(fan_in)) for weight and bias; FLatten
scale and positional_encoding zeros.

API: MODELS, PARAMS, GMACS, build(name, ...), randomize(model, seed), count_params(model), count_macs(model).
Self-test (/usr/bin/python3 cswin_ref.py): exact parameter counts of every model in MODELS, MACs within 1% of
spec-flatten §7, float64 forward+backward of reduced models (two-branch stripes of width 1, 2 and 7, single-branch
S stages, FLatten L stages), stripe attention and LePE against an independent dense masked formulation, the
focused linear attention against its dense form.
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

_C = dict(mlp_ratio=4.0, qkv_bias=True, ln_eps=1e-5, in_chans=3, num_classes=1000, focusing_factor=3,
          kernel_size=5)
MODELS = {
    # official microsoft/CSWin-Transformer models/cswin.py; drop_path from README train/finetune commands
    "cswin_tiny_224": dict(_C, family="cswin", official="CSWin_64_12211_tiny_224", img_size=224, embed_dim=64,
                           depths=[1, 2, 21, 1], heads=[2, 4, 8, 16], split_size=[1, 2, 7, 7], la_split_size=None,
                           attn="SSSS", drop_path_rate=0.2),
    "cswin_small_224": dict(_C, family="cswin", official="CSWin_64_24322_small_224", img_size=224, embed_dim=64,
                            depths=[2, 4, 32, 2], heads=[2, 4, 8, 16], split_size=[1, 2, 7, 7], la_split_size=None,
                            attn="SSSS", drop_path_rate=0.4),
    "cswin_base_224": dict(_C, family="cswin", official="CSWin_96_24322_base_224", img_size=224, embed_dim=96,
                           depths=[2, 4, 32, 2], heads=[4, 8, 16, 32], split_size=[1, 2, 7, 7], la_split_size=None,
                           attn="SSSS", drop_path_rate=0.5),
    "cswin_base_384": dict(_C, family="cswin", official="CSWin_96_24322_base_384", img_size=384, embed_dim=96,
                           depths=[2, 4, 32, 2], heads=[4, 8, 16, 32], split_size=[1, 2, 12, 12],
                           la_split_size=None, attn="SSSS", drop_path_rate=0.7),
    # LeapLabTHU/FLatten-Transformer models/flatten_cswin.py + cfgs/flatten_cswin_*.yaml + config.py
    "flatten_cswin_tiny": dict(_C, family="flatten_cswin", official="FLatten_CSWin_64_24181_tiny_224", img_size=224,
                               embed_dim=64, depths=[2, 4, 18, 1], heads=[2, 4, 8, 16], split_size=[1, 2, 7, 7],
                               la_split_size=[56, 28, 14, 7], attn="LLSS", drop_path_rate=0.2),
    "flatten_cswin_small": dict(_C, family="flatten_cswin", official="FLatten_CSWin_64_24322_small_224",
                                img_size=224, embed_dim=64, depths=[2, 4, 32, 2], heads=[2, 4, 8, 16],
                                split_size=[1, 2, 7, 7], la_split_size=[56, 28, 14, 7], attn="LLSS",
                                drop_path_rate=0.4),
    "flatten_cswin_base": dict(_C, family="flatten_cswin", official="FLatten_CSWin_96_36292_base_224", img_size=224,
                               embed_dim=96, depths=[3, 6, 29, 2], heads=[4, 8, 16, 32], split_size=[1, 2, 7, 7],
                               la_split_size=[56, 28, 14, 7], attn="LLSS", drop_path_rate=0.5),
    "flatten_cswin_base_384": dict(_C, family="flatten_cswin", official="FLatten_CSWin_96_36292_base_384",
                                   img_size=384, embed_dim=96, depths=[3, 6, 29, 2], heads=[4, 8, 16, 32],
                                   split_size=[1, 2, 12, 12], la_split_size=[96, 48, 24, 12], attn="LLSS",
                                   drop_path_rate=0.7),
}
PARAMS = {"cswin_tiny_224": 22_320_552, "cswin_small_224": 34_643_304, "cswin_base_224": 77_382_184,
          "cswin_base_384": 77_382_184, "flatten_cswin_tiny": 21_201_768, "flatten_cswin_small": 35_451_752,
          "flatten_cswin_base": 74_867_032, "flatten_cswin_base_384": 78_369_112}
GMACS = {"cswin_tiny_224": 4.324, "cswin_small_224": 6.801, "cswin_base_224": 14.955, "cswin_base_384": 46.964,
         "flatten_cswin_tiny": 4.324, "flatten_cswin_small": 6.783, "flatten_cswin_base": 14.913,
         "flatten_cswin_base_384": 46.305}   # spec-flatten §7 "counted MACs" (matmul/linear/conv only)


def _conv_out(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def stage_resolutions(img_size):
    return [img_size // 4, img_size // 8, img_size // 16, img_size // 32]


def sizes_ok(img_size, split_size, heads=None, dims=None):
    """None if the official code runs at this input size with these split sizes, else the reason.
    The official stem hard-codes img_size//4, every block asserts N == (img_size // 2^(s+2))^2, and a two-branch
    stage reshapes the grid into stripes of width s (s | R).  Stage 4 is always one global window."""
    R = stage_resolutions(img_size)
    if min(R) < 1:
        return f"img_size {img_size} < 32"
    r = _conv_out(img_size, 7, 4, 2)
    if r != R[0]:
        return f"stem output {r}x{r} != img_size//4 = {R[0]}"
    for i in range(3):
        r = _conv_out(r, 3, 2, 1)
        if r != R[i + 1]:
            return f"merge{i + 1} output {r}x{r} != img_size//{8 << i} = {R[i + 1]}"
    for i in range(3):
        s = split_size[i]
        if s != R[i]:
            if R[i] % s:
                return f"stage{i + 1}: split {s} does not divide the resolution {R[i]}"
            if heads is not None and heads[i] % 2:
                return f"stage{i + 1}: two branches need an even head count, got {heads[i]}"
            if dims is not None and heads is not None and (dims[i] // 2) % (heads[i] // 2):
                return f"stage{i + 1}: C/2 = {dims[i] // 2} not divisible by h/2 = {heads[i] // 2}"
    return None


# ----------------------------------------------------------------------------------------------------------------
# layout helpers: tokens (B, H*W, c) in row-major order  <->  windows (B*nwin, hs*ws, c) / window images


def to_windows(t, H, W, hs, ws):
    """(B, H*W, c) -> (B * H/hs * W/ws, hs*ws, c); windows ordered (b, wy, wx), tokens row-major inside."""
    B, _, c = t.shape
    t = t.reshape(B, H // hs, hs, W // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return t.reshape(-1, hs * ws, c)


def from_windows(t, B, H, W, hs, ws):
    c = t.shape[-1]
    t = t.reshape(B, H // hs, W // ws, hs, ws, c).permute(0, 1, 3, 2, 4, 5)
    return t.reshape(B, H * W, c)


def tokens_to_image(t, h, w):
    return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], h, w)


def image_to_tokens(x):
    return x.flatten(2).transpose(1, 2)


def split_heads(t, heads):       # (B', n, c) -> (B', heads, n, c/heads): head i = channels [i d, (i+1) d)
    Bp, n, c = t.shape
    return t.reshape(Bp, n, heads, c // heads).transpose(1, 2)


def merge_heads(t):              # (B', heads, n, d) -> (B', n, heads*d)
    Bp, h, n, d = t.shape
    return t.transpose(1, 2).reshape(Bp, n, h * d)


# ----------------------------------------------------------------------------------------------------------------


class StripeAttention(nn.Module):
    """CSWin LePEAttention (no parameters other than LePE's get_v).  Window hs x ws over an R x R grid;
    one branch's channels c and heads."""

    def __init__(self, dim, heads, res, hs, ws):
        super().__init__()
        self.heads, self.res, self.hs, self.ws = heads, res, hs, ws
        self.d = dim // heads
        self.get_v = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)

    def forward(self, q, k, v):                      # each (B, R*R, c)
        B, N, c = q.shape
        R, hs, ws = self.res, self.hs, self.ws
        assert N == R * R, "token count does not match the stage resolution"
        qw, kw, vw = (to_windows(t, R, R, hs, ws) for t in (q, k, v))
        lepe = image_to_tokens(self.get_v(tokens_to_image(vw, hs, ws)))   # zero padding at the window borders
        qh, kh, vh = (split_heads(t, self.heads) for t in (qw, kw, vw))
        if USE_SDPA and not RECORD_MAPS and hasattr(nn.functional, "scaled_dot_product_attention"):
            o = nn.functional.scaled_dot_product_attention(qh, kh, vh)  # its scale: d^-1/2
            return from_windows(merge_heads(o) + lepe, B, R, R, hs, ws)
        a = torch.softmax((qh * self.d ** -0.5) @ kh.transpose(-2, -1), dim=-1)
        if RECORD_MAPS:
            self.maps = {"": a}                      # per window (B·nW, heads, hs·ws, hs·ws), for test_attention.py
        o = merge_heads(a @ vh) + lepe
        return from_windows(o, B, R, R, hs, ws)


class FocusedLinearAttention(nn.Module):
    """FLatten L attention in the CSwin host (spec-flatten §1.2 + step 15): one global R x R window."""

    def __init__(self, dim, heads, res, focusing=3, kernel=5):
        super().__init__()
        self.heads, self.res, self.p = heads, res, focusing
        d = dim // heads
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, res * res, dim))
        self.get_v = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)
        self.dwc = nn.Conv2d(d, d, kernel, 1, kernel // 2, groups=d)

    def forward(self, q, k, v, dense=False):         # each (B, R*R, C)
        B, N, C = q.shape
        R, h = self.res, self.heads
        assert N == R * R, "token count does not match the stage resolution"
        s = F.softplus(self.scale)                   # beta 1, threshold 20
        o = flatten_ref.attend(flatten_ref.focus(q, s, self.p),
                               flatten_ref.focus(k + self.positional_encoding, s, self.p), v, h, dense)
        d = C // h
        vimg = split_heads(v, h).reshape(B * h, R, R, d).permute(0, 3, 1, 2)  # (B*h, d, R, R), kernel shared by heads
        dwc = self.dwc(vimg).reshape(B, C, N).transpose(1, 2)                # channel i*d + c
        lepe = image_to_tokens(self.get_v(tokens_to_image(v, R, R)))         # depthwise 3x3 over all C
        return o + dwc + lepe


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class CSWinBlock(nn.Module):
    def __init__(self, dim, heads, res, split, attn_type, last_stage, cfg):
        super().__init__()
        self.res, self.attn_type = res, attn_type
        self.qkv = nn.Linear(dim, 3 * dim, bias=cfg["qkv_bias"])
        self.norm1 = nn.LayerNorm(dim, eps=cfg["ln_eps"])
        self.proj = nn.Linear(dim, dim)
        self.branches = 1 if (last_stage or split == res) else 2
        if attn_type == "L":
            if self.branches != 1:
                raise ValueError(f"FLatten L attention needs split == resolution ({split} != {res}); "
                                 "the official code fails on L stripes")
            self.attns = nn.ModuleList([FocusedLinearAttention(dim, heads, res, cfg["focusing_factor"],
                                                               cfg["kernel_size"])])
        elif self.branches == 1:
            self.attns = nn.ModuleList([StripeAttention(dim, heads, res, res, res)])
        else:
            if res % split or heads % 2 or (dim // 2) % (heads // 2):
                raise ValueError(f"two-branch stripes need split | res, even heads, (C/2) % (h/2) == 0: "
                                 f"C {dim} h {heads} res {res} split {split}")
            self.attns = nn.ModuleList([StripeAttention(dim // 2, heads // 2, res, res, split),    # vertical
                                        StripeAttention(dim // 2, heads // 2, res, split, res)])   # horizontal
        self.mlp = Mlp(dim, int(dim * cfg["mlp_ratio"]))
        self.norm2 = nn.LayerNorm(dim, eps=cfg["ln_eps"])

    def attention(self, t):
        B, N, C = t.shape
        q, k, v = self.qkv(t).reshape(B, N, 3, C).unbind(2)
        if self.branches == 1:
            return self.attns[0](q, k, v)
        hC = C // 2
        return torch.cat([self.attns[0](q[..., :hC], k[..., :hC], v[..., :hC]),
                          self.attns[1](q[..., hC:], k[..., hC:], v[..., hC:])], dim=-1)

    def forward(self, x):
        x = x + self.proj(self.attention(self.norm1(x)))
        return x + self.mlp(self.norm2(x))


class MergeBlock(nn.Module):
    def __init__(self, dim, dim_out, eps):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim_out, 3, 2, 1)
        self.norm = nn.LayerNorm(dim_out, eps=eps)

    def forward(self, x):
        r = math.isqrt(x.shape[1])
        return self.norm(image_to_tokens(self.conv(tokens_to_image(x, r, r))))


class ToTokens(nn.Module):
    """stage1_conv_embed.1 (einops Rearrange 'b c h w -> b (h w) c' with h = w = img_size//4; no parameters)."""

    def __init__(self, r):
        super().__init__()
        self.r = r

    def forward(self, x):
        if x.shape[-2:] != (self.r, self.r):
            raise ValueError(f"stem output {tuple(x.shape[-2:])} != img_size//4 = {self.r}")
        return image_to_tokens(x)


class CSWin(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        dims, depths, heads = cfg["dims"], cfg["depths"], cfg["heads"]
        R = stage_resolutions(cfg["img_size"])
        self.resolutions = R
        self.stage1_conv_embed = nn.Sequential(nn.Conv2d(cfg["in_chans"], dims[0], 7, 4, 2), ToTokens(R[0]),
                                               nn.LayerNorm(dims[0], eps=cfg["ln_eps"]))
        for i in range(4):
            t = cfg["attn"][i]
            split = (cfg["la_split_size"] if t == "L" else cfg["split_size"])[i]
            setattr(self, f"stage{i + 1}", nn.ModuleList(
                CSWinBlock(dims[i], heads[i], R[i], split, t, i == 3, cfg) for _ in range(depths[i])))
            if i < 3:
                setattr(self, f"merge{i + 1}", MergeBlock(dims[i], dims[i + 1], cfg["ln_eps"]))
        self.norm = nn.LayerNorm(dims[3], eps=cfg["ln_eps"])
        self.head = nn.Linear(dims[3], cfg["num_classes"])

    def features(self, x):
        """Token maps after each stage, (B, R_i^2, C_i)."""
        x, out = self.stage1_conv_embed(x), []
        for i in range(4):
            if i:
                x = getattr(self, f"merge{i}")(x)
            for blk in getattr(self, f"stage{i + 1}"):
                x = blk(x)
            out.append(x)
        return out

    def forward(self, x):
        return self.head(self.norm(self.features(x)[-1]).mean(dim=1))


def model_config(name, img_size=None, num_classes=None, in_chans=None, dims=None, depths=None, heads=None,
                 split_size=None):
    """MODELS[name] with overrides.  L stages always get split = their resolution (global FLatten, the only case
    the official code runs); split_size overrides the S split sizes (official: [1, 2, 7, 7] / [1, 2, 12, 12])."""
    c = dict(MODELS[name])
    c["depths"], c["heads"], c["split_size"] = list(c["depths"]), list(c["heads"]), list(c["split_size"])
    if img_size is not None:
        c["img_size"] = img_size
    if num_classes is not None:
        c["num_classes"] = num_classes
    if in_chans is not None:
        c["in_chans"] = in_chans
    if depths is not None:
        c["depths"] = list(depths)
    if heads is not None:
        c["heads"] = list(heads)
    if split_size is not None:
        c["split_size"] = list(split_size)
    if dims is not None:
        dims = list(dims)
        if dims != [dims[0] << i for i in range(4)]:
            raise ValueError(f"CSwin stage widths must be C1, 2C1, 4C1, 8C1, got {dims}")
        c["embed_dim"] = dims[0]
    c["dims"] = [c["embed_dim"] << i for i in range(4)]
    R = stage_resolutions(c["img_size"])
    if c["la_split_size"] is not None:
        if img_size is None:
            assert c["la_split_size"] == R, (name, c["la_split_size"], R)
        c["la_split_size"] = R
    splits = [R[i] if c["attn"][i] == "L" else c["split_size"][i] for i in range(4)]
    why = sizes_ok(c["img_size"], splits, c["heads"], c["dims"])
    if why:
        raise ValueError(f"{name} at {c['img_size']} px: {why}")
    return c


def build(name, img_size=None, num_classes=None, in_chans=None, dims=None, depths=None, heads=None,
          split_size=None):
    return CSWin(model_config(name, img_size, num_classes, in_chans, dims, depths, heads, split_size))


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def count_macs(model, img_size=None):
    """Multiply-adds of every matmul / linear / conv for one image (1 MAC per multiply-add), incl. the attention
    matmuls (S: q k^T and a v per window; L: q·mean(k), k^T v, q (k^T v)), LePE 3x3 and DWC 5x5 depthwise convs."""
    cfg = model.cfg
    if img_size is not None and img_size != cfg["img_size"]:
        raise ValueError(f"model was built for {cfg['img_size']} px, not {img_size}")
    R, dims = model.resolutions, cfg["dims"]
    macs = R[0] * R[0] * dims[0] * cfg["in_chans"] * 49
    for i in range(4):
        C, N = dims[i], R[i] * R[i]
        if i:
            macs += N * C * dims[i - 1] * 9
        for blk in getattr(model, f"stage{i + 1}"):
            macs += N * C * 3 * C + N * C * C + 2 * N * C * blk.mlp.fc1.out_features
            for a in blk.attns:
                c = a.get_v.in_channels
                macs += 9 * N * c                                    # LePE
                if isinstance(a, StripeAttention):
                    n = a.hs * a.ws
                    macs += 2 * N * n * c                            # (N/n windows) x 2 n^2 c
                else:
                    d = c // a.heads
                    macs += N * c + 2 * N * c * d + a.dwc.kernel_size[0] ** 2 * N * c
    return macs + dims[3] * cfg["num_classes"]


def randomize(model, seed):
    """Random float32 values for every parameter (as a state dict), activations O(1).  Standard deviations:
    Linear/conv weights 1/sqrt(fan_in) (qkv sqrt(1.5/fan_in) so the softmax is not flat; LePE get_v 1/3, dwc 1/5),
    biases .1, LayerNorm weight 1 + .1 r, bias .1 r, FLatten scale .5 (softplus around ln 2, both signs),
    positional_encoding .3 (moves keys across the ReLU)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in model.state_dict().items():
        r = torch.randn(v.shape, generator=g, dtype=torch.float64)
        mod = k.rsplit(".", 1)[0]
        is_ln = isinstance(model.get_submodule(mod), nn.LayerNorm) if k.endswith(("weight", "bias")) else False
        if is_ln:
            out[k] = 1 + 0.1 * r if k.endswith("weight") else 0.1 * r
        elif k.endswith(".scale"):
            out[k] = 0.5 * r
        elif k.endswith(".positional_encoding"):
            out[k] = 0.3 * r
        elif k.endswith("bias"):
            out[k] = 0.1 * r
        elif k.endswith("qkv.weight"):
            out[k] = r * math.sqrt(1.5 / v[0].numel())
        else:
            out[k] = r / math.sqrt(v[0].numel())
    return {k: v.float() for k, v in out.items()}


def load(model, sd):
    """float64 copy of model with the state dict loaded strictly."""
    model = model.double()
    model.load_state_dict({k: torch.as_tensor(v).double() for k, v in sd.items()}, strict=True)
    return model


# ----------------------------------------------------------------------------------------------------------------
# self-test


def _dense_stripe(att, q, k, v):
    """Independent form of StripeAttention: full R^2 x R^2 attention with a same-window mask, LePE as a full-image
    3x3 whose taps are dropped where the neighbour lies in another window (or off the image)."""
    B, N, c = q.shape
    R, hs, ws, h = att.res, att.hs, att.ws, att.heads
    yy, xx = torch.meshgrid(torch.arange(R), torch.arange(R), indexing="ij")
    win = ((yy // hs) * (R // ws) + xx // ws).reshape(-1)
    same = win[:, None] == win[None, :]
    qh, kh, vh = (t.reshape(B, N, h, c // h).transpose(1, 2) for t in (q, k, v))
    logits = (qh @ kh.transpose(-2, -1)) / math.sqrt(c // h)
    a = torch.softmax(logits.masked_fill(~same, float("-inf")), dim=-1)
    o = (a @ vh).transpose(1, 2).reshape(B, N, c)
    img = v.transpose(1, 2).reshape(B, c, R, R)
    wimg = win.reshape(R, R)
    lepe = att.get_v.bias.view(1, c, 1, 1).expand(B, c, R, R).clone()
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            sh = torch.zeros_like(img)
            m = torch.zeros(R, R, dtype=torch.bool)
            ys, yd = slice(max(dy, 0), R + min(dy, 0)), slice(max(-dy, 0), R + min(-dy, 0))
            xs, xd = slice(max(dx, 0), R + min(dx, 0)), slice(max(-dx, 0), R + min(-dx, 0))
            sh[:, :, yd, xd] = img[:, :, ys, xs]
            m[yd, xd] = wimg[ys, xs] == wimg[yd, xd]
            lepe = lepe + sh * m * att.get_v.weight[:, 0, dy + 1, dx + 1].view(1, c, 1, 1)
    return o + lepe.flatten(2).transpose(1, 2)


def _selftest():
    rep_pass = rep_fail = 0

    def check(name, ok, detail=""):
        nonlocal rep_pass, rep_fail
        rep_pass, rep_fail = rep_pass + bool(ok), rep_fail + (not ok)
        print(("PASS " if ok else "FAIL ") + name + ((" (" if ok else ": ") + detail + (")" if ok else "")
                                                     if detail else ""), flush=True)

    t0 = time.time()
    torch.manual_seed(0)
    for name, want in PARAMS.items():
        m = build(name)
        got = count_params(m)
        check(f"params {name}", got == want, f"{got:,}, want {want:,}")
        mac = count_macs(m) / 1e9
        e = abs(mac / GMACS[name] - 1)
        check(f"macs {name}", e <= 0.01, f"{mac:.3f} G, spec {GMACS[name]} G, {100 * e:.2f}%")
        del m

    # stripe attention / LePE against the dense masked form, stripes of width 1, 2, 3 both orientations + global
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for (R, hs, ws) in [(6, 6, 1), (6, 1, 6), (6, 6, 2), (6, 2, 6), (6, 6, 3), (6, 3, 6), (5, 5, 5)]:
        a = StripeAttention(8, 2, R, hs, ws).double()
        with torch.no_grad():
            for p in a.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
        q, k, v = (torch.randn(2, R * R, 8, generator=g, dtype=torch.float64) for _ in range(3))
        worst = max(worst, (a(q, k, v) - _dense_stripe(a, q, k, v)).abs().max().item())
    check("stripe attention == dense masked form (LePE zero-padded per stripe)", worst < 1e-12, f"max {worst:.1e}")

    fa = FocusedLinearAttention(16, 4, 5).double()
    with torch.no_grad():
        for p in fa.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    q, k, v = (torch.randn(2, 25, 16, generator=g, dtype=torch.float64) for _ in range(3))
    e = (fa(q, k, v) - fa(q, k, v, dense=True)).abs().max().item()
    check("focused linear attention == dense form", e < 1e-10, f"max {e:.1e}")

    # reduced models, float64 forward + backward
    red = [  # tag, name, overrides, expected branch counts per stage (first block)
        ("cswin@224 C16 (stripes 1, 2, 7)", "cswin_tiny_224",
         dict(dims=[16, 32, 64, 128], depths=[1, 1, 2, 1], heads=[2, 2, 4, 8], num_classes=10), [2, 2, 2, 1]),
        ("cswin@64 split [1,2,4,4] (stage 3 R == split: one branch)", "cswin_tiny_224",
         dict(img_size=64, dims=[16, 32, 64, 128], depths=[1, 2, 1, 1], heads=[2, 4, 4, 8], num_classes=7,
              in_chans=1, split_size=[1, 2, 4, 4]), [2, 2, 1, 1]),
        ("cswin_base_384@384 split 12 C8", "cswin_base_384",
         dict(dims=[8, 16, 32, 64], depths=[1, 1, 1, 1], heads=[2, 2, 4, 4], num_classes=5), [2, 2, 2, 1]),
        ("flatten_cswin@224 C16 (L global, S stripes 7)", "flatten_cswin_tiny",
         dict(dims=[16, 32, 64, 128], depths=[1, 1, 2, 1], heads=[2, 4, 4, 8], num_classes=10), [1, 1, 2, 1]),
        ("flatten_cswin@64 split [1,2,2,2]", "flatten_cswin_base",
         dict(img_size=64, dims=[16, 32, 64, 128], depths=[2, 1, 1, 1], heads=[2, 2, 4, 8], num_classes=10,
              split_size=[1, 2, 2, 2]), [1, 1, 2, 1]),
    ]
    for i, (tag, name, ov, br) in enumerate(red):
        m = build(name, **ov)
        got_br = [getattr(m, f"stage{s + 1}")[0].branches for s in range(4)]
        m = load(m, randomize(m, 100 + i))
        c = m.cfg
        x = torch.randn(2, c["in_chans"], c["img_size"], c["img_size"], generator=g, dtype=torch.float64)
        y = m(x)
        loss = F.cross_entropy(y, torch.tensor([0, c["num_classes"] - 1]))
        loss.backward()
        dead = [k for k, p in m.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
        ok = (got_br == br and y.shape == (2, c["num_classes"]) and torch.isfinite(y).all().item()
              and 0.05 < y.abs().max().item() < 50 and not dead)
        check(f"fwd+bwd {tag}", ok, f"branches {got_br} (want {br}), logits max {y.abs().max().item():.3f}, "
                                    f"loss {loss.item():.4f}, all-zero grads {dead[:4]}")

    # refused sizes
    bad = [("cswin_tiny_224", 227), ("cswin_tiny_224", 64), ("cswin_tiny_224", 240), ("flatten_cswin_tiny", 200)]
    for name, s in bad:
        try:
            build(name, img_size=s, dims=[8, 16, 32, 64], depths=[1, 1, 1, 1])
            check(f"refuse {name}@{s}", False, "built")
        except ValueError as ex:
            check(f"refuse {name}@{s}", True, str(ex))
    print(f"# {time.time() - t0:.1f} s")
    print(f"{rep_pass} passed, {rep_fail} failed", flush=True)
    raise SystemExit(1 if rep_fail else 0)


if __name__ == "__main__":
    _selftest()
