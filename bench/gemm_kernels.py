#!/usr/bin/python3
"""GEMM libraries on the real shapes of DeiT-T/S: OpenBLAS, oneDNN, vitc's 64-column kernel and its dispatcher (`auto`).

Builds bench/gemm_kernels.c against build/libvitc.a, then, in one run, times every GEMM that vitc issues for
DeiT-T and DeiT-S at batch 1 and 16 (forward qkv/proj/fc1/fc2, their backward dX and dW, the patch embedding,
the per-head attention GEMMs and the per-panel fc1 GEMMs, which run one per thread inside vitc's parallel loops),
with OPENBLAS_CORETYPE unset and =Prescott (what Debian's OpenBLAS 0.3.21 picks on Intel Xeons it does not know),
plus a sweep of n^3 squares, one of few-row linear shapes (M rows, A·Bᵀ and its backward), one of the
hierarchical hosts' weight gradients (AᵀB over many rows) and one of products with 64 columns (rule 10: vitc's own
kernel, timed as `vitc` on the shapes it takes, N = 64) for the dispatch rule, alternating the settings --reps
times and keeping each library's best. Prints one table per setting with the CPU model and kernels, and a summary:
the time of a model's GEMMs with each library, with `auto` and with the best library per shape.

    /usr/bin/python3 bench/gemm_kernels.py [--reps 3] [--threads N] [--settings unset,Prescott] [--markdown OUT.md]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "gemm_kernels")
LIBS = ["openblas", "onednn", "auto"]
# name -> environment: OPENBLAS_CORETYPE unset / Prescott (Debian's OpenBLAS 0.3.21 on Xeons it does not know);
# "avx2" emulates an AVX2-only CPU (both libraries capped at AVX2 kernels) for --settings unset,Prescott,avx2.
SETTINGS = {"unset": {}, "Prescott": {"OPENBLAS_CORETYPE": "Prescott"},
            "avx2": {"OPENBLAS_CORETYPE": "Haswell", "DNNL_MAX_CPU_ISA": "AVX2"}}
MODELS = [("deit_tiny", 192, 3), ("deit_small", 384, 6)]  # name, C, heads (dh = 64, N = 197, MLP 4C, depth 12)


def build():
    subprocess.run(["make", "--no-print-directory", "-C", ROOT, "build/libvitc.a"], check=True,
                   stdout=subprocess.DEVNULL)
    cmd = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-O2", "-fopenmp",
           "-I" + os.path.join(ROOT, "include"), os.path.join(ROOT, "bench", "gemm_kernels.c"),
           os.path.join(ROOT, "build", "libvitc.a"), "-lopenblas", "-ldnnl", "-lm", "-o", BIN]
    subprocess.run(cmd, check=True)


def shapes(threads):
    """(label, group, calls per step, ta, tb, M, N, K, lda, ldb, ldc, beta, par) for every GEMM of a DeiT step.
    group: model/batch and 'fwd' or 'bwd'; calls: how often the shape runs per forward or backward."""
    out = []
    N, dh, depth = 197, 64, 12
    for name, C, H in MODELS:
        for B in (1, 16):
            R = B * N
            g = f"{name} b{B}"
            lin = [("qkv", C, 3 * C), ("proj", C, C), ("fc1", C, 4 * C), ("fc2", 4 * C, C)]
            for lname, ci, co in lin:
                beta = 1  # the bias (and residual) is written into the output first, sgemm accumulates onto it
                if lname == "fc1" and R >= 512:  # vt_linear_gelu: row panels, one sgemm per thread
                    np_ = threads * ((R + threads * 256 - 1) // (threads * 256))
                    rows = R // np_
                    out.append((f"{g} fc1 panel", g + " fwd", depth * np_ / threads, 0, 1, rows, co, ci, ci, ci, co,
                                1, 1))
                else:
                    out.append((f"{g} {lname}", g + " fwd", depth, 0, 1, R, co, ci, ci, ci, co, beta, 0))
                out.append((f"{g} {lname} dX", g + " bwd", depth, 0, 0, R, ci, co, co, ci, ci, 1, 0))
                out.append((f"{g} {lname} dW", g + " bwd", depth, 1, 0, co, ci, R, co, ci, ci, 1, 0))
            # classifier head (1000 classes) on the class tokens
            out.append((f"{g} head", g + " fwd", 1, 0, 1, B, 1000, C, C, C, 1000, 1, 0))
            out.append((f"{g} head dX", g + " bwd", 1, 0, 0, B, C, 1000, 1000, C, C, 1, 0))
            out.append((f"{g} head dW", g + " bwd", 1, 1, 0, 1000, C, B, 1000, C, C, 1, 0))
            # patch embedding: conv 16x16/16 = per image (C, 196) = W (C, 768) · col (768, 196); images in parallel
            par = 1 if B > 1 else 0
            calls = B / threads if par else B
            out.append((f"{g} patch", g + " fwd", calls, 0, 0, C, 196, 768, 768, 196, 196, 0, par))
            out.append((f"{g} patch dW", g + " bwd", calls, 0, 1, C, 768, 196, 196, 196, 768, 1, par))
            # attention, per (batch, head), one thread each (src/ops/attention.c)
            L3 = 3 * C
            att = depth * B * H / threads
            out += [(f"{g} attn q·kT", g + " fwd", att, 0, 1, N, N, dh, L3, L3, N, 0, 1),
                    (f"{g} attn p·v", g + " fwd", att, 0, 0, N, dh, N, N, L3, C, 0, 1),
                    (f"{g} attn dV=pT·dO", g + " bwd", att, 1, 0, N, dh, N, N, C, L3, 1, 1),
                    (f"{g} attn dP=dO·vT", g + " bwd", att, 0, 1, N, N, dh, C, L3, N, 0, 1),
                    (f"{g} attn dQ=dS·k", g + " bwd", att, 0, 0, N, dh, N, N, L3, L3, 1, 1),
                    (f"{g} attn dK=dST·q", g + " bwd", att, 1, 0, N, dh, N, N, L3, L3, 1, 1)]
    # the rule's sweep: squares n^3, one call on all threads and one call per thread inside a parallel region
    for n in (16, 32, 48, 64, 80, 96, 128, 192, 256):
        for par in (0, 1):
            out.append((f"sweep {n}^3 {'per-thread' if par else 'all-threads'}", "sweep", 1, 0, 0, n, n, n, n, n, n,
                        0, par))
    # rule 4's sweep: a linear's forward A·Bᵀ (and its backward AB, AᵀB) with few rows for its depth, all threads
    for m in (1, 12, 16, 49, 128, 196, 400):
        for k, n in ((128, 384), (1536, 384), (3072, 768), (768, 3072)):
            out.append((f"rows {m}x{n}x{k} A*B^T", "sweep", 1, 0, 1, m, n, k, k, k, n, 1, 0))
            out.append((f"rows {m}x{k}x{n} dX", "sweep", 1, 0, 0, m, k, n, n, k, k, 1, 0))
            out.append((f"rows {n}x{k}x{m} dW", "sweep", 1, 1, 0, n, k, m, n, k, k, 1, 0))
    # rules 7 and 8's sweep: weight gradients dW = dyᵀ·x (AᵀB, M = out, N = in features, K = rows) of the
    # hierarchical hosts at batch 16 (stage widths, MLP ratios, stage rows) and of DeiT-S, all threads
    hosts = {"Swin-T": ((96, 192, 384, 768), (4, 4, 4, 4)), "PVTv2-b1": ((64, 128, 320, 512), (8, 8, 4, 4)),
             "CSwin-T": ((64, 128, 256, 512), (4, 4, 4, 4)), "Next-ViT-S": ((96, 192, 384, 768), (3, 3, 3, 3)),
             "DeiT-S": ((384,), (4,))}
    seen = set()
    for host, (dims, ratios) in hosts.items():
        rows = (3152,) if host == "DeiT-S" else (50176, 12544, 3136, 784)
        for c, r, k in zip(dims, ratios, rows):
            for lin, m, n in (("fc1", r * c, c), ("fc2", c, r * c), ("qkv", 3 * c, c), ("kv", 2 * c, c),
                              ("proj", c, c)):
                if (m, n, k) not in seen:
                    seen.add((m, n, k))
                    out.append((f"dW {host} {lin} {m}x{n}x{k}", "sweep", 1, 1, 0, m, n, k, m, n, n, 1, 0))
    # rule 10's sweep: 64 output columns; stage-1 rows of the hosts at batch 16 (50176) and 1 (3136) over the depths
    # of their linears (A·B: dX into 64 features, A·Bᵀ: a forward into 64), weight gradients AᵀB into 64 input
    # features, and one-thread tiles (64-channel heads' P·V and dQ)
    for m in (50176, 3136):
        for k in (64, 128, 192, 256, 512):
            out.append((f"n64 {m}x64x{k} A*B", "sweep", 1, 0, 0, m, 64, k, k, 64, 64, 1, 0))
            out.append((f"n64 {m}x64x{k} A*B^T", "sweep", 1, 0, 1, m, 64, k, k, k, 64, 1, 0))
    for m in (64, 128, 192, 256, 512):
        for k in (50176, 3136, 784):
            out.append((f"n64 dW {m}x64x{k}", "sweep", 1, 1, 0, m, 64, k, m, 64, 64, 1, 0))
    for n in (49, 98, 197, 392):
        out.append((f"n64 {n}x64x{n} per-thread", "sweep", 1, 0, 0, n, 64, n, n, 64, 64, 0, 1))
    out.append(("peak 1024^3", "peak", 1, 0, 0, 1024, 1024, 1024, 1024, 1024, 1024, 0, 0))
    return out


def run_once(shp, setting, threads):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "DNNL_MAX_CPU_ISA", "VITC_GEMM"):
        env.pop(k, None)
    env.update(SETTINGS[setting])
    env["OMP_NUM_THREADS"] = str(threads)
    lines = "".join(f"{s[0].replace(' ', '~')} {' '.join(str(v) for v in s[3:])}\n" for s in shp)
    # 7 rounds of 3 ms bursts per shape: short enough to fit between the other jobs of a shared machine
    p = subprocess.run([BIN, "7", "3"], input=lines, env=env, capture_output=True, text=True, check=True)
    machine, rule, res = "", "", {}
    for ln in p.stdout.splitlines():
        if ln.startswith("machine "):
            machine = ln[8:]
        elif ln.startswith("rule "):
            rule = ln[5:]
        else:
            label, lib, gf = ln.split()
            res[(label.replace("~", " "), lib)] = float(gf)
    return machine, rule, res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="alternations of the settings")
    ap.add_argument("--settings", default="unset,Prescott", help="comma-separated, from " + ",".join(SETTINGS))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument("--raw", default=os.path.join(ROOT, "build", "gemm_kernels.json"),
                    help="best GFLOP/s so far, rewritten after every round (default build/gemm_kernels.json)")
    ap.add_argument("--from-raw", action="store_true", help="only print the tables of an earlier run's --raw file")
    a = ap.parse_args()
    by_lower = {k.lower(): k for k in SETTINGS}  # avx2 or AVX2, as vitc_before_after.py spells it
    settings = [by_lower.get(s.lower(), s) for s in a.settings.split(",")]
    if any(s not in SETTINGS for s in settings):  # before the build
        sys.exit(f"--settings: {next(s for s in settings if s not in SETTINGS)!r} is not one of "
                 f"{', '.join(SETTINGS)}")
    best = {k: {} for k in settings}
    info = {}
    if a.from_raw:
        with open(a.raw) as f:
            raw = json.load(f)
        info = raw["info"]
        best = {k: {tuple(kk.split("|")): v for kk, v in d.items()} for k, d in raw["best"].items()}
        # the recorded run's threads (they set the shapes of the fc1 panels and the FLOP totals), not this call's
        m = re.search(r"threads=(\d+)", next(iter(info.values()), ("", ""))[0])
        a.threads = raw.get("threads") or (int(m.group(1)) if m else a.threads)
    else:
        build()
    shp = shapes(a.threads)
    for r in range(0 if a.from_raw else a.reps):
        for key in (settings if r % 2 == 0 else settings[::-1]):
            machine, rule, res = run_once(shp, key, a.threads)
            info[key] = (machine, rule)
            for k, v in res.items():
                best[key][k] = max(best[key].get(k, 0.0), v)
            with open(a.raw, "w") as f:
                json.dump({"info": info, "threads": a.threads,
                           "best": {k: {"|".join(kk): v for kk, v in d.items()} for k, d in best.items()}}, f)
            print(f"round {r + 1}/{a.reps}, setting {key}: done", file=sys.stderr)
    out = []
    for key in settings:
        machine, rule = info[key]
        env = " ".join(f"{k}={v}" for k, v in SETTINGS[key].items()) or "OPENBLAS_CORETYPE unset"
        out.append(f"\n{env}: {machine.replace('|', ', ')}\nauto rule: {rule}\n")
        out.append("| GEMM | ta tb | M×N×K | threads | OpenBLAS GFLOP/s | oneDNN GFLOP/s | vitc GFLOP/s | "
                   "auto GFLOP/s | auto/best library |")
        out.append("|---|---|---|---|---:|---:|---:|---:|---:|")
        for s in shp:
            v = [best[key][(s[0], l)] for l in LIBS]
            own = best[key].get((s[0], "vitc"))  # the 64-column kernel, where it applies
            thr = f"1 per call ×{a.threads}" if s[12] else str(a.threads)
            out.append(f"| {s[0]} | {s[3]} {s[4]} | {s[5]}×{s[6]}×{s[7]} | {thr} | {v[0]:.1f} | {v[1]:.1f} | "
                       f"{'–' if own is None else f'{own:.1f}'} | {v[2]:.1f} | {v[2] / max(v[0], v[1], 1e-9):.2f} |")
        # time of all GEMMs of a forward / backward with each library, with auto, and with the best per shape
        out.append("\n| model, batch, pass | GEMM GFLOP | OpenBLAS ms | oneDNN ms | auto ms | best per shape ms | "
                   "auto GFLOP/s | auto vs peak |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        peak = max(best[key][("peak 1024^3", l)] for l in LIBS)
        groups = collections.OrderedDict()
        for s in shp:
            if s[1] not in ("peak", "sweep"):
                groups.setdefault(s[1], []).append(s)
        def flop(x):  # of all calls of shape x in a pass
            return 2.0 * x[5] * x[6] * x[7] * x[2] * (a.threads if x[12] else 1)

        def rate(x, libs):  # best GFLOP/s among libs (those timed on x), never 0
            return max(1e-9, max(best[key].get((x[0], l), 0.0) for l in libs))

        for gname, ss in groups.items():
            fl = sum(flop(x) for x in ss)
            t = {l: sum(flop(x) / rate(x, [l]) / 1e9 for x in ss) for l in LIBS}
            tb = sum(flop(x) / rate(x, LIBS[:2] + ["vitc"]) / 1e9 for x in ss)
            out.append(f"| {gname} | {fl / 1e9:.2f} | {1e3 * t['openblas']:.1f} | {1e3 * t['onednn']:.1f} | "
                       f"{1e3 * t['auto']:.1f} | {1e3 * tb:.1f} | {fl / t['auto'] / 1e9:.1f} | "
                       f"{100 * fl / t['auto'] / 1e9 / peak:.0f}% |")
        out.append(f"\npeak (1024³, best library): {peak:.1f} GFLOP/s "
                   f"(OpenBLAS {best[key][('peak 1024^3', 'openblas')]:.1f}, "
                   f"oneDNN {best[key][('peak 1024^3', 'onednn')]:.1f})")
    text = "\n".join(out)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
