#!/usr/bin/env python3
"""`vitc bench` of two vitc binaries (e.g. before and after a change), alternated in one run.

For DeiT-T and DeiT-S at batch 1 and 16, inference and training, with OPENBLAS_CORETYPE unset and =Prescott, runs
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
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {"unset": {}, "Prescott": {"OPENBLAS_CORETYPE": "Prescott"}}
CASES = [(m, b, t) for m in ("deit_tiny_patch16_224", "deit_small_patch16_224") for b in (1, 16) for t in (0, 1)]


def wait_quiet(limit_s):
    """Waits (at most limit_s) until no other process is runnable (/proc/loadavg's running count is 1: us)."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        with open("/proc/loadavg") as f:
            if int(f.read().split()[3].split("/")[0]) <= 1:
                return
        time.sleep(1)


def bench(binary, model, batch, train, setting, threads):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "DNNL_MAX_CPU_ISA", "VITC_GEMM"):
        env.pop(k, None)
    env.update(SETTINGS[setting])
    iters = 20 if batch == 1 else 4
    cmd = [binary, "bench", model, "--batch-size", str(batch), "--iters", str(iters), "--json"]
    cmd += (["--train"] if train else []) + (["--threads", str(threads)] if threads else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the vitc binary before the change")
    ap.add_argument("--new", default=os.path.join(ROOT, "vitc"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settings", default="unset,Prescott")
    ap.add_argument("--threads", type=int, default=0, help="--threads for both binaries (default: theirs, all cores)")
    ap.add_argument("--quiet-wait", type=float, default=0,
                    help="before each run, wait up to this many seconds for no other runnable process")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    settings = a.settings.split(",")
    best = {}  # (setting, case, which) -> json of the best run
    peak = 0.0
    for r in range(a.reps):
        for s in settings:
            for c in CASES:
                order = ("old", "new") if (r + CASES.index(c)) % 2 == 0 else ("new", "old")
                for which in order:
                    wait_quiet(a.quiet_wait)
                    j = bench(a.old if which == "old" else a.new, *c, s, a.threads)
                    print(f"  {s} {c[0]} b{c[1]} {'train' if c[2] else 'infer'} {which}: {j['img_per_s']:.2f} img/s",
                          file=sys.stderr, flush=True)
                    peak = max(peak, j["sgemm_gflops"], j.get("sgemm_gflops_onednn", 0.0),
                               j.get("sgemm_gflops_openblas", 0.0))
                    k = (s, c, which)
                    if k not in best or j["img_per_s"] > best[k]["img_per_s"]:
                        best[k] = j
            print(f"round {r + 1}/{a.reps}, setting {s}: done", file=sys.stderr)
    out = []
    for s in settings:
        n = best[(s, CASES[0], "new")]
        env = " ".join(f"{k}={v}" for k, v in SETTINGS[s].items()) or "OPENBLAS_CORETYPE unset"
        out.append(f"\n{env}: CPU {n.get('cpu_model', '?')}, OpenBLAS \"{n.get('openblas_core', '?')}\", oneDNN "
                   f"{n.get('onednn_isa', '?')}, {n['threads']} threads; best GEMM rate measured: {peak:.1f} GFLOP/s\n")
        out.append("| model | mode | batch | before img/s | after img/s | speed-up | after GFLOP/s | after % of best GEMM |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for c in CASES:
            o, nw = best[(s, c, "old")], best[(s, c, "new")]
            out.append(f"| {c[0]} | {'train' if c[2] else 'infer'} | {c[1]} | {o['img_per_s']:.2f} | "
                       f"{nw['img_per_s']:.2f} | {nw['img_per_s'] / o['img_per_s']:.2f} | {nw['gflops']:.1f} | "
                       f"{100 * nw['gflops'] / peak:.0f}% |")
    text = "\n".join(out)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
