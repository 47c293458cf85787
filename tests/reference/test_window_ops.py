"""Reference test of vitc's window ops (src/ops/window.c) and general fused attention (vt_attention_ex) against
torchvision's Swin: shifted window attention (zero padding to whole windows, torch.roll, window partition, qkv,
relative position bias, the −100 shift mask, softmax, proj, window reverse, crop) followed by patch merging, and the
same windows reversed with the input's channels appended (vt_window_reverse_cat against torch.cat).

The PyTorch side is written here from torchvision 0.14's `shifted_window_attention` and `_patch_merging_pad` and
Microsoft's `relative_position_index` / `attn_mask` construction (float64), independently of the C code; when
torchvision is importable its own function is checked against that transcription too. The C side is
tests/reference/window_ops_driver.c, compiled here against build/libvitc.a (built by `make vitc`).
Cases: square windows with shifts, odd map sizes (padding), rectangular windows and CSwin-like stripes, a window
larger than the map (torchvision clears the shift), and a shift cleared on one axis only.
Checks: forward output, patch merge and the concatenation ≤ 1e-4 (scale_err), gradients of the input, the bias table, the qkv
weight and bias and the projection's weight and bias ≤ 1e-3 (grad_err), the relative_position_index and the shift mask exactly.
"""
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

from common import Report, build_driver, grad_err, scale_err, tmpdir


def rel_index(wh, ww):
    coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += wh - 1
    rel[:, :, 1] += ww - 1
    rel[:, :, 0] *= 2 * ww - 1
    return rel.sum(-1).flatten()


def shift_mask(pad_h, pad_w, ws, ss):
    m = torch.zeros((pad_h, pad_w), dtype=torch.float64)
    h_slices = ((0, -ws[0]), (-ws[0], -ss[0]), (-ss[0], None))
    w_slices = ((0, -ws[1]), (-ws[1], -ss[1]), (-ss[1], None))
    count = 0
    for h in h_slices:
        for w in w_slices:
            m[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    nw = (pad_h // ws[0]) * (pad_w // ws[1])
    m = m.view(pad_h // ws[0], ws[0], pad_w // ws[1], ws[1]).permute(0, 2, 1, 3).reshape(nw, ws[0] * ws[1])
    m = m.unsqueeze(1) - m.unsqueeze(2)
    return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0)


def swa(x, qkv_w, proj_w, rpb, ws, heads, ss, qkv_b, proj_b):
    """torchvision 0.14 shifted_window_attention (no dropout)."""
    B, H, W, C = x.shape
    pad_r = (ws[1] - W % ws[1]) % ws[1]
    pad_b = (ws[0] - H % ws[0]) % ws[0]
    x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
    _, pad_h, pad_w, _ = x.shape
    ss = list(ss)
    if ws[0] >= pad_h:
        ss[0] = 0
    if ws[1] >= pad_w:
        ss[1] = 0
    if sum(ss) > 0:
        x = torch.roll(x, shifts=(-ss[0], -ss[1]), dims=(1, 2))
    nw = (pad_h // ws[0]) * (pad_w // ws[1])
    x = x.view(B, pad_h // ws[0], ws[0], pad_w // ws[1], ws[1], C).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(B * nw, ws[0] * ws[1], C)
    qkv = F.linear(x, qkv_w, qkv_b).reshape(x.size(0), x.size(1), 3, heads, C // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    attn = (q * (C // heads) ** -0.5).matmul(k.transpose(-2, -1)) + rpb
    if sum(ss) > 0:
        n = x.size(1)
        attn = attn.view(x.size(0) // nw, nw, heads, n, n) + shift_mask(pad_h, pad_w, ws, ss).unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, heads, n, n)
    x = F.softmax(attn, dim=-1).matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), C)
    x = F.linear(x, proj_w, proj_b)
    x = x.view(B, pad_h // ws[0], pad_w // ws[1], ws[0], ws[1], C).permute(0, 1, 3, 2, 4, 5).reshape(B, pad_h, pad_w, C)
    if sum(ss) > 0:
        x = torch.roll(x, shifts=(ss[0], ss[1]), dims=(1, 2))
    return x[:, :H, :W, :].contiguous(), ss


def patch_merge(x):
    """torchvision's _patch_merging_pad, tokens flattened: (B, H, W, C) -> (B, ⌈H/2⌉·⌈W/2⌉, 4C)."""
    H, W = x.shape[-3:-1]
    x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
    x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
    return x.reshape(x.shape[0], -1, x.shape[-1])



CASES = [  # B, H, W, C, heads, window (wh, ww), shift (sh, sw)
    (2, 8, 8, 12, 3, (4, 4), (2, 2)),      # Microsoft's setting: whole windows, shift = window / 2
    (1, 9, 11, 8, 2, (4, 4), (2, 2)),      # odd sizes: torchvision's zero padding, then the roll
    (2, 7, 10, 6, 2, (2, 3), (1, 1)),      # rectangular windows, padded on both axes
    (1, 14, 14, 8, 2, (7, 7), (3, 3)),     # Swin-T's 7×7 windows
    (3, 4, 12, 8, 2, (4, 4), (2, 2)),      # window = padded height: torchvision clears that shift only
    (1, 5, 6, 8, 2, (7, 7), (3, 3)),       # one padded window larger than the map, no shift
    (1, 6, 9, 8, 2, (6, 1), (0, 0)),       # CSwin-like vertical stripes
    (2, 6, 6, 4, 1, (2, 6), (0, 0)),       # CSwin-like horizontal stripes
]


def main():
    rep = Report()
    d = tmpdir()
    exe = build_driver(rep, "window_ops_driver", d)
    try:
        from torchvision.models.swin_transformer import shifted_window_attention as tv_swa
    except Exception:  # torchvision is optional: the transcription above is the reference
        tv_swa = None
    for case in CASES if exe else []:
        B, H, W, C, heads, ws, ss = case
        name = f"swin B{B} {H}x{W} C{C} h{heads} win{ws[0]}x{ws[1]} shift{ss[0]},{ss[1]}"
        g = torch.Generator().manual_seed(B * 1000 + H * 10 + W)
        T, N = (2 * ws[0] - 1) * (2 * ws[1] - 1), ws[0] * ws[1]
        f64 = dict(generator=g, dtype=torch.float64)
        x = torch.randn(B, H, W, C, **f64).requires_grad_()
        wq = (0.3 * torch.randn(3 * C, C, **f64)).requires_grad_()
        bq, wp, bp = (0.1 * torch.randn(3 * C, **f64)).requires_grad_(), (0.3 * torch.randn(C, C, **f64)).requires_grad_(), \
            (0.1 * torch.randn(C, **f64)).requires_grad_()
        tab = torch.randn(T, heads, **f64).requires_grad_()
        Ho, Wo = (H + 1) // 2, (W + 1) // 2
        r, r2 = torch.randn(B, H, W, C, **f64), torch.randn(B, Ho * Wo, 4 * C, **f64)
        r3 = torch.randn(B, H, W, 2 * C, **f64)
        rpb = tab[rel_index(*ws)].view(N, N, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        y, ss_used = swa(x, wq, wp, rpb, ws, heads, ss, bq, bp)
        if tv_swa is not None:
            ytv = tv_swa(x, wq, wp, rpb, list(ws), heads, list(ss), qkv_bias=bq, proj_bias=bp)
            rep.check(f"{name}: transcription = torchvision", scale_err(y, ytv) < 1e-12, f"{scale_err(y, ytv):.1e}")
        pm, yc = patch_merge(y), torch.cat([y, x], -1)
        ((y * r).sum() + (pm * r2).sum() + (yc * r3).sum()).backward()
        fin, fout = d / "in.bin", d / "out.bin"
        with open(fin, "wb") as f:
            for t in (x, wq, bq, wp, bp, tab, r, r2, r3):
                f.write(t.detach().float().numpy().tobytes())
        p = subprocess.run([str(exe)] + [str(v) for v in (B, H, W, C, heads, ws[0], ws[1], ss[0], ss[1])] +
                           [str(fin), str(fout)], capture_output=True, text=True, timeout=300)
        if not rep.check(f"{name}: run", p.returncode == 0, p.stderr[-600:]):
            continue
        out = np.fromfile(fout, dtype=np.float32).astype(np.float64)
        o = 0

        def take(shape):
            nonlocal o
            n = int(np.prod(shape))
            v = out[o:o + n].reshape(shape)
            o += n
            return v

        for what, ref in (("output", y), ("patch merge", pm), ("reverse + concat", yc)):
            e = scale_err(take(ref.shape), ref)
            rep.check(f"{name}: {what}", e <= 1e-4, f"err {e:.1e}")
        for what, ref in (("grad x", x.grad), ("grad table", tab.grad), ("grad qkv weight", wq.grad),
                          ("grad qkv bias", bq.grad), ("grad proj weight", wp.grad), ("grad proj bias", bp.grad)):
            e, i, a, b = grad_err(take(ref.shape), ref)
            rep.check(f"{name}: {what}", e <= 1e-3, f"err {e:.1e} at {i}: {a:.6g} vs {b:.6g}")
        idx = take((N, N))
        rep.check(f"{name}: relative_position_index", np.array_equal(idx.ravel(), rel_index(*ws).double().numpy()))
        if sum(ss_used) > 0:
            Hp, Wp = -(-H // ws[0]) * ws[0], -(-W // ws[1]) * ws[1]
            ref = shift_mask(Hp, Wp, ws, ss_used).numpy()
            rep.check(f"{name}: shift mask", np.array_equal(take(ref.shape), ref))
        rep.check(f"{name}: output size", o == out.size, f"{out.size - o} floats left over")
    rep.finish()


if __name__ == "__main__":
    main()
