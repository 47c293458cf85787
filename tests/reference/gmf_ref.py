"""Independent PyTorch reference of GroupMixFormer / Group-Mix Attention, written from
shared/specs/spec-groupmixformer.md (§2-§5), not from vitc.  Module and parameter names equal the
official state_dict keys (conv_stem, patch_embed_layers, groupmixformer_backbone.{i}.gma_stage.{j},
norm4, head).  BatchNorm2d replaces SyncBatchNorm (same keys).  DropPath and dropouts are identity.

Also: ViTGMA, the plain ViT host (patch conv, pos_embed, no class token, GAP head) with the GMA
attention (EfficientAtt only) in place of MHSA, as `vitc --attn gma` on vit_fmnist_tiny_gap.

Self-test (python3 gmf_ref.py): exact parameter counts of M/T/S/B/L at 224 (spec §8).
"""
import torch
import torch.nn.functional as F
from torch import nn

# EfficientAtt records its implied token weights in .maps only when this is True (test_attention.py sets it);
# off (the default, as bench/compare_torch.py times the references) that N x N product, which the output never
# uses, is not computed.
RECORD_MAPS = False

CONFIGS = {  # name -> (dims, depths, mlp ratios)
    "groupmixformer_m": ([40, 80, 160, 160], [3, 3, 12, 4], [4, 4, 4, 4]),
    "groupmixformer_t": ([80, 160, 200, 240], [4, 4, 12, 4], [4, 4, 4, 4]),
    "groupmixformer_s": ([80, 160, 320, 320], [2, 4, 12, 4], [4, 4, 4, 4]),
    "groupmixformer_b": ([200, 240, 320, 480], [8, 8, 12, 8], [2, 2, 4, 4]),
    "groupmixformer_l": ([240, 320, 360, 480], [8, 10, 18, 16], [4, 4, 2, 2]),   # paper Table 1
}
PARAMS = {"groupmixformer_m": 5_733_120, "groupmixformer_t": 10_949_152, "groupmixformer_s": 22_421_320,
          "groupmixformer_b": 45_827_272, "groupmixformer_l": 70_309_264}
HEADS = 8


def hswish(x):
    return x * torch.clamp(x + 3, 0, 6) / 6


class SeparableConv2d(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cin, k, stride, k // 2, groups=cin, bias=False)
        self.pointwise_conv = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x):
        return self.pointwise_conv(self.conv1(x))


class Agg0(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.conv = SeparableConv2d(3 * s, s, 3)
        self.norm = nn.LayerNorm(s)          # eps 1e-5

    def forward(self, x):                    # x (B, 3s, H, W) -> (B, N, s)
        y = self.conv(x).flatten(2).transpose(1, 2)
        return hswish(self.norm(y))


class Aggregator(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.norm0 = nn.BatchNorm2d(s)
        self.agg1, self.norm1 = SeparableConv2d(s, s, 3), nn.BatchNorm2d(s)
        self.agg2, self.norm2 = SeparableConv2d(s, s, 5), nn.BatchNorm2d(s)
        self.agg3, self.norm3 = SeparableConv2d(s, s, 7), nn.BatchNorm2d(s)
        self.agg0 = Agg0(s)


class CRPE(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.split = [2 * d, 3 * d, 3 * d]
        self.conv_list = nn.ModuleList(nn.Conv2d(c, c, k, 1, k // 2, groups=c) for c, k in zip(self.split, (3, 5, 7)))

    def forward(self, vimg):                 # (B, 8d, H, W)
        return torch.cat([cv(v) for cv, v in zip(self.conv_list, vimg.split(self.split, dim=1))], 1)


class EfficientAtt(nn.Module):
    def __init__(self, C):
        super().__init__()
        assert C % 10 == 0
        self.C, self.s, self.d = C, C // 5, C // 10
        self.scale = (C // HEADS) ** -0.5  # the official head_dim = dim // num_heads: integer division
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.aggregator = Aggregator(self.s)
        self.crpe = CRPE(self.d)

    def forward(self, x, H, W):
        B, N, C = x.shape
        s, d, a = self.s, self.d, self.aggregator
        t = self.qkv(x).reshape(B, N, 3, C).permute(2, 0, 1, 3).reshape(3 * B, N, C)
        t = t.transpose(1, 2).reshape(3 * B, C, H, W)
        X = t.split(s, dim=1)
        Y = [hswish(a.norm0(X[0])), hswish(a.norm1(a.agg1(X[1]))), hswish(a.norm2(a.agg2(X[2]))),
             hswish(a.norm3(a.agg3(X[3])))]
        Z = torch.cat(Y, 1).reshape(3, B, HEADS, d, N).transpose(-1, -2)       # (3, B, 8, N, d)
        q, k, v = Z[0], Z[1], Z[2]
        ctx = k.softmax(dim=2).transpose(-1, -2) @ v                            # (B, 8, d, d)
        if RECORD_MAPS:  # implied token weights (B, 8, N, N): an N x N product the forward itself never needs
            self.maps = {"": self.scale * q @ k.softmax(dim=2).transpose(-1, -2)}
        fa = q @ ctx
        vimg = v.transpose(-1, -2).reshape(B, HEADS * d, H, W)
        vc = self.crpe(vimg).reshape(B, HEADS, d, N).transpose(-1, -2)
        o = (self.scale * fa + q * vc).transpose(1, 2).reshape(B, N, 4 * s)
        x4 = X[4].reshape(3, B, s, H, W).permute(1, 0, 2, 3, 4).reshape(B, 3 * s, H, W)
        u = a.agg0(x4)
        return self.proj(torch.cat([o, u], -1))


class ConvPosEnc(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.proj = nn.Conv2d(C, C, 3, 1, 1, groups=C)

    def forward(self, x, H, W):
        B, N, C = x.shape
        f = x.transpose(1, 2).reshape(B, C, H, W)
        return (self.proj(f) + f).flatten(2).transpose(1, 2)


class Mlp(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(C, hidden), nn.Linear(hidden, C)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class GMABlock(nn.Module):
    def __init__(self, C, r):
        super().__init__()
        self.cpe = ConvPosEnc(C)
        self.norm1 = nn.LayerNorm(C, eps=1e-6)
        self.att = EfficientAtt(C)
        self.norm2 = nn.LayerNorm(C, eps=1e-6)
        self.mlp = Mlp(C, int(C * r))

    def forward(self, x, H, W):
        x = self.cpe(x, H, W)
        x = x + self.att(self.norm1(x), H, W)
        return x + self.mlp(self.norm2(x))


class ConvStem(nn.Module):
    def __init__(self, C0, in_chans=3):
        super().__init__()
        self.proj1, self.norm1 = nn.Conv2d(in_chans, C0 // 2, 3, 2, 1), nn.BatchNorm2d(C0 // 2)
        self.proj2, self.norm2 = nn.Conv2d(C0 // 2, C0, 3, 2, 1), nn.BatchNorm2d(C0)

    def forward(self, x):
        return hswish(self.norm2(self.proj2(hswish(self.norm1(self.proj1(x))))))


class PatchEmbedLayer(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.proj = SeparableConv2d(cin, cout, 3, stride)
        self.norm = nn.BatchNorm2d(cout)

    def forward(self, x):
        return hswish(self.norm(self.proj(x)))


class Stage(nn.Module):
    def __init__(self, C, depth, r):
        super().__init__()
        self.gma_stage = nn.ModuleList(GMABlock(C, r) for _ in range(depth))


class GroupMixFormer(nn.Module):
    def __init__(self, dims, depths, ratios, num_classes=1000, in_chans=3):
        super().__init__()
        self.conv_stem = ConvStem(dims[0], in_chans)
        self.patch_embed_layers = nn.ModuleList(
            PatchEmbedLayer(dims[max(i - 1, 0)], dims[i], 2 if i else 1) for i in range(4))
        self.groupmixformer_backbone = nn.ModuleList(Stage(dims[i], depths[i], ratios[i]) for i in range(4))
        self.norm4 = nn.BatchNorm2d(dims[3])
        self.head = nn.Linear(dims[3], num_classes)

    def features(self, x):
        """The four stage maps (B, C_i, H_i, W_i), as the official backbone returns them for dense tasks."""
        m, maps = self.conv_stem(x), []
        for pe, st in zip(self.patch_embed_layers, self.groupmixformer_backbone):
            m = pe(m)
            B, C, H, W = m.shape
            t = m.flatten(2).transpose(1, 2)
            for blk in st.gma_stage:
                t = blk(t, H, W)
            m = t.reshape(B, H, W, C).permute(0, 3, 1, 2)
            maps.append(m)
        return maps

    def forward(self, x):
        return self.head(self.norm4(self.features(x)[-1]).mean(dim=(2, 3)))


class ViTGMABlock(nn.Module):
    def __init__(self, D, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, eps=1e-6)
        self.attn = EfficientAtt(D)
        self.norm2 = nn.LayerNorm(D, eps=1e-6)
        self.mlp = Mlp(D, hidden)


class ViTGMA(nn.Module):
    """timm-style ViT without class token: patch_embed.proj, pos_embed (1, N, D), pre-norm blocks with
    GMA attention (EfficientAtt) on the square token grid, norm, mean over tokens, head."""

    def __init__(self, img, patch, D, depth, hidden, in_chans, num_classes):
        super().__init__()
        self.g = img // patch
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(in_chans, D, patch, patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.g * self.g, D))
        self.blocks = nn.ModuleList(ViTGMABlock(D, hidden) for _ in range(depth))
        self.norm = nn.LayerNorm(D, eps=1e-6)
        self.head = nn.Linear(D, num_classes)

    def forward(self, x):
        t = self.patch_embed.proj(x).flatten(2).transpose(1, 2) + self.pos_embed
        for b in self.blocks:
            t = t + b.attn(b.norm1(t), self.g, self.g)
            t = t + b.mlp(b.norm2(t))
        return self.head(self.norm(t).mean(1))


def build(name, num_classes=1000, in_chans=3):
    dims, depths, ratios = CONFIGS[name]
    return GroupMixFormer(dims, depths, ratios, num_classes, in_chans)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def randomize(model, seed):
    """Random weights with O(1) activations, random norm affines and BN running statistics (float32)."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            sd[k] = torch.randint(0, 100, (), generator=g, dtype=torch.int64)
        elif k.endswith("running_mean"):
            sd[k] = 0.2 * torch.randn(v.shape, generator=g)
        elif k.endswith("running_var"):
            sd[k] = 0.5 + torch.rand(v.shape, generator=g)
        elif v.dim() == 1 and k.endswith("weight"):
            sd[k] = 1.0 + 0.2 * torch.randn(v.shape, generator=g)
        elif v.dim() == 1:
            sd[k] = 0.1 * torch.randn(v.shape, generator=g)
        elif k == "pos_embed":
            sd[k] = 0.1 * torch.randn(v.shape, generator=g)
        else:
            fan_in = v[0].numel()
            sd[k] = (2 * torch.rand(v.shape, generator=g) - 1) * (3.0 / fan_in) ** 0.5
    return sd


if __name__ == "__main__":
    ok = True
    for n, want in PARAMS.items():
        got = count_params(build(n))
        print(("PASS" if got == want else "FAIL"), n, got, want)
        ok &= got == want
    raise SystemExit(0 if ok else 1)
