#!/usr/bin/python3
"""The demo's training run in vitc and in PyTorch, side by side: same model, data, schedule and thread count.

Model: vit_fmnist_p7 (ViT, patch 7 -> 16 tokens + class token, D 128, depth 4, 4 heads, MLP 2x, 540k params).
Schedule: `make demo`'s (tools/demo.sh): Fashion-MNIST train split, no augmentation, batch 128 (last partial batch
dropped), AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.05 except biases, norms, class token and position
embedding), lr 1e-3 with a 0.3-epoch linear warm-up from 1e-6 and a per-step cosine to 1e-5 (timm's
CosineLRScheduler), the gradients' global norm clipped at 1, no label smoothing; test accuracy on the 10,000 test
images after every epoch (as vitc's trainer evaluates), the last one reported.

The PyTorch side is written here, independently of vitc (timm's ViT layout: pre-norm blocks, LayerNorm eps 1e-6,
fused qkv, exact GELU, trunc-normal(0.02) init). Each side runs as its own process, timed from start to exit
(start-up, data loading, training and the evaluations), `--rounds` times alternating which goes first.

    /usr/bin/python3 bench/demo_vs_torch.py [--epochs 8] [--rounds 1] [--first vitc|pytorch] [--threads 2]
                                            [--vitc ./vitc]
    /usr/bin/python3 bench/demo_vs_torch.py --torch-only       # the PyTorch side alone (prints one JSON line)
"""
import argparse
import gzip
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import benchenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = os.environ.get("VITC_FMNIST_DIR") or "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530
LR, WARMUP_LR, MIN_LR, WARMUP_EPOCHS, WD, BATCH, CLIP = 1e-3, 1e-6, 1e-5, 0.3, 0.05, 128, 1.0


def load_idx(images, labels):
    import numpy as np
    with gzip.open(os.path.join(FMNIST, images)) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(FMNIST, labels)) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return x, y


def torch_side(epochs, threads, seed):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    t0 = time.perf_counter()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self, d, heads, hidden):
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

        def forward(self, x):
            B, N, C = x.shape
            q, k, v = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
            a = ((q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5).softmax(-1)
            x = x + self.proj((a @ v).transpose(1, 2).reshape(B, N, C))
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self, d=128, depth=4, heads=4, patch=7, classes=10):
            super().__init__()
            self.patch_embed = nn.Conv2d(1, d, patch, patch)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
            self.pos_embed = nn.Parameter(torch.zeros(1, (28 // patch) ** 2 + 1, d))
            self.blocks = nn.ModuleList(Block(d, heads, 2 * d) for _ in range(depth))
            self.norm, self.head = nn.LayerNorm(d, eps=1e-6), nn.Linear(d, classes)
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            nn.init.trunc_normal_(self.cls_token, std=0.02)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x)[:, 0])

    xtr, ytr = load_idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    xte, yte = load_idx("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    norm = lambda a: (torch.from_numpy(a.astype("float32")) / 255.0 - MEAN) / STD
    xtr, xte = norm(xtr), norm(xte)
    ytr, yte = torch.from_numpy(ytr.astype("int64")), torch.from_numpy(yte.astype("int64"))
    model = ViT()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and n not in ("cls_token", "pos_embed")]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and n not in ("cls_token", "pos_embed"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.999), eps=1e-8)
    spe = len(xtr) // BATCH
    warm, total = int(WARMUP_EPOCHS * spe), epochs * spe

    def lr_at(step):  # timm CosineLRScheduler per step, warm-up not prefixed (as vitc's schedule)
        if step < warm:
            return WARMUP_LR + step * (LR - WARMUP_LR) / warm
        return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * step / total))

    def evaluate():  # the test split, as vitc evaluates after every epoch
        model.eval()
        correct = 0
        with torch.no_grad():
            for s in range(0, len(xte), 250):
                correct += (model(xte[s:s + 250]).argmax(1) == yte[s:s + 250]).sum().item()
        return 100.0 * correct / len(xte)

    gen = torch.Generator().manual_seed(seed)
    step, t_train, acc = 0, 0.0, 0.0
    for _ in range(epochs):
        te = time.perf_counter()
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        for i in range(spe):
            idx = perm[i * BATCH:(i + 1) * BATCH]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            step += 1
        t_train += time.perf_counter() - te
        acc = evaluate()
    return {"side": "pytorch", "version": torch.__version__, "params": params, "acc": acc,
            "train_img_s": spe * BATCH * epochs / t_train, "inner_s": time.perf_counter() - t0}


def run_torch(args):
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-only", "--epochs", str(args.epochs),
                        "--threads", str(args.threads)], capture_output=True, text=True)
    if p.returncode:
        last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        sys.exit(f"PyTorch side failed: {last}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["wall_s"] = time.perf_counter() - t0
    return r


def run_vitc(args, run_dir):
    cmd = [args.vitc, "train", "vit_fmnist_p7", "--data", "fashion-mnist", "--epochs", str(args.epochs),
           "--batch-size", str(BATCH), "--lr", str(LR), "--warmup-epochs", str(WARMUP_EPOCHS), "--no-augment",
           "--smoothing", "0", "--clip-grad", str(CLIP), "--log-every", "1000", "--threads", str(args.threads),
           "--out", run_dir, "--overwrite"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        lines = f.read().strip().splitlines()
    head, last = lines[0].split(","), lines[-1].split(",")
    row = dict(zip(head, last))
    rates = [float(dict(zip(head, ln.split(",")))["img_per_s"]) for ln in lines[1:]]
    return {"side": "vitc", "acc": 100.0 * float(row["test_acc"]), "wall_s": wall,
            "train_img_s": len(rates) / sum(1.0 / r for r in rates)}


def machine():
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    return cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--first", choices=("vitc", "pytorch"), default="vitc", help="the side that runs first in round 1 "
                    "(then the order alternates)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--vitc", default=os.path.join(ROOT, "vitc"))
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_only:
        print(json.dumps(torch_side(args.epochs, args.threads, 0)))
        return
    benchenv.need_program(args.vitc)
    benchenv.clean_omp_env()  # both sides get --threads / torch.set_num_threads explicitly
    g = subprocess.run([args.vitc, "bench", "vit_fmnist_p7", "--batch-size", "1", "--iters", "1", "--json"],
                       capture_output=True, text=True)
    info = json.loads(g.stdout) if g.returncode == 0 else {}
    print(f"cpu: {machine()}, {args.threads} threads; vitc's GEMM kernels: OpenBLAS {info.get('openblas_core', '?')}, "
          f"oneDNN {info.get('onednn_isa', '?')}")
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = (run_vitc, run_torch) if (r + (args.first == "pytorch")) % 2 == 0 else (run_torch, run_vitc)
            for f in order:
                out = f(args, os.path.join(tmp, "run")) if f is run_vitc else f(args)
                res.append(out)
                print(f"round {r + 1}: {out['side']:8s} test acc {out['acc']:.2f}%  {out['wall_s']:.1f} s  "
                      f"train {out['train_img_s']:.0f} img/s", flush=True)
    best = {s: min((x for x in res if x["side"] == s), key=lambda x: x["wall_s"]) for s in ("vitc", "pytorch")}
    v, t = best["vitc"], best["pytorch"]
    print(f"\n{args.epochs} epochs, best of {args.rounds}: vitc {v['wall_s']:.0f} s ({v['acc']:.2f}%), PyTorch "
          f"{t['version']} {t['wall_s']:.0f} s ({t['acc']:.2f}%, {t['params']} params): vitc takes "
          f"{v['wall_s'] / t['wall_s']:.2f}x PyTorch's time (train img/s ratio {v['train_img_s'] / t['train_img_s']:.2f})")


if __name__ == "__main__":
    main()
