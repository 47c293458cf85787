#!/usr/bin/python3
"""Side-by-side comparison of the five papers' blocks in small Fashion-MNIST hosts.

Every row trains a host with one attention (--attn) and FFN (--ffn) choice, for the same budget and seed, then
records: params, MACs per image, test accuracy, training and inference throughput (`vitc bench`, batch 128) and the
peak memory of the training process. The plain host is vit_fmnist_tiny_gap (patch 4, 7x7 tokens, D 80, depth 4,
8 heads, GAP head, no class token, so that every attention type fits); the hierarchical one is swin_fmnist_tiny
(2 stages: 14x14 tokens in windows of 7, then 7x7; FLatten global over stage 1 as in FLatten-Swin, MSF in every
window as in Swin-MSF). Writes a markdown table to
OUT/compare.md and prints it.
Usage: /usr/bin/python3 bench/compare_blocks.py [--epochs E] [--train-subset N] [--out DIR]
       [--rows host:attn:ffn[:--option=value],...]   (per-stage lists joined by '+', e.g. flatten+mhsa)
       [--bench-only]   (keeps the trained runs in OUT, measures img/s again: for a quieter machine)
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time

import benchenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VITC = os.path.join(ROOT, "vitc")
HOST, SWIN = "vit_fmnist_tiny_gap", "swin_fmnist_tiny"
ROWS = ",".join([f"{HOST}:{r}" for r in ("mhsa:mlp", "msf:mlp", "msf_g2:mlp", "hmhsa:mlp", "flatten:mlp", "refiner:mlp",
                                           "gma:mlp", "mhsa:cffn", "hmhsa:cffn")] +
                [f"{SWIN}:{r}" for r in ("mhsa:mlp", "flatten+mhsa:mlp:--windows=14+7", "msf:mlp", "msf_g2:mlp")])


def run(args):
    out = subprocess.run([VITC] + args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"vitc {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--train-subset", type=int, default=15000)  # `make compare`'s and the README table's
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", default="2e-3")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "compare"))
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--bench-only", action="store_true",
                    help="reuse the accuracy and peak memory of the runs in --out, measure img/s again")
    a = ap.parse_args()
    benchenv.need_program(VITC)
    benchenv.clean_omp_env()  # vitc then runs on the cores this process may run on, as the header says
    os.makedirs(a.out, exist_ok=True)
    lines = [f"Hosts `{HOST}` and `{SWIN}`, {a.epochs} epochs on the first {a.train_subset} Fashion-MNIST training images, "
             f"batch {a.batch_size}, AdamW lr {a.lr} (weight decay 0.05, 1 warm-up epoch from 1e-6, cosine to 1e-5: "
             f"vitc's defaults), seed {a.seed}, no augmentation, label smoothing 0.1; "
             f"test accuracy on all 10,000 test images; img/s: best of 2 `vitc bench` runs (batch 128); "
             f"{len(os.sched_getaffinity(0))} threads (the cores this process may run on); {time.strftime('%Y-%m-%d')}.",
             "",
             "| host | attention | FFN | params | MMACs/img | test acc (%) | train img/s | infer img/s | peak MiB |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for row in a.rows.split(","):
        host, attn, ffn, *extra = row.split(":")
        sel = ["--attn", attn.replace("+", ","), "--ffn", ffn]
        for opt in extra:  # e.g. --windows=14+7
            k, v = opt.split("=")
            sel += [k, v.replace("+", ",")]
        info = json.loads(run(["info", host, "--json"] + sel))
        # one folder per row: rows that differ only in their options (e.g. --windows) must not share a run
        tag = "".join("-" + re.sub(r"[^A-Za-z0-9_.+]", "", opt.replace("=", "_")) for opt in extra)
        rdir = os.path.join(a.out, f"{host}-{attn}-{ffn}{tag}")
        peak_file = os.path.join(rdir, "peak_mib.txt")
        if not a.bench_only:
            log = run(["train", host, "--data", "fashion-mnist", "--epochs", str(a.epochs), "--batch-size",
                       str(a.batch_size), "--lr", a.lr, "--seed", a.seed, "--train-subset", str(a.train_subset),
                       "--no-augment", "--log-every", "100000", "--out", rdir, "--overwrite"] + sel)
            m = re.search(r"peak memory ([0-9.]+) MiB", log)
            if not m:
                sys.exit(f"{rdir}: the training log names no peak memory (its wording changed?):\n{log[-2000:]}")
            with open(peak_file, "w") as f:
                f.write(m.group(1) + "\n")
        elif not os.path.exists(peak_file) or not os.path.exists(os.path.join(rdir, "metrics.csv")):
            sys.exit(f"--bench-only: {rdir} holds no trained run of this row (run once without --bench-only)")
        with open(os.path.join(rdir, "metrics.csv")) as f:
            last = list(csv.DictReader(f))[-1]
        with open(peak_file) as f:
            peak = float(f.read())
        # the training form is used for training; inference is measured in the deployed/eval form; best of 2 runs
        tr, inf = ({"img_per_s": 0.0}, {"img_per_s": 0.0})
        for _ in range(2):
            j = json.loads(run(["bench", host, "--batch-size", "128", "--iters", "10", "--train", "--json"] + sel))
            tr = j if j["img_per_s"] > tr["img_per_s"] else tr
            j = json.loads(run(["bench", host, "--batch-size", "128", "--iters", "10", "--json"] + sel))
            inf = j if j["img_per_s"] > inf["img_per_s"] else inf
        opts = "".join(f" ({o.replace('=', ' ').replace('+', ',')})" for o in extra)
        line = (f"| {host} | {attn.replace('+', ', ')}{opts} | {ffn} | {info['params']:,} | {info['macs'] / 1e6:.2f} | "
                f"{100 * float(last['test_acc']):.2f} | {tr['img_per_s']:.0f} | {inf['img_per_s']:.0f} | {peak:.0f} |")
        lines.append(line)
        print(line, flush=True)
    with open(os.path.join(a.out, "compare.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
