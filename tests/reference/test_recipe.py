"""Reference tests of the training recipe's pieces against computations written here, independently of the C code,
from timm's definitions (timm/data/mixup.py, timm/loss/cross.py, torch.nn.utils.clip_grad_norm_):

- Mixup/CutMix (vt_mixup_apply, src/train/mixup.c) with fixed lam / mode / box centre: the mixed batch and the soft
  targets equal timm's `_mix_batch` + `mixup_target` transcribed in torch (≤ 1e-6), for Mixup, CutMix with and
  without correct_lam, boxes clipped at the border, lam = 1 (no mixing);
- the draws (vt_mixup_sample): CutMix frequency = switch_prob, Mixup's lam ~ Beta(0.8, 0.8) and CutMix's ~ Beta(1, 1)
  (two-sample Kolmogorov-Smirnov against torch.distributions.Beta), box centres uniform, prob < 1 leaves that share
  of the batches unmixed, Mixup-only never cuts;
- soft-target cross-entropy (vt_soft_cross_entropy, src/ops/loss.c): loss and gradients equal timm's
  SoftTargetCrossEntropy with autograd (float64) ≤ 1e-5;
- gradient clipping (vt_clip_grad_norm) equals torch.nn.utils.clip_grad_norm_ ≤ 1e-6.
The C side is tests/reference/recipe_driver.c, compiled against build/libvitc.a.
"""
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

from common import Report, build_driver, grad_err, scale_err, tmpdir


def run(rep, name, exe, *args):
    p = subprocess.run([str(exe)] + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    return rep.check(f"{name}: run", p.returncode == 0, p.stderr[-600:])


# ---- timm's Mixup, mode 'batch', transcribed (numpy draws replaced by the given lam / mode / centre) ----
def rand_bbox(shape, lam, cy, cx):
    ratio = np.sqrt(1 - lam)
    img_h, img_w = shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    yl = np.clip(cy - cut_h // 2, 0, img_h)
    yh = np.clip(cy + cut_h // 2, 0, img_h)
    xl = np.clip(cx - cut_w // 2, 0, img_w)
    xh = np.clip(cx + cut_w // 2, 0, img_w)
    return yl, yh, xl, xh


def one_hot(x, num_classes, on_value, off_value):
    x = x.long().view(-1, 1)
    return torch.full((x.size(0), num_classes), off_value).scatter_(1, x, on_value)


def mixup_target(target, num_classes, lam, smoothing):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value, off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value, off_value)
    return y1 * lam + y2 * (1. - lam)


def timm_mix(x, target, K, lam, cutmix, cy, cx, smoothing, correct_lam):
    x = x.clone()
    if lam != 1.:
        if cutmix:
            yl, yh, xl, xh = rand_bbox(x.shape, lam, cy, cx)
            if correct_lam:
                lam = 1. - (yh - yl) * (xh - xl) / float(x.shape[-2] * x.shape[-1])
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            x_flipped = x.flip(0).mul_(1. - lam)
            x.mul_(lam).add_(x_flipped)
    return x, mixup_target(target, K, lam, smoothing), lam


MIX_CASES = [  # B, C, H, W, K, lam, cutmix, cy, cx, smoothing, correct_lam
    (4, 3, 8, 8, 5, 0.3, 0, 0, 0, 0.1, 1),
    (6, 2, 7, 9, 10, 0.85, 0, 0, 0, 0.0, 1),
    (4, 3, 8, 8, 5, 0.3, 1, 4, 4, 0.1, 1),     # box inside the image
    (4, 3, 8, 10, 5, 0.2, 1, 0, 9, 0.1, 1),    # box clipped at the top and right
    (2, 1, 28, 28, 10, 0.6, 1, 27, 3, 0.1, 0),  # correct_lam off: lam stays the Beta draw
    (8, 3, 5, 5, 3, 0.95, 1, 2, 2, 0.1, 1),     # small cut (int() of a small side): possibly empty box
    (4, 3, 8, 8, 5, 1.0, 1, 3, 3, 0.1, 1),      # lam = 1: nothing mixed, targets smoothed one-hot
]


def check_mixup(rep, exe, d):
    for case in MIX_CASES:
        B, C, H, W, K, lam, cut, cy, cx, sm, corr = case
        name = f"mixup B{B} C{C} {H}x{W} K{K} lam{lam} {'cutmix' if cut else 'mixup'} c=({cy},{cx}) corr{corr}"
        g = torch.Generator().manual_seed(B * 100 + H)
        x = torch.randn(B, C, H, W, generator=g)
        lab = torch.randint(0, K, (B,), generator=g)
        xr, tr, lr = timm_mix(x, lab, K, lam, cut, cy, cx, sm, corr)
        fin, fout = d / "mix_in.bin", d / "mix_out.bin"
        with open(fin, "wb") as f:
            f.write(x.numpy().tobytes())
            f.write(lab.float().numpy().tobytes())
        if not run(rep, name, exe, "mixup", B, C, H, W, K, repr(lam), cut, cy, cx, repr(sm), corr, fin, fout):
            continue
        out = np.fromfile(fout, dtype=np.float64)
        nx = B * C * H * W
        rep.check(f"{name}: images", scale_err(out[:nx].reshape(x.shape), xr) <= 1e-6,
                  f"err {scale_err(out[:nx].reshape(x.shape), xr):.1e}")
        rep.check(f"{name}: targets", scale_err(out[nx:nx + B * K].reshape(B, K), tr) <= 1e-6,
                  f"err {scale_err(out[nx:nx + B * K].reshape(B, K), tr):.1e}")
        rep.check(f"{name}: lam", abs(out[-1] - lr) <= 1e-12, f"{out[-1]} vs {lr}")
        rep.check(f"{name}: targets sum to 1", np.allclose(out[nx:nx + B * K].reshape(B, K).sum(1), 1, atol=1e-6))


def ks2(a, b):
    """Two-sample Kolmogorov-Smirnov statistic and its 1e-4 critical value."""
    a, b = np.sort(a), np.sort(b)
    z = np.concatenate([a, b])
    d = np.abs(np.searchsorted(a, z, side="right") / a.size - np.searchsorted(b, z, side="right") / b.size).max()
    crit = np.sqrt(-np.log(1e-4 / 2) / 2) * np.sqrt((a.size + b.size) / (a.size * b.size))
    return d, crit


def draws(rep, exe, d, N, H, W, ma, ca, prob, sw, seed):
    fout = d / "draws.bin"
    if not run(rep, f"draws {ma}/{ca}/{prob}/{sw}", exe, "draws", N, H, W, ma, ca, prob, sw, seed, fout):
        return None
    return np.fromfile(fout, dtype=np.float64).reshape(N, 4)


def check_draws(rep, exe, d):
    N, H, W = 40000, 28, 20
    r = draws(rep, exe, d, N, H, W, 0.8, 1.0, 1.0, 0.5, 7)
    if r is not None:
        lam, cut, cy, cx = r[:, 0], r[:, 1] == 1, r[:, 2], r[:, 3]
        share = cut.mean()
        rep.check("draws: CutMix share = switch_prob 0.5", abs(share - 0.5) < 5 * np.sqrt(0.25 / N), f"{share:.4f}")
        g = torch.Generator().manual_seed(3)
        for mode, sel, alpha in (("Mixup", ~cut, 0.8), ("CutMix", cut, 1.0)):
            torch.manual_seed(11)
            ref = torch.distributions.Beta(alpha, alpha).sample((N,)).double().numpy()
            dks, crit = ks2(lam[sel], ref)
            rep.check(f"draws: {mode} lam ~ Beta({alpha}, {alpha}) (KS vs torch)", dks < crit,
                      f"D {dks:.4f}, critical {crit:.4f}")
        for what, v, n in (("cy", cy[cut], H), ("cx", cx[cut], W)):
            counts = np.bincount(v.astype(int), minlength=n)
            exp = v.size / n
            chi2 = ((counts - exp) ** 2 / exp).sum()
            rep.check(f"draws: box {what} uniform over {n}", counts.size == n and chi2 < n - 1 + 6 * np.sqrt(2 * (n - 1)),
                      f"chi2 {chi2:.1f} for {n - 1} dof")
        rep.check("draws: Mixup draws no box", np.all(cy[~cut] == 0) and np.all(cx[~cut] == 0))
    r = draws(rep, exe, d, 20000, H, W, 0.8, 1.0, 0.5, 0.5, 8)
    if r is not None:
        unmixed = (r[:, 0] == 1).mean()
        rep.check("draws: prob 0.5 leaves half the batches unmixed", abs(unmixed - 0.5) < 5 * np.sqrt(0.25 / 20000),
                  f"{unmixed:.4f}")
    r = draws(rep, exe, d, 5000, H, W, 0.8, 0.0, 1.0, 0.5, 9)
    if r is not None:
        rep.check("draws: mixup_alpha only never cuts", np.all(r[:, 1] == 0) and np.all(r[:, 0] < 1))
    r = draws(rep, exe, d, 5000, H, W, 0.0, 1.0, 1.0, 0.5, 9)
    if r is not None:
        rep.check("draws: cutmix_alpha only always cuts", np.all(r[:, 1] == 1))


def check_softce(rep, exe, d):
    for B, K in ((4, 5), (16, 10), (1, 1000)):
        name = f"soft_cross_entropy B{B} K{K}"
        g = torch.Generator().manual_seed(B + K)
        x = (3 * torch.randn(B, K, generator=g)).float()
        t = torch.rand(B, K, generator=g).float()
        t = t / t.sum(-1, keepdim=True)
        fin, fout = d / "ce_in.bin", d / "ce_out.bin"
        with open(fin, "wb") as f:
            f.write(x.numpy().tobytes())
            f.write(t.numpy().tobytes())
        if not run(rep, name, exe, "softce", B, K, fin, fout):
            continue
        out = np.fromfile(fout, dtype=np.float64)
        xd, td = x.double().requires_grad_(), t.double().requires_grad_()
        loss = torch.sum(-td * F.log_softmax(xd, dim=-1), dim=-1).mean()  # timm SoftTargetCrossEntropy
        loss.backward()
        rep.check(f"{name}: loss", abs(out[0] - loss.item()) <= 1e-5 * max(1, abs(loss.item())),
                  f"{out[0]} vs {loss.item()}")
        for what, o, ref in (("grad logits", out[1:1 + B * K], xd.grad), ("grad targets", out[1 + B * K:], td.grad)):
            e, i, a, b = grad_err(o.reshape(B, K), ref)
            rep.check(f"{name}: {what}", e <= 1e-5, f"err {e:.1e} at {i}: {a:.6g} vs {b:.6g}")


def check_clip(rep, exe, d):
    for max_norm, scale in ((1.0, 1.0), (5.0, 0.01), (0.5, 30.0)):
        sizes = (7, 100, 3)
        g = torch.Generator().manual_seed(int(max_norm * 10))
        grads = [scale * torch.randn(n, generator=g) for n in sizes]
        params = [torch.zeros(n, requires_grad=True) for n in sizes]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        fin, fout = d / "clip_in.bin", d / "clip_out.bin"
        with open(fin, "wb") as f:
            for gr in grads:
                f.write(gr.numpy().tobytes())
        name = f"clip_grad_norm max {max_norm} (norm {norm.item():.3g})"
        if not run(rep, name, exe, "clip", max_norm, *sizes, "--", fin, fout):
            continue
        out = np.fromfile(fout, dtype=np.float64)
        rep.check(f"{name}: norm", abs(out[0] - norm.item()) <= 1e-6 * norm.item(), f"{out[0]} vs {norm.item()}")
        ref = torch.cat([p.grad for p in params])
        e, i, a, b = grad_err(out[1:], ref)
        rep.check(f"{name}: clipped gradients", e <= 1e-6, f"err {e:.1e} at {i}: {a:.6g} vs {b:.6g}")


def main():
    rep = Report()
    d = tmpdir()
    exe = build_driver(rep, "recipe_driver", d)
    if exe:
        check_mixup(rep, exe, d)
        check_draws(rep, exe, d)
        check_softce(rep, exe, d)
        check_clip(rep, exe, d)
    rep.finish()


if __name__ == "__main__":
    main()
