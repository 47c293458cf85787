#!/bin/sh
# Makes the virtualenv of bench/compare_torch.py's PyPI anchors (PyTorch 2.x from PyPI, ONNX Runtime) and prints
# what they run on: torch's BLAS / oneDNN lines of torch.__config__.show(), its CPU capability, ORT's version.
# Idempotent: when DIR already has the pinned versions it only prints them. Not part of `make test`.
#   bench/anchors_venv.sh [DIR]        (default build/bench-venv)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-"$ROOT/build/bench-venv"}
# Pinned: the newest releases with cp311 wheels on 2026-11-23. onnxscript: torch.onnx.export's dynamo exporter.
PINS="torch==2.15.0 onnx==1.23.2 onnxscript==0.7.2 onnxruntime==1.32.0 numpy==2.4.6"

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
