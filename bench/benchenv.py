"""Shared by the benchmark scripts (compare_torch.py, compare_official.py, vitc_before_after.py): environment
hygiene, the anchors' oneMKL settings on CPUs not Intel's, the cells that put a row against the machine's sgemm
peak and the note on a vitc run that other processes disturbed."""
import os
import subprocess
import sys

# OpenMP settings that change how a runtime's threads wait between parallel regions. They reach the OpenMP programs
# (vitc, PyTorch) and not ONNX Runtime's own thread pool: OMP_WAIT_POLICY=PASSIVE left in a shell (as the reference
# tests use it) made vitc's PVTv2-b1 batch-1 inference 1.18-1.22x slower against an unaffected ORT (2026-11-28, AMD
# EPYC Zen 3).
OMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


# Thread counts a shell may have left set: every anchor gets them explicitly, and vitc must run with its default
# (all cores) as the scripts say, not with a leftover OMP_NUM_THREADS=1.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def clean_omp_env():
    """Removes OMP_WAIT_VARS and THREAD_VARS from os.environ (so every side runs its libraries' defaults, or the
    threads a script sets); says so on stderr."""
    for k in OMP_WAIT_VARS + THREAD_VARS:
        if k in os.environ:
            print(f"note: {k}={os.environ.pop(k)!r} removed from the environment of every timed process",
                  file=sys.stderr)


def exit_on_signals():
    """SIGTERM and SIGHUP end the script as Ctrl-C does (SystemExit unwinds its with-blocks: temporary folders of
    exported models are removed, not left in /tmp)."""
    import signal

    def stop(signum, _frame):
        sys.exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stop)


def need_program(path, what="vitc"):
    """Exits with one line when path is not an executable file (a binary not built, a wrong --vitc / --python)."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.exit(f"{path}: no such executable ({'build it with make' if what == 'vitc' else what})")


def check_modes(modes):
    """The comma-separated --modes list, each infer or train; exits naming a wrong one (it had run as inference,
    labelled as typed)."""
    out = modes.split(",")
    bad = [m for m in out if m not in ("infer", "train")]
    if bad:
        sys.exit(f"--modes: {bad[0]!r} is not a mode (infer, train)")
    return out


# Marks a "% peak" cell above 100%: the "peak" (a 1024^3 sgemm's best measured rate) is not an upper bound, since
# a model's kernels (weights packed once, other shapes, fused work) can run faster than that one product.
ABOVE_PEAK = " (>peak)"
PEAK_LEGEND = ("\"peak\": the best 1024^3 sgemm rate `vitc bench` measured in the row (before and after its timed "
               "steps), a reference rate, not an upper bound; \"" + ABOVE_PEAK.strip() + "\" marks a side that ran "
               "above it (its kernels beat that one product), and \"ceiling\" is then below vitc's ratio")


def macs_note(v):
    """"run / model" GMACs per image of a `vitc bench --json` run where the MACs vitc's graph runs differ from the
    model's (a class-token ViT's last block computes the class token's row alone), else the model's alone."""
    run, model = v.get("gmacs_run_per_img", 0.0), v.get("gmacs_per_img", 0.0)
    if run and model and abs(run - model) > 5e-4 * model:  # `vitc bench`'s own threshold for "(N run)"
        return f"{run:.3f} / {model:.3f}"
    return f"{model:.3f}"


def pct(x):
    return f"{x:.0f}%" + (ABOVE_PEAK if x > 100.0 else "")


def peak_cells(v, anchor_ips, peak):
    """The row's "peak GFLOP/s | % peak vitc / anchor | ceiling" markdown cells: v is vitc's best `vitc bench --json`
    run, anchor_ips the best anchor's img/s on the same model, batch and mode, peak the highest sgemm GFLOP/s (the
    better library at 1024^3) of the row's vitc runs. "% peak": each side's achieved GFLOP/s as a share of peak, a
    cell above 100% marked ABOVE_PEAK. vitc's FLOPs per image are those its graph runs (2 per MAC; training: forward
    and backward as vt_graph_train_macs counts them); the anchor's are the same count scaled by the model's MACs
    over vitc's run MACs (gmacs_per_img / gmacs_run_per_img), since the anchor runs every token (a class-token ViT's
    last block in full, where vitc computes the class token's row alone): one counting rule for both sides, in
    inference 2 x the model's MACs. "ceiling" = peak over the anchor's img/s at vitc's FLOPs per image: the ratio
    against that anchor of an engine running vitc's FLOPs at the measured sgemm rate. It is not a bound (vitc's
    kernels can beat a 1024^3 sgemm; then vitc's ratio exceeds it and its % peak is marked)."""
    flop_per_img = v["gflops"] / v["img_per_s"]  # vitc's, from the MACs its graph runs
    run, model = v.get("gmacs_run_per_img"), v.get("gmacs_per_img")
    anchor_flop_per_img = flop_per_img * (model / run if run and model else 1.0)
    anchor_pct = 100 * anchor_ips * anchor_flop_per_img / peak
    ceiling = peak / (anchor_ips * flop_per_img)
    return f"{peak:.0f} | {pct(100 * v['gflops'] / peak)} / {pct(anchor_pct)} | {ceiling:.2f}"


def openblas_tier(core):
    """The ISA tier of an OpenBLAS core name, as vitc's src/ops/gemm.c openblas_tier ranks them: 3 AVX-512, 2 AVX2,
    1 AVX, 0 the SSE cores (Prescott, Core2, Nehalem, Atom, Barcelona, ...) and names not listed."""
    c = (core or "").lower()
    for tier, names in ((3, ("skylakex", "cooperlake", "sapphirerapids")), (2, ("haswell", "zen")),
                        (1, ("sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"))):
        if c in names:
            return tier
    return 0


def contention_note(run, label):
    """Prints on stderr the contention warning of a `vitc bench --json` run (other processes took cores during its
    timed steps, so its img/s read low), naming the run by label; nothing when the run has none."""
    if run.get("contention_warning"):
        print(f"note: {label}: {run['contention_warning']}", file=sys.stderr)


def cpu_vendor():
    """The CPU's vendor_id from /proc/cpuinfo (e.g. GenuineIntel, AuthenticAMD), '?' when absent."""
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("vendor_id")), "?")


MKL_INTEL = "MKL Intel path"  # the label of the setting below in the tables


def mkl_note():
    """What the MKL_INTEL label means, for the scripts' table headers."""
    return (f"\"{MKL_INTEL}\": its oneMKL made to take its Intel code path on this {cpu_vendor()} CPU (LD_PRELOAD of "
            "bench/mkl_intel_path.c)")


def mkl_settings(uses_mkl):
    """The environments to try for a PyTorch that links oneMKL: {} alone on Intel CPUs (or without MKL); on other
    x86 vendors also MKL's Intel code path, forced by LD_PRELOAD of bench/mkl_intel_path.c (built here into
    build/mkl_intel_path.so), since MKL runs a slower path there (sgemm 2.6x slower on a Zen 5). Each entry is
    (label, environment additions); the label is "" or MKL_INTEL."""
    if not uses_mkl or cpu_vendor() in ("GenuineIntel", "?"):
        return [("", {})]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src, so = os.path.join(root, "bench", "mkl_intel_path.c"), os.path.join(root, "build", "mkl_intel_path.so")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        os.makedirs(os.path.dirname(so), exist_ok=True)
        try:
            subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-O2", src, "-o", so],
                           check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"cannot build {so} (the anchors' MKL setting on this {cpu_vendor()} CPU): {e}")
    pre = os.environ.get("LD_PRELOAD")
    return [("", {}), (MKL_INTEL, {"LD_PRELOAD": so + (" " + pre if pre else "")})]
