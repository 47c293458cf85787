#!/usr/bin/python3
"""One line naming what a PyTorch install computes with: version, BLAS (and the BLAS library the process loaded, with
OpenBLAS's kernel core, which OPENBLAS_CORETYPE changes), oneDNN, and CPU capability; with --ort, ONNX Runtime's version too (its GEMMs are its own MLAS).
Runs under any python with torch: bench/compare_torch.py calls it with Debian's python and the venv's.
    python bench/torch_info.py [--ort]
"""
import ctypes
import re
import sys

import torch


def torch_line():
    show = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", show)
    dnn = re.search(r"MKL-DNN (v[\d.]+)", show)
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", show)
    cap = re.search(r"CPU capability usage: (\S+)", show)
    if hasattr(torch.backends, "cpu"):  # torch >= 2.0
        cap = re.match(r"(.*)", torch.backends.cpu.get_cpu_capability())
    torch.ones(64, 64) @ torch.ones(64, 64)  # loads the BLAS library, if torch links one dynamically
    with open("/proc/self/maps") as f:
        maps = f.read()
    pat = r"/(lib(?:openblas|blas|mkl_rt|blis)[^/\s]*\.so[.\d]*)"
    libs = sorted({m.group(1) for m in re.finditer(pat, maps)})
    for path in sorted({m.group(0) for m in re.finditer(r"/\S*libopenblas\S*\.so[.\d]*", maps)}):
        try:
            fn = ctypes.CDLL(path).openblas_get_corename
            fn.restype = ctypes.c_char_p
            libs = [lib + (f" core {fn().decode()}" if "openblas" in lib else "") for lib in libs]
            break
        except (OSError, AttributeError):
            pass
    line = f"torch {torch.__version__}: BLAS {blas.group(1) if blas else '?'}"
    if mkl:
        line += f" (MKL {mkl.group(1)})"
    if libs:
        line += f" ({', '.join(libs)})"
    return line + f", oneDNN {dnn.group(1) if dnn else '?'}, CPU capability {cap.group(1) if cap else '?'}"


if __name__ == "__main__":
    print(torch_line())
    if "--ort" in sys.argv[1:]:
        import onnxruntime
        providers = ", ".join(onnxruntime.get_available_providers())
        print(f"onnxruntime {onnxruntime.__version__}: MLAS GEMMs, providers {providers}")
