"""Reference test of vitc's hMHSA + cFFN (Xu et al. 2023) against an independent PyTorch model written from
../shared/specs/spec-hmhsa-cffn.md (no official code exists), in float64 from the same float32 weights.

Model: the DeiT host of vit_ref.py with every block's attention replaced by HAttention and every MLP by CMlp:
  HAttention (spec §1): h heads (2·heads when double_heads), d = C/h, h2 = h/2; qkv Linear C -> 2C, rows
    [0, C/2) Q^, [C/2, C) K^, [C, 2C) V; A_r = Q^ K^T d^-1/2 (B, h2, N, N); IHH = Conv2d(h2, h2, 3, pad 1,
    groups h2) on each query row's patch keys as a (gh, gw) image, the cls key copied (A3); CHH = Conv2d(h2, h2, 1)
    on (B, h2, N, N); softmax([A_r, A_h]) V, proj.
  CMlp (spec §2): fc1 -> GELU -> U -> V, k = floor(t·hidden/(m+1)), t = 2/3; deployed U, V = Linear with bias;
    training U, V = Σ_{b<2} BatchNorm(Conv2d 1x1 no bias), BN statistics over batch x tokens.
Weights: N(0, 1/fan_in) matrices, N(0, .1) biases/tokens; LayerNorm and BatchNorm affine 1 + N(0, .1) / N(0, .1);
BN running_mean N(0, .2), running_var U(.5, 1.5), a quarter of them then near the BN eps with the affine weight
rescaled to match, so that the eps shows (common.eps_sensitive).

Checks:
  counts   at 224 / 1000 classes, `vitc info --json` and the reference: deit_tiny_hmhsa_cffn 4,680,040 deployed /
           5,865,664 training (--train-form), deit_small_hmhsa_cffn 17,901,808 / 22,623,136; the per-FFN spec
           numbers for DeiT-T (98,214 deployed, 197,016 training)
  (a) deit_tiny_hmhsa_cffn --img-size 32 --num-classes 10 (2x2 key grid + cls) and at 32x48 (a 2x3 key grid: timm's
  (H, W) img_size), deit_small_hmhsa_cffn at 32 px with one block, (b) vit_fmnist_tiny --attn hmhsa
      --ffn cffn (7x7 + cls): eval logits of the deployed form (Python-merged weights) and of the training form
      (--train-form, BN running stats): max|a-b| / max|b| <= 1e-4
  (c) `vitc grad` (training form, BN batch statistics), both models: loss <= 1e-4 relative, every grad/<param>
      max|a-b| / max|b| <= 1e-3, every gradient non-zero somewhere, except two that are analytically zero
      (checked <= 1e-6 relative to the largest gradient): attn.chh.bias adds a constant to every key of a
      hallucinated head, which softmax cancels; mlp.fc2_u.rep.*.bn.bias adds a per-channel constant to the
      bottleneck, which V's bias-free convs map to a per-channel constant that V's train-mode BNs subtract
  (d) `vitc deploy`: every tensor equals the Python merge (spec §2.3) within 1e-5 relative, and vitc's deployed
      logits equal vitc's training-form eval logits within 1e-5 (max|b| scale)
Run: /usr/bin/python3 tests/reference/test_hmhsa_cffn.py     (needs ./vitc or $VITC)
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import st
import vit_ref
from common import (Report, compare_grads, eps_sensitive, grad_err, have_vitc, info, scalar, scale_err, tmpdir,
                    vitc_ok)

TOL_FWD, TOL_LOSS, TOL_GRAD, TOL_DEPLOY = 1e-4, 1e-4, 1e-3, 1e-5
BN_EPS, T, R = 1e-5, 2.0 / 3.0, 2
COUNTS = {"deit_tiny_hmhsa_cffn": (4_680_040, 5_865_664), "deit_small_hmhsa_cffn": (17_901_808, 22_623_136)}
DOUBLE = {"deit_tiny_hmhsa_cffn": True, "deit_small_hmhsa_cffn": False, "vit_fmnist_tiny": False}
BASE = {"deit_tiny_hmhsa_cffn": "deit_tiny_patch16_224", "deit_small_hmhsa_cffn": "deit_small_patch16_224"}
GMACS = {"deit_tiny_hmhsa_cffn": 1.021, "deit_small_hmhsa_cffn": 3.709}  # spec-hmhsa-cffn §4, counted
GMACS_HOST = {"deit_tiny_patch16_224": 1.254, "deit_small_patch16_224": 4.599}  # §3, the official hosts measured


class HAttention(nn.Module):
    def __init__(self, dim, heads, double_heads, grid):
        super().__init__()
        self.h = 2 * heads if double_heads else heads
        assert self.h % 2 == 0 and dim % self.h == 0
        self.h2, self.d, self.grid = self.h // 2, dim // self.h, grid
        self.qkv = nn.Linear(dim, 2 * dim)
        self.ihh = nn.Conv2d(self.h2, self.h2, 3, padding=1, groups=self.h2)
        self.chh = nn.Conv2d(self.h2, self.h2, 1)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        h, h2, d, (gh, gw) = self.h, self.h2, self.d, self.grid
        qkv = self.qkv(x)
        q = qkv[..., : C // 2].reshape(B, N, h2, d).transpose(1, 2)
        k = qkv[..., C // 2: C].reshape(B, N, h2, d).transpose(1, 2)
        v = qkv[..., C:].reshape(B, N, h, d).transpose(1, 2)
        ar = (q @ k.transpose(-2, -1)) * d ** -0.5                        # (B, h2, N queries, N keys)
        extra = N - gh * gw                                               # the cls key bypasses IHH
        img = ar[..., extra:].permute(0, 2, 1, 3).reshape(B * N, h2, gh, gw)
        ih = self.ihh(img).reshape(B, N, h2, gh * gw).permute(0, 2, 1, 3)
        ah = self.chh(torch.cat([ar[..., :extra], ih], dim=-1))           # 1x1 over heads at every (query, key)
        a = torch.softmax(torch.cat([ar, ah], dim=1), dim=-1)
        self.maps = {"": a}                                               # computed heads, then hallucinated ones
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, C))


class Branch(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm1d(cout, eps=BN_EPS, momentum=0.1)

    def forward(self, x):                                                 # (B, N, cin) -> (B, N, cout)
        # 1x1 conv on tokens = Linear with the (cout, cin) kernel; BN over the B·N rows. (BatchNorm2d on the
        # transposed (B, cout, N, 1) view gave wrong gradients in torch 1.13's CPU channels-last backward.)
        B, N, cin = x.shape
        y = self.bn(F.linear(x.reshape(B * N, cin), self.conv.weight[:, :, 0, 0]))
        return y.reshape(B, N, -1)


class RepFactor(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.rep = nn.ModuleList(Branch(cin, cout) for _ in range(R))

    def forward(self, x):
        return sum(b(x) for b in self.rep)


class CMlp(nn.Module):
    def __init__(self, dim, hidden, train_form):
        super().__init__()
        self.k = math.floor(T * hidden / (hidden / dim + 1))
        self.fc1 = nn.Linear(dim, hidden)
        f = RepFactor if train_form else nn.Linear
        self.fc2_u, self.fc2_v = f(hidden, self.k), f(self.k, dim)

    def forward(self, x):
        return self.fc2_v(self.fc2_u(F.gelu(self.fc1(x))))


def zero_grad_param(k):
    """Parameters whose training-form gradient is identically zero: attn.chh.bias (a per-head constant on every
    key, cancelled by softmax) and mlp.fc2_u.rep.*.bn.bias (a per-channel constant on the bottleneck, mapped by
    V's bias-free convs to a constant that V's train-mode BatchNorms subtract)."""
    return k.endswith("attn.chh.bias") or (".fc2_u.rep." in k and k.endswith(".bn.bias"))


def make_model(cfg, double_heads, train_form):
    """cfg["img_w"], where given, makes the image H x W: a gh x gw key grid (timm's (H, W) img_size)."""
    gh, gw = cfg["img_size"] // cfg["patch_size"], cfg.get("img_w", cfg["img_size"]) // cfg["patch_size"]
    m = vit_ref.ViT(dict(cfg, num_patches=gh * gw))
    for b in m.blocks:
        b.attn = HAttention(cfg["embed_dim"], cfg["num_heads"], double_heads, (gh, gw))
        b.mlp = CMlp(cfg["embed_dim"], cfg["mlp_hidden"], train_form)
    return m


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def random_sd(model, seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in model.state_dict().items():
        r = torch.randn(v.shape, generator=g)
        if k.endswith("num_batches_tracked"):
            out[k] = torch.tensor(7, dtype=torch.int64)
        elif k.endswith("running_mean"):
            out[k] = 0.2 * r
        elif k.endswith("running_var"):
            out[k] = 0.5 + torch.rand(v.shape, generator=g)
        elif ".norm" in k or k.startswith("norm.") or ".bn." in k:
            out[k] = 1 + 0.1 * r if k.endswith("weight") else 0.1 * r
        elif v.ndim >= 2 and k not in ("cls_token", "pos_embed"):
            out[k] = r / math.sqrt(v[0].numel())
        else:
            out[k] = 0.1 * r
    return eps_sensitive({k: v if v.dtype == torch.int64 else v.float() for k, v in out.items()}, seed + 1)


def merge(sd):
    """Training-form state dict -> deployed (spec §2.3), in float64, returned as float32."""
    out = {}
    for k, v in sd.items():
        if ".rep." not in k:
            out[k] = v
    stems = sorted({k.split(".rep.")[0] for k in sd if ".rep." in k})
    for s in stems:
        W = b = 0
        for i in range(R):
            p = f"{s}.rep.{i}."
            a = sd[p + "bn.weight"].double() / torch.sqrt(sd[p + "bn.running_var"].double() + BN_EPS)
            W = W + a[:, None] * sd[p + "conv.weight"].double()[:, :, 0, 0]
            b = b + sd[p + "bn.bias"].double() - a * sd[p + "bn.running_mean"].double()
        out[s + ".weight"], out[s + ".bias"] = W.float(), b.float()
    return out


def build(cfg, dbl, train_form, sd):
    m = make_model(cfg, dbl, train_form).double()
    m.load_state_dict({k: (v if v.dtype == torch.int64 else v.double()) for k, v in sd.items()}, strict=True)
    return m


def test_counts(rep):
    c = vit_ref.model_config("deit_tiny_patch16_224")
    f_dep, f_tr = CMlp(192, 768, False), CMlp(192, 768, True)
    got = (f_dep.k, n_params(f_dep.fc2_u) + n_params(f_dep.fc2_v), n_params(f_tr.fc2_u) + n_params(f_tr.fc2_v))
    rep.check("spec cFFN counts DeiT-T", got == (102, 98_214, 197_016), f"(k, deployed, training) = {got}")
    for name, (dep, tr) in COUNTS.items():
        c = vit_ref.model_config(BASE[name])
        ref = (n_params(make_model(c, DOUBLE[name], False)), n_params(make_model(c, DOUBLE[name], True)))
        rep.check(f"reference counts {name}", ref == (dep, tr), f"{ref}, want {(dep, tr)}")
        for flag, want in (([], dep), (["--train-form"], tr)):
            p = vitc_ok(rep, f"info {name} {flag}", "info", name, "--json", *flag)
            if p is None:
                continue
            import json
            j = json.loads(p.stdout)
            rep.check(f"info {name}{' --train-form' if flag else ''} params", j.get("params") == want,
                      f"{j.get('params')}, want {want} (GMACs {j.get('gmacs')})")
            if not flag:  # spec §4's counted MACs of the deployed form (matmul and conv multiply-adds)
                g = GMACS[name]
                rep.check(f"info {name} GMACs", abs(j.get("gmacs", 0) - g) <= 0.01 * g,
                          f"{j.get('gmacs')}, spec {g} (within 1%)")
    for host, g in GMACS_HOST.items():  # spec §3's measured hosts
        j = info(rep, host)
        if j is not None:
            rep.check(f"info {host} GMACs", abs(j.get("gmacs", 0) - g) <= 0.01 * g, f"{j.get('gmacs')}, spec {g}")


def run_forward(rep, tag, args, w, xin, out, ref):
    if vitc_ok(rep, tag, "forward", *args, "--weights", w, "--input", xin, "--output", out) is None:
        return None
    y = st.load(out).get("logits")
    if y is None or y.shape != tuple(ref.shape):
        rep.check(tag, False, f"logits {None if y is None else y.shape}, want {tuple(ref.shape)}")
        return None
    e = scale_err(y, ref)
    rep.check(tag, e <= TOL_FWD, f"logits rel err {e:.2e} (tol {TOL_FWD:g})")
    return y


def test_model(rep, tmp, tag, model, args, cfg, dbl, seed):
    """Forward (both forms), grad (training form), deploy for one configuration; args are vitc's model options."""
    tr_model = make_model(cfg, dbl, True)
    sd = random_sd(tr_model, seed)
    # names and shapes of vitc's training form (and buffers) must equal the reference state dict
    init = tmp / f"{tag}_init.safetensors"
    if vitc_ok(rep, f"{tag} init --train-form", "init", model, *args, "--train-form", "-o", init) is not None:
        got = {k: v.shape for k, v in st.load(init).items()}
        want = {k: tuple(v.shape) for k, v in sd.items()}
        rep.check(f"{tag} training-form names/shapes", got == want,
                  f"missing {sorted(set(want) - set(got))[:6]}, extra {sorted(set(got) - set(want))[:6]}, "
                  f"shape diffs {[k for k in want if k in got and got[k] != want[k]][:6]}")
    sd_dep = merge(sd)
    w_tr, w_dep = tmp / f"{tag}_train.safetensors", tmp / f"{tag}_dep.safetensors"
    st.save(w_tr, sd)
    st.save(w_dep, sd_dep)
    g = torch.Generator().manual_seed(seed + 100)
    B = 4
    x = torch.randn(B, cfg["in_chans"], cfg["img_size"], cfg.get("img_w", cfg["img_size"]), generator=g)
    labels = torch.randint(0, cfg["num_classes"], (B,), generator=g)
    xin = tmp / f"{tag}_x.safetensors"
    st.save(xin, {"input": x, "labels": labels})
    with torch.no_grad():
        ref_tr = build(cfg, dbl, True, sd).eval()(x.double())
        ref_dep = build(cfg, dbl, False, sd_dep).eval()(x.double())
    e = scale_err(ref_dep, ref_tr)
    rep.check(f"{tag} reference merge", e <= 1e-6, f"deployed vs training-form eval logits {e:.2e}")
    run_forward(rep, f"({tag}) forward deployed", [model, *args], w_dep, xin, tmp / f"{tag}_yd.safetensors",
                ref_dep)
    y_tr = run_forward(rep, f"({tag}) forward training form (eval)", [model, *args, "--train-form"], w_tr, xin,
                       tmp / f"{tag}_yt.safetensors", ref_tr)

    # (c) gradients of the training form, BatchNorm in train mode
    out = tmp / f"{tag}_g.safetensors"
    if vitc_ok(rep, f"({tag}) grad", "grad", model, *args, "--weights", w_tr, "--input", xin, "--output", out):
        res = st.load(out)
        m = build(cfg, dbl, True, sd).train()
        m.zero_grad()
        loss = F.cross_entropy(m(x.double()), labels)
        loss.backward()
        ref_g = {k: p.grad for k, p in m.named_parameters()}
        ref_loss = loss.item()
        if "loss" in res:
            e = abs(scalar(res["loss"]) - ref_loss) / max(1.0, abs(ref_loss))
            rep.check(f"({tag}) loss", e <= TOL_LOSS, f"vitc {scalar(res['loss']):.7f} vs ref {ref_loss:.7f}, rel {e:.2e}")
        else:
            rep.check(f"({tag}) loss", False, "no `loss` tensor in output")
        # chh.bias and fc2_u's BN biases are analytically zero (see the module docstring): round-off only in both
        zero, structural = compare_grads(rep, f"({tag})", res, ref_g, TOL_GRAD, zero_by=zero_grad_param)
        zero = [k for k in zero if k not in structural]
        rep.check(f"({tag}) grads non-zero", not zero, f"all-zero gradients: {zero}")

    # (d) vitc deploy: weights equal the Python merge; logits equal the training form's eval logits
    dep = tmp / f"{tag}_vitc_dep.safetensors"
    if vitc_ok(rep, f"({tag}) deploy", "deploy", model, *args, "--weights", w_tr, "-o", dep) is None:
        return
    got = st.load(dep)
    if set(got) != set(sd_dep):
        rep.check(f"({tag}) deploy names", False, f"missing {sorted(set(sd_dep) - set(got))[:6]}, "
                                                 f"extra {sorted(set(got) - set(sd_dep))[:6]}")
        return
    e = max(grad_err(got[k], sd_dep[k])[0] for k in sd_dep)
    rep.check(f"({tag}) deploy weights", e <= TOL_DEPLOY, f"max rel err {e:.2e} (tol {TOL_DEPLOY:g})")
    yd = tmp / f"{tag}_ydv.safetensors"
    if y_tr is not None and vitc_ok(rep, f"({tag}) forward vitc-deployed", "forward", model, *args, "--weights", dep,
                                    "--input", xin, "--output", yd):
        e = scale_err(st.load(yd)["logits"], y_tr)
        rep.check(f"({tag}) deploy logits", e <= TOL_DEPLOY,
                  f"deployed vs training-form eval logits {e:.2e} (tol {TOL_DEPLOY:g})")


def main():
    rep = Report()
    if have_vitc(rep):
        tmp = tmpdir()
        test_counts(rep)
        cfg = vit_ref.model_config("deit_tiny_patch16_224", img_size=32, num_classes=10)
        test_model(rep, tmp, "deit_tiny@32", "deit_tiny_hmhsa_cffn", ["--img-size", 32, "--num-classes", 10], cfg,
                   True, 1)
        # at 32x48: IHH on a 2x3 key grid (the cls key bypassing it), pos_embed of 6 patch rows
        test_model(rep, tmp, "deit_tiny@32x48", "deit_tiny_hmhsa_cffn", ["--img-size", "32x48", "--num-classes", 10],
                   dict(cfg, img_w=48), True, 7)
        # DeiT-S: its 6 heads not doubled (3 computed, 3 hallucinated), one block
        cfg = dict(vit_ref.model_config("deit_small_patch16_224", img_size=32, num_classes=10), depth=1)
        test_model(rep, tmp, "deit_small@32", "deit_small_hmhsa_cffn",
                   ["--img-size", 32, "--num-classes", 10, "--depths", 1], cfg, False, 3)
        j = info(rep, "vit_fmnist_tiny") or {}
        cfg = dict(patch_size=j.get("patch_size", 4), embed_dim=j.get("embed_dim", 64), depth=j.get("depth", 4),
                   num_heads=j.get("num_heads", 4), img_size=j.get("img_size", 28), in_chans=j.get("in_chans", 1),
                   num_classes=j.get("num_classes", 10))
        cfg["mlp_hidden"] = 2 * cfg["embed_dim"]
        test_model(rep, tmp, "fmnist", "vit_fmnist_tiny", ["--attn", "hmhsa", "--ffn", "cffn"], cfg, False, 2)
    rep.finish()


if __name__ == "__main__":
    main()
