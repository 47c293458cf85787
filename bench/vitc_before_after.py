#!/usr/bin/python3
"""`vitc bench` of two vitc binaries (e.g. before and after a change), alternated in one run.

For DeiT-T and DeiT-S at batch 1 and 16, inference and training, with OPENBLAS_CORETYPE unset and =Prescott (or
--settings AVX2: OpenBLAS's Haswell kernels and oneDNN held to AVX2, as on an AVX2-only CPU), runs
`OLD bench ... --json` and `NEW bench ... --json` alternately --reps times (the order flips every round) and keeps
each binary's best img/s. Prints a table with the CPU model and GEMM kernels, the speed-up, the achieved GFLOP/s
and its share of the machine's best GEMM rate (the largest 1024^3 sgemm GFLOP/s that any run's bench measured with
either library).

    /usr/bin/python3 bench/vitc_before_after.py --old /tmp/vitc-old/vitc [--new ./vitc] [--reps 3] [--threads N]
                                                [--markdown F]

On a shared machine, 2-thread runs stall whenever another process holds the second core (a thread waits at every
OpenMP barrier until the scheduler runs its partner again, ~10 ms): compare with --threads 1 there, or use
--quiet-wait S to start every run when nothing else is runnable.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import benchenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "AVX2" stands in for an AVX2-only CPU (such as AMD Zen 3) on an AVX-512 one: both libraries held to AVX2 kernels.
SETTINGS = {"unset": {}, "Prescott": {"OPENBLAS_CORETYPE": "Prescott"},
            "AVX2": {"OPENBLAS_CORETYPE": "Haswell", "DNNL_MAX_CPU_ISA": "AVX2"}}


def wait_quiet(limit_s):
    """Waits (at most limit_s) until no other process is runnable (/proc/loadavg's running count is 1: us)."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        with open("/proc/loadavg") as f:
            if int(f.read().split()[3].split("/")[0]) <= 1:
                return
        time.sleep(1)


def bench(binary, extra, model, batch, train, setting, threads, iters, metric):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "DNNL_MAX_CPU_ISA", "VITC_GEMM"):
        env.pop(k, None)
    env.update(SETTINGS[setting])
    iters = iters or (20 if batch == 1 else 4)
    cmd = [binary, "bench", model, "--batch-size", str(batch), "--iters", str(iters), "--json"]
    cmd += (["--train"] if train else []) + (["--threads", str(threads)] if threads else []) + extra
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    j = json.loads(p.stdout)
    benchenv.contention_note(j, f"{binary} {model} b{batch}")
    if metric == "fastest":
        j["img_per_s"] = 1e3 * batch / j["ms_best_iter"]
        j["gflops"] *= j["ms_per_iter"] / j["ms_best_iter"]
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the vitc binary before the change")
    ap.add_argument("--new", default=os.path.join(ROOT, "vitc"))
    ap.add_argument("--old-args", default="", help="extra `vitc bench` arguments of the OLD side (e.g. --train-form)")
    ap.add_argument("--new-args", default="", help="extra `vitc bench` arguments of the NEW side")
    ap.add_argument("--models", default="deit_tiny_patch16_224,deit_small_patch16_224")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--modes", default="infer,train", help="infer, train or both")
    ap.add_argument("--metric", choices=("mean", "fastest"), default="mean",
                    help="img/s of a run: over all its iterations (mean), or of its fastest iteration (steadier on a "
                         "shared machine, whose stalls only add time)")
    ap.add_argument("--iters", type=int, default=0, help="timed iterations per run (default 20 at batch 1, else 4)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settings", default="unset,Prescott")
    ap.add_argument("--threads", type=int, default=0, help="--threads for both binaries (default: theirs, all cores)")
    ap.add_argument("--quiet-wait", type=float, default=0,
                    help="before each run, wait up to this many seconds for no other runnable process")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    for path in (a.old, a.new):
        benchenv.need_program(path)
    by_lower = {k.lower(): k for k in SETTINGS}  # AVX2 or avx2, as gemm_kernels.py spells it
    settings = [by_lower.get(s.lower(), s) for s in a.settings.split(",")]
    if any(s not in SETTINGS for s in settings):
        sys.exit(f"--settings: {next(s for s in settings if s not in SETTINGS)!r} is not one of "
                 f"{', '.join(SETTINGS)}")
    cases = [(m, int(b), t == "train") for m in a.models.split(",") for b in a.batches.split(",")
             for t in benchenv.check_modes(a.modes)]
    extra = {"old": shlex.split(a.old_args), "new": shlex.split(a.new_args)}
    best = {}  # (setting, case, which) -> json of the best run
    rounds = {}  # (setting, case) -> [NEW img/s / OLD img/s of each round]
    peak = 0.0
    for r in range(a.reps):
        for s in settings:
            for c in cases:
                order = ("old", "new") if (r + cases.index(c)) % 2 == 0 else ("new", "old")
                speed = {}
                for which in order:
                    wait_quiet(a.quiet_wait)
                    j = bench(a.old if which == "old" else a.new, extra[which], *c, s, a.threads, a.iters, a.metric)
                    speed[which] = j["img_per_s"]
                    print(f"  {s} {c[0]} b{c[1]} {'train' if c[2] else 'infer'} {which}: {j['img_per_s']:.2f} img/s",
                          file=sys.stderr, flush=True)
                    peak = max(peak, j["sgemm_gflops"], j.get("sgemm_gflops_onednn", 0.0),
                               j.get("sgemm_gflops_openblas", 0.0))
                    k = (s, c, which)
                    if k not in best or j["img_per_s"] > best[k]["img_per_s"]:
                        best[k] = j
                rounds.setdefault((s, c), []).append(speed["new"] / speed["old"])
            print(f"round {r + 1}/{a.reps}, setting {s}: done", file=sys.stderr)
    out = []
    for s in settings:
        n = best[(s, cases[0], "new")]
        env = " ".join(f"{k}={v}" for k, v in SETTINGS[s].items()) or "OPENBLAS_CORETYPE unset"
        out.append(f"\n{env}: CPU {n.get('cpu_model', '?')}, OpenBLAS \"{n.get('openblas_core', '?')}\", oneDNN "
                   f"{n.get('onednn_isa', '?')}, {n['threads']} threads; best GEMM rate measured: {peak:.1f} GFLOP/s\n")
        sides = f"before: {a.old} {a.old_args}".rstrip() + f"; after: {a.new} {a.new_args}".rstrip()
        per_run = "the fastest iteration of each run" if a.metric == "fastest" else "img/s of each run"
        out.append(f"{sides}; best of {a.reps} alternated rounds ({per_run})\n")
        out.append("| model | mode | batch | before img/s | after img/s | speed-up (best) | per round: median, after "
                   "faster | after GFLOP/s | after % of best GEMM |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for c in cases:
            o, nw, rr = best[(s, c, "old")], best[(s, c, "new")], rounds[(s, c)]
            out.append(f"| {c[0]} | {'train' if c[2] else 'infer'} | {c[1]} | {o['img_per_s']:.2f} | "
                       f"{nw['img_per_s']:.2f} | {nw['img_per_s'] / o['img_per_s']:.3f} | "
                       f"{statistics.median(rr):.3f}, {sum(x > 1 for x in rr)}/{len(rr)} | {nw['gflops']:.1f} | "
                       f"{100 * nw['gflops'] / peak:.0f}% |")
    text = "\n".join(out)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
