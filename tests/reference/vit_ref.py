"""Independent PyTorch ViT/DeiT reference, written from the papers/timm conventions (not vitc).

Architecture (timm VisionTransformer with a class token, as used by DeiT):
  patch_embed.proj  Conv2d(C, D, P, stride P)  -> tokens (B, N, D)
  prepend cls_token (1,1,D), add pos_embed (1,1+N,D)
  depth x pre-norm block:  x += attn.proj(MHSA(norm1(x)));  x += mlp.fc2(GELU(mlp.fc1(norm2(x))))
     MHSA: qkv Linear(D, 3D, bias), split as (3, heads, head_dim), softmax(q k^T * head_dim^-0.5) v
  norm (applied to all tokens) -> token 0 -> head Linear(D, K)
LayerNorm eps 1e-6, exact (erf) GELU.  Module/parameter names equal timm's state_dict keys.

The architecture is read back from a state dict's shapes (config_from_state_dict); only the
number of heads must be given.  Self-test (python3 vit_ref.py): parameter counts of
deit_tiny_patch16_224 = 5,717,416 and deit_small_patch16_224 = 22,050,664 at 224 / 1000 classes; attention equals
torch.nn.MultiheadAttention given the same projections.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

MODELS = {  # timm names -> architecture
    "deit_tiny_patch16_224": dict(patch_size=16, embed_dim=192, depth=12, num_heads=3),
    "deit_small_patch16_224": dict(patch_size=16, embed_dim=384, depth=12, num_heads=6),
    "deit_base_patch16_224": dict(patch_size=16, embed_dim=768, depth=12, num_heads=12),
}
# Attention modules record their maps in .maps only when this is True (test_attention.py sets it); off (the
# default, as bench/compare_torch.py times the references) no block's map outlives its forward.
RECORD_MAPS = False
# True: attention through torch's fused F.scaled_dot_product_attention where this torch has it (2.x; timm's ViT uses
# it there, so bench/compare_torch.py turns it on for its anchors), unless maps are recorded; the tests keep the
# written-out softmax(q k^T) v
USE_SDPA = False

LN_EPS = 1e-6


def model_config(name, img_size=224, in_chans=3, num_classes=1000):
    c = dict(MODELS[name], img_size=img_size, in_chans=in_chans, num_classes=num_classes)
    c["mlp_hidden"] = 4 * c["embed_dim"]
    return c


def config_from_state_dict(sd, num_heads=None):
    """Architecture from tensor shapes (a square grid where pos_embed's patch rows are a square number, else
    num_patches: timm's PatchEmbed with an (H, W) img_size; no cls_token: a GAP head); num_heads must be supplied."""
    cls = "cls_token" in sd
    D = sd["pos_embed"].shape[-1]
    _, C, P, _ = sd["patch_embed.proj.weight"].shape
    n = sd["pos_embed"].shape[1] - cls
    grid = math.isqrt(n)
    depth = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    cfg = dict(patch_size=P, embed_dim=D, depth=depth, num_heads=num_heads, img_size=grid * P,
               in_chans=C, num_classes=sd["head.weight"].shape[0],
               mlp_hidden=sd["blocks.0.mlp.fc1.weight"].shape[0])
    if grid * grid != n:
        cfg["num_patches"] = n
    if not cls:
        cfg["class_token"] = False
    return cfg


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        assert dim % heads == 0, (dim, heads)
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, D = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]                       # (B, heads, N, head_dim)
        if USE_SDPA and not RECORD_MAPS and hasattr(nn.functional, "scaled_dot_product_attention"):
            o = nn.functional.scaled_dot_product_attention(q, k, v)  # its scale: head_dim^-0.5, as self.scale
            return self.proj(o.transpose(1, 2).reshape(B, N, D))
        a = torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)
        if RECORD_MAPS:
            self.maps = {"": a}                                 # (B, heads, N, N), for test_attention.py
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, D))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))                   # exact erf GELU


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=LN_EPS), Attention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=LN_EPS), Mlp(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, in_chans, dim, patch):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)         # (B, N, D), row-major patches


class ViT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, n = cfg["embed_dim"], cfg.get("num_patches") or (cfg["img_size"] // cfg["patch_size"]) ** 2
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg["in_chans"], D, cfg["patch_size"])
        self.cls = cfg.get("class_token", True)   # False: no class token, the mean of the normed tokens (GAP)
        if self.cls:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.cls + n, D))
        self.blocks = nn.ModuleList(Block(D, cfg["num_heads"], cfg["mlp_hidden"])
                                    for _ in range(cfg["depth"]))
        self.norm = nn.LayerNorm(D, eps=LN_EPS)
        self.head = nn.Linear(D, cfg["num_classes"])

    def forward(self, x):
        x = self.patch_embed(x)
        if self.cls:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed
        for b in self.blocks:
            x = b(x)
        x = self.norm(x)
        return self.head(x[:, 0] if self.cls else x.mean(1))


def build(sd, num_heads, dtype=torch.float64):
    """ViT from a state dict (numpy or torch values), computing in `dtype`."""
    sd = {k: torch.as_tensor(v) for k, v in sd.items()}
    m = ViT(config_from_state_dict(sd, num_heads)).to(dtype)
    m.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=True)
    return m


def random_state_dict(cfg, seed=0, std=0.02):
    """Random float32 weights.  std=0.02 (timm-like): N(0, .02) for weights, biases, tokens and
    pos_embed.  std="fan_in": weights N(0, 1/fan_in), biases/tokens N(0, .1), so activations are
    O(1) (attention is peaked, GELU works off its linear part).  LayerNorm: weight 1 + N(0, .1),
    bias N(0, .1) in both cases."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in ViT(cfg).state_dict().items():
        r = torch.randn(v.shape, generator=g)
        if ".norm" in k or k.startswith("norm."):
            out[k] = 1 + 0.1 * r if k.endswith("weight") else 0.1 * r
        elif std != "fan_in":
            out[k] = std * r
        elif v.ndim >= 2 and k not in ("cls_token", "pos_embed"):
            out[k] = r / math.sqrt(v[0].numel())
        else:
            out[k] = 0.1 * r
    return {k: v.float() for k, v in out.items()}


def no_decay(name, p):
    """AdamW grouping used by vitc: no weight decay on dim <= 1 params, cls_token, pos_embed."""
    return p.ndim <= 1 or name in ("cls_token", "pos_embed")


def loss_and_grads(model, x, labels):
    model.zero_grad()
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    return loss.item(), {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def adamw_run(model, x, labels, steps, lr, weight_decay):
    """torch.optim.AdamW (betas .9/.999, eps 1e-8) on one batch -> (losses before each step,
    gradients of the last step)."""
    ps = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for k, p in ps if not no_decay(k, p)], "weight_decay": weight_decay},
         {"params": [p for k, p in ps if no_decay(k, p)], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        loss, grads = loss_and_grads(model, x, labels)
        losses.append(loss)
        opt.step()
    return losses, grads


def count_params(cfg):
    return sum(v.numel() for v in ViT(cfg).state_dict().values())


if __name__ == "__main__":
    for name, want in [("deit_tiny_patch16_224", 5_717_416), ("deit_small_patch16_224", 22_050_664)]:
        got = count_params(model_config(name))
        assert got == want, (name, got, want)
        print(f"PASS {name}: {got:,} params")
    cfg = model_config("deit_tiny_patch16_224", img_size=32, num_classes=10)
    sd = random_state_dict(cfg, seed=1)
    m = build(sd, 3)
    assert config_from_state_dict(sd, 3) == cfg
    assert m(torch.randn(2, 3, 32, 32, dtype=torch.float64)).shape == (2, 10)
    # attention must agree with torch's own nn.MultiheadAttention given the same projections
    a, mha = Attention(24, 3).double(), nn.MultiheadAttention(24, 3, batch_first=True).double()
    with torch.no_grad():
        for q in a.parameters():
            q.normal_(0, 0.3)
        mha.in_proj_weight.copy_(a.qkv.weight), mha.in_proj_bias.copy_(a.qkv.bias)
        mha.out_proj.weight.copy_(a.proj.weight), mha.out_proj.bias.copy_(a.proj.bias)
        t = torch.randn(2, 5, 24, dtype=torch.float64)
        assert (mha(t, t, t, need_weights=False)[0] - a(t)).abs().max() < 1e-12
    print("PASS vit_ref self-test")
