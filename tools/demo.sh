#!/usr/bin/env bash
# `make demo`: trains vit_fmnist_tiny (139k params) on the real Fashion-MNIST on this machine's cores and prints its
# test accuracy. Settings: 10 epochs, batch 128, AdamW lr 3e-3 (0.3 epoch warm-up, cosine), weight decay 0.05,
# no augmentation and no label smoothing (both slow convergence at this small budget; enable them for longer runs).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RUN:-runs/demo}
rm -rf "$RUN"
start=$SECONDS
./vitc train vit_fmnist_tiny --data fashion-mnist --epochs 10 --batch-size 128 --lr 3e-3 --warmup-epochs 0.3 \
    --no-augment --smoothing 0 --log-every 100 --out "$RUN"
./vitc eval vit_fmnist_tiny --weights "$RUN/weights.safetensors" --data fashion-mnist
echo "demo: trained in $((SECONDS - start)) s; run folder $RUN (metrics.csv, curves.png, checkpoint.safetensors)"
