"""Independent PyTorch reference of Next-ViT (Li et al. 2022) and of Next-ViT-S with hMHSA + cFFN (Xu et al. 2023),
written from ../shared/specs/spec-nextvit.md (the official bytedance/Next-ViT classification/nextvit.py described
op by op) and spec-hmhsa-cffn.md §1-2, §8 — not from vitc's C code.  NCHW as the official code; float64 in tests.

Official state_dict names: stem.{0..3}.{conv,norm}, features.{i}.* (NCB: patch_embed.{conv,norm}, mhca.{group_conv3x3,
norm,projection}, norm, mlp.{conv1,conv2}; NTB: patch_embed, norm1, e_mhsa.{q,k,v,proj,norm}, projection.{conv,norm},
mhca, norm2, mlp), norm, proj_head.0.  Every BatchNorm is written out (batch statistics over all axes but the
channels in train mode, running statistics in eval mode, eps 1e-5), in the reference's own arithmetic rather than
torch's BatchNorm kernels (compared with the official classes on 2026-12-07: logits within 2e-14, gradients 5e-13).

Forms: `merged=True` is the deployed form of the official merge_bn (norm / norm1 / norm2 / e_mhsa.norm skipped, their
tensors kept); `train_form=True` gives cFFN's training branches (conv2_{u,v}.rep.{b}.{conv,bn}).
hMHSA keys for IHH: n reduced keys row-major on rows x cols, rows = the largest divisor of n not above sqrt(n)
(7x7 at 224); with sr = 1 the real H x W grid.

API: PARAMS, GMACS, build(name, depths=None, num_classes=1000, train_form=False, merged=False), randomize(model, seed),
calibrate(model, sd, seed, img), merge_bn(sd, model), deploy(train_sd, model) (cFFN merge, then merge_bn), stage_maps(model, x).
"""
import math

import common
import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-5
PARAMS = {"nextvit_small": 31_763_368, "nextvit_base": 44_818_856, "nextvit_large": 57_874_344,
          "nextvit_small_hmhsa_cffn": 27_252_844}                                  # deployed form
GMACS = {"nextvit_small": 5.794420224, "nextvit_base": 8.273817088, "nextvit_large": 10.753213952,
         "nextvit_small_hmhsa_cffn": 5.115684376}                                  # spec §6, §8
DEPTHS = {"nextvit_small": [3, 4, 10, 3], "nextvit_base": [3, 4, 20, 3], "nextvit_large": [3, 4, 30, 3],
          "nextvit_small_hmhsa_cffn": [3, 4, 10, 3]}


def make_divisible(v, d=32):
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class BN(nn.Module):
    """BatchNorm over channel axis 1 of (B, C, ...), written out (see the module docstring)."""

    def __init__(self, c):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    calib = None   # calibrate(): a torch.Generator while running stats are drawn around the batch statistics

    def forward(self, x):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        if self.training:
            dims = [0] + list(range(2, x.dim()))
            mu, var = x.mean(dims, keepdim=True), x.var(dims, unbiased=False, keepdim=True)
            if self.calib is not None:
                g, m, v = self.calib, mu.flatten().detach(), var.flatten().detach()
                r = torch.randn(m.shape, generator=g, dtype=m.dtype)
                self.running_mean.copy_(m + 0.2 * torch.sqrt(v) * r)
                self.running_var.copy_(v * (0.7 + 0.6 * torch.rand(v.shape, generator=g, dtype=v.dtype)))
        else:
            mu, var = self.running_mean.view(shape), self.running_var.view(shape)
        return (x - mu) / torch.sqrt(var + EPS) * self.weight.view(shape) + self.bias.view(shape)


RELU_HOOK = []  # callables f(z, y) told of every ReLU's input z and output y (test_nextvit's flip allowance)


def relu(z):
    """F.relu, reported to RELU_HOOK's callables."""
    y = F.relu(z)
    for f in RELU_HOOK:
        f(z, y)
    return y


class ConvBNReLU(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, padding=1, bias=False)
        self.norm = BN(cout)

    def forward(self, x):
        return relu(self.norm(self.conv(x)))


class PatchEmbed(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.pool = stride == 2
        if stride == 2 or cin != cout:
            self.conv, self.norm = nn.Conv2d(cin, cout, 1, bias=False), BN(cout)
        else:
            self.conv = None

    def forward(self, x):
        if self.pool:
            x = F.avg_pool2d(x, 2, 2, ceil_mode=True, count_include_pad=False)
        return x if self.conv is None else self.norm(self.conv(x))


class MHCA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.group_conv3x3 = nn.Conv2d(c, c, 3, 1, padding=1, groups=c // 32, bias=False)
        self.norm = BN(c)
        self.projection = nn.Conv2d(c, c, 1, bias=False)

    def forward(self, x):
        return self.projection(relu(self.norm(self.group_conv3x3(x))))


class Branch(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(cin, cout, 1, bias=False), BN(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


class Factor(nn.Module):
    """A cFFN factor: a 1x1 conv with bias (deployed) or the sum of r = 2 conv + BN branches (training)."""

    def __init__(self, cin, cout, train_form):
        super().__init__()
        if train_form:
            self.rep = nn.ModuleList([Branch(cin, cout) for _ in range(2)])
        else:
            self.weight = nn.Parameter(torch.zeros(cout, cin, 1, 1))
            self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x):
        if hasattr(self, "rep"):
            return sum(b(x) for b in self.rep)
        return F.conv2d(x, self.weight, self.bias)


class Mlp(nn.Module):
    def __init__(self, c, ratio, cffn, train_form):
        super().__init__()
        hid = make_divisible(c * ratio)
        self.conv1 = nn.Conv2d(c, hid, 1)
        if cffn:
            k = (2 * hid * c) // (3 * (hid + c))
            self.conv2_u, self.conv2_v = Factor(hid, k, train_form), Factor(k, c, train_form)
        else:
            self.conv2 = nn.Conv2d(hid, c, 1)

    def forward(self, x):
        h = relu(self.conv1(x))
        return self.conv2_v(self.conv2_u(h)) if hasattr(self, "conv2_u") else self.conv2(h)


def key_rows(n):
    return max(d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0)


class EMHSA(nn.Module):
    """E-MHSA (hmhsa=False: heads C/32, d 32) or hMHSA (heads doubled, d 16, IHH + CHH) on tokens (B, N, C)."""

    def __init__(self, c, sr, hmhsa):
        super().__init__()
        self.h = 2 * (c // 32) if hmhsa else c // 32
        self.d, self.sr, self.hm = c // self.h, sr, hmhsa
        qk = c // 2 if hmhsa else c
        self.q, self.k, self.v, self.proj = nn.Linear(c, qk), nn.Linear(c, qk), nn.Linear(c, c), nn.Linear(c, c)
        if sr > 1:
            self.norm = BN(c)
        if hmhsa:
            h2 = self.h // 2
            self.ihh = nn.Conv2d(h2, h2, 3, padding=1, groups=h2)
            self.chh = nn.Conv2d(h2, h2, 1)

    def forward(self, x, H, W, merged):
        B, N, C = x.shape
        xs = x
        if self.sr > 1:
            xs = F.avg_pool1d(x.transpose(1, 2), self.sr ** 2, self.sr ** 2)   # raster windows, tail dropped
            if not merged:
                xs = self.norm(xs)
            xs = xs.transpose(1, 2)
        n = xs.shape[1]
        hq = self.h // 2 if self.hm else self.h
        q = self.q(x).reshape(B, N, hq, self.d).transpose(1, 2)
        k = self.k(xs).reshape(B, n, hq, self.d).transpose(1, 2)
        v = self.v(xs).reshape(B, n, self.h, self.d).transpose(1, 2)
        a = q @ k.transpose(-2, -1) * self.d ** -0.5
        if self.hm:
            gh, gw = (H, W) if self.sr == 1 else (key_rows(n), n // key_rows(n))
            img = a.permute(0, 2, 1, 3).reshape(B * N, hq, gh, gw)
            ih = self.ihh(img).reshape(B, N, hq, n).permute(0, 2, 1, 3)
            a = torch.cat([a, self.chh(ih)], dim=1)
        o = (a.softmax(-1) @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(o)


class NCB(nn.Module):
    def __init__(self, cin, cout, stride, cfg):
        super().__init__()
        self.patch_embed = PatchEmbed(cin, cout, stride)
        self.mhca = MHCA(cout)
        self.norm = BN(cout)
        self.mlp = Mlp(cout, 3, cfg["cffn"], cfg["train_form"])
        self.merged = cfg["merged"]

    def forward(self, x):
        x = self.patch_embed(x)
        x = x + self.mhca(x)
        return x + self.mlp(x if self.merged else self.norm(x))


class NTB(nn.Module):
    def __init__(self, cin, cout, stride, sr, cfg):
        super().__init__()
        cs = make_divisible(int(cout * 0.75))
        self.patch_embed = PatchEmbed(cin, cs, stride)
        self.norm1 = BN(cs)
        self.e_mhsa = EMHSA(cs, sr, cfg["hmhsa"])
        self.projection = PatchEmbed(cs, cout - cs, 1)
        self.mhca = MHCA(cout - cs)
        self.norm2 = BN(cout)
        self.mlp = Mlp(cout, 2, cfg["cffn"], cfg["train_form"])
        self.merged = cfg["merged"]

    def forward(self, x):
        x = self.patch_embed(x)
        B, C, H, W = x.shape
        h = x if self.merged else self.norm1(x)
        a = self.e_mhsa(h.flatten(2).transpose(1, 2), H, W, self.merged)
        x = x + a.transpose(1, 2).reshape(B, C, H, W)
        o = self.projection(x)
        o = o + self.mhca(o)
        x = torch.cat([x, o], dim=1)
        return x + self.mlp(x if self.merged else self.norm2(x))


class NextViT(nn.Module):
    def __init__(self, depths, num_classes=1000, hmhsa=False, cffn=False, train_form=False, merged=False):
        super().__init__()
        cfg = {"hmhsa": hmhsa, "cffn": cffn, "train_form": train_form, "merged": merged}
        outs = [[96] * depths[0], [192] * (depths[1] - 1) + [256], [384, 384, 384, 384, 512] * (depths[2] // 5),
                [768] * (depths[3] - 1) + [1024]]
        ntb = [[False] * depths[0], [False] * (depths[1] - 1) + [True], [False, False, False, False, True] *
               (depths[2] // 5), [False] * (depths[3] - 1) + [True]]
        self.stem = nn.Sequential(ConvBNReLU(3, 64, 2), ConvBNReLU(64, 32, 1), ConvBNReLU(32, 64, 1),
                                  ConvBNReLU(64, 64, 2))
        blocks, cin, self.ends = [], 64, []
        for s in range(4):
            for j in range(depths[s]):
                stride = 2 if s > 0 and j == 0 else 1
                blk = (NTB(cin, outs[s][j], stride, [8, 4, 2, 1][s], cfg) if ntb[s][j]
                       else NCB(cin, outs[s][j], stride, cfg))
                blocks.append(blk)
                cin = outs[s][j]
            self.ends.append(len(blocks) - 1)
        self.features = nn.Sequential(*blocks)
        self.norm = BN(cin)
        self.proj_head = nn.Sequential(nn.Linear(cin, num_classes))

    def forward(self, x):
        x = self.norm(self.features(self.stem(x)))
        return self.proj_head(x.mean((2, 3)))


def build(name, depths=None, num_classes=1000, train_form=False, merged=False):
    hm = name == "nextvit_small_hmhsa_cffn"
    return NextViT(depths or DEPTHS[name], num_classes, hmhsa=hm, cffn=hm, train_form=train_form, merged=merged)


def stage_maps(model, x):
    """The four stage outputs (B, C_i, H_i, W_i)."""
    out, x = [], model.stem(x)
    for i, blk in enumerate(model.features):
        x = blk(x)
        if i in model.ends:
            out.append(x)
    return out


BRANCH_OUT = (".mlp.conv2.weight", ".mlp.conv2_v.weight", ".mhca.projection.weight", ".e_mhsa.proj.weight")


def randomize(model, seed, dtype=torch.float32):
    """Random values for every state_dict entry: conv/Linear weights N(0, 1/fan_in) (the residual branches' last
    layers, BRANCH_OUT, half that std, so the residual stream grows slowly), biases N(0, 0.1^2), BN weights
    1 + N(0, 0.1^2), BN running_mean N(0, 0.2^2), running_var U(0.5, 1.5), num_batches_tracked random."""
    return common.random_state(model, seed, dtype, gain=lambda k: 0.5 if k.endswith(BRANCH_OUT) else 1.0)


def calibrate(model, sd, seed, img, B=4):
    """sd with every BatchNorm's running statistics redrawn around the batch statistics of a train-mode forward on
    random inputs (mean + 0.2·std·N(0, 1), var·U(0.7, 1.3)), in module order: random weights then keep eval-mode
    activations O(1) through deep stacks (uncalibrated random statistics grow them to ~1e3 by stage 4, where float32
    round-off alone reaches 1e-4)."""
    g = torch.Generator().manual_seed(seed)
    m = model.double()
    m.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in sd.items()})
    bns = [b for b in m.modules() if isinstance(b, BN)]
    for b in bns:
        b.calib = g
    m.train()
    with torch.no_grad():
        m(torch.randn(B, 3, img, img, generator=g, dtype=torch.float64))
    for b in bns:
        b.calib = None
    return {k: v.to(sd[k].dtype) for k, v in m.state_dict().items()}


def _bn_affine(sd, p):
    s = sd[p + ".weight"].double() / torch.sqrt(sd[p + ".running_var"].double() + EPS)
    return s, sd[p + ".bias"].double() - s * sd[p + ".running_mean"].double()


def merge_bn(sd, model):
    """The official merge_pre_bn on every NCB/NTB (spec §4), in float64: a, c of the pre-norm(s) (two BNs: a1 a2,
    a2 c1 + c2); b' = b + W c, W' = W diag(a).  Returns a new state_dict (same keys, input dtype)."""
    out = dict(sd)

    def fold(target, bns):
        a, c = _bn_affine(sd, bns[0])
        if len(bns) == 2:
            a2, c2 = _bn_affine(sd, bns[1])
            a, c = a * a2, a2 * c + c2
        w = sd[target + ".weight"].double()
        w2 = w.reshape(w.shape[0], -1)
        out[target + ".bias"] = (sd[target + ".bias"].double() + w2 @ c).to(sd[target + ".bias"].dtype)
        out[target + ".weight"] = (w2 * a[None, :]).reshape(w.shape).to(w.dtype)

    for i, blk in enumerate(model.features):
        f = f"features.{i}"
        if isinstance(blk, NCB):
            fold(f + ".mlp.conv1", [f + ".norm"])
        else:
            fold(f + ".mlp.conv1", [f + ".norm2"])
            fold(f + ".e_mhsa.q", [f + ".norm1"])
            red = [f + ".norm1", f + ".e_mhsa.norm"] if blk.e_mhsa.sr > 1 else [f + ".norm1"]
            fold(f + ".e_mhsa.k", red)
            fold(f + ".e_mhsa.v", red)
    return out


def deploy(train_sd, model):
    """Training-form state_dict -> deployed: cFFN's branches merged (spec-hmhsa-cffn §2.3: W = sum_b diag(a_b) W_b,
    b = sum_b (beta_b - a_b mu_b)), then merge_bn.  Float64 inside, returned in the input dtype."""
    out, done = {}, set()
    for key, v in train_sd.items():
        if ".rep." not in key:
            out[key] = v
            continue
        stem = key.split(".rep.")[0]
        if stem in done:
            continue
        done.add(stem)
        W = b = 0
        for i in range(2):
            a, c = _bn_affine(train_sd, f"{stem}.rep.{i}.bn")
            W = W + a[:, None, None, None] * train_sd[f"{stem}.rep.{i}.conv.weight"].double()
            b = b + c
        out[stem + ".weight"], out[stem + ".bias"] = W.to(v.dtype), b.to(v.dtype)
    return merge_bn(out, model)


def count_params(model):
    return sum(p.numel() for p in model.parameters())
