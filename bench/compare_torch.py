#!/usr/bin/python3
"""Side-by-side throughput of vitc and PyTorch on the same model, batch and mode, in one run.

PyTorch runs the independent PyTorch reference of the model (tests/reference: vit_ref for DeiT, swin_ref, pvt_ref,
cswin_ref, gmf_ref, nextvit_ref (BN-merged for inference, like vitc's deployed Next-ViT); float32, eval mode for
inference; forward + cross-entropy + backward + AdamW step for training; the hierarchical references match the
official code bit for bit; their RECORD_MAPS stays False, so no attention map is kept or, for GMA, computed; their
DropPath is identity, and vitc trains with --drop-path 0 to match; on torch 2.x the ViT, Swin and CSwin references
run their softmax attention through F.scaled_dot_product_attention, as timm's models), under every combination of
torch.set_num_threads in {1, 2} and OPENBLAS_NUM_THREADS in {1, 2} (each in a fresh process, since OpenBLAS reads
its variable at load time); the best setting is kept. vitc runs `vitc bench ... --json --threads 2`, the most any
PyTorch side gets (on a machine of more cores vitc's default, all of them, would not be a like-for-like row).
The host's speed drifts by up to 1.5x within minutes, so after the four settings vitc and PyTorch's best setting
run alternately --repeats times and each side reports its best run (vitc gets --repeats runs, PyTorch's best
setting at least as many).
Peak memory: each process's peak resident set (MiB) for the same run (weights, activations, libraries); vitc's is
`vitc bench`'s peak_rss_mib, without the buffers of its sgemm-peak probes, which the PyTorch processes do not run.
"GMACs/img": the model's multiply-adds per image; "run / model" where vitc's graph runs fewer (a class-token ViT's
last block computes the class token's row alone: DeiT-T 1.167 of 1.254), every anchor running the model's.

With --venv DIR (a virtualenv made by bench/anchors_venv.sh: PyTorch 2.x from PyPI, with MKL and its own oneDNN,
and ONNX Runtime), each row also runs, with DIR's python and the same reference model and snippet:
  torch 2.x eager   float32, torch.set_num_threads in {1, 2} (MKL follows it; OpenBLAS is not loaded, so
                    OPENBLAS_NUM_THREADS has nothing to set); on a CPU not Intel's each also with oneMKL's Intel
                    code path forced ("MKL Intel path": benchenv.mkl_settings, bench/mkl_intel_path.c), since MKL
                    runs a slower path on other vendors' CPUs;
  torch.compile     torch.compile(model) (inductor), on eager's best setting; two warm-up steps compile it,
                    outside the timing; "n/a" with the reason printed once when it fails;
  ORT               inference only: the eval model exported by torch.onnx.export (opset 18, static shapes) to a
                    temporary file, run by onnxruntime's CPUExecutionProvider with all graph optimisations,
                    intra_op_num_threads in {1, 2}.
Every side alternates --repeats times after its search and keeps its best run, the order of the sides reversed in
every other round (a side that always ran first or last would carry any order effect); ratio = vitc / the best
anchor.

Against the machine's fp32 GEMM speed: "peak" is the highest 1024^3 sgemm GFLOP/s that `vitc bench` measured in
this row's vitc runs (the better of OpenBLAS and oneDNN, before and after each run's timed steps): a measured
reference rate, not an upper bound, since a model's kernels (weights packed once, other shapes) can beat that one
product. "% peak" is each side's achieved GFLOP/s as a share of it, one count for both: vitc's FLOPs per image are
those its graph runs (training: forward and backward as vt_graph_train_macs counts them), the anchor's the same scaled
by the model's MACs over vitc's run MACs (inference: 2 x the model's MACs); a share above 100% is marked "(>peak)".
"ceiling" = peak over the anchor's img/s at vitc's FLOPs per image: the ratio against that anchor of an engine running
vitc's FLOPs at the measured sgemm rate; vitc's ratio exceeds it exactly where its % peak is marked
(benchenv.peak_cells).
Debian's torch links the machine's OpenBLAS, whose kernels an OPENBLAS_CORETYPE in the environment changes, while
vitc's dispatcher moves its large products to oneDNN: the script refuses to run with OPENBLAS_CORETYPE set unless
--allow-coretype is given. The header prints each side's OpenBLAS core; the Debian torch column's title names its core,
and where that core's kernels are below the CPU's ISA (forced by OPENBLAS_CORETYPE or misdetected), the title, every
Debian cell and every ratio against it carry "†" with a note above the table.
Every process gets its thread counts explicitly; OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS left in
the shell are removed (vitc gets --threads 2, as above).
With --bf16: vitc runs `--dtype bf16` (its large products on bf16 inputs summed in fp32) and every PyTorch side runs
its forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision on a CPU (its
matmuls and convolutions in bf16, weights and optimizer in fp32); it needs --venv: Debian's torch 1.13 is skipped (its
CPU autocast fails on the Swin reference's LayerNorm: "expected scalar type BFloat16 but found Float"), and so is ONNX
Runtime (no such mode). "peak" is then the bf16 product's (`vitc bench`'s bf16_gemm_gflops: a 1024^3 product on bf16
inputs, converted as vitc's GEMMs convert them), and "ceiling" the ratio against it.
Usage: /usr/bin/python3 bench/compare_torch.py [--models deit_tiny_patch16_224,...] [--batches 1,16]
       [--modes infer,train] [--iters N] [--repeats R] [--no-search] [--venv build/bench-venv] [--bf16]
       [--allow-coretype]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import benchenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "tests", "reference")

TORCH_SNIPPET = r"""
import resource, sys, time, torch, json
sys.path.insert(0, %(ref)r)
torch.set_num_threads(%(threads)d)
torch.manual_seed(0)
name = %(model)r
train = %(train)d
def build():
    import vit_ref, swin_ref, pvt_ref, cswin_ref, gmf_ref, nextvit_ref
    for ref in (vit_ref, swin_ref, cswin_ref, gmf_ref):  # the default: no attention map kept or computed
        ref.RECORD_MAPS = False
    for ref in (vit_ref, swin_ref, cswin_ref):  # softmax attention through F.scaled_dot_product_attention on torch
        ref.USE_SDPA = True                      # 2.x, as timm's models
    if name in nextvit_ref.DEPTHS:  # inference on the BN-merged form, as vitc's deployed default
        return nextvit_ref.build(name, train_form=bool(train), merged=not train)
    for ref in (swin_ref, pvt_ref, cswin_ref):
        if name in ref.MODELS:
            return ref.build(name)
    if name in gmf_ref.CONFIGS:
        return gmf_ref.build(name)
    return vit_ref.ViT(vit_ref.model_config(name))
backend = %(backend)r  # "eager"; with PyTorch 2.x also "compile" or "ort" (inference only)
amp = %(amp)d  # --bf16: forward and loss under CPU autocast to bfloat16
m = build().float()
x = torch.randn(%(batch)d, 3, %(img)d, %(img)d)
y = torch.randint(0, 1000, (%(batch)d,))
def prepare():  # the timed step() of this backend
    net = torch.compile(m) if backend == "compile" else m
    if backend == "ort":
        import os, onnxruntime as ort
        m.eval()
        path = %(onnx)r  # exported once per model and batch, by the first ORT run
        if not os.path.exists(path):
            with torch.no_grad():
                torch.onnx.export(m, (x,), path + ".tmp", opset_version=18, dynamo=True, external_data=False)
            os.replace(path + ".tmp", path)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = %(threads)d, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x.numpy()}
        return lambda: sess.run(None, feed)
    if train:
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.05)
        lossf = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(amp)):
                loss = lossf(net(x), y)
            loss.backward()
            opt.step()
        return step
    m.eval()
    def step():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(amp)):
            net(x)
    return step
t = time.perf_counter()
if backend == "eager":
    step = prepare()
    for _ in range(2):
        step()
else:  # a failed compile or export is this run's result, not a crash
    try:
        step = prepare()
        for _ in range(2):
            step()
    except Exception as e:
        print(json.dumps({"error": (type(e).__name__ + ": " + str(e)).strip().splitlines()[0][:300]}))
        sys.exit(0)
warm_s = time.perf_counter() - t
t = time.perf_counter()
for _ in range(%(iters)d):
    step()
t = time.perf_counter() - t
print(json.dumps({"img_per_s": %(batch)d * %(iters)d / t, "warmup_s": warm_s,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


AMP = [False]  # --bf16 (set once by main)


def torch_run(model, img, batch, train, iters, threads, blas, python="/usr/bin/python3", backend="eager", onnx="",
              extra_env=None):
    """(img/s, peak MiB) of one PyTorch run in a fresh process (extra_env added to its environment); Debian's torch
    exits on failure, the others return (None, reason)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(threads), **(extra_env or {}))
    code = TORCH_SNIPPET % dict(ref=os.path.join(ROOT, "tests", "reference"), threads=threads, model=model,
                                img=img, batch=batch, train=int(train), iters=iters, backend=backend, onnx=onnx,
                                amp=int(AMP[0]))
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    r = json.loads(lines[-1]) if out.returncode == 0 and lines and lines[-1].startswith("{") else None
    if python == "/usr/bin/python3" and r is None:
        sys.exit("torch run failed:\n" + out.stderr)
    if r is None or "error" in r:
        err = r["error"] if r else (out.stderr.strip().splitlines() or ["exit status %d" % out.returncode])[-1]
        return None, err
    return r["img_per_s"], r["peak_mib"]


def torch_best(model, img, batch, train, iters, search):
    """Best (img/s, torch threads, OpenBLAS threads, peak MiB) over the thread settings (2 and 2 without search)."""
    settings = [(t, b) for b in (1, MAX_THREADS) for t in (1, MAX_THREADS)] if search else [(MAX_THREADS, MAX_THREADS)]
    best = None
    for threads, blas in settings:
        ips, mib = torch_run(model, img, batch, train, iters, threads, blas)
        if best is None or ips > best[0]:
            best = (ips, threads, blas, mib)
    return best


class Anchor:
    """One PyPI anchor (torch 2.x eager, torch.compile or ORT) of one row: its best run so far and its setting
    (threads, benchenv.mkl_settings entry), or why it has none."""

    def __init__(self, python, backend, onnx):
        self.python, self.backend, self.onnx = python, backend, onnx
        self.ips, self.setting, self.err = None, None, None

    def run(self, row, setting):
        threads, (_, env) = setting
        ips, err = torch_run(*row, threads, threads, self.python, self.backend, self.onnx, env)
        if ips is None:
            self.err = self.err or err
        elif self.ips is None or ips > self.ips:
            self.ips, self.setting = ips, setting

    def cell(self):
        if self.ips is None:
            return "n/a"
        threads, (label, _) = self.setting
        return f"{self.ips:.2f} ({threads}{', ' + label if label else ''})"


def anchors_row(venv, tmp, row, search, repeats, vitc_again, debian_again, mkl):
    """The PyPI anchors of one row (model, img, batch, train, iters), alternated with vitc's and Debian torch's
    repeats (vitc_again / debian_again run one more of theirs); torch 2.x eager also tries each of mkl's settings
    (benchenv.mkl_settings), torch.compile runs on eager's best; returns the anchors by name."""
    model, _, batch, train, _ = row
    python = os.path.join(venv, "bin", "python")
    onnx = os.path.join(tmp, f"{model}_b{batch}.onnx")
    an = {k: Anchor(python, k, onnx) for k in ("eager", "compile", "ort")}
    if AMP[0]:
        an["ort"].err = "no bf16 mode (--bf16)"
    threads = (1, MAX_THREADS) if search else (MAX_THREADS,)
    for t in threads:
        for m in mkl:
            an["eager"].run(row, (t, m))
    if an["eager"].ips is not None:
        an["compile"].run(row, an["eager"].setting)
    if not train and not AMP[0]:
        for t in threads:
            an["ort"].run(row, (t, ("", {})))
    for k in range(repeats - 1):  # the order reversed in every other round
        sides = [vitc_again, debian_again] + [lambda a=a: a.run(row, a.setting) for a in an.values()
                                              if a.setting is not None]
        for side in (sides if k % 2 else sides[::-1]):
            side()
    return an
def img_size(model):
    out = subprocess.run([os.path.join(ROOT, "vitc"), "info", model, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("vitc info failed:\n" + out.stderr)
    info = json.loads(out.stdout)
    if info.get("in_chans", 3) != 3 or info.get("num_classes", 1000) != 1000:
        sys.exit(f"{model}: the PyTorch side runs 3-channel, 1000-class models only")
    return info["img_size"]


def reference_models():
    """The model names the PyTorch references build (TORCH_SNIPPET's build()), read with Debian's python."""
    code = ("import sys; sys.path.insert(0, %r)\nimport vit_ref, swin_ref, pvt_ref, cswin_ref, gmf_ref, nextvit_ref\n"
            "names = set(nextvit_ref.DEPTHS) | set(gmf_ref.CONFIGS)\nfor r in (swin_ref, pvt_ref, cswin_ref): "
            "names |= set(r.MODELS)\nnames |= set(getattr(vit_ref, 'MODELS', ()))\nprint(' '.join(sorted(names)))"
            % REF)
    out = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True)
    return set(out.stdout.split()) if out.returncode == 0 else None


# The most threads any PyTorch side runs (the thread search's largest setting); vitc runs this many.
MAX_THREADS = 2


def vitc_run(model, batch, train, iters):
    """`vitc bench --json` result (on MAX_THREADS threads) plus the process's peak resident set (peak_mib, from
    wait4)."""
    cmd = [os.path.join(ROOT, "vitc"), "bench", model, "--batch-size", str(batch), "--iters", str(iters), "--json",
           "--threads", str(MAX_THREADS)]
    if train:
        cmd += ["--train", "--drop-path", "0"]  # the references' DropPath is identity: the same work on both sides
    if AMP[0]:
        cmd += ["--dtype", "bf16"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("vitc bench failed:\n" + err)
    r = json.loads(out)
    # the model's peak without the sgemm probes' buffers (no PyTorch process runs those); a vitc without the field:
    # the process's
    r["peak_mib"] = r.get("peak_rss_mib") or usage.ru_maxrss / 1024
    benchenv.contention_note(r, f"vitc {model} b{batch} {'train' if train else 'infer'}")
    return r


def debian_core_cell(core, isa):
    """(title suffix, cell marker, note or None) for the Debian torch column: its OpenBLAS core in the title, and
    "†" with a note where that core's kernels are below the CPU's ISA tier (isa: `vitc bench --json`'s) or were
    forced by OPENBLAS_CORETYPE."""
    env = os.environ.get("OPENBLAS_CORETYPE")
    cpu = "AVX-512" if isa.get("avx512") else "AVX2" if isa.get("avx2") else None
    below = cpu is not None and core != "?" and benchenv.openblas_tier(core) < (3 if cpu == "AVX-512" else 2)
    if env is None and not below:
        return f" [OpenBLAS {core}]", "", None
    why = [f"OPENBLAS_CORETYPE={env}"] if env is not None else []
    if below:
        why.append(f"below the CPU's {cpu}")
    allowed = "; run with --allow-coretype" if env is not None else ""
    note = (f"† Debian torch ran OpenBLAS core {core} ({', '.join(why)}{allowed}), while vitc's dispatcher runs its "
            "large products on oneDNN: the Debian torch column and every ratio against it are not like for like")
    return f" [OpenBLAS {core}, {', '.join(why)}] †", " †", note


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="deit_tiny_patch16_224,deit_small_patch16_224,swin_tiny_patch4_window7_224,"
                    "flatten_swin_tiny,pvt_v2_b1,flatten_pvt_v2_b1,cswin_tiny_224,nextvit_small,nextvit_small_hmhsa_cffn")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="alternating vitc / PyTorch runs after the search")
    ap.add_argument("--no-search", action="store_true", help="PyTorch with 2 threads only (no thread search)")
    ap.add_argument("--venv", help="also PyTorch 2.x eager, torch.compile and ONNX Runtime from this virtualenv "
                    "(made by bench/anchors_venv.sh)")
    ap.add_argument("--bf16", action="store_true", help="vitc --dtype bf16 against PyTorch's CPU autocast to bfloat16")
    ap.add_argument("--allow-coretype", action="store_true",
                    help="run although OPENBLAS_CORETYPE is set (it picks Debian torch's OpenBLAS kernels, while vitc "
                    "runs its large products on oneDNN); the Debian torch column and its ratios are then marked")
    a = ap.parse_args()
    if "OPENBLAS_CORETYPE" in os.environ and not a.allow_coretype:
        sys.exit(f"OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']!r} is set: it chooses the OpenBLAS kernels of "
                 "Debian's torch (all its GEMMs), while vitc runs its large products on oneDNN, so the Debian torch "
                 "column would be handicapped. Unset it, or give --allow-coretype to run with it (that column and "
                 "its ratios are then marked).")
    AMP[0] = a.bf16
    if a.bf16 and not a.venv:
        sys.exit("--bf16 compares with PyTorch 2.x's autocast: give --venv (Debian's torch 1.13 autocast fails)")
    benchenv.clean_omp_env()
    benchenv.need_program(os.path.join(ROOT, "vitc"))
    modes = benchenv.check_modes(a.modes)
    if a.venv and not os.access(os.path.join(a.venv, "bin", "python"), os.X_OK):
        sys.exit(f"{a.venv}/bin/python not found: make it with bench/anchors_venv.sh {a.venv}")
    known = reference_models()  # checked before anything runs: a late failure would lose the rows measured
    unknown = [m for m in a.models.split(",") if known is not None and m not in known]
    if unknown:
        sys.exit(f"--models: no PyTorch reference builds {unknown[0]!r} (they build: {', '.join(sorted(known))})")
    sizes = {m: img_size(m) for m in a.models.split(",")}
    benchenv.exit_on_signals()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# {time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores; img/s (higher is better), "
          + ("ratio = vitc / best anchor; (n) = threads" if a.venv else
             "ratio = vitc / torch best; MiB: peak resident set of each process")
          + ("; bf16: vitc --dtype bf16, PyTorch under CPU autocast to bfloat16" if a.bf16 else ""))
    info = os.path.join(ROOT, "bench", "torch_info.py")
    debian_core = "?"
    for python in ["/usr/bin/python3"] + ([os.path.join(a.venv, "bin", "python")] if a.venv else []):
        out = subprocess.run([python, info] + (["--ort"] if python != "/usr/bin/python3" else []),
                             capture_output=True, text=True)
        for line in out.stdout.splitlines() or [f"{python}: torch_info failed: {out.stderr.strip()[-200:]}"]:
            print("# " + line)
        core = re.search(r"libopenblas[^\s,)]* core ([^\s,)]+)", out.stdout)
        if python == "/usr/bin/python3" and core:
            debian_core = core.group(1)
    if "OPENBLAS_CORETYPE" in os.environ:
        print(f"# OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']!r} is set (--allow-coretype): it chose the "
              "OpenBLAS core of Debian's torch above, and vitc's OpenBLAS core below")
    mkl = [("", {})]
    if a.venv:
        uses = subprocess.run([os.path.join(a.venv, "bin", "python"), "-c",
                               "import torch; print(int(torch.backends.mkl.is_available()))"],
                              capture_output=True, text=True).stdout.strip() == "1"
        mkl = benchenv.mkl_settings(uses)
        if len(mkl) > 1:
            print(f"# torch 2.x eager (and torch.compile on its best) also tries {benchenv.mkl_note()}; the cells name "
                  "it where it won")
    header, mark = False, ""  # mark: the Debian torch column's (debian_core_cell)
    errors_seen = set()
    with tempfile.TemporaryDirectory(prefix="vitc-compare-") as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")  # torch.compile's cache, removed too
        for model in a.models.split(","):
            img = sizes[model]
            for mode in modes:
                for b in (int(v) for v in a.batches.split(",")):
                    train = mode == "train"
                    iters = max(2, a.iters if b > 1 else 4 * a.iters)
                    # the host is noisy: each side keeps its best run (see the module docstring)
                    v = vitc_run(model, b, train, iters)
                    key = "bf16_gemm_gflops" if a.bf16 else "sgemm_gflops"  # the peak of the products' arithmetic
                    peak = v[key]
                    t = (0.0, "-", "-", 0.0) if a.bf16 else torch_best(model, img, b, train, iters, not a.no_search)
                    if not header:
                        print(f"# vitc's GEMM kernels: OpenBLAS {v.get('openblas_core', '?')}, "
                              f"oneDNN {v.get('onednn_isa', '?')}; vitc threads: {v.get('threads', '?')}"
                              + ("" if a.bf16 else f"; Debian torch's GEMM kernels: OpenBLAS {debian_core}"))
                        title, mark, note = debian_core_cell(debian_core, v.get("isa", {}))
                        if a.bf16:
                            title, mark, note = "", "", None
                        if note:
                            print("# " + note)
                        print("# " + benchenv.PEAK_LEGEND + "; GMACs/img: vitc's run / the model's where they differ "
                              "(every anchor runs the model's)")
                        if a.venv:
                            print(f"| model | mode | batch | GMACs/img | vitc img/s | Debian torch 1.13{title} "
                                  "(threads, OpenBLAS threads) | torch 2.x eager | torch.compile | ORT | ratio | "
                                  "peak GFLOP/s | % peak vitc / best anchor | ceiling |")
                            print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
                        else:
                            print(f"| model | mode | batch | GMACs/img | vitc img/s | vitc GFLOP/s | Debian torch "
                                  f"1.13{title} best img/s (threads, OpenBLAS threads) | ratio | MiB vitc / torch | "
                                  "peak GFLOP/s | % peak vitc / torch | ceiling |")
                            print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
                        header = True

                    def vitc_again():
                        nonlocal v, peak
                        v2 = vitc_run(model, b, train, iters)
                        peak = max(peak, v2[key])
                        v = v if v["img_per_s"] >= v2["img_per_s"] else v2

                    def debian_again():
                        nonlocal t
                        if a.bf16:
                            return
                        ips, mib = torch_run(model, img, b, train, iters, t[1], t[2])
                        t = (ips, t[1], t[2], max(mib, t[3])) if ips > t[0] else t

                    if not a.venv:
                        for k in range(a.repeats - 1):  # the order reversed in every other round
                            for side in ((debian_again, vitc_again) if k % 2 == 0 else (vitc_again, debian_again)):
                                side()
                        print(f"| {model} | {mode} | {b} | {benchenv.macs_note(v)} | {v['img_per_s']:.2f} | "
                              f"{v['gflops']:.1f} | {t[0]:.2f} ({t[1]}, {t[2]}){mark} | "
                              f"{v['img_per_s'] / t[0]:.2f}{mark} | "
                              f"{v['peak_mib']:.0f} / {t[3]:.0f} | {benchenv.peak_cells(v, t[0], peak)} |", flush=True)
                        continue
                    an = anchors_row(a.venv, tmp, (model, img, b, train, iters), not a.no_search, a.repeats,
                                     vitc_again, debian_again, mkl)
                    for k, x in an.items():
                        if x.err and k not in errors_seen:
                            errors_seen.add(k)
                            print(f"# {k} n/a ({model} {mode} b{b}, first failure only): {x.err}", flush=True)
                    best = max([t[0]] + [x.ips for x in an.values() if x.ips is not None])
                    ort = an["ort"].cell() if not train else "-"
                    debian = "-" if a.bf16 else f"{t[0]:.2f} ({t[1]}, {t[2]}){mark}"
                    against = mark if not a.bf16 and best == t[0] else ""  # the ratio is against Debian torch
                    ratio = f"{v['img_per_s'] / best:.2f}{against} | {benchenv.peak_cells(v, best, peak)}" \
                        if best > 0 else "n/a | - | - | -"  # no anchor ran
                    print(f"| {model} | {mode} | {b} | {benchenv.macs_note(v)} | {v['img_per_s']:.2f} | {debian} | "
                          f"{an['eager'].cell()} | {an['compile'].cell()} | {ort} | {ratio} |", flush=True)
                    onnx = os.path.join(tmp, f"{model}_b{b}.onnx")  # ~100 MB a model: not kept past its rows
                    if os.path.exists(onnx):
                        os.unlink(onnx)


if __name__ == "__main__":
    main()
