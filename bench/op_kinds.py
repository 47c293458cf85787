#!/usr/bin/python3
"""Where each paper model's step goes, by op kind: `vitc bench MODEL --profile --json` per model and mode.

The performance issue's target for the papers' blocks is that no more than a quarter of a step runs outside GEMMs.
`vitc bench --profile` splits the timed steps by op kind (include/vitc/graph.h, vt_op_kind): GEMM ops (linear,
matmul, convolutions but the depthwise, grouped linears), GEMMs fused with other work on their tiles (the attention
ops, the Refiner's DLA, GroupMixFormer's aggregators: per-head or per-plane GEMMs with softmax, focusing,
hallucination or depthwise convolutions between them) and other ops
(norms, activations, layout, depthwise convs). The fused ops' own GEMM calls are timed too (their threads' time in
vt_gemm over the thread count), so the last share column counts only the time outside any GEMM call. This script
runs it for every paper-variant model (or --models), inference and training, and prints a markdown table with the
CPU model; shares are within one run, so a noisy machine moves them less than it moves img/s.

    /usr/bin/python3 bench/op_kinds.py [--vitc ./vitc] [--models a,b] [--batch 16] [--iters 2] [--modes infer,train]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import benchenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER_MODELS = [
    "simplevit_s_msf", "simplevit_s_msf_g2", "swin_t_msf", "swin_t_msf_g2",  # Mean-Shift Feature Transformer
    "groupmixformer_m", "groupmixformer_t", "groupmixformer_s",  # Group-Mix Attention
    "deit_tiny_hmhsa_cffn", "deit_small_hmhsa_cffn", "pvt_v2_b1_hmhsa_cffn", "nextvit_small_hmhsa_cffn",  # hMHSA + cFFN
    "flatten_deit_tiny", "flatten_pvt_tiny", "flatten_pvt_v2_b1", "flatten_swin_tiny", "flatten_cswin_tiny",  # FLatten
    "refiner_vit_s",  # Refiner
]


def run(vitc, model, batch, iters, train, threads):
    cmd = [vitc, "bench", model, "--batch-size", str(batch), "--iters", str(iters), "--profile", "--json"]
    if train:
        cmd.append("--train")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    result = json.loads(out.stdout)  # stdout: the JSON object alone; the profile table is on stderr
    ops = []  # the profile's op table (name, seconds, share, MACs, kind): the ops outside the GEMM kind
    for line in out.stderr.splitlines():
        if line.startswith("by kind:"):
            break
        f = line.split()
        if len(f) == 5 and f[2].endswith("%") and f[0] != "op" and f[4] != "gemm":
            ops.append((float(f[2][:-1]), f[0]))
    return result, sorted(ops, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vitc", default=os.path.join(ROOT, "vitc"))
    ap.add_argument("--models", default=",".join(PAPER_MODELS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    a.vitc = os.path.abspath(a.vitc)  # as given from the caller's folder (the runs' working folder is the repository)
    benchenv.need_program(a.vitc)
    modes = benchenv.check_modes(a.modes)
    rows, cpu = [], None
    for model in a.models.split(","):
        for mode in modes:
            r, ops = run(a.vitc, model, a.batch, a.iters, mode == "train", a.threads)
            cpu = cpu or f"{r['cpu_model']} (OpenBLAS \"{r['openblas_core']}\", oneDNN {r['onednn_isa']})"
            k = r["time_by_kind"]
            top = ", ".join(f"{name} {share:.1f}" for share, name in ops[:3])
            outside = k["fused"] + k["other"]
            calls = outside - k["fused_gemm_calls"]
            rows.append(f"| {model} | {mode} | {r['img_per_s']:.2f} | {100 * k['gemm']:.1f} | {100 * k['fused']:.1f} | "
                        f"{100 * k['other']:.1f} | {100 * outside:.1f} | {100 * calls:.1f} | {top} |")
            print(rows[-1], file=sys.stderr, flush=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu}, batch {a.batch}, {a.threads} threads, "
          f"{a.iters} timed steps each; shares in % of the step\n")
    print("| model | mode | img/s | GEMM ops | fused GEMM ops | other ops | outside GEMM ops | outside GEMM calls | "
          "largest of those ops (%) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
