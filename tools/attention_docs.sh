#!/bin/bash
# The README's attention pictures (docs/attention/*.png): the demo model vit_fmnist_p7 with each --attn (GMA, which
# needs a model without a class token: vit_fmnist_tiny_gap) trained for one epoch on the 60,000 Fashion-MNIST
# training images with the demo's settings (under a minute each on 2 cores), then `vitc attention` on the
# first test image, last block (all heads, or the head mean where a block has two views), and the PNGs reduced to a
# 64-colour palette with PIL (Debian's python3-pil) to keep them small.
# Run from the repository root after `make vitc`: bash tools/attention_docs.sh [RUNS_DIR (default build/attention_runs)]
set -euo pipefail
V=./vitc
RUNS=${1:-build/attention_runs}
OUT=docs/attention
mkdir -p "$RUNS" "$OUT"
/usr/bin/python3 - "$RUNS/ankle_boot.png" <<'EOF'
import gzip, sys
import numpy as np
from PIL import Image
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()
Image.fromarray(np.frombuffer(raw[16:16 + 784], np.uint8).reshape(28, 28)).save(sys.argv[1])  # test image 0
EOF
for spec in "vit_fmnist_p7 mhsa all --rollout" "vit_fmnist_p7 hmhsa all" "vit_fmnist_p7 refiner mean" \
            "vit_fmnist_p7 msf mean" "vit_fmnist_p7 flatten mean" "vit_fmnist_tiny_gap gma mean"; do
    set -- $spec
    model=$1 attn=$2 heads=$3
    shift 3
    if [ ! -f "$RUNS/$attn/weights.safetensors" ]; then
        $V train "$model" --attn "$attn" --data fashion-mnist --epochs 1 --batch-size 128 --lr 1e-3 --warmup-epochs 0.3 \
            --no-augment --smoothing 0 --out "$RUNS/$attn" --overwrite > "$RUNS/$attn.log"
    fi
    echo "$attn: test accuracy $(tail -1 "$RUNS/$attn/metrics.csv" | cut -d, -f6)"
    $V attention "$model" --attn "$attn" --weights "$RUNS/$attn/weights.safetensors" "$RUNS/ankle_boot.png" \
        --blocks 3 --heads "$heads" "$@" -o "$RUNS/$attn.png"
    /usr/bin/python3 -c "
import sys
from PIL import Image
Image.open(sys.argv[1]).convert('RGB').quantize(64).save(sys.argv[2], optimize=True)" "$RUNS/$attn.png" "$OUT/$attn.png"
done
ls -l "$OUT"
