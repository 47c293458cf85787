#!/usr/bin/python3
"""Throughput of each paper's official PyTorch model class against vitc's model of the same name.

The official repositories are not part of vitc: fetch them at the pinned commits (bench/fetch_official.sh DEST)
and pass each checkout by path with --repo NAME=PATH (NAME: gma, refiner, msf, flatten). Each repository is
imported in its own process (all four have a top-level `models` package), with these run-time fixes and nothing
patched on disk:
  gma      the unused `import ipdb` gets an empty stub module when ipdb is absent; every nn.SyncBatchNorm is
           swapped for an nn.BatchNorm2d with the same state (same math in one process; SyncBatchNorm's train
           forward needs a process group)
  refiner  the real timm is imported before the repository joins sys.path (it vendors an old timm/ at its root)
  msf      vit_pytorch/__init__ needs `packaging`
  flatten  the repository's build_model() is followed by hand with the yaml's settings (its config.py needs yacs)
Requirements of the official side: torch, timm 0.4.x (`pip install timm==0.4.12 einops`; see TIMM_HELP), einops,
PyYAML, packaging; run it with --python PATH (default: Debian's /usr/bin/python3).

Per model: the official parameter count must equal `vitc info NAME --json`'s params (a mismatch is not timed).
Then for inference at batch 1 and 16 and a training step at batch 16 (forward + cross-entropy + backward + AdamW;
the official model gets vitc's drop-path rate, which is the yaml's), the official model and `vitc bench` run
alternately --repeats times (vitc second, then first, and so on) and each side keeps its best; vitc runs on 2
threads (--threads), the most the official side gets; the official side tries torch.set_num_threads 1 and 2
in each run, each after 2 warm-up steps and timed for at least --min-time seconds (vitc bench warms up 2 steps
too; its iteration count is chosen for the same minimum time); when its torch links oneMKL and the CPU is not
Intel's, each run happens twice, the second with MKL's Intel code path forced ("MKL Intel path",
benchenv.mkl_settings: MKL takes a slower path on other vendors' CPUs). The markdown table goes to stdout at the end,
progress to stderr.
Usage: /usr/bin/python3 bench/compare_official.py --repo gma=DIR --repo refiner=DIR --repo msf=DIR
       --repo flatten=DIR [--models a,b] [--cases infer:1,infer:16,train:16] [--repeats 3] [--python PY] [--quick]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import benchenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# vitc name -> (repository, how to build its official model). Commits checked: bench/fetch_official.sh.
OFFICIAL = {
    "groupmixformer_m": ("gma", "configs/groupmixformer_miny.yaml"),
    "groupmixformer_t": ("gma", "configs/groupmixformer_tiny.yaml"),
    "groupmixformer_s": ("gma", "configs/groupmixformer_small.yaml"),
    "groupmixformer_b": ("gma", "configs/groupmixformer_base.yaml"),
    # the repo's large yaml is a placeholder ("need to adjust", depths 8/10/30/10): paper Table 1's L instead
    "groupmixformer_l": ("gma", {"EMBEDDING_DIMS": [240, 320, 360, 480], "SERIAL_DEPTHS": [8, 10, 18, 16],
                                 "MLP_RATIOS": [4, 4, 2, 2]}),
    "refiner_vit_s": ("refiner", "Refiner_ViT_S"),
    "refiner_vit_m": ("refiner", "Refiner_ViT_M"),
    "refiner_vit_l": ("refiner", "Refiner_ViT_L"),
    "refiner_vit_s_dense": ("refiner", "Refiner_ViT_S"),
    "refiner_vit_m_dense": ("refiner", "Refiner_ViT_M"),
    "refiner_vit_l_dense": ("refiner", "Refiner_ViT_L"),
    "simplevit_s_msf_g2": ("msf", "SimpleViTS_msf-g2"),
    "simplevit_s_orig": ("msf", "SimpleViTS_orig"),
    "simplevit_s_msf": ("msf", "SimpleViTS_msf"),
    "simplevit_s_orig_g2": ("msf", "SimpleViTS_orig-g2"),
    # ViT-Ti / SS / B are not registered in the repo: its class with paper Table 5's sizes and dim_head 64 (spec-msf)
    **{f"simplevit_{size}_{att.replace('-', '_')}": ("msf", dict(dim=dim, depth=depth, heads=heads, att=att))
       for size, dim, depth, heads in (("ti", 192, 12, 3), ("ss", 384, 6, 6), ("b", 768, 12, 12))
       for att in ("orig", "msf", "msf-g2", "orig-g2")},
    "flatten_swin_tiny": ("flatten", "cfgs/flatten_swin_t.yaml"),
    "flatten_swin_small": ("flatten", "cfgs/flatten_swin_s.yaml"),
    "flatten_swin_base": ("flatten", "cfgs/flatten_swin_b.yaml"),
    "flatten_swin_base_384": ("flatten", "cfgs/flatten_swin_b_384.yaml"),
    "flatten_pvt_tiny": ("flatten", "cfgs/flatten_pvt_t.yaml"),
    "flatten_pvt_small": ("flatten", "cfgs/flatten_pvt_s.yaml"),
    "flatten_pvt_v2_b1": ("flatten", "cfgs/flatten_pvt_v2_b1.yaml"),
    "flatten_pvt_v2_b2": ("flatten", "cfgs/flatten_pvt_v2_b2.yaml"),
    "flatten_cswin_tiny": ("flatten", "cfgs/flatten_cswin_t.yaml"),
    "flatten_cswin_small": ("flatten", "cfgs/flatten_cswin_s.yaml"),
    "flatten_cswin_base": ("flatten", "cfgs/flatten_cswin_b.yaml"),
    "flatten_cswin_base_384": ("flatten", "cfgs/flatten_cswin_b_384.yaml"),
}
# vitc models without an official counterpart to time
NO_OFFICIAL = {
    "deit_tiny_hmhsa_cffn": "hMHSA + cFFN has no official code (compare with vitc's plain host: bench/compare_torch.py)",
    "deit_small_hmhsa_cffn": "hMHSA + cFFN has no official code (compare with vitc's plain host: bench/compare_torch.py)",
    "pvt_v2_b1_hmhsa_cffn": "hMHSA + cFFN has no official code (compare with vitc's plain host: bench/compare_torch.py)",
    "flatten_deit_tiny": "the FLatten repository has no DeiT host (vitc's is a transplant, spec s6)",
}
DEFAULT_MODELS = ("groupmixformer_m,groupmixformer_t,groupmixformer_s,refiner_vit_s,refiner_vit_s_dense,"
                  "simplevit_s_msf_g2,simplevit_s_orig,flatten_swin_tiny,flatten_pvt_tiny,flatten_pvt_v2_b1,"
                  "flatten_cswin_tiny,deit_tiny_hmhsa_cffn")
# models whose official training forward needs extra targets: inference only
EVAL_ONLY = {f"refiner_vit_{s}_dense": "the official train forward (aux head + MixToken) needs token-labelling targets"
             for s in "sml"}

TIMM_HELP = """The official code needs timm 0.4.x (timm.models.layers, register_model; MSF excepted) and einops,
which {py} lacks. Make a virtualenv that sees Debian's torch and install them from PyPI:
  /usr/bin/python3 -m venv --system-site-packages /tmp/offvenv
  /tmp/offvenv/bin/pip install timm==0.4.12 einops
and pass --python /tmp/offvenv/bin/python. (timm 0.4.12's __init__ imports its data and model zoo, which need
torchvision and PIL: Debian's python3-torchvision and python3-pil provide them.)"""

# FLatten's config.py defaults that its yaml files leave out (MODEL.LA.*, MODEL.SWIN.*)
FLATTEN_LA = {"FOCUSING_FACTOR": 3, "KERNEL_SIZE": 5, "ATTN_TYPE": "LLLL", "PVT_LA_SR_RATIOS": 1111,
              "CSWIN_LA_SPLIT_SIZE": "56-28-14-7"}
FLATTEN_SWIN = {"PATCH_SIZE": 4, "IN_CHANS": 3, "EMBED_DIM": 96, "DEPTHS": [2, 2, 6, 2], "NUM_HEADS": [3, 6, 12, 24],
                "WINDOW_SIZE": 7, "MLP_RATIO": 4.0, "QKV_BIAS": True, "QK_SCALE": None, "APE": False,
                "PATCH_NORM": True}


# ---------------------------------------------------------------- official side (runs under --python)

def _import_timm():
    import timm
    if not timm.__version__.startswith("0.4."):
        print(f"warning: timm {timm.__version__}; the official code targets timm 0.4.x", file=sys.stderr)


def _swap_syncbn(module):
    """Replace every nn.SyncBatchNorm under module by an nn.BatchNorm2d carrying the same state."""
    import torch.nn as nn
    for name, child in module.named_children():
        if isinstance(child, nn.SyncBatchNorm):
            bn = nn.BatchNorm2d(child.num_features, child.eps, child.momentum, child.affine,
                                child.track_running_stats)
            bn.load_state_dict(child.state_dict())
            setattr(module, name, bn)
        else:
            _swap_syncbn(child)


def build_official(name, repo, drop_path, img_size):
    """The official model for vitc's `name`, built from the checkout `repo` (imported in this process only)."""
    import importlib.util
    import types
    import yaml
    kind, what = OFFICIAL[name]
    if kind != "msf":  # the real timm before the repository joins the path: Refiner vendors an old timm/
        _import_timm()
    sys.path.insert(0, repo)
    if kind == "gma":
        if importlib.util.find_spec("ipdb") is None:  # imported, never used, by the official file
            sys.modules["ipdb"] = types.ModuleType("ipdb")
        from models.groupmixformer import GroupMixFormer
        g = what if isinstance(what, dict) else yaml.safe_load(open(os.path.join(repo, what)))["MODEL"]["GMA"]
        m = GroupMixFormer(patch_size=4, in_dim=3, num_stages=4, num_classes=1000,
                           embedding_dims=g["EMBEDDING_DIMS"], serial_depths=g["SERIAL_DEPTHS"], num_heads=8,
                           mlp_ratios=g.get("MLP_RATIOS", [4] * 4), qkv_bias=True, qk_scale=None, drop_rate=0.0,
                           attn_drop_rate=0.0, drop_path_rate=drop_path)
        _swap_syncbn(m)
        return m
    if kind == "refiner":
        import models.refined_transformer as rt
        dense = name.endswith("_dense")
        extra = {} if dense else {"return_dense": False, "mix_token": False}
        return getattr(rt, what)(img_size=img_size, drop_path_rate=drop_path, **extra)
    if kind == "msf":
        from vit_pytorch import get_vit_model
        if isinstance(what, dict):  # the class of get_vit_model's SimpleViTS at another size
            from vit_pytorch.simple_vit_flexatt import SimpleViTflexAtt
            return SimpleViTflexAtt(image_size=224, patch_size=16, num_classes=1000, mlp_dim=4 * what["dim"],
                                    dim_head=64, **what)
        return get_vit_model(what)
    # flatten: the arguments of the repository's models/build.py, from the yaml over config.py's defaults
    import models as fm
    cfg = yaml.safe_load(open(os.path.join(repo, what)))
    mc = cfg["MODEL"]
    la = dict(FLATTEN_LA, **mc.get("LA", {}))
    img = cfg.get("DATA", {}).get("IMG_SIZE", 224)
    if img != img_size:
        sys.exit(f"{what}: image size {img}, vitc's {name} {img_size}")
    if mc["TYPE"] == "flatten_swin":
        s = dict(FLATTEN_SWIN, **mc.get("SWIN", {}))
        return fm.build.FLattenSwinTransformer(
            img_size=img, patch_size=s["PATCH_SIZE"], in_chans=s["IN_CHANS"], num_classes=1000,
            embed_dim=s["EMBED_DIM"], depths=s["DEPTHS"], num_heads=s["NUM_HEADS"], window_size=s["WINDOW_SIZE"],
            mlp_ratio=s["MLP_RATIO"], qkv_bias=s["QKV_BIAS"], qk_scale=s["QK_SCALE"], drop_rate=0.0,
            drop_path_rate=drop_path, ape=s["APE"], patch_norm=s["PATCH_NORM"], use_checkpoint=False,
            focusing_factor=la["FOCUSING_FACTOR"], kernel_size=la["KERNEL_SIZE"], attn_type=la["ATTN_TYPE"])
    if mc["TYPE"].startswith("FLatten_CSWin"):
        return getattr(fm.build, mc["TYPE"])(
            img_size=img, in_chans=3, num_classes=1000, drop_rate=0.0, drop_path_rate=drop_path,
            focusing_factor=la["FOCUSING_FACTOR"], kernel_size=la["KERNEL_SIZE"], attn_type=la["ATTN_TYPE"],
            la_split_size=la["CSWIN_LA_SPLIT_SIZE"])
    return getattr(fm.build, mc["TYPE"])(
        drop_path_rate=drop_path, focusing_factor=la["FOCUSING_FACTOR"], kernel_size=la["KERNEL_SIZE"],
        attn_type=la["ATTN_TYPE"], la_sr_ratios=str(la["PVT_LA_SR_RATIOS"]))


def torch_blas():
    """'torch VERSION, BLAS NAME (core CORE)': the BLAS torch was built with, OpenBLAS's kernels if it is loaded."""
    import ctypes
    import re
    import torch
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = m.group(1) if m else "?"
    core = None
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "libopenblas" in line and line.split()[-1].startswith("/")}
    for lib in sorted(libs):
        try:
            fn = ctypes.CDLL(lib).openblas_get_corename
            fn.restype = ctypes.c_char_p
            core = fn().decode()
            break
        except (OSError, AttributeError):
            pass
    return f"torch {torch.__version__} (BLAS_INFO {blas}" + (f", OpenBLAS core {core})" if core else ")")


def import_help(e, repo):
    """The message for an ImportError building an official model: timm or einops missing from this python, or a
    --repo directory that is not the model's repository."""
    if (getattr(e, "name", None) or "").split(".")[0] in ("timm", "einops"):
        return f"{e}\n" + TIMM_HELP.format(py=sys.executable)
    return f"{e}: {repo} does not look like this model's official repository (check its --repo)"


def worker(spec):
    """Runs in a fresh interpreter: parameter count, or the best img/s over torch threads 1 and 2."""
    import torch
    torch.manual_seed(0)
    try:
        m = build_official(spec["name"], spec["repo"], spec["drop_path"], spec["img_size"]).float()
    except ImportError as e:
        sys.exit(import_help(e, spec["repo"]))
    out = {"params": sum(p.numel() for p in m.parameters()), "class": type(m).__name__, "torch": torch_blas()}
    if spec["mode"] == "params":
        print(json.dumps(out))
        return
    b, img = spec["batch"], spec["img_size"]
    x = torch.randn(b, 3, img, img)
    y = torch.randint(0, 1000, (b,))
    if spec["mode"] == "train":
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.05)
        lossf = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            lossf(m(x), y).backward()
            opt.step()
    else:
        m.eval()

        def step():
            with torch.no_grad():
                m(x)
    out["img_per_s"] = {}
    for threads in spec["threads"]:
        torch.set_num_threads(threads)
        for _ in range(spec["warmup"]):
            step()
        n, t0 = 0, time.perf_counter()
        while True:
            step()
            n += 1
            t = time.perf_counter() - t0
            if t >= spec["min_time"]:
                break
        out["img_per_s"][threads] = b * n / t
    print(json.dumps(out))


# ---------------------------------------------------------------- driver (any python3)

def run_json(cmd, what, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env) if env else None)
    if p.returncode != 0:
        sys.exit(f"{what} failed ({' '.join(cmd[:3])} ...):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def official(a, spec, env=None):
    return run_json([a.python, os.path.abspath(__file__), "--worker", json.dumps(spec)], f"official {spec['name']}",
                    env)


def vitc_bench(a, name, batch, train, iters, threads):
    """`vitc bench --json` on `threads` threads (the most the official side gets)."""
    cmd = [a.vitc, "bench", name, "--batch-size", str(batch), "--iters", str(iters), "--json", "--threads",
           str(threads)]
    r = run_json(cmd + (["--train"] if train else []), f"vitc bench {name}")
    benchenv.contention_note(r, f"vitc {name} b{batch} {'train' if train else 'infer'}")
    return r


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", action="append", default=[], metavar="NAME=PATH",
                    help="an official checkout: gma, refiner, msf or flatten (repeat the option)")
    ap.add_argument("--models", default=DEFAULT_MODELS, help="vitc names, comma-separated; known: "
                    + ", ".join(list(OFFICIAL) + list(NO_OFFICIAL)))
    ap.add_argument("--cases", default="infer:1,infer:16,train:16", help="MODE:BATCH list (MODE infer or train)")
    ap.add_argument("--repeats", type=int, default=3, help="alternated official / vitc runs, best kept per side "
                    "(at least 1)")
    ap.add_argument("--min-time", type=float, default=3.0, help="seconds timed per run (after 2 warm-up steps)")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter for the official side (torch, timm)")
    ap.add_argument("--vitc", default=os.path.join(ROOT, "vitc"), help="the vitc binary")
    ap.add_argument("--quick", action="store_true",
                    help="one short repeat (1 s, 1 warm-up step, torch threads 2 only): a smoke test, not a measurement")
    a = ap.parse_args()
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats}: at least 1")
    benchenv.clean_omp_env()
    repos = {}
    for r in a.repo:
        k, sep, path = r.partition("=")
        if not sep or k not in ("gma", "refiner", "msf", "flatten") or not os.path.isdir(path):
            ap.error(f"--repo {r}: expected NAME=DIR with NAME gma, refiner, msf or flatten and an existing DIR")
        repos[k] = os.path.abspath(path)
    cases = []
    for c in a.cases.split(","):
        mode, _, b = c.partition(":")
        if mode not in ("infer", "train") or not b.isdigit() or int(b) < 1:
            ap.error(f"--cases {c}: expected infer:B or train:B")
        cases.append((mode, int(b)))
    repeats, min_time, warmup, threads = ((1, 1.0, 1, [2]) if a.quick else (a.repeats, a.min_time, 2, [1, 2]))

    benchenv.need_program(a.vitc)
    benchenv.need_program(a.python, "give --python an interpreter with torch and timm")
    for name in a.models.split(","):  # every name checked before anything is timed
        if name not in NO_OFFICIAL and name not in OFFICIAL:
            sys.exit(f"{name}: no official counterpart known (known: {', '.join(OFFICIAL)})")
    rows, notes, torch_info, vitc_kernels, mkl = [], [], None, None, [("", {})]
    for name in a.models.split(","):
        if name in NO_OFFICIAL:
            notes.append(f"{name}: skipped, {NO_OFFICIAL[name]}")
            continue
        kind = OFFICIAL[name][0]
        if kind not in repos:
            notes.append(f"{name}: skipped, no --repo {kind}=DIR")
            continue
        info = run_json([a.vitc, "info", name, "--json"], f"vitc info {name}")
        spec = {"name": name, "repo": repos[kind], "drop_path": info["drop_path"], "img_size": info["img_size"],
                "mode": "params", "threads": threads, "warmup": warmup, "min_time": min_time}
        o = official(a, spec)
        torch_info = torch_info or o["torch"]
        mkl = benchenv.mkl_settings("BLAS_INFO mkl" in o["torch"])  # the official side's settings besides threads
        log(f"{name}: official {o['class']} {o['params']} params, vitc {info['params']} params")
        if o["params"] != info["params"]:
            notes.append(f"{name}: NOT TIMED, official {o['class']} has {o['params']} parameters, vitc "
                         f"{info['params']}")
            continue
        for mode, b in cases:
            train = mode == "train"
            if train and name in EVAL_ONLY:
                notes.append(f"{name}: {mode} b{b} not timed, {EVAL_ONLY[name]}")
                continue
            best_o, best_t, best_v, peak = 0.0, "", None, 0.0
            # an uncounted vitc run sizes the counted ones to --min-time (each side then has `repeats` counted runs)
            v = vitc_bench(a, name, b, train, 2, max(threads))
            iters = max(2, math.ceil(1e3 * min_time / v["ms_per_iter"]))
            for r in range(repeats):
                round_o = 0.0
                if r % 2:  # vitc first in every other round (a side always first would carry any order effect)
                    v = vitc_bench(a, name, b, train, iters, max(threads))
                for label, extra in mkl:
                    o = official(a, dict(spec, mode=mode, batch=b), extra)
                    for t, ips in o["img_per_s"].items():
                        round_o = max(round_o, ips)
                        if ips > best_o:
                            best_o, best_t = ips, t + (", " + label if label else "")
                if r % 2 == 0:
                    v = vitc_bench(a, name, b, train, iters, max(threads))
                vitc_kernels = vitc_kernels or v
                peak = max(peak, v["sgemm_gflops"])
                best_v = v if best_v is None or v["img_per_s"] > best_v["img_per_s"] else best_v
                log(f"  {name} {mode} b{b} run {r + 1}/{repeats}: official {round_o:.2f}, "
                    f"vitc {v['img_per_s']:.2f} img/s")
            rows.append(f"| {name} ({o['class']}) | {mode} | {b} | {best_o:.2f} ({best_t}) | "
                        f"{best_v['img_per_s']:.2f} | {best_v['img_per_s'] / best_o:.2f} | "
                        f"{benchenv.peak_cells(best_v, best_o, peak)} |")
            log(rows[-1])  # on stderr as it completes: a later failure does not lose it
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    kern = (f"vitc GEMM: OpenBLAS core {vitc_kernels['openblas_core']}, oneDNN {vitc_kernels['onednn_isa']} "
            f"({vitc_kernels['gemm_lib']})" if vitc_kernels else "vitc GEMM: not run")
    env = os.environ.get("OPENBLAS_CORETYPE")
    print(f"# {time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores; {torch_info or 'torch: not run'}; {kern}"
          + (f"; OPENBLAS_CORETYPE={env!r}" if env is not None else ""))
    print(f"# img/s (higher is better), best of {repeats} alternated runs per side; official: best of torch threads "
          f"{'/'.join(map(str, threads))}"
          + (f", each also with {benchenv.mkl_note()}" if len(mkl) > 1 else "")
          + "; ratio = vitc / official; peak: the highest sgemm GFLOP/s of the row's vitc "
          "runs; % peak: each side's achieved GFLOP/s as a share of it (vitc's FLOPs per image as its graph counts "
          "them, the official side's the same scaled by the model's MACs over vitc's run MACs); ceiling = peak over "
          "the official img/s at vitc's FLOPs per image, the ratio of an engine running vitc's FLOPs at that "
          "measured sgemm rate (benchenv.peak_cells)")
    print("# " + benchenv.PEAK_LEGEND)
    print("| model (official class) | mode | batch | official img/s (torch threads) | vitc img/s | ratio | "
          "peak GFLOP/s | % peak vitc / official | ceiling |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
