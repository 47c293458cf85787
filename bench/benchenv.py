"""Shared by the side-by-side benchmark scripts (compare_torch.py, compare_official.py): environment hygiene and the
cells that put a row against the machine's sgemm peak."""
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


def peak_cells(v, anchor_ips, peak):
    """The row's "peak GFLOP/s | % peak vitc / anchor | ceiling" markdown cells: v is vitc's best `vitc bench --json`
    run, anchor_ips the best anchor's img/s on the same model, batch and mode, peak the highest sgemm GFLOP/s (the
    better library at 1024^3) of the row's vitc runs. "% peak": each side's achieved GFLOP/s (vitc's MAC count at
    its img/s) as a share of peak; "ceiling" = peak / the anchor's GFLOP/s, the ratio an engine running every MAC at
    the sgemm peak would reach against that anchor (a target above it needs fewer operations, not faster fp32)."""
    flop_per_img = v["gflops"] / v["img_per_s"]  # vitc's count: 2 per MAC, 3 passes in training
    anchor = anchor_ips * flop_per_img
    return f"{peak:.0f} | {100 * v['gflops'] / peak:.0f}% / {100 * anchor / peak:.0f}% | {peak / anchor:.2f}"
