#!/bin/sh
# Makes the virtualenv of bench/compare_torch.py's PyPI anchors (PyTorch 2.x from PyPI, ONNX Runtime) and prints
# what they run on: torch's BLAS / oneDNN lines of torch.__config__.show(), its CPU capability, ORT's version.
# Idempotent: when DIR already has the pinned versions it only prints them. Not part of `make test`.
# --official adds what the papers' official code needs (torchvision, timm 0.4.12, einops, PyYAML, packaging), so
# bench/compare_official.py --python DIR/bin/python times it on the same PyTorch 2.x.
#   bench/anchors_venv.sh [--official] [DIR]        (default build/bench-venv)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OFFICIAL=0
if [ "${1:-}" = --official ]; then
    OFFICIAL=1
    shift
fi
DIR=${1:-"$ROOT/build/bench-venv"}
# Pinned: the newest releases with cp311 wheels on 2026-11-23. onnxscript: torch.onnx.export's dynamo exporter.
PINS="torch==2.15.0 onnx==1.23.2 onnxscript==0.7.2 onnxruntime==1.32.0 numpy==2.4.6"
# The official code's (2026-11-27: torchvision the release pip chose for torch 2.15.0; timm as the repositories)
if [ $OFFICIAL = 1 ]; then
    PINS="$PINS torchvision==0.29.2 timm==0.4.12 einops==0.8.2 PyYAML==6.0.4 packaging==26.4"
fi

if [ ! -x "$DIR/bin/python" ]; then
    /usr/bin/python3 -m venv "$DIR"
fi
# installs only when a pin is missing or differs (pip itself would query the index even when all are satisfied)
if ! "$DIR/bin/python" -c '
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1].split())))
except PackageNotFoundError:
    sys.exit(1)
' "$PINS"; then
    # shellcheck disable=SC2086  # PINS is a list of words
    "$DIR/bin/python" -m pip install --quiet $PINS
fi

"$DIR/bin/python" "$ROOT/bench/torch_info.py" --ort
"$DIR/bin/python" -c 'import numpy, onnx, onnxscript; print(f"onnx {onnx.__version__}, onnxscript {onnxscript.__version__}, numpy {numpy.__version__}")'
