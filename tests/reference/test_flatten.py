"""Reference test of vitc's FLatten focused linear attention (src/blocks/flatten.c) in the DeiT / ViT host.

The PyTorch model below is written from ../shared/specs/spec-flatten.md (§1.2 HEAD formula, PVT-style module with
attn.q / attn.kv, §6 recommended DeiT transplant: positional encoding over all tokens in every block, the class
token skips the DWC), independently of the C code. Computed in float64 from the same float32 weights.

Checks:
  info   `vitc info flatten_deit_tiny --json` params = 6,193,576 (224 px, 1000 classes), equal to the count of the
         reference module (spec §6: 6.194 M transplant with pos-enc 197×192)
  names  `vitc init` state_dict names and shapes equal the reference's (both models below)
  (a) flatten_deit_tiny --img-size 64 --num-classes 10 (4×4 grid + cls), random non-trivial weights, batch 2
  (b) vit_fmnist_tiny --attn flatten (7×7 grid + cls), batch 3
      for each: `vitc forward` logits max|a-b| / max|b| <= 1e-4; `vitc grad` loss <= 1e-4 relative and
      every grad/<param> max|a-b| / max|b| <= 1e-3; every gradient non-zero somewhere except the last block's
      attn.dwc (exactly 0 in vitc and in the reference: only the class token reaches the head and it skips the DWC)
  (c) the same attention with the dense form Σ_j (φq_i·φk_j) v_j / Σ_j (φq_i·φk_j) (spec §1.2 last paragraph) in
      the reference itself (guards the reference's O(N d²) algebra)
Run: /usr/bin/python3 tests/reference/test_flatten.py      (needs ./vitc or $VITC)
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import flatten_ref
import st
from common import Report, compare_grads, have_vitc, info, scalar, scale_err, tmpdir, vitc_ok

TOL_FWD, TOL_LOSS, TOL_GRAD = 1e-4, 1e-4, 1e-3
LN_EPS = 1e-6
P_FOCUS, KERNEL = 3, 5


class FocusedLinearAttention(nn.Module):
    """spec §1.2 with PVT-style projections; `lead` leading tokens (cls) are off the H×W grid and skip the DWC."""

    def __init__(self, dim, heads, n, lead, focusing=P_FOCUS, kernel=KERNEL):
        super().__init__()
        self.heads, self.lead, self.p = heads, lead, focusing
        d = dim // heads
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, n, dim))
        self.q = nn.Linear(dim, dim, bias=True)
        self.kv = nn.Linear(dim, 2 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)
        self.dwc = nn.Conv2d(d, d, kernel, padding=kernel // 2, groups=d)

    def kernels(self, x):
        B, N, C = x.shape
        q = self.q(x)
        kv = self.kv(x).reshape(B, N, 2, C)
        k, v = kv[:, :, 0], kv[:, :, 1]
        k = k + self.positional_encoding
        s = F.softplus(self.scale)                       # beta 1, threshold 20
        self.raw = (q, k)                                # for the plain ReLU linear attention map in forward
        return flatten_ref.focus(q, s, self.p), flatten_ref.focus(k, s, self.p), v     # (B, N, C) each

    def dwc_term(self, v, B, N, C):
        h, d, lead = self.heads, C // self.heads, self.lead
        side = math.isqrt(N - lead)
        vg = flatten_ref.split_heads(v, h)[:, :, lead:].reshape(B * h, side, side, d).permute(0, 3, 1, 2)        # (B·h, d, H, W)
        t = self.dwc(vg).reshape(B, C, side * side).permute(0, 2, 1)              # channel i·d + c
        return torch.cat([t.new_zeros(B, lead, C), t], dim=1)

    def forward(self, x, dense=False):
        B, N, C = x.shape
        q, k, v = self.kernels(x)
        o = flatten_ref.attend(q, k, v, self.heads, dense) + self.dwc_term(v, B, N, C)
        # the maps (test_attention.py): focused implied attention; plain ReLU linear attention of the same q, k
        self.maps = {"": flatten_ref.implied(q, k, self.heads),
                     "relu_linear": flatten_ref.implied(*(F.relu(t) for t in self.raw), self.heads)}
        return self.proj(o)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, n):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = FocusedLinearAttention(dim, heads, n, lead=1)
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, in_chans, dim, patch):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class FLattenViT(nn.Module):
    """DeiT/ViT with a class token, every block's attention FLatten (timm names)."""

    def __init__(self, cfg):
        super().__init__()
        D, n = cfg["embed_dim"], (cfg["img_size"] // cfg["patch_size"]) ** 2 + 1
        self.patch_embed = PatchEmbed(cfg["in_chans"], D, cfg["patch_size"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, n, D))
        self.blocks = nn.ModuleList(Block(D, cfg["num_heads"], cfg["mlp_hidden"], n) for _ in range(cfg["depth"]))
        self.norm = nn.LayerNorm(D, eps=LN_EPS)
        self.head = nn.Linear(D, cfg["num_classes"])

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


def deit_tiny_cfg(img_size=224, num_classes=1000):
    return dict(patch_size=16, embed_dim=192, depth=12, num_heads=3, mlp_hidden=768, img_size=img_size,
                in_chans=3, num_classes=num_classes)


def count_params(cfg):
    return sum(v.numel() for v in FLattenViT(cfg).state_dict().values())


def random_state_dict(cfg, seed):
    """Non-trivial float32 weights: Linear/conv N(0, 1/fan_in), biases and tokens N(0, .1), LayerNorm 1 + N(0, .1) /
    N(0, .1); attn.scale N(0, .5) (softplus away from ln 2, both signs); attn.positional_encoding N(0, .3) (moves
    keys across the ReLU); dwc N(0, 1/5)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in FLattenViT(cfg).state_dict().items():
        r = torch.randn(v.shape, generator=g, dtype=torch.float64)
        if ".norm" in k or k.startswith("norm."):
            out[k] = 1 + 0.1 * r if k.endswith("weight") else 0.1 * r
        elif k.endswith("attn.scale"):
            out[k] = 0.5 * r
        elif k.endswith("attn.positional_encoding"):
            out[k] = 0.3 * r
        elif k.endswith("dwc.weight"):
            out[k] = 0.2 * r
        elif v.ndim >= 2 and k not in ("cls_token", "pos_embed"):
            out[k] = r / math.sqrt(v[0].numel())
        else:
            out[k] = 0.1 * r
    return {k: v.float() for k, v in out.items()}


def build(cfg, sd):
    m = FLattenViT(cfg).double()
    m.load_state_dict({k: torch.as_tensor(v).double() for k, v in sd.items()}, strict=True)
    return m


def check_model(rep, tmp, tag, model, cfg, opts, batch, seed, mutate=None, extra_dead=()):
    """Names/shapes from `vitc init`, forward logits, loss and every gradient of `vitc grad`. mutate(sd) edits the
    random weights; extra_dead: parameters it leaves without a gradient."""
    init = tmp / f"{tag}_init.safetensors"
    if vitc_ok(rep, f"{tag} init", "init", model, "-o", init, "--seed", 0, *opts) is None:
        return
    got = {k: tuple(v.shape) for k, v in st.load(init).items()}
    want = {k: tuple(v.shape) for k, v in FLattenViT(cfg).state_dict().items()}
    rep.check(f"{tag} names/shapes", got == want,
              f"missing {sorted(set(want) - set(got))[:6]}, extra {sorted(set(got) - set(want))[:6]}, "
              f"shape diffs {[(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:6]}")
    sd = random_state_dict(cfg, seed)
    if mutate:
        mutate(sd)
    w = tmp / f"{tag}_w.safetensors"
    st.save(w, sd)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, cfg["in_chans"], cfg["img_size"], cfg["img_size"], generator=gen)
    labels = torch.randint(0, cfg["num_classes"], (batch,), generator=gen)
    m = build(cfg, sd)

    xin, out = tmp / f"{tag}_x.safetensors", tmp / f"{tag}_y.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    if vitc_ok(rep, f"{tag} forward", "forward", model, "--weights", w, "--input", xin, "--output", out, *opts):
        y = st.load(out).get("logits")
        with torch.no_grad():
            ref = m(x.double())
        if y is None or y.shape != tuple(ref.shape):
            rep.check(f"{tag} forward", False, f"logits {None if y is None else y.shape}, want {tuple(ref.shape)}")
        else:
            e = scale_err(y, ref)
            rep.check(f"{tag} forward", e <= TOL_FWD, f"logits rel err {e:.2e} (tol {TOL_FWD:g}), "
                      f"max|logit| {ref.abs().max().item():.3f}")

    gout = tmp / f"{tag}_g.safetensors"
    if vitc_ok(rep, f"{tag} grad", "grad", model, "--weights", w, "--input", xin, "--output", gout, *opts) is None:
        return
    res = st.load(gout)
    m.zero_grad()
    loss = F.cross_entropy(m(x.double()), labels)
    loss.backward()
    ref_g = {k: p.grad.detach() for k, p in m.named_parameters()}
    if "loss" in res:
        e = abs(scalar(res["loss"]) - loss.item()) / max(1.0, abs(loss.item()))
        rep.check(f"{tag} loss", e <= TOL_LOSS, f"vitc {scalar(res['loss']):.7f} vs ref {loss.item():.7f}, rel {e:.2e}")
    else:
        rep.check(f"{tag} loss", False, "no `loss` tensor in output")
    zero, _ = compare_grads(rep, tag, res, ref_g, TOL_GRAD)
    # The last block's DWC cannot reach the logits: only the class token feeds the head, and the class token gets
    # no DWC term (spec §6 choice). Its gradient is exactly 0 in the reference too; every other one must be non-zero.
    last = cfg["depth"] - 1
    dead = {f"blocks.{last}.attn.dwc.weight", f"blocks.{last}.attn.dwc.bias", *extra_dead}
    ref_dead = sorted(k for k, r in ref_g.items() if not torch.any(r != 0))
    rep.check(f"{tag} grads non-zero", not (set(zero) - dead) and sorted(zero) == ref_dead == sorted(dead),
              f"all-zero in vitc: {zero}; in the reference: {ref_dead}; expected exactly {sorted(dead)} "
              "(last block's DWC: the class token skips the DWC)")


def queries_off(sd):
    """Blocks 0 and 1 get queries with no positive channel (q = 0) and softplus(scale) > 2.08: every focused query
    row is (1e-6 / softplus(scale))^3 scaled, whose ‖u^3‖² underflows float32 (vitc flushes denormals to zero) and
    must be computed rescaled, not as zeros."""
    g = torch.Generator().manual_seed(7)
    for b in (0, 1):
        sd[f"blocks.{b}.attn.q.weight"].zero_()
        sd[f"blocks.{b}.attn.q.bias"].zero_()
        sc = sd[f"blocks.{b}.attn.scale"]
        sc.copy_(2.5 + 0.3 * torch.rand(sc.shape, generator=g))


def check_dense(rep):
    torch.manual_seed(0)
    a = FocusedLinearAttention(24, 3, 10, lead=1).double()
    with torch.no_grad():
        for p in a.parameters():
            p.normal_(0, 0.4)
    x = torch.randn(2, 10, 24, dtype=torch.float64)
    e = (a(x) - a(x, dense=True)).abs().max().item()
    rep.check("(c) reference linear form == dense form", e < 1e-9, f"max diff {e:.2e}")


def main():
    rep = Report()
    check_dense(rep)
    want = 6_193_576
    n_ref = count_params(deit_tiny_cfg())
    rep.check("reference flatten_deit_tiny params", n_ref == want, f"{n_ref:,} (spec §6: 6.194 M), want {want:,}")
    if have_vitc(rep):
        tmp = tmpdir()
        j = info(rep, "flatten_deit_tiny")
        if j is not None:
            got = (j.get("params"), j.get("img_size"), j.get("num_classes"), j.get("attn"))
            rep.check("info flatten_deit_tiny", got == (want, 224, 1000, "flatten"),
                      f"(params, img, classes, attn) = {got}, want {(want, 224, 1000, 'flatten')}; "
                      f"{j.get('gmacs')} GMACs")
            rep.check("info flatten_deit_tiny GMACs", abs(j.get("gmacs", 0) - 1.145) <= 0.01 * 1.145,
                      f"{j.get('gmacs')}, spec §6 1.145 as transplanted (within 1%)")
        check_model(rep, tmp, "(a) flatten_deit_tiny@64", "flatten_deit_tiny", deit_tiny_cfg(64, 10),
                    ["--img-size", 64, "--num-classes", 10], batch=2, seed=10)
        fm = dict(patch_size=4, embed_dim=64, depth=4, num_heads=4, mlp_hidden=128, img_size=28, in_chans=1,
                  num_classes=10)
        check_model(rep, tmp, "(b) vit_fmnist_tiny --attn flatten", "vit_fmnist_tiny", fm, ["--attn", "flatten"],
                    batch=3, seed=20)
        check_model(rep, tmp, "(d) vit_fmnist_tiny --attn flatten, queries without a positive channel",
                    "vit_fmnist_tiny", fm, ["--attn", "flatten"], batch=2, seed=30, mutate=queries_off,
                    extra_dead=[f"blocks.{b}.attn.q.{t}" for b in (0, 1) for t in ("weight", "bias")])
    rep.finish()


if __name__ == "__main__":
    main()
