"""Reference tests of the training recipe's pieces against computations written here, independently of the C code,
from timm's definitions (timm/data/mixup.py, timm/loss/cross.py, torch.nn.utils.clip_grad_norm_):

- Mixup/CutMix (vt_mixup_apply, src/train/mixup.c) with fixed lam / mode / box centre: the mixed batch and the soft
  targets equal timm's `_mix_batch` + `mixup_target` transcribed in torch (≤ 1e-6), for Mixup, CutMix with and
  without correct_lam, boxes clipped at the border, lam = 1 (no mixing); with vt_mixup.roll (the msf recipe's)
  torchvision's RandomMixup / RandomCutmix transcribed (each image's partner the one before it: batch.roll(1, 0));
- the draws (vt_mixup_sample): CutMix frequency = switch_prob, Mixup's lam ~ Beta(0.8, 0.8) and CutMix's ~ Beta(1, 1)
  (two-sample Kolmogorov-Smirnov against torch.distributions.Beta), box centres uniform, prob < 1 leaves that share
  of the batches unmixed, Mixup-only never cuts;
- soft-target cross-entropy (vt_soft_cross_entropy, src/ops/loss.c): loss and gradients equal timm's
  SoftTargetCrossEntropy with autograd (float64) ≤ 1e-5;
- gradient clipping (vt_clip_grad_norm) equals torch.nn.utils.clip_grad_norm_ ≤ 1e-6;
- the fine-tuning resize (vt_resize_bicubic) equals F.interpolate(mode="bicubic", align_corners=False) ≤ 1e-5, up
  and down; end to end (vt_adapt_load): a saved 10-class 28×28 vit_fmnist_tiny loads into a 2-class 36×36 model with
  pos_embed = [class row, F.interpolate of the 7×7 grid to 9×9] (timm's resample_abs_pos_embed without antialias),
  the head re-initialised, every other tensor equal, and 16 AdamW steps lower the loss; a Swin table resized from
  window 7 to 14 equals F.interpolate of the (heads, 13, 13) table to 27×27 (timm's resize_rel_pos_bias_table_simple);
  an RGB model's patch embedding loaded into 1, 2 and 4 input channels equals timm's adapt_input_conv (transcribed);
- the repeated-augmentation sampler (vt_ra_sample) equals DeiT's RASampler.__iter__ (samplers.py, transcribed) applied
  to the same permutation, for 1 and 3 replicas;
- the learning rate each epoch trains at (metrics.csv's `lr`, the epoch's last step, over runs of 2 steps an epoch):
  `--recipe msf` equals torch's SequentialLR(LinearLR(0.033), CosineAnnealingLR) stepped after each epoch, as
  torchvision's train.py runs it; `--recipe deit` equals timm's CosineLRScheduler (transcribed) stepped by DeiT's
  main.py with the epoch just trained; `--recipe refiner` equals it stepped by timm's train.py (epoch + 1), with its
  10 cooldown epochs at min_lr after --epochs; `--recipe swin` changes the rate within an epoch (per step);
- `vitc train` end to end on a Fashion-MNIST subset: --accum-steps 2 × batch 8 gives batch 16's epoch loss (≤ 1e-5
  relative) and weights (all but 0.01% within 1e-4 of their tensor's scale, the key projection aside); the model
  EMA is printed, saved, and resumes exactly; --recipe deit prints and saves its
  settings (lr scaled by batch/512); --init-from with another model's weights is refused naming tensors; Mixup with
  an odd batch is refused.
The C side is tests/reference/recipe_driver.c, compiled against build/libvitc.a.
"""
import json
import math
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

import st
from common import Report, build_driver, grad_err, have_vitc, scale_err, tmpdir, vitc, vitc_ok


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


# ---- torchvision's references/classification/transforms.py RandomMixup / RandomCutmix, transcribed (the draws
# given; the box r = 0.5·sqrt(1 - lam) of each side from the centre, clamped; smoothing as the loss's
# label_smoothing, applied to the one-hot targets before mixing: the same linear map) ----
def tv_mix(x, target, K, lam, cutmix, cy, cx, smoothing, correct_lam):
    x = x.clone()
    x_rolled = x.roll(1, 0)
    if lam != 1.:
        if cutmix:
            H, W = x.shape[-2:]
            r = 0.5 * math.sqrt(1.0 - lam)
            rw, rh = int(r * W), int(r * H)
            x1, y1 = max(cx - rw, 0), max(cy - rh, 0)
            x2, y2 = min(cx + rw, W), min(cy + rh, H)
            x[:, :, y1:y2, x1:x2] = x_rolled[:, :, y1:y2, x1:x2]
            if correct_lam:
                lam = 1.0 - (x2 - x1) * (y2 - y1) / (W * H)
        else:
            x = x * lam + x_rolled * (1.0 - lam)
    off = smoothing / K
    y = one_hot(target, K, 1. - smoothing + off, off)
    return x, y * lam + y.roll(1, 0) * (1. - lam), lam


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
    for case, (how, ref) in ((c, h) for c in MIX_CASES for h in (("mixup", timm_mix), ("mixup_roll", tv_mix))):
        B, C, H, W, K, lam, cut, cy, cx, sm, corr = case
        name = (f"{'timm' if how == 'mixup' else 'torchvision (roll)'} mixup B{B} C{C} {H}x{W} K{K} lam{lam} "
                f"{'cutmix' if cut else 'mixup'} c=({cy},{cx}) corr{corr}")
        g = torch.Generator().manual_seed(B * 100 + H)
        x = torch.randn(B, C, H, W, generator=g)
        lab = torch.randint(0, K, (B,), generator=g)
        xr, tr, lr = ref(x, lab, K, lam, cut, cy, cx, sm, corr)
        fin, fout = d / "mix_in.bin", d / "mix_out.bin"
        with open(fin, "wb") as f:
            f.write(x.numpy().tobytes())
            f.write(lab.float().numpy().tobytes())
        if not run(rep, name, exe, how, B, C, H, W, K, repr(lam), cut, cy, cx, repr(sm), corr, fin, fout):
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
    r = draws(rep, exe, d, 20000, H, W, 0.8, 1.0, 1.0, 0.2, 12)  # timm: CutMix when rand() < switch_prob
    if r is not None:
        share = (r[:, 1] == 1).mean()
        rep.check("draws: CutMix share = switch_prob 0.2", abs(share - 0.2) < 5 * np.sqrt(0.16 / 20000), f"{share:.4f}")
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


def torch_resize(grid, H, W):
    """(h, w, C) -> (H, W, C) with F.interpolate bicubic, align_corners False (float64)."""
    x = torch.as_tensor(np.asarray(grid, np.float64)).permute(2, 0, 1).unsqueeze(0)
    return F.interpolate(x, size=(H, W), mode="bicubic", align_corners=False)[0].permute(1, 2, 0).numpy()


def check_resize(rep, exe, d):
    for h, w, C, H, W in ((7, 7, 8, 9, 9), (4, 4, 3, 14, 14), (14, 14, 5, 24, 24), (13, 13, 4, 9, 9), (9, 9, 2, 5, 5),
                          (2, 2, 1, 7, 7)):
        name = f"bicubic {h}x{w}x{C} -> {H}x{W}"
        g = torch.Generator().manual_seed(h * 100 + H)
        src = torch.randn(h, w, C, generator=g).float().numpy()
        fin, fout = d / "rs_in.bin", d / "rs_out.bin"
        src.tofile(fin)
        if not run(rep, name, exe, "resize", h, w, C, H, W, fin, fout):
            continue
        out = np.fromfile(fout, dtype=np.float64).reshape(H, W, C)
        e = scale_err(out, torch_resize(src, H, W))
        rep.check(f"{name} = F.interpolate", e <= 1e-5, f"err {e:.1e}")


def adapt_run(rep, exe, d, model, seed, args, what, losses, init=()):
    """`vitc init` of model with seed (and the options init), then the adapt driver with args (size, classes, window,
    input channels) on it: (the initial tensors, the adapted ones, the driver's run), or None after a failed check."""
    src, dst = d / f"{model}.safetensors", d / f"{model}_adapted.safetensors"
    if vitc_ok(rep, f"init {model} {' '.join(init)}", "init", model, "-o", src, "--seed", str(seed), *init) is None:
        return None
    p = subprocess.run([str(exe), "adapt", model, *args, str(src), str(dst), str(losses)], capture_output=True,
                       text=True, timeout=300)
    if not rep.check(f"fine-tune {what}: run", p.returncode == 0, p.stderr[-600:]):
        return None
    return st.load(src), st.load(dst), p


def check_finetune(rep, exe, d):
    losses, losses2 = d / "losses.bin", d / "losses2.bin"
    r = adapt_run(rep, exe, d, "vit_fmnist_tiny", 4, ["36", "2", "0", "0"], "10 -> 2 classes, 28 -> 36 px", losses)
    if r is None:
        return
    a, b, p = r
    pe_a, pe_b = a["pos_embed"].astype(np.float64), b["pos_embed"]
    ref = np.concatenate([pe_a[:, :1], torch_resize(pe_a[0, 1:].reshape(7, 7, -1), 9, 9).reshape(1, 81, -1)], 1)
    e = scale_err(pe_b, ref)
    rep.check("fine-tune: pos_embed = class row + bicubic 7x7 -> 9x9 (torch)", pe_b.shape == (1, 82, 64) and e <= 1e-5,
              f"shape {pe_b.shape}, err {e:.1e}")
    rep.check("fine-tune: head re-initialised for 2 classes",
              b["head.weight"].shape == (2, 64) and b["head.bias"].shape == (2,))
    others = [k for k in a if k not in ("pos_embed", "head.weight", "head.bias")]
    same = [k for k in others if k in b and np.array_equal(a[k], b[k])]
    rep.check("fine-tune: every other tensor loaded unchanged", len(same) == len(others) == len(b) - 3,
              f"{len(same)} of {len(others)}")
    # to a non-square model (timm's (H, W) img_size): the 7x7 grid resized to 7x11, as timm's resize_pos_embed with
    # gs_new = the model's grid_size
    r2 = adapt_run(rep, exe, d, "vit_fmnist_tiny", 4, ["28x44", "2", "0", "0"], "28 -> 28x44 px", losses2)
    if r2 is not None:
        a2, b2, p2 = r2
        pe = a2["pos_embed"].astype(np.float64)
        ref = np.concatenate([pe[:, :1], torch_resize(pe[0, 1:].reshape(7, 7, -1), 7, 11).reshape(1, 77, -1)], 1)
        e = scale_err(b2["pos_embed"], ref)
        rep.check("fine-tune: pos_embed = class row + bicubic 7x7 -> 7x11 (torch)",
                  b2["pos_embed"].shape == (1, 78, 64) and e <= 1e-5 and "to a 7×11 grid" in p2.stdout,
                  f"shape {b2['pos_embed'].shape}, err {e:.1e}, {p2.stdout[-200:]}")
    rep.check("fine-tune: one line per adapted tensor", "pos_embed resized" in p.stdout and
              "head.weight re-initialised" in p.stdout and "head.bias re-initialised" in p.stdout, p.stdout[-400:])
    # 16 steps at lr 3e-4 on 8 noise images the model learns by heart: over init seeds 1-8 (2026-12-06) the loss
    # before the last step was 0.17-0.36 below the first at 36 px and 0.55-0.58 at 28x44; the earlier 8 steps at 1e-3
    # overshot at the first steps (28x44: 0.69 -> 0.83-0.96) and ended 0.02-0.09 below
    for what, f in (("36 px", losses), ("28x44 px", losses2)):
        if f.is_file():
            l = np.fromfile(f, dtype=np.float64)
            rep.check(f"fine-tune {what}: 16 AdamW steps lower the loss", l.size == 16 and l[-1] < l[0] - 0.1,
                      f"losses {l}")
    r = adapt_run(rep, exe, d, "swin_fmnist_tiny", 5, ["28", "10", "14", "0"], "Swin window 7 -> 14", losses)
    if r is None:
        return
    a, b, p = r
    keys = [k for k in a if k.endswith("relative_position_bias_table") and a[k].shape != b[k].shape]
    for k in keys:
        t = a[k].astype(np.float64)  # ((2w-1)^2, heads): timm transposes to (1, heads, 13, 13), interpolates, back
        ref = torch_resize(t.reshape(13, 13, -1), 27, 27).reshape(27 * 27, -1)
        e = scale_err(b[k], ref)
        rep.check(f"fine-tune Swin: {k} 13x13 -> 27x27 = F.interpolate", b[k].shape == ref.shape and e <= 1e-5,
                  f"err {e:.1e}")
    rep.check("fine-tune Swin: the stage-0 tables were resized", len(keys) == 2 and "window 7 -> 14" in p.stdout,
              f"{keys}")
    for chans in (1, 2, 4):
        r = adapt_run(rep, exe, d, "vit_fmnist_tiny", 6, ["28", "10", "0", str(chans)], f"RGB -> {chans} channels",
                      losses, ("--in-chans", "3"))
        if r is None:
            return
        a, b, p = r
        k = "patch_embed.proj.weight"
        ref = timm_adapt_input_conv(chans, torch.from_numpy(a[k].astype(np.float64))).numpy()
        e = scale_err(b[k], ref)
        rep.check(f"fine-tune RGB -> {chans} channels: {k} = timm's adapt_input_conv",
                  b[k].shape == ref.shape and e <= 1e-6 and f"adapted from 3 input channels to {chans}" in p.stdout,
                  f"shape {b[k].shape} vs {ref.shape}, err {e:.1e}")
        same = [n for n in a if n != k and n in b and np.array_equal(a[n], b[n])]
        rep.check(f"fine-tune RGB -> {chans} channels: every other tensor loaded unchanged",
                  len(same) == len(a) - 1 == len(b) - 1, f"{len(same)} of {len(a) - 1}")


def timm_adapt_input_conv(in_chans, w):
    """timm's adapt_input_conv (timm/models/helpers.py) for a 3-channel conv weight (O, 3, kh, kw)."""
    if in_chans == 1:
        return w.sum(dim=1, keepdim=True)
    rep = int(math.ceil(in_chans / 3))
    return w.repeat(1, rep, 1, 1)[:, :in_chans] * (3 / float(in_chans))


def deit_rasampler(perm, replicas, rank, repeats=3):
    """DeiT samplers.py RASampler.__iter__ with torch.randperm's result replaced by perm."""
    n = len(perm)
    num_samples = int(math.ceil(n * repeats / replicas))
    total_size = num_samples * replicas
    num_selected_samples = int(math.floor(n // 256 * 256 / replicas))
    indices = [ele for ele in perm for i in range(repeats)]
    indices += indices[:(total_size - len(indices))]
    assert len(indices) == total_size
    indices = indices[rank:total_size:replicas]
    assert len(indices) == num_samples
    return indices[:num_selected_samples]


def check_rasampler(rep, exe, d):
    for n, replicas, rank in ((1000, 1, 0), (600, 1, 0), (1000, 3, 2), (257, 2, 1), (100, 1, 0)):
        name = f"RASampler n {n}, replicas {replicas}, rank {rank}"
        fout = d / "ra.bin"
        if not run(rep, name, exe, "ra", n, 3, replicas, rank, 11, fout):
            continue
        v = np.fromfile(fout, dtype=np.float64).astype(int)
        perm, got = list(v[:n]), list(v[n:])
        ref = deit_rasampler(perm, replicas, rank)
        rep.check(f"{name}: = DeiT's", sorted(perm) == list(range(n)) and got == ref,
                  f"{len(got)} vs {len(ref)} indices, first {got[:6]} vs {ref[:6]}")


def read_weights(run):
    return st.load(run / "weights.safetensors")


def timm_cosine(t, base, warmup_lr, min_lr, warmup_t, t_initial):
    """timm 0.4.12 CosineLRScheduler._get_lr(t) (cycle_limit 1, warmup_prefix False), t in epochs."""
    if t < warmup_t:
        return warmup_lr + t * (base - warmup_lr) / warmup_t
    if t >= t_initial:
        return min_lr
    return min_lr + 0.5 * (base - min_lr) * (1 + math.cos(math.pi * t / t_initial))


def epoch_lrs(run):
    rows = (run / "metrics.csv").read_text().splitlines()
    col = rows[0].split(",").index("lr")
    return [float(r.split(",")[col]) for r in rows[1:]]


def check_schedules(rep, d):
    import torch
    common = ["--train-subset", "16", "--test-subset", "10", "--batch-size", "8", "--no-repeated-aug", "--threads", "1",
              "--drop-path", "0"]
    # msf: torchvision's train.py, lr_scheduler.step() after each epoch
    run = d / "s_msf"
    if vitc_ok(rep, "train --recipe msf --lr 2e-3 (6 epochs, 2 warm-up)", "train", "vit_fmnist_tiny", "--recipe",
               "msf", "--epochs", "6", "--warmup-epochs", "2", "--lr", "2e-3", "--out", run, *common):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([p], lr=2e-3)  # the warm-up starts at 0.033 of whatever lr is given
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.033, total_iters=2)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.0)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
        want = []
        for _ in range(6):
            want.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        got = epoch_lrs(run)
        err = max(abs(a - b) for a, b in zip(got, want)) if len(got) == 6 else 1
        rep.check(f"msf: each epoch's lr = torchvision's SequentialLR (max diff {err:.2g})", err < 1e-9,
                  f"{got} vs {want}")
    # deit: timm's scheduler, DeiT's main.py calls lr_scheduler.step(epoch) after epoch `epoch`
    run = d / "s_deit"
    base = 1e-3  # given: the recipe's 5e-4 · 8/512 would be below its min lr
    if vitc_ok(rep, "train --recipe deit (5 epochs, 2 warm-up)", "train", "vit_fmnist_tiny", "--recipe", "deit",
               "--epochs", "5", "--warmup-epochs", "2", "--lr", "1e-3", "--no-model-ema", "--out", run, *common):
        want = [timm_cosine(max(e - 1, 0), base, 1e-6, 1e-5, 2, 5) for e in range(5)]
        got = epoch_lrs(run)
        err = max(abs(a - b) for a, b in zip(got, want)) if len(got) == 5 else 1
        rep.check(f"deit: each epoch's lr = timm's cosine stepped by DeiT's main.py (max diff {err:.2g})",
                  err < 1e-12, f"{got} vs {want}")
    # refiner: timm's train.py, lr_scheduler.step(epoch + 1) after each epoch; 10 cooldown epochs after --epochs
    run = d / "s_ref"
    if vitc_ok(rep, "train --recipe refiner (2 epochs + cooldown, 1 warm-up)", "train", "vit_fmnist_tiny", "--recipe",
               "refiner", "--epochs", "2", "--warmup-epochs", "1", "--no-model-ema", "--out", run, *common):
        want = [timm_cosine(e, 5e-4, 1e-6, 1e-5, 1, 2) for e in range(12)]
        got = epoch_lrs(run)
        err = max(abs(a - b) for a, b in zip(got, want)) if len(got) == 12 else 1
        rep.check(f"refiner: 12 epochs (2 + 10 cooldown), each at timm's train.py lr (max diff {err:.2g})",
                  err < 1e-12, f"{got} vs {want}")
    # --cooldown-epochs sets the cooldown (here 1 instead of the recipe's 10), and a resume keeps the recorded one
    run = d / "s_cool"
    if vitc_ok(rep, "train --recipe refiner --cooldown-epochs 1", "train", "vit_fmnist_tiny", "--recipe", "refiner",
               "--epochs", "2", "--warmup-epochs", "1", "--cooldown-epochs", "1", "--no-model-ema", "--out", run,
               *common):
        got = epoch_lrs(run)
        want = [timm_cosine(e, 5e-4, 1e-6, 1e-5, 1, 2) for e in range(3)]
        rep.check("--cooldown-epochs 1: 3 epochs, the last at min_lr", len(got) == 3 and
                  max(abs(a - b) for a, b in zip(got, want)) < 1e-12, f"{got} vs {want}")
        p = vitc("train", "vit_fmnist_tiny", "--resume", run, "--epochs", "3", "--threads", "1")
        rep.check("a resume keeps the recorded cooldown (3 + 1 epochs)", p.returncode == 0 and
                  len(epoch_lrs(run)) == 4, p.stderr[-300:])
    # swin: per step, so an epoch's last step is not its first (the lr of step 1 of epoch 1 differs from step 2's)
    run = d / "s_swin"
    if vitc_ok(rep, "train --recipe swin (3 epochs, 1 warm-up)", "train", "vit_fmnist_tiny", "--recipe", "swin",
               "--epochs", "3", "--warmup-epochs", "1", "--out", run, *common):
        scale = 8 / 512
        base, wl, ml = 5e-4 * scale, 5e-7 * scale, 5e-6 * scale
        want = [timm_cosine(s, base, wl, ml, 2, 6) for s in (1, 3, 5)]  # steps, 2 an epoch: each epoch's last
        got = epoch_lrs(run)
        err = max(abs(a - b) / b for a, b in zip(got, want)) if len(got) == 3 else 1
        rep.check(f"swin: per-step lr, each epoch's last step (max rel. diff {err:.2g})", err < 1e-9,
                  f"{got} vs {want}")


def check_train(rep, d):
    common = ["--epochs", "1", "--train-subset", "64", "--test-subset", "50", "--no-augment", "--drop-path", "0",
              "--threads", "1", "--warmup-epochs", "0", "--lr", "0.003", "--log-every", "1"]
    r16, r8 = d / "b16", d / "b8x2"
    ok = vitc_ok(rep, "train batch 16", "train", "vit_fmnist_tiny", "--batch-size", "16", "--out", r16, *common)
    ok2 = vitc_ok(rep, "train batch 8 x 2", "train", "vit_fmnist_tiny", "--batch-size", "8", "--accum-steps", "2",
                  "--out", r8, *common)
    if ok and ok2:
        a, b = read_weights(r16), read_weights(r8)
        # The gradients agree to 1e-5 (the `recipe` unit suite), but AdamW's first steps move each weight by about
        # lr·sign(g), so an element whose gradient is rounding-sized moves by an lr-sized step either way: a single
        # element's difference says nothing (1.5e-3 of its tensor's scale in one LayerNorm bias once the init
        # changed; 3.0e-4 in an fc2 weight before), the count of them does. At most 0.01% of the weights may differ
        # by more than 1e-4 of their tensor's largest value, and at most a quarter of any one tensor's (a wrong small
        # tensor, such as the head's 10 biases): 2 of 122,378 on 2026-12-06, one element each in two tensors, while
        # half of each batch left out (batch 8 without accumulation) moved 121,999 of them. The key projection (qkv rows
        # [C, 2C), weight and bias) is left out: softmax ignores a constant per query, so its gradient is zero along
        # the tokens' mean (exactly zero for the bias) and many of its elements are rounding-sized.
        def split(k):
            x, y = a[k].astype(np.float64), b[k].astype(np.float64)
            if k.endswith("attn.qkv.bias") or k.endswith("attn.qkv.weight"):
                C = x.shape[0] // 3
                x, y = np.concatenate([x[:C], x[2 * C:]]), np.concatenate([y[:C], y[2 * C:]])
            return x, y
        total = moved = 0
        finite, crowded = True, []
        for k in a:
            x, y = split(k)
            finite = finite and bool(np.isfinite(x).all() and np.isfinite(y).all())
            n = int((np.abs(x - y) > 1e-4 * max(np.abs(x).max(), 1e-8)).sum())
            if n > max(1, x.size // 4):
                crowded.append(f"{k}: {n} of {x.size}")
            total += x.size
            moved += n
        rep.check("accum-steps 2 x batch 8 = batch 16 after 4 AdamW steps (weights but the key projection)",
                  finite and moved <= 1e-4 * total and not crowded,
                  f"{moved} of {total} weights differ by more than 1e-4 of their tensor's scale ({crowded[:3]}), "
                  f"finite: {finite}")
        la, lb = (float((r / "metrics.csv").read_text().splitlines()[1].split(",")[2]) for r in (r16, r8))
        rep.check("accum-steps 2 x batch 8 = batch 16: epoch train loss", abs(la - lb) <= 1e-5 * abs(la), f"{la} vs {lb}")
    common = ["--train-subset", "64", "--test-subset", "50", "--batch-size", "16", "--threads", "1",
              "--model-ema", "--model-ema-decay", "0.5"]
    full, part = d / "ema_full", d / "ema_part"
    p = vitc_ok(rep, "train with EMA", "train", "vit_fmnist_tiny", "--epochs", "2", "--out", full, *common)
    if p:
        rep.check("EMA: evaluated each epoch", p.stdout.count("Test (EMA): epoch") == 2, p.stdout[-300:])
        ema, w = st.load(full / "weights_ema.safetensors"), read_weights(full)
        rep.check("EMA: weights_ema differs from the weights", any(not np.array_equal(ema[k], w[k]) for k in w))
    if p and vitc_ok(rep, "train with EMA, 1 epoch", "train", "vit_fmnist_tiny", "--epochs", "1", "--out", part,
                     *common) and vitc_ok(rep, "resume with EMA", "train", "vit_fmnist_tiny", "--epochs", "2",
                                          "--out", part, "--resume", part, *common):
        a, b = st.load(full / "weights_ema.safetensors"), st.load(part / "weights_ema.safetensors")
        rep.check("EMA: resumed run's EMA equals the uninterrupted run's", all(np.array_equal(a[k], b[k]) for k in a))
    rd = d / "deit"
    p = vitc_ok(rep, "train --recipe deit", "train", "vit_fmnist_tiny", "--recipe", "deit", "--epochs", "1",
                "--train-subset", "300", "--test-subset", "50", "--batch-size", "32", "--threads", "1", "--out", rd)
    if p:
        try:
            r = json.loads((rd / "recipe.json").read_text())
        except (OSError, ValueError) as e:
            r = {"error": str(e)}
        rep.check("recipe deit: printed and saved", "Recipe deit" in p.stdout and r.get("mixup") == 0.8 and
                  r.get("cutmix") == 1.0 and r.get("model_ema") is True and abs(r.get("lr", 0) - 5e-4 * 32 / 512) < 1e-12,
                  json.dumps(r)[:300])
        # repeated augmentation: 300 images -> 256 visited an epoch -> 8 steps of 32
        rep.check("recipe deit: repeated augmentation visits ⌊300/256⌋·256 images", "[   8/8 (100%)]" in p.stdout,
                  p.stdout[-300:])
    ws = d / "swin_other.safetensors"
    vitc_ok(rep, "init swin_fmnist_tiny", "init", "swin_fmnist_tiny", "-o", ws)
    p = vitc("train", "vit_fmnist_tiny", "--init-from", ws, "--epochs", "1", "--train-subset", "64", "--batch-size", "32", "--out", d / "bad")
    rep.check("init-from another model's weights: refused naming tensors", p.returncode == 1 and
              "missing" in p.stderr and "pos_embed" in p.stderr, p.stderr[-300:])
    p = vitc("train", "vit_fmnist_tiny", "--mixup", "0.8", "--batch-size", "7", "--epochs", "1", "--train-subset", "64",
             "--out", d / "odd")
    rep.check("mixup with an odd batch: refused (a usage error: 2)", p.returncode == 2 and "even batch" in p.stderr,
              p.stderr[-300:])


def main():
    rep = Report()
    d = tmpdir()
    exe = build_driver(rep, "recipe_driver", d)
    if exe:
        check_mixup(rep, exe, d)
        check_draws(rep, exe, d)
        check_softce(rep, exe, d)
        check_clip(rep, exe, d)
        check_resize(rep, exe, d)
        check_rasampler(rep, exe, d)
        if have_vitc(rep):
            check_finetune(rep, exe, d)
            check_train(rep, d)
            check_schedules(rep, d)
    rep.finish()


if __name__ == "__main__":
    main()
