"""Shared helpers for the reference tests: locate and run ./vitc, report PASS/FAIL, compare.

Reporting: each check prints `PASS <name>` or `FAIL <name>: <detail>`; Report.finish() prints
`N passed, N failed` and exits 1 if anything failed.  A missing ./vitc is a FAIL, never a skip.
Binary: $VITC if set, else <repo root>/vitc.  $VITC_KEEP=1 keeps the temporary folder.

Comparisons:
  scale_err(a, b) = max|a-b| / max(max|b|, 1e-8)            (outputs; b is the reference)
  grad_err(a, b)  = max|a-b| / max(max|b|, 1e-8), plus the worst element's index and values
  norm_err(a, b)  = ‖a-b‖₂ / max(‖b‖₂, 1e-30)                  (a whole tensor's relative error)
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
VITC = Path(os.environ.get("VITC", ROOT / "vitc"))
torch.set_num_threads(os.cpu_count() or 1)


class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}" + (f" ({detail})" if detail else ""), flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}", flush=True)
        return ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failed else 0)


def have_vitc(rep):
    ok = VITC.is_file() and os.access(VITC, os.X_OK)
    return rep.check("vitc-binary", ok, str(VITC) if ok else f"{VITC} missing or not executable (run make first)")


def vitc(*args, timeout=600):
    """Run vitc; returns CompletedProcess (text stdout/stderr); a timeout gives returncode None."""
    cmd = [str(VITC)] + [str(a) for a in args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, None, e.stdout or "", f"timed out after {timeout}s")


def vitc_ok(rep, name, *args, timeout=600):
    """Run vitc expecting success; on failure report FAIL <name> with stderr and return None."""
    p = vitc(*args, timeout=timeout)
    if p.returncode != 0:
        rep.check(name, False, f"`vitc {' '.join(map(str, args))}` exited {p.returncode}: "
                               f"{p.stderr.strip()[-600:]}")
        return None
    return p


def info(rep, model, *args):
    p = vitc_ok(rep, f"info {model}", "info", model, "--json", *args)
    if p is None:
        return None
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        rep.check(f"info {model}", False, f"stdout is not one JSON object ({e}): {p.stdout[:300]!r}")
        return None


def tmpdir():
    d = tempfile.mkdtemp(prefix="vitc-ref-")
    if os.environ.get("VITC_KEEP") != "1":
        atexit.register(shutil.rmtree, d, True)
    else:
        print(f"# keeping {d}")
    return Path(d)


def _np(x):
    return x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, np.float64)


def scale_err(a, b):
    a, b = _np(a), _np(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-8)) if b.size else 0.0


def grad_err(a, b, slack=None):
    """-> (relative error, worst index, a at worst, b at worst); slack: a per-element bound on |a - b| not counted."""
    a, b = _np(a), _np(b)
    d = np.abs(a - b) if slack is None else np.maximum(np.abs(a - b) - _np(slack), 0.0)
    i = np.unravel_index(int(np.argmax(d)), d.shape)
    return float(d[i] / max(np.abs(b).max(), 1e-8)), tuple(int(j) for j in i), float(a[i]), float(b[i])


def norm_err(a, b):
    a, b = _np(a), _np(b)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def compare_grads(rep, tag, res, ref_g, tol, norm_tol=None, slack=None, zero_by=None, zero_tol=1e-6, note=""):
    """vitc's gradients res["grad/" + name] against the reference's ref_g[name]. Checks: no unexpected grad/ tensor;
    each reference gradient present with its shape, its worst element (grad_err, less slack[name] per element where
    given) within tol and, with norm_tol, its norm error (norm_err) within that; gradients zero by construction (the
    reference's at most 1e-12 of its largest gradient, or a name for which zero_by(name) is true) round-off only in
    vitc and the reference (<= zero_tol of the largest). Each failure is its own check, one passing check (with note)
    when none fails. Returns (the names vitc gives all-zero gradients, the names taken as zero by construction)."""
    extra = sorted(k for k in res if k.startswith("grad/") and k[5:] not in ref_g)
    rep.check(f"{tag} grad names", not extra, f"unexpected tensors {extra[:6]}")
    gscale = max((float(r.abs().max()) for r in ref_g.values()), default=0.0)
    worst, worst_n, bad, zero, structural = (0.0, ""), (0.0, ""), 0, [], []
    for k, r in ref_g.items():
        a = res.get("grad/" + k)
        if a is None or a.shape != tuple(r.shape):
            bad += 1
            rep.check(f"{tag} grad/{k}", False, "missing" if a is None else f"shape {a.shape}, want {tuple(r.shape)}")
            continue
        if not np.any(a != 0):
            zero.append(k)
        rmax = float(r.abs().max())
        if rmax <= 1e-12 * gscale or (zero_by and zero_by(k)):
            structural.append(k)
            e = max(float(np.abs(a).max()), rmax) / max(gscale, 1e-30)
            if not e <= zero_tol:  # (a NaN fails)
                bad += 1
                rep.check(f"{tag} grad/{k}", False, f"zero by construction, but max|g| {e:.2e}·max|grad| "
                          f"(vitc {float(np.abs(a).max()):.2e}, reference {rmax:.2e})")
            continue
        e, idx, av, bv = grad_err(a, r, None if slack is None else slack.get(k))
        en = norm_err(a, r) if norm_tol is not None else 0.0
        worst, worst_n = max(worst, (e, k)), max(worst_n, (en, k))
        if not (e <= tol and en <= (norm_tol or 0.0)):  # (a NaN error fails)
            bad += 1
            rep.check(f"{tag} grad/{k}", False, (f"rel err {en:.2e} (tol {norm_tol:g}), " if norm_tol else "") +
                      f"worst element {e:.2e} (tol {tol:g}) at {idx}: vitc {av:.4e} vs ref {bv:.4e}")
    if not bad:
        rep.check(f"{tag} grads", True, f"{len(ref_g)} tensors, " +
                  (f"worst relative {worst_n[0]:.2e} in {worst_n[1]}, " if norm_tol else "") +
                  f"worst element {worst[0]:.2e} in {worst[1]}" + (f"; {note}" if note else "") +
                  (f"; zero by construction (round-off only): {structural[:6]}{'...' if len(structural) > 6 else ''}"
                   if structural else ""))
    return zero, structural


def scalar(x):
    """loss stored with shape () or (1,) -> float."""
    x = np.asarray(x)
    assert x.size == 1, f"expected a scalar, got shape {x.shape}"
    return float(x.reshape(()))


def build_driver(rep, name, outdir):
    """Compiles tests/reference/<name>.c against build/libvitc.a with the Makefile's flags (`make link-flags`) into
    outdir; reports `driver-build` and returns the executable's path, or None."""
    import shlex
    lib, src = ROOT / "build" / "libvitc.a", ROOT / "tests" / "reference" / f"{name}.c"
    if not lib.is_file():
        rep.check("driver-build", False, f"{lib} missing (run make vitc first)")
        return None
    flags = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), "link-flags"],
                           capture_output=True, text=True).stdout.split()
    exe = Path(outdir) / name
    cmd = [os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-O2",
           "-fopenmp", f"-I{ROOT / 'include'}", str(src), str(lib), "-o", str(exe)] + flags + ["-lm", "-fopenmp"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if not rep.check("driver-build", p.returncode == 0, p.stderr[-800:] or shlex.join(cmd)):
        return None
    return exe


def random_state(model, seed, dtype=torch.float32, special=None, gain=None):
    """Random values for every state_dict entry of model, drawn in key order from one generator: conv/Linear weights
    N(0, 1/fan_in) (times gain(key) when given), biases N(0, 0.1^2), norm weights 1 + N(0, 0.1^2), BN running_mean
    N(0, 0.2^2), running_var U(0.5, 1.5), num_batches_tracked a random int; special(key, r) may return its own value
    from the key's N(0, 1) draw r (None: the rules above)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            out[k] = torch.randint(1, 1000, (), generator=g, dtype=torch.int64)
            continue
        r = torch.randn(v.shape, generator=g, dtype=torch.float64)
        t = special(k, r) if special else None
        if t is not None:
            pass
        elif k.endswith("running_mean"):
            t = 0.2 * r
        elif k.endswith("running_var"):
            t = 0.5 + torch.rand(v.shape, generator=g, dtype=torch.float64)
        elif v.dim() == 1 and k.endswith("weight"):
            t = 1 + 0.1 * r
        elif v.dim() == 1:
            t = 0.1 * r
        else:
            t = r / (v[0].numel() ** 0.5) * (gain(k) if gain else 1.0)
        out[k] = t.to(dtype)
    return out


def eps_sensitive(sd, seed, eps=1e-5, frac=0.25):
    """sd with about frac of every BatchNorm's channels given a running_var near eps (eps·U(0.5, 1.5)) and their
    affine weight rescaled so that the eval output under eps stays what it was: the eval forward then depends on the
    BN eps (1e-6 in its place moves those channels by a third), where running variances of O(1) hide it (1e-5)."""
    g = torch.Generator().manual_seed(seed)
    out = dict(sd)
    for k in sd:
        if not k.endswith("running_var"):
            continue
        p = k[:-len("running_var")]
        v = sd[k].double()
        pick = torch.rand(v.shape, generator=g, dtype=torch.float64) < frac
        new = torch.where(pick, eps * (0.5 + torch.rand(v.shape, generator=g, dtype=torch.float64)), v)
        out[k] = new.to(sd[k].dtype)
        w = sd[p + "weight"].double()
        out[p + "weight"] = (w * torch.sqrt((new + eps) / (v + eps))).to(sd[p + "weight"].dtype)
    return out
