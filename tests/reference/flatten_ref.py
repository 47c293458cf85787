"""FLatten's focused linear attention core (spec-flatten §1.2, the official HEAD formula), shared by the host
references (test_flatten's DeiT transplant, swin_ref, pvt_ref, cswin_ref), which keep their own projections, DWC and
state_dict layouts.

  focus(t, s, p):  u = (ReLU(t) + 1e-6) / s, then u^p · ‖u‖ / ‖u^p‖ with the norms over all C channels of a token
                   (every head together);
  attend(q, k, v, heads): per head z = 1 / (q·mean(k) + 1e-6), KV = (kᵀ n^-½)(v n^-½), o = (q·KV)·z, heads merged
                   (channel = head·d + c); dense=True gives the O(N·n) form with the 1e-6 where the code puts it.
"""
import torch.nn.functional as F


def focus(t, s, p):
    t = (F.relu(t) + 1e-6) / s
    tn = t.norm(dim=-1, keepdim=True)
    t = t ** p
    return t / t.norm(dim=-1, keepdim=True) * tn


def implied(q, k, heads):
    """The attention linear attention implies: per head a_ij = q_i·k_j / (Σ_j q_i·k_j + n·1e-6) (B, h, N, n), the
    weights `attend` gives v_j (the dense form's normaliser)."""
    q, k = split_heads(q, heads), split_heads(k, heads)
    a = q @ k.transpose(-2, -1)
    return a / (a.sum(-1, keepdim=True) + k.shape[2] * 1e-6)


def split_heads(t, heads):
    B, n, C = t.shape
    return t.reshape(B, n, heads, C // heads).transpose(1, 2)      # (B, h, n, d)


def attend(q, k, v, heads, dense=False):
    """q (B, N, C), k and v (B, n, C), already focused (q, k) -> (B, N, C)."""
    B, N, C = q.shape
    q, k, v = (split_heads(t, heads) for t in (q, k, v))
    n = k.shape[2]
    if dense:
        a = q @ k.transpose(-2, -1)
        o = (a @ v) / (a.sum(-1, keepdim=True) + n * 1e-6)
    else:
        z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) + 1e-6)
        o = (q @ ((k.transpose(-2, -1) * n ** -0.5) @ (v * n ** -0.5))) * z
    return o.transpose(1, 2).reshape(B, N, C)
