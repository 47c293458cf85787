"""Environment hygiene shared by the side-by-side benchmark scripts (compare_torch.py, compare_official.py)."""
import os
import sys

# OpenMP settings that change how a runtime's threads wait between parallel regions. They reach the OpenMP programs
# (vitc, PyTorch) and not ONNX Runtime's own thread pool: OMP_WAIT_POLICY=PASSIVE left in a shell (as the reference
# tests use it) made vitc's PVTv2-b1 batch-1 inference 1.18-1.22x slower against an unaffected ORT (2026-11-28, AMD
# EPYC Zen 3).
OMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def clean_omp_env():
    """Removes OMP_WAIT_VARS from os.environ (so every side runs its libraries' defaults); says so on stderr."""
    for k in OMP_WAIT_VARS:
        if k in os.environ:
            print(f"note: {k}={os.environ.pop(k)!r} removed from the environment of every timed process",
                  file=sys.stderr)
