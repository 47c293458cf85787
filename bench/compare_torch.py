#!/usr/bin/python3
"""Side-by-side throughput of vitc and PyTorch on the same model, batch and mode, in one run.

PyTorch runs the independent reference ViT of tests/reference/vit_ref.py (timm's DeiT layout, float32, eval mode
for inference; forward + cross-entropy + backward + AdamW step for training), under every combination of
torch.set_num_threads in {1, 2} and OPENBLAS_NUM_THREADS in {1, 2} (each in a fresh process, since OpenBLAS reads
its variable at load time); the best setting is kept. vitc runs `vitc bench ... --json` with its default threads.
The host's speed drifts by up to 1.5x within minutes, so after the four settings vitc and PyTorch's best setting
run alternately --repeats times and each side reports its best run (vitc gets --repeats runs, PyTorch's best
setting at least as many).
Usage: /usr/bin/python3 bench/compare_torch.py [--models deit_tiny_patch16_224,...] [--batches 1,16]
       [--modes infer,train] [--iters N] [--repeats R]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_SNIPPET = r"""
import sys, time, torch, json
sys.path.insert(0, %(ref)r)
import vit_ref
torch.set_num_threads(%(threads)d)
torch.manual_seed(0)
cfg = vit_ref.model_config(%(model)r)
m = vit_ref.ViT(cfg).float()
x = torch.randn(%(batch)d, 3, 224, 224)
y = torch.randint(0, 1000, (%(batch)d,))
train = %(train)d
if train:
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.05)
    lossf = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    def step():
        opt.zero_grad(set_to_none=True)
        lossf(m(x), y).backward()
        opt.step()
else:
    m.eval()
    def step():
        with torch.no_grad():
            m(x)
for _ in range(2):
    step()
t = time.perf_counter()
for _ in range(%(iters)d):
    step()
t = time.perf_counter() - t
print(json.dumps({"img_per_s": %(batch)d * %(iters)d / t}))
"""


def torch_run(model, batch, train, iters, threads, blas):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(threads))
    code = TORCH_SNIPPET % dict(ref=os.path.join(ROOT, "tests", "reference"), threads=threads, model=model,
                                batch=batch, train=int(train), iters=iters)
    out = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("torch run failed:\n" + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])["img_per_s"]


def torch_best(model, batch, train, iters):
    """Best (img/s, torch threads, OpenBLAS threads) over the four thread settings."""
    return max((torch_run(model, batch, train, iters, threads, blas), threads, blas)
               for blas in (1, 2) for threads in (1, 2))


def vitc_run(model, batch, train, iters):
    cmd = [os.path.join(ROOT, "vitc"), "bench", model, "--batch-size", str(batch), "--iters", str(iters), "--json"]
    if train:
        cmd.append("--train")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("vitc bench failed:\n" + out.stderr)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="deit_tiny_patch16_224,deit_small_patch16_224")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="alternating vitc / PyTorch runs after the search")
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; img/s (higher is better), ratio = vitc / torch best")
    print("| model | mode | batch | vitc img/s | vitc GFLOP/s | torch best img/s (threads, OpenBLAS threads) | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model in a.models.split(","):
        for mode in a.modes.split(","):
            for b in (int(v) for v in a.batches.split(",")):
                train = mode == "train"
                iters = max(2, a.iters if b > 1 else 4 * a.iters)
                # the host is noisy: each side keeps its best run (see the module docstring)
                v = vitc_run(model, b, train, iters)
                t = torch_best(model, b, train, iters)
                for _ in range(a.repeats - 1):
                    v2 = vitc_run(model, b, train, iters)
                    v = v if v["img_per_s"] >= v2["img_per_s"] else v2
                    t = max(t, (torch_run(model, b, train, iters, t[1], t[2]), t[1], t[2]))
                print(f"| {model} | {mode} | {b} | {v['img_per_s']:.2f} | {v['gflops']:.1f} | "
                      f"{t[0]:.2f} ({t[1]}, {t[2]}) | {v['img_per_s'] / t[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
