#!/usr/bin/env bash
# Hostile but realistic use: each case of the reliability probe (sizes past every limit, corrupt and truncated
# images, special files and inputs as outputs, pipes and FIFOs, long names, NaN weights, odd thread settings) must
# end with a clear message and its exit status, leave every input unchanged, and never crash; then training killed
# with SIGKILL (once inside its second epoch, twice at random moments) and resumed each time ends bit-identical to an
# uninterrupted run, with one metrics.csv row per epoch; then a file-size limit below the checkpoint's size.
. "$(dirname "$0")/lib.sh"
V=./vitc
# expect NAME RC WORDS CMD...: exit status RC (not a signal), stderr containing WORDS
expect() {
    local name=$1 want=$2 words=$3
    shift 3
    "$@" >"$T/out.log" 2>"$T/err.log"
    local rc=$?
    check "$name" "[ $rc -eq $want ] && grep -qi -- \"$words\" '$T/err.log'" "rc $rc (want $want): $(tail -c 400 "$T/err.log")"
}
M=vit_fmnist_tiny
$V init $M -o "$T/w.safetensors" >/dev/null
/usr/bin/python3 - "$T" <<'EOF'
import struct, sys, zlib
sys.path.insert(0, "tests/reference")
import numpy as np, st
t = sys.argv[1]
st.save(f"{t}/x.safetensors", {"input": np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32),
                               "labels": np.array([1, 2], np.int64)})
st.save(f"{t}/xbad.safetensors", {"input": np.zeros((2, 1, 28, 28), np.float32), "labels": np.array([1, 99], np.int64)})
st.save(f"{t}/x3lab.safetensors", {"input": np.zeros((2, 1, 28, 28), np.float32), "labels": np.array([0, 1, 2], np.int64)})
w = st.load(f"{t}/w.safetensors")
w["head.bias"] = w["head.bias"].copy(); w["head.bias"][3] = np.nan
st.save(f"{t}/nan.safetensors", w)
pix = (np.arange(28 * 28) % 251).astype(np.uint8)
def png(rows):
    raw = b"".join(b"\0" + rows[i * 28:(i + 1) * 28].tobytes() for i in range(28))
    chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xffffffff)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
good = png(pix)
open(f"{t}/good.png", "wb").write(good)
rot = bytearray(good); rot[60] ^= 4                              # a bit flipped inside IDAT: CRC mismatch
open(f"{t}/rot.png", "wb").write(bytes(rot))
tga = struct.pack("<BBBHHBHHHHBB", 0, 0, 2, 0, 0, 0, 0, 0, 28, 28, 24, 0)
open(f"{t}/trunc.tga", "wb").write(tga + bytes(300))           # header + 300 of 2352 pixel bytes
open(f"{t}/header.tga", "wb").write(tga)
open(f"{t}/garbage.png", "wb").write(tga + bytes(range(256)) * 3)  # a TGA header + garbage, named .png
EOF
cp "$T/w.safetensors" "$T/w0.safetensors"
cp "$T/x.safetensors" "$T/x0.safetensors"

# 1. sizes past the limits: a refusal naming the size, not a write past a buffer
expect "bench at 512 px and batch 1024 refused (1: the batch makes it too large)" 1 "limit" $V bench $M --img-size 512 --batch-size 1024 --iters 1
expect "forward at 1024 px refused (2)" 2 "limit" $V forward $M --img-size 1024 -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
expect "deit --img-size 4096 refused (2)" 2 "limit" $V bench deit_tiny_patch16_224 --img-size 4096 --iters 1
expect "--img-size 736 refused (2)" 2 "limit" $V bench $M --img-size 736 --iters 1
# an any-size model takes its size from the input: a side past 4096 is named as such, not as the model's size
SW="swin_t --dims 16,32,64,128 --depths 1,1,1,1 --heads 1,2,4,8 --num-classes 10"
$V init $SW -o "$T/sw.safetensors" >/dev/null 2>&1
/usr/bin/python3 -c 'import sys; sys.path.insert(0, "tests/reference"); import st, numpy as np
st.save(sys.argv[1], {"input": np.zeros((1, 3, 4, 4097), np.float32)})' "$T/x4097.safetensors"
expect "an any-size model's input 4 x 4097 refused, naming the 4096-pixel limit" 1 \
    "input has shape (1, 3, 4, 4097): image sides are at most 4096 pixels" \
    $V forward swin_t -w "$T/sw.safetensors" --input "$T/x4097.safetensors" -o "$T/y.safetensors"
# 2, 9. truncated TGA, header-only TGA, a TGA header + garbage, a bit-rotted PNG: errors, the good image still classified
for f in trunc.tga header.tga garbage.png rot.png; do
    expect "predict refuses $f" 1 "$f" $V predict $M -w "$T/w.safetensors" "$T/$f" "$T/good.png"
    check "... and classifies the good image next to $f" "grep -q good.png '$T/out.log'"
done
# outputs get the mode open() would give them: the umask's for a new file, the old one's for a file replaced
(umask 077 && $V init $M -o "$T/mode.safetensors" >/dev/null 2>&1)
check "a new output under umask 077 is 0600" "[ \"\$(stat -c %a '$T/mode.safetensors')\" = 600 ]" "$(stat -c %a "$T/mode.safetensors")"
chmod 640 "$T/mode.safetensors" && $V init $M -o "$T/mode.safetensors" >/dev/null 2>&1
check "an output replaced keeps its mode (0640)" "[ \"\$(stat -c %a '$T/mode.safetensors')\" = 640 ]" "$(stat -c %a "$T/mode.safetensors")"
# a write-protected output is refused, as the shell's `>` refuses it, and left as it was (root may write any file:
# there the check runs as nobody, where nobody can run this build)
AS=""
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && AS="setpriv --reuid=65534 --regid=65534 --clear-groups"
RO=$(mktemp -d)
CLEANUP+=("$RO")
chmod 755 "$RO" && cp "$T/mode.safetensors" "$RO/ro.safetensors" && chmod 444 "$RO/ro.safetensors"
[ -n "$AS" ] && chown -R 65534 "$RO"
if [ "$(id -u)" -eq 0 ] && [ -z "$AS" ] || ! $AS $V list >/dev/null 2>&1; then
    skip "a write-protected output is refused" "no unprivileged user can run $V here"
else
    expect "a write-protected output (0444) is refused, naming it" 1 "ro.safetensors: it is write-protected" \
        $AS $V init $M --seed 4 -o "$RO/ro.safetensors"
    check "... and left unchanged" "cmp -s '$T/mode.safetensors' '$RO/ro.safetensors'"
fi
# 3. outputs onto special files are refused, the special file survives
mkfifo "$T/fifo"
expect "-o onto a FIFO refused" 1 "not a regular file" $V init $M -o "$T/fifo"
check "... the FIFO is still a FIFO" "[ -p '$T/fifo' ]"
expect "-o /dev/null refused" 1 "not a regular file" $V init $M -o /dev/null
check "... /dev/null is still a character device" "[ -c /dev/null ]"
expect "-o onto a folder refused" 1 "not a regular file" $V init $M -o "$T"
# weights read from a FIFO whose writer waits for a reader: read once, whole (a probing open released the writer and
# its close cost it SIGPIPE or the data)
mkfifo "$T/wfifo"
(timeout 60 cat "$T/w.safetensors" >"$T/wfifo") &
wpid=$!
sleep 0.5
timeout 120 $V predict $M -w "$T/wfifo" "$T/good.png" >"$T/wfifo.log" 2>&1
check "weights from a FIFO with a waiting writer load" "[ $? -eq 0 ] && grep -q good.png '$T/wfifo.log'" "$(cat "$T/wfifo.log")"
wait $wpid
# 4. an output equal to an input is refused before anything is written
expect "forward --input X -o X refused" 1 "is the input" $V forward $M -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/x.safetensors"
expect "forward -w W -o W refused" 1 "is the input" $V forward $M -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/w.safetensors"
ln -s "$T/w.safetensors" "$T/wlink"
expect "grad -o through a symlink to the weights refused" 1 "is the input" $V grad $M -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/wlink"
# a link to a file not there yet writes that file (as a shell's > does), the link kept; one into a missing folder is
# refused before any work
mkdir -p "$T/dl" "$T/dl2" && ln -s ../dl2/a "$T/dl/b" && ln -s ../dl_target.safetensors "$T/dl2/a"
$V init $M -o "$T/dl/b" >"$T/dl.log" 2>&1
check "init -o through a chain of links across folders to a file not there yet writes that file, the links kept" \
    "[ $? -eq 0 ] && [ -L '$T/dl/b' ] && [ -L '$T/dl2/a' ] && [ -s '$T/dl_target.safetensors' ]" \
    "$(cat "$T/dl.log"; ls -l "$T/dl" "$T/dl2")"
ln -s "$T/nofolder/x.safetensors" "$T/dl/c"
expect "... and one to a missing folder is refused, naming it" 1 "cannot write .*dl/c: folder .*nofolder" \
    $V forward $M -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/dl/c"
cp "$T/good.png" "$T/keep.png"
expect "predict -o onto an image refused" 1 "is the input" $V predict $M -w "$T/w.safetensors" -o "$T/good.png" "$T/good.png"
check "... every input unchanged" "cmp -s '$T/w.safetensors' '$T/w0.safetensors' && cmp -s '$T/x.safetensors' '$T/x0.safetensors' && cmp -s '$T/good.png' '$T/keep.png'"
# ... the class names too: --classes, the classes.json read beside the weights (a run folder's, or W.classes.json)
mkdir -p "$T/run" "$T/side" && cp "$T/w.safetensors" "$T/run/weights.safetensors" && cp "$T/w.safetensors" "$T/side/w.safetensors"
/usr/bin/python3 -c 'import json, sys; json.dump({str(i): "c%d" % i for i in range(10)}, open(sys.argv[1], "w"))' "$T/cls.json"
cp "$T/cls.json" "$T/run/classes.json" && cp "$T/cls.json" "$T/side/w.classes.json" && cp "$T/cls.json" "$T/cls0.json"
expect "predict --classes C -o C refused" 1 "is the input" $V predict $M -w "$T/w.safetensors" --classes "$T/cls.json" -o "$T/cls.json" "$T/good.png"
expect "predict -o onto the run's classes.json beside the weights refused" 1 "is the input" $V predict $M -w "$T/run/weights.safetensors" -o "$T/run/classes.json" "$T/good.png"
expect "predict -o onto W.classes.json beside the weights refused" 1 "is the input" $V predict $M -w "$T/side/w.safetensors" -o "$T/side/w.classes.json" "$T/good.png"
$V init $M --ffn cffn --train-form -o "$T/run/cffn_tr.safetensors" >/dev/null
expect "deploy -o onto the run's classes.json refused" 1 "is the input" $V deploy $M --ffn cffn -w "$T/run/cffn_tr.safetensors" -o "$T/run/classes.json"
check "... the class names unchanged" "cmp -s '$T/cls.json' '$T/cls0.json' && cmp -s '$T/run/classes.json' '$T/cls0.json' && cmp -s '$T/side/w.classes.json' '$T/cls0.json'"
# 11. NaN weights are refused at load, naming the tensor
expect "NaN weights refused" 1 "head.bias" $V forward $M -w "$T/nan.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
# 12. a FIFO without a writer as --weights does not hang; images and weights through pipes work
expect "a FIFO as --weights does not hang, and the message says no writer gave data" 1 "no data came from it (a FIFO" \
    timeout 20 $V forward $M -w "$T/fifo" --input "$T/x.safetensors" -o "$T/y.safetensors"
expect "a FIFO without a writer as an image: the same message, not an empty file's" 1 "fifo: no data came from it (a FIFO" \
    timeout 20 $V predict $M -w "$T/w.safetensors" "$T/fifo"
# Fashion-MNIST's files as FIFOs (or devices): refused, not waited on (opening a FIFO without a writer blocks)
mkdir -p "$T/fmfifo" "$T/fmfifo2"
mkfifo "$T/fmfifo/t10k-images-idx3-ubyte.gz" "$T/fmfifo2/t10k-labels-idx1-ubyte.gz"
: >"$T/fmfifo/t10k-labels-idx1-ubyte.gz"
/usr/bin/python3 -c 'import gzip, struct, sys
open(sys.argv[1], "wb").write(gzip.compress(struct.pack(">IIII", 0x803, 2, 28, 28) + bytes(2 * 784)))' \
    "$T/fmfifo2/t10k-images-idx3-ubyte.gz"
expect "a FIFO as Fashion-MNIST's image file refused, not waited on" 1 \
    "refusing to read $T/fmfifo/t10k-images-idx3-ubyte.gz: it is a FIFO or pipe, not a regular file" \
    env VITC_FMNIST_DIR="$T/fmfifo" timeout 20 $V eval $M -w "$T/w.safetensors" --data fashion-mnist
expect "... and as its label file" 1 "t10k-labels-idx1-ubyte.gz: it is a FIFO or pipe, not a regular file" \
    env VITC_FMNIST_DIR="$T/fmfifo2" timeout 20 $V eval $M -w "$T/w.safetensors" --data fashion-mnist
$V predict $M -w <(cat "$T/w.safetensors") <(cat "$T/good.png") >"$T/pipe.log" 2>&1
check "weights and an image through pipes" "[ $? -eq 0 ] && grep -q 'class' '$T/pipe.log'" "$(cat "$T/pipe.log")"
# names holding a newline or a terminal escape: printed escaped, each on one line, in the text output and the errors
mkdir -p "$T/odd" && cp "$T/good.png" "$T/odd/c"$'\n'"d.png" && printf x >"$T/odd/e"$'\033'"[31mred.png"
$V predict $M -w "$T/w.safetensors" "$T/odd/c"$'\n'"d.png" "$T/odd/e"$'\033'"[31mred.png" >"$T/odd.out" 2>"$T/odd.err"
check "image names with a newline or an escape printed escaped (stdout and stderr)" "[ $? -eq 1 ] && \
    grep -qxF '$T/odd/c\\nd.png' '$T/odd.out' && grep -qF 'e\\x1b[31mred.png: unsupported' '$T/odd.err' && \
    ! grep -q \$'\\033' '$T/odd.out' '$T/odd.err'" "$(cat -A "$T/odd.out" "$T/odd.err")"
# a weight file's records and tensor names holding a terminal escape: notices and the --init-from log escape them
/usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests/reference'); import st; w = st.load('$T/w.safetensors'); \
st.save('$T/wesc.safetensors', w, metadata={'vitc_model': 'deit_tiny_patch16_224\x1b]0;T\x07'}); \
w['blocks.0.attn_mask\x1b[2J'] = w['head.bias']; st.save('$T/wesc2.safetensors', w)"
$V predict $M -w "$T/wesc.safetensors" "$T/good.png" >"$T/esc.out" 2>"$T/esc.err"
check "a weight file's model record with an escape: the notice prints it escaped" \
    "grep -qF 'records the weights of deit_tiny_patch16_224\\x1b]0;T\\x07, not' '$T/esc.err' && \
    ! grep -q \$'\\033' '$T/esc.err'" "$(cat -A "$T/esc.err")"
$V train $M --data fashion-mnist --train-subset 64 --epochs 1 --batch-size 32 --init-from "$T/wesc2.safetensors" \
    --out "$T/escrun" >"$T/escrun.log" 2>&1
check "... and --init-from's log a tensor name with one" \
    "grep -qF 'init-from: blocks.0.attn_mask\\x1b[2J dropped' '$T/escrun.log' && ! grep -q \$'\\033' '$T/escrun.log'" \
    "$(cat -A "$T/escrun.log" | head -5)"
# results on a standard output that cannot be written (a full disk): an error and exit 1, never a silent exit 0
$V list >/dev/full 2>"$T/full.err"
check "list into a full disk: an error, exit 1" \
    "[ $? -eq 1 ] && grep -qF 'vitc: error writing standard output: No space left on device' '$T/full.err'" \
    "$(cat "$T/full.err")"
$V predict $M -w "$T/w.safetensors" "$T/good.png" --json >/dev/full 2>"$T/full.err"
check "... and predict --json" "[ $? -eq 1 ] && grep -qF 'error writing standard output' '$T/full.err'" \
    "$(cat "$T/full.err")"
$V list >&- 2>"$T/closed.err"
check "list with its standard output closed: an error, exit 1" \
    "[ $? -eq 1 ] && grep -qF 'vitc: error writing standard output: it is closed' '$T/closed.err'" "$(cat "$T/closed.err")"
# a closed stdout or stderr is no free descriptor for the run folder's lock to take: no console text lands in it
$V train $M --data fashion-mnist --epochs 1 --batch-size 16 --train-subset 32 --test-subset 16 --out "$T/cl1" >&- 2>/dev/null
$V train $M --data fashion-mnist --epochs 1 --batch-size 16 --train-subset 32 --test-subset 16 --out "$T/cl2" 2>&- \
    >/dev/null
check "train with stdout, then stderr, closed: nothing written into the run's lock file" \
    "[ -e '$T/cl1/.lock' ] && [ ! -s '$T/cl1/.lock' ] && [ -e '$T/cl2/.lock' ] && [ ! -s '$T/cl2/.lock' ]" \
    "$(head -c 300 "$T/cl1/.lock" "$T/cl2/.lock")"
# without gnuplot the run ends saying its curves were not drawn (it named curves.png as if they were)
PATH=/nonexistent $V train $M --data fashion-mnist --epochs 1 --batch-size 16 --train-subset 32 --test-subset 16 \
    --out "$T/cl3" >"$T/cl3.log" 2>&1
check "... and without gnuplot, the closing line says the curves were not drawn" "[ $? -eq 0 ] && grep -q \
'^Done: 1 epoch; weights in .*, curves not drawn (see the warning), their script .*cl3/curves.gp;' '$T/cl3.log' && \
    [ ! -e '$T/cl3/curves.png' ]" "$(tail -3 "$T/cl3.log")"
# 13. a legal 249-byte output name works (the temporary name does not grow it)
long=$(printf 'w%.0s' $(seq 237)).safetensors
$V init $M -o "$T/$long" >"$T/long.log" 2>&1
check "a 249-byte output name" "[ $? -eq 0 ] && [ -s '$T/$long' ]" "$(cat "$T/long.log")"
# 14. absurd thread counts are clamped with a notice, never a crash
OMP_NUM_THREADS=100000 $V bench $M --batch-size 2 --iters 1 >"$T/t.log" 2>&1
check "OMP_NUM_THREADS=100000 is clamped" \
    "[ $? -eq 0 ] && grep -q '100000 threads asked (OMP_NUM_THREADS) but .*: using [0-9]* threads' '$T/t.log'" \
    "$(cat "$T/t.log")"
OMP_NUM_THREADS=9223372036854775808 $V bench $M --batch-size 2 --iters 1 >"$T/t.log" 2>&1
check "a thread count past 2^63 is echoed as given" "[ $? -eq 0 ] && grep -q '9223372036854775808 threads asked' '$T/t.log'" "$(cat "$T/t.log")"
OMP_NUM_THREADS=300 $V bench $M --batch-size 2 --iters 1 --json >"$T/t.log" 2>"$T/t.err"
check "OMP_NUM_THREADS=300 runs on the cores it has and says so" "[ $? -eq 0 ] && grep -q '300 threads asked' '$T/t.err' && \
    grep -q \"\\\"threads\\\": $(nproc)\" '$T/t.log'" "$(cat "$T/t.log" "$T/t.err")"
OMP_NUM_THREADS='1 ,1' $V bench $M --batch-size 2 --iters 1 --json >"$T/t.log" 2>"$T/t.err"
check "OMP_NUM_THREADS='1 ,1' is one thread, as libgomp reads it" "[ $? -eq 0 ] && grep -q '\"threads\": 1,' '$T/t.log' \
    && ! grep -q 'not a thread count' '$T/t.err'" "$(cat "$T/t.log" "$T/t.err")"
# 14a. a process held to one core (taskset, a cpuset, mpirun's binding) runs one thread by default, and clamps more
if command -v taskset >/dev/null && [ "$(nproc --all)" -ge 2 ]; then
    taskset -c 0 $V bench $M --batch-size 2 --iters 1 --json >"$T/t.log" 2>"$T/t.err"
    check "held to one core: one thread by default" "[ $? -eq 0 ] && grep -q '\"threads\": 1,' '$T/t.log'" \
        "$(cat "$T/t.log" "$T/t.err")"
    taskset -c 0 $V bench $M --batch-size 2 --iters 1 --threads 2 --json >"$T/t.log" 2>"$T/t.err"
    check "held to one core: --threads 2 clamped, the notice names the affinity" "[ $? -eq 0 ] && \
        grep -q '\"threads\": 1,' '$T/t.log' && grep -q 'may run on 1 core (its CPU affinity)' '$T/t.err'" \
        "$(cat "$T/t.log" "$T/t.err")"
fi
# 14a'. OMP_PROC_BIND / OMP_PLACES: libgomp binds the initial thread to its first place at start-up, so that thread's
# own affinity is one core while the team runs on every place: the default is still every core, and --threads up to
# them is not clamped
if [ "$(nproc)" -ge 2 ]; then
    env -u OMP_NUM_THREADS OMP_PROC_BIND=true $V bench $M --batch-size 2 --iters 1 --json >"$T/t.log" 2>"$T/t.err"
    check "OMP_PROC_BIND=true: every core by default" "[ $? -eq 0 ] && grep -q \"\\\"threads\\\": $(nproc),\" '$T/t.log'" \
        "$(cat "$T/t.log" "$T/t.err")"
    env -u OMP_NUM_THREADS OMP_PLACES=cores $V bench $M --batch-size 2 --iters 1 --threads 2 --json >"$T/t.log" \
        2>"$T/t.err"
    check "OMP_PLACES=cores: --threads 2 runs 2 threads, no notice" "[ $? -eq 0 ] && \
        grep -q '\"threads\": 2,' '$T/t.log' && ! grep -q 'notice' '$T/t.err'" "$(cat "$T/t.log" "$T/t.err")"
fi
# 14a''. a kernel with more than 1,024 possible CPUs refuses a fixed cpu_set_t (EINVAL): the mask grows until it fits
# (an LD_PRELOAD stand-in for sched_getaffinity: 2,048 possible CPUs, the process held to CPU 0)
if [ "$(nproc --all)" -ge 2 ] && cat >"$T/aff.c" <<'C' && cc -shared -fPIC -o "$T/aff.so" "$T/aff.c"
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>
int sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set) {
    (void)pid;
    if (size < 2048 / 8) { errno = EINVAL; return -1; }
    memset(set, 0, size);
    ((unsigned char *)set)[0] = 1;
    return 0;
}
C
then
    env -u OMP_NUM_THREADS LD_PRELOAD="$T/aff.so" $V bench $M --batch-size 2 --iters 1 --json >"$T/t.log" 2>"$T/t.err"
    check "2,048 possible CPUs, held to one: one thread by default" "[ $? -eq 0 ] && grep -q '\"threads\": 1,' '$T/t.log'" \
        "$(cat "$T/t.log" "$T/t.err")"
fi
# 14b. OpenMP settings that give a parallel region fewer threads than asked: OpenBLAS's threaded sgemm (bench's peak,
# the training step's linears) waited forever for the missing ones; now the thread count is clamped with a notice and
# OMP_DYNAMIC is turned off
for v in OMP_THREAD_LIMIT=1 OMP_MAX_ACTIVE_LEVELS=0 OMP_DYNAMIC=true; do
    env "$v" timeout 120 $V bench $M --batch-size 4 --iters 1 --train --threads "$(nproc)" --json >"$T/t.log" \
        2>"$T/t.err"
    rc=$?
    want=$(nproc)
    [ "$v" = OMP_DYNAMIC=true ] || want=1
    check "$v: bench --train ends on $want thread(s)" "[ $rc -eq 0 ] && grep -q \"\\\"threads\\\": $want\" '$T/t.log'" \
        "rc $rc: $(cat "$T/t.log" "$T/t.err")"
    if [ "$want" = 1 ] && [ "$(nproc)" -gt 1 ]; then
        check "$v: the clamp is noticed" "grep -q 'OpenMP runs at most 1' '$T/t.err'" "$(cat "$T/t.err")"
    fi
done
# 15. empty names
expect "train --out \"\" refused (2)" 2 "option --out has an empty value" $V train $M --data fashion-mnist --epochs 1 --out ""
LONG=$T/$(printf 'a%.0s' $(seq 200))$(for i in $(seq 19); do printf '/%s' "$(printf 'b%.0s' $(seq 200))"; done)
expect "train --out of 4000+ bytes refused (its files' names would be cut short)" 1 "leave room for its files' names" \
    $V train $M --data fashion-mnist --epochs 1 --out "$LONG"
expect "init -o \"\" refused as a usage error, naming the option" 2 "option -o has an empty value" $V init $M -o ""
expect "predict -w \"\" refused so too (it had said 'cannot open : No such file')" 2 "option -w has an empty value" \
    $V predict $M -w "" "$T/good.png"
# `--` ends the options: an image whose name starts with '-' after it
cp "$T/good.png" "$T/-dash.png"
(cd "$T" && "$OLDPWD/$V" predict $M -w w.safetensors -- -dash.png) >"$T/dash.log" 2>&1
check "an image named -dash.png after --" "[ $? -eq 0 ] && grep -qx -- '-dash.png' '$T/dash.log'" "$(cat "$T/dash.log")"
# 16. an endless stream as a safetensors file ends at its header (read only as far as the header says), and an
# input through a pipe is read once (its size taken from the same read)
expect "--weights /dev/zero refused at once" 1 "JSON object" timeout 20 $V forward $M -w /dev/zero --input "$T/x.safetensors" -o "$T/y.safetensors"
expect "--input /dev/zero refused at once" 1 "JSON object" timeout 20 $V forward $M -w "$T/w.safetensors" --input /dev/zero -o "$T/y.safetensors"
# ... and so does an image stream that starts no image format (it had read 1 GiB of /dev/zero, then refused the size)
expect "predict /dev/zero refused at its first bytes" 1 "unrecognised image format" timeout 20 $V predict $M -w "$T/w.safetensors" /dev/zero
$V forward $M -w "$T/w.safetensors" --input <(cat "$T/x.safetensors") -o "$T/yp.safetensors" >"$T/pin.log" 2>&1
check "an input through a pipe without --img-size" "[ $? -eq 0 ] && [ -s '$T/yp.safetensors' ]" "$(cat "$T/pin.log")"
# 17. finite inputs and weights that overflow float32: an error, no file of NaN
/usr/bin/python3 - "$T" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np, st
t = sys.argv[1]
st.save(f"{t}/xbig.safetensors", {"input": np.full((2, 1, 28, 28), 3e38, np.float32), "labels": np.array([1, 2], np.int64)})
x = np.zeros((2, 1, 28, 28), np.float32); x[1, 0, 3, 5] = np.nan
st.save(f"{t}/xnan.safetensors", {"input": x, "labels": np.array([1, 2], np.int64)})
x[1, 0, 3, 5] = 0; x[0, 0, 27, 1] = -np.inf
st.save(f"{t}/xinf.safetensors", {"input": x, "labels": np.array([1, 2], np.int64)})
PY
# ... and inputs holding NaN or Inf are refused before the graph runs, naming the element
expect "forward of a NaN input refused, naming the element" 1 "NaN at image 1, channel 0, row 3, column 5" \
    $V forward $M -w "$T/w.safetensors" --input "$T/xnan.safetensors" -o "$T/ynan.safetensors"
expect "grad of an Inf input refused, naming the element" 1 "Inf at image 0, channel 0, row 27, column 1" \
    $V grad $M -w "$T/w.safetensors" --input "$T/xinf.safetensors" -o "$T/gnan.safetensors"
check "... neither wrote its output" "[ ! -e '$T/ynan.safetensors' ] && [ ! -e '$T/gnan.safetensors' ]"
expect "forward whose logits overflow refused" 1 "NaN or Inf" $V forward $M -w "$T/w.safetensors" --input "$T/xbig.safetensors" -o "$T/ybig.safetensors"
expect "grad whose loss overflows refused" 1 "overflow" $V grad $M -w "$T/w.safetensors" --input "$T/xbig.safetensors" -o "$T/gbig.safetensors"
check "... neither wrote its output" "[ ! -e '$T/ybig.safetensors' ] && [ ! -e '$T/gbig.safetensors' ]"
# ... and attention, whose maps of weights scaled by 1e20 are NaN: an error naming the map, no PNG or maps file
/usr/bin/python3 - "$T" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import st
t = sys.argv[1]
d = st.load(f"{t}/w.safetensors")
st.save(f"{t}/w1e20.safetensors", {k: v * 1e20 if v.ndim >= 2 and k.endswith("weight") else v for k, v in d.items()})
PY
expect "attention whose maps overflow refused" 1 "attention map of blocks.0.attn is not finite (nan)" \
    $V attention $M -w "$T/w1e20.safetensors" "$T/good.png" -o "$T/nanmaps.png" --save-maps "$T/nanmaps.safetensors"
check "... nothing written" "[ ! -e '$T/nanmaps.png' ] && [ ! -e '$T/nanmaps.safetensors' ]"
expect "... and so is the picture alone (no maps kept: checked where drawn)" 1 "attention map of blocks.0.attn is not finite" \
    $V attention $M -w "$T/w1e20.safetensors" "$T/good.png" -o "$T/nanmaps.png"
check "... no PNG written" "[ ! -e '$T/nanmaps.png' ]"
# ... and predict, whose --output is then not written, saying why (not that an image could not be read)
expect "predict whose logits overflow refused, --output not written" 1 "output not written: some images failed" \
    $V predict $M -w "$T/w1e20.safetensors" "$T/good.png" -o "$T/pnan.safetensors"
check "... no --output written" "[ ! -e '$T/pnan.safetensors' ]"
# 18. contradictory or stray arguments
expect "list with a stray argument refused" 2 "unexpected argument" $V list extra
expect "predict without --weights: a usage error (2)" 2 "missing --weights" $V predict $M "$T/good.png"
expect "init without -o: a usage error (2)" 2 "missing -o OUTPUT" $V init $M
# predict and attention without an image: a usage error before the weights are read (their notice of the options they
# record came first)
$V init $M --num-classes 3 -o "$T/w3.safetensors" >/dev/null 2>&1
for c in predict attention; do
    expect "$c without an image: a usage error (2), said before the weights are read" 2 "missing IMAGE" \
        $V $c $M -w "$T/w3.safetensors" -o "$T/none.png"
    check "... and nothing else said" "[ \$(wc -l <'$T/err.log') -eq 1 ]" "$(cat "$T/err.log")"
done
expect "-o followed by an option refused" 2 "needs a value, got the option --seed" $V init $M -o --seed 3
expect "... and by one in its --name=value form (it wrote a file of that name)" 2 "needs a value, got the option --seed=3" \
    $V init $M -o --seed=3
check "... no file --seed=3 written" "[ ! -e ./--seed=3 ]"
check "... and no file named --seed" "[ ! -e ./--seed ]"
expect "... and by the end of options, --, which wrote a file of that name" 2 "needs a value, got the option --" \
    $V init $M -o --
check "... no file -- written" "[ ! -e ./-- ]"
expect "a learning rate that underflows refused as such" 2 "too close to 0" $V train $M --lr 1e-310 --out "$T/lr"
# a batch × accumulation steps past the epoch is a usage error before the graph is built: batch 65536 had asked for
# 30 GB first, and 8192 × 524288 (2^32) wrapped an int to 0 (SIGFPE) or, + 1, to a batch of 8192 (an epoch of 10^6 steps)
for ba in "65536 1" "8192 524288" "8192 524289"; do
    set -- $ba
    expect "train --batch-size $1 --accum-steps $2 past an epoch of 64 images refused (2)" 2 \
        "batch size $1 × $2 accumulation steps is larger than the 64 images an epoch visits" \
        $V train $M --data fashion-mnist --train-subset 64 --test-subset 64 --epochs 1 --batch-size $1 --accum-steps $2 \
        --out "$T/ba"
done
# a warm-up shorter than one optimiser step would warm up no step (it had run at the peak from step 0, silently)
expect "train --warmup-epochs 0.4 of an epoch of 2 optimiser steps refused (2)" 2 \
    "a warm-up of 0.4 epochs is less than one of the 2 optimiser steps an epoch makes" \
    $V train $M --data fashion-mnist --train-subset 128 --test-subset 16 --batch-size 64 --epochs 3 --warmup-epochs 0.4 \
    --warmup-lr 1e-4 --out "$T/wu"
check "... and leaves no run folder" "[ ! -e '$T/wu' ]"
# an option the model cannot apply is a usage error (2), as in every command that builds a model
expect "--windows on a model without windows refused (a usage error: 2)" 2 "no attention windows" $V info $M --windows 3
expect "--train-form on a model without re-parameterised blocks refused (2)" 2 "no re-parameterised blocks" $V info $M \
    --train-form
expect "... and so in forward, before reading the weights" 2 "no re-parameterised blocks" $V forward $M --train-form \
    -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/tf.safetensors"
expect "--features on a model without stage maps refused (2)" 2 "no stage feature maps" $V forward $M --features \
    -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/tf.safetensors"
# a value a double holds but a float stores as 0 (it had fallen back to the model's crop_pct)
expect "--crop-pct 1e-300 refused" 2 "too close to 0 for a float" $V predict $M -w "$T/w.safetensors" \
    --crop-pct 1e-300 x.png
# per-stage lists: one value for every stage or one per stage (a shorter list had left the last stages as they were)
expect "--dims with 2 values for 4 stages refused (a usage error: 2)" 2 "2 values, but the model has 4 stage(s)" $V info \
    groupmixformer_test --dims 20,30
expect "--depths 1x refused (a usage error: 2)" 2 "expected comma-separated integers" $V info $M --depths 1x
expect "--depths with a blank refused, as every other number of the command line" 2 "expected comma-separated integers" \
    $V info swin_fmnist_tiny --depths "1, 1"
# found by fuzz_model_options: a width its heads do not divide crashed Refined-ViT's build (the MLP read a failed input)
expect "Refined-ViT --dims 4 (12 heads) refused, not a crash (2)" 2 "C divisible by 12 heads" $V info refiner_vit_s --dims 4
# ... and a Swin window of 157 asked for 2.4 GB (its relative position index has window^4 entries)
expect "Swin --windows 157 refused before any allocation (2)" 2 "window 157 is more than vitc builds (64" \
    $V info swin_t_msf --windows 157
# a weight past the per-tensor limit (qkv 196608 × 65536) is refused as the graph's tensors are, before any allocation
# (info had reported 618,614 M parameters and init run out of memory)
expect "DeiT --dims 65536 refused by the per-tensor limit (2)" 2 \
    "parameter blocks.0.attn.qkv.weight: 12884901888 elements exceed the engine's limit" \
    $V info deit_tiny_patch16_224 --dims 65536 --heads 1
$V info swin_tiny_patch4_window7_224 --windows 100 >/dev/null 2>&1
check "... but the Microsoft layout's window covering the map, which shrinks to it, is taken" "[ $? -eq 0 ]"
expect "attention --blocks -1 refused (a usage error: 2)" 2 "not a list of non-negative integers" $V attention $M \
    -w "$T/w.safetensors" "$T/good.png" -o "$T/blocks.png" --blocks -1
# maps the default selection cannot draw (FLatten inside Swin windows) are left out with a note, not silently
$V init swin_fmnist_tiny --attn flatten,mhsa -o "$T/sfl.safetensors" >/dev/null 2>&1
$V init swin_fmnist_tiny -o "$T/sfl0.safetensors" >/dev/null 2>&1
$V attention swin_fmnist_tiny --attn flatten,mhsa -w "$T/sfl.safetensors" "$T/good.png" -o "$T/sfl.png" >/dev/null 2>"$T/sfl.log"
check "attention notes the per-window FLatten maps it leaves out" \
    "grep -q '4 of 6 attention maps left out, e.g. layers.0.blocks.0.attn: its attention runs per window' '$T/sfl.log'" \
    "$(cat "$T/sfl.log")"
# attention's selection and output errors are usage errors (2), as --blocks -1 is; -o and --save-maps naming one file
# another way (./) are refused, not the PNG overwritten by the maps
expect "attention -o x.jpg refused (2)" 2 "give a name ending in .png" $V attention $M -w "$T/w.safetensors" \
    "$T/good.png" -o "$T/att.jpg"
expect "attention --blocks past the model's refused (2)" 2 "block 9: vit_fmnist_tiny has" $V attention $M \
    -w "$T/w.safetensors" "$T/good.png" -o "$T/att.png" --blocks 9
expect "attention -o and --save-maps naming one file as X and ./X refused" 1 "name the same file" \
    $V attention $M -w "$T/w.safetensors" "$T/good.png" -o "$T/same.png" --save-maps "$T/./same.png"
check "... nothing written" "[ ! -e '$T/same.png' ]"
# a title the picture is widened for is drawn whole (the font's buffer had held 400 quads: cut mid-text), and a
# newline in an image's name is drawn as '?', not as a line over the tiles
stem="$T/IMG_20240101_123456_wxyz_kvmwmw_sample_photo_from_my_phone_camera_n"
cp "$T/good.png" "${stem}?l.png" && cp "$T/good.png" "$stem"$'\n'"l.png"
$V attention swin_fmnist_tiny -w "$T/sfl0.safetensors" "${stem}?l.png" -o "$T/long.png" --blocks 0 --heads 0 >/dev/null 2>"$T/long.log" &&
    $V attention swin_fmnist_tiny -w "$T/sfl0.safetensors" "$stem"$'\n'"l.png" -o "$T/long_nl.png" --blocks 0 \
    --heads 0 >/dev/null 2>>"$T/long.log"
check "a long title drawn to its end (white pixels in the title band's last tenth); a newline in the name drawn as one \
character (the same width)" "[ $? -eq 0 ] && /usr/bin/python3 -c '
import sys; from PIL import Image
im = Image.open(sys.argv[1]).convert(\"L\"); w, h = im.size
xs = [x for y in range(2, 14) for x in range(w) if im.getpixel((x, y)) > 200]
sys.exit(not xs or max(xs) < 0.9 * w or Image.open(sys.argv[2]).size != im.size)' '$T/long.png' '$T/long_nl.png'" \
    "$(cat "$T/long.log")"
rm -f "$stem"*
# a name longer than the title's room is cut, marked "...": names of 200 and 240 letters give one picture width
for n in 200 240; do
    cp "$T/good.png" "$T/$(printf 'a%.0s' $(seq $n)).png"
    $V attention swin_fmnist_tiny -w "$T/sfl0.safetensors" "$T/$(printf 'a%.0s' $(seq $n)).png" -o "$T/cut$n.png" \
        --blocks 0 --heads 0 >/dev/null 2>>"$T/cut.log"
done
check "a file name past the title's room cut to one width" "/usr/bin/python3 -c '
import sys; from PIL import Image
a, b = (Image.open(p) for p in sys.argv[1:3]); sys.exit(a.size != b.size or a.size[0] > 1200)' \
    '$T/cut200.png' '$T/cut240.png'" "$(cat "$T/cut.log")"
rm -f "$T"/aaaaaaaaaa*.png
# hMHSA on an odd-headed stage: refused naming --double-heads; with it, the named variant's model; without any hMHSA
# stage, --double-heads has no effect and is refused
expect "hMHSA on PVTv2-b1's 5-head stage refused (2), naming --double-heads" 2 "odd heads: double them, .--double-heads" \
    $V info pvt_v2_b1 --attn mhsa,mhsa,hmhsa,hmhsa
expect "gma after a class token refused as the model is built (2)" 2 "without a class token" \
    $V forward deit_tiny_patch16_224 --attn gma --input "$T/none.safetensors" -w "$T/none.safetensors" -o "$T/none.out"
expect "FLatten on PVTv2-b1's reduced stages refused as the model is built (2)" 2 "spatial reduction" \
    $V train pvt_v2_b1 --attn flatten --data fashion-mnist --out "$T/none_run"
expect "--double-heads without an hMHSA stage refused (2)" 2 "applies to hMHSA stages" $V info pvt_v2_b1 --double-heads
$V info pvt_v2_b1 --attn hmhsa --ffn cffn --double-heads --json >"$T/dh.json" 2>&1 &&
    $V info pvt_v2_b1_hmhsa_cffn --json >"$T/dn.json" 2>&1
check "pvt_v2_b1 --attn hmhsa --ffn cffn --double-heads: the named pvt_v2_b1_hmhsa_cffn's parameters and MACs" \
    "[ \"\$(grep -o '\"params\": [0-9]*' '$T/dh.json'; grep -o '\"macs\": [0-9]*' '$T/dh.json' | head -1)\" = \
       \"\$(grep -o '\"params\": [0-9]*' '$T/dn.json'; grep -o '\"macs\": [0-9]*' '$T/dn.json' | head -1)\" ] && \
     grep -q '\"params\": 12151706' '$T/dh.json'" "$(head -c 300 "$T/dh.json")"
$V init pvt_v2_b1 --attn mhsa,mhsa,hmhsa,hmhsa --double-heads --img-size 64 -o "$T/dh.safetensors" >"$T/dhi.log" 2>&1 &&
    /usr/bin/python3 - "$T/dhx.safetensors" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np
import st
st.save(sys.argv[1], {"input": np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)})
PY
$V forward pvt_v2_b1 --attn mhsa,mhsa,hmhsa,hmhsa --double-heads --img-size 64 -w "$T/dh.safetensors" \
    --input "$T/dhx.safetensors" -o "$T/dhy.safetensors" >>"$T/dhi.log" 2>&1
check "init and forward of PVTv2-b1 with hMHSA (doubled heads) in stages 3-4" "[ $? -eq 0 ] && [ -s '$T/dhy.safetensors' ]" \
    "$(tail -3 "$T/dhi.log")"
$V info swin_fmnist_tiny --heads 4 --json >"$T/h.json" 2>&1
check "--heads 4 sets every stage's heads" "[ $? -eq 0 ] && [ \$(grep -o '\"heads\": 4,' '$T/h.json' | wc -l) -eq 2 ]" \
    "$(cat "$T/h.json")"
$V info vit_fmnist_tiny --img-size 56 --img-size 28 >"$T/twice.log" 2>&1
check "an option given again replaces its value (a script may override a shared list)" \
    "[ $? -eq 0 ] && grep -q 'input      1 x 28 x 28' '$T/twice.log'" "$(cat "$T/twice.log")"
# 19. cFFN weights of the other form: the error says which form the file holds
# checkpoints record the data path in their JSON header: a path that is not UTF-8 is refused before training
expect "a --data path that is not UTF-8 refused" 1 "not valid UTF-8 (byte 0xff" \
    $V train $M --data "$T/d$(printf '\377')x" --epochs 1 --out "$T/u8run"
check "... leaving no run folder" "[ ! -e '$T/u8run' ]"
# --resume of a folder that holds no run (a typo, the data folder) is refused before anything is written there
mkdir -p "$T/norun"
expect "--resume of a folder without a checkpoint refused" 1 "cannot resume" $V train $M --resume "$T/norun"
check "... and the folder stays empty" "[ -z \"\$(ls -A '$T/norun')\" ]" "$(ls -A "$T/norun")"
# eval's batch is capped at the images it evaluates (65536 on 5 images had built a 4.9 GB graph)
(ulimit -v 2000000; $V eval $M -w "$T/w.safetensors" --test-subset 5 --batch-size 65536 >"$T/eb1.log" 2>&1)
rc=$?
$V eval $M -w "$T/w.safetensors" --test-subset 5 --batch-size 2 >"$T/eb2.log" 2>&1
check "eval --batch-size 65536 on 5 images: within 2 GB of address space, the result of batch 2" \
    "[ $rc -eq 0 ] && [ \"\$(tail -1 '$T/eb1.log')\" = \"\$(tail -1 '$T/eb2.log')\" ]" "$(tail -2 "$T/eb1.log")"
# a long thin image (2000×3 pixels: its shorter side resized to 28 makes a copy 18,666 pixels wide) is read, as
# torchvision reads it, in training and in validation (it was skipped as unusable while copies were limited by side)
mkdir -p "$T/wide/train/a" "$T/wide/train/b" "$T/wide/val/a" "$T/wide/val/b"
for d in train/a train/b val/a val/b; do cp "$T/good.png" "$T/wide/$d/g.png"; done
/usr/bin/python3 -c "
from PIL import Image; import sys
im = Image.new('L', (2000, 3), 128)
for d in ('train/a', 'val/b'): im.save(sys.argv[1] + '/' + d + '/wide.png')" "$T/wide"
$V train $M --data "$T/wide" --num-classes 2 --epochs 1 --batch-size 1 --out "$T/wider" >"$T/wide.log" 2>&1
check "a 2000×3 image in a folder: read like the others, the run completes" \
    "[ $? -eq 0 ] && ! grep -q 'skipping' '$T/wide.log' && [ -s '$T/wider/weights.safetensors' ]" \
    "$(grep -v '^ ' "$T/wide.log" | tail -4)"
# class names go into classes.json and JSON output: a class folder (or a --classes name) that is not UTF-8 is refused
mkdir -p "$T/u8d/train/a" "$T/u8d/train/b$(printf '\377')" "$T/u8d/val/a"
for d in train/a "train/b$(printf '\377')" val/a; do cp "$T/good.png" "$T/u8d/$d/"; done
expect "a class folder whose name is not UTF-8 refused" 1 "is not valid UTF-8 (byte 0xff at offset 1)" \
    $V train $M --data "$T/u8d" --num-classes 2 --epochs 1 --batch-size 1 --out "$T/u8c"
check "... leaving no run folder" "[ ! -e '$T/u8c' ]"
printf '{"0": "a", "1": "b\377", "2": "c", "3": "d", "4": "e", "5": "f", "6": "g", "7": "h", "8": "i", "9": "j"}' \
    >"$T/u8cls.json"
expect "a --classes name that is not UTF-8 refused" 1 "not valid UTF-8" \
    $V predict $M -w "$T/w.safetensors" --classes "$T/u8cls.json" "$T/good.png"
# predict --json stays valid JSON (UTF-8) for file names that are not UTF-8 and for errors naming them
cp "$T/good.png" "$T/bad$(printf '\377').png"
$V predict $M -w "$T/w.safetensors" --json "$T/bad$(printf '\377').png" "$T/missing$(printf '\303')" >"$T/u8.json" 2>/dev/null
r=$(/usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], 'rb')]
ok = len(rows) == 2 and rows[0]['image'].endswith('bad\ufffd.png') and 'top' in rows[0] and 'error' in rows[1]
print('ok' if ok else rows)" "$T/u8.json" 2>&1)
check "predict --json with a file name that is not UTF-8: valid JSON, U+FFFD in its place" "[ '$r' = ok ]" "$r"
expect "an unknown attention type refused (a usage error: 2), the list naming msf's group forms" 2 "(also msf_g<N>" \
    $V info simplevit_ti_msf --attn msf_g0
# a block a host cannot hold is refused by name (a usage error: 2), never ignored
for c in "refiner_vit_s --attn mhsa:fixed blocks" "refiner_vit_s --ffn cffn:fixed blocks" \
    "groupmixformer_test --attn mhsa:fixed blocks" "simplevit_ti_msf --ffn cffn:takes the MSF paper" \
    "simplevit_ti_msf --attn flatten:takes the MSF paper"; do
    expect "info ${c%%:*} refused" 2 "${c#*:}" $V info ${c%%:*}
done
expect "an unknown model name is a usage error (2)" 2 "unknown model 'no_such_model' (see .vitc list.)" \
    $V info no_such_model
# a near miss names the nearest name (edits, case, a name the word begins), never a far one
expect "a mistyped model name: the nearest named" 2 \
    "unknown model 'deit_tiny_patch16_225' (did you mean 'deit_tiny_patch16_224'?" $V info deit_tiny_patch16_225
expect "a model name's start: the shortest name it begins" 2 "(did you mean 'cswin_tiny_224'?" $V info cswin_tiny
expect "a mistyped command: the nearest named (2)" 2 "unknown command 'trian' (did you mean 'train'?)" $V trian
expect "vitc help of a mistyped command" 2 "unknown command 'predcit' (did you mean 'predict'?)" $V help predcit
expect "a mistyped option: the nearest of the command's" 2 "unknown option '--epoch' (did you mean '--epochs'?" \
    $V train $M --epoch 1
expect "an option of another command: none named" 2 "unknown option '--epochs' (see .vitc info --help.)" \
    $V info $M --epochs 1
# sizes and widths a family's rules refuse are usage errors too, in every family (2)
for c in "simplevit_ti_msf --img-size 33:multiple of the patch size 16" "swin_t --dims 90:multiple of its 12 heads" \
    "cswin_tiny_224 --img-size 16:below 32" \
    "groupmixformer_test --img-size 48:grid ceil(ceil(S/2)/2) is a positive multiple of 8" \
    "refiner_vit_s --img-size 47:but 16k + 15" "deit_tiny_patch16_224 --img-size 15:below the patch size 16"; do
    expect "info ${c%%:*} refused (2)" 2 "${c#*:}" $V info ${c%%:*}
done
expect "--depths past the block limit refused before any memory goes to it" 2 "262144 blocks in all (--depths) is more" \
    $V info swin_t --depths 65536
expect "a width its heads do not divide: the message names the model before the block (2)" 2 \
    "vit_fmnist_tiny: blocks.0: attention: blocks.0.attn: width 64 is not divisible by 3 heads" $V info $M --heads 3
# per-stage entries that can have no effect: Next-ViT's stage 1 has no attention, CSwin's last stage attends globally
expect "Next-ViT: an --attn entry for stage 1 (NCBs only) refused (2)" 2 "stage 1 has no attention" \
    $V info nextvit_small --attn hmhsa,mhsa,mhsa,mhsa --double-heads
expect "CSwin: a --windows entry for the last stage refused (2), naming what it may be" 2 \
    "its --windows entry 5 can have no effect: give 7 (its resolution at 224 px; for inputs of another size, give \
that size as --img-size) there" $V info cswin_tiny_224 --windows 1,2,7,5
expect "... at 96 px: its resolution there, or the named model's" 2 "entry 2 can have no effect: give 3 (its \
resolution at 96 px) or 7 there" $V info cswin_tiny_224 --windows 1,2,2,2 --img-size 96
$V info cswin_tiny_224 --windows 2 >/dev/null 2>&1
check "... one value for every stage is taken" "[ $? -eq 0 ]"
$V init $M --ffn cffn -o "$T/cffn_dep.safetensors" >/dev/null && $V init $M --ffn cffn --train-form -o "$T/cffn_tr.safetensors" >/dev/null
for f in cffn_dep cffn_tr; do # as converted files: no model options recorded
    rerecord "$T/$f.safetensors" "$T/${f}_nr.safetensors" vitc_model vitc_model_options
done
expect "deploy of a model without re-parameterised blocks refused, as for every family" 1 "nothing to deploy" \
    $V deploy $M -w "$T/w.safetensors" -o "$T/nodep.safetensors"
check "... writing no file" "[ ! -e '$T/nodep.safetensors' ]"
expect "grad on deployed cFFN weights names the forms" 1 "deployed form of re-parameterised" $V grad $M --ffn cffn -w "$T/cffn_dep.safetensors" --input "$T/x.safetensors" -o "$T/g.safetensors"
$V forward $M --ffn cffn --train-form -w "$T/cffn_tr.safetensors" --input "$T/x.safetensors" -o "$T/ytf.safetensors" >/dev/null 2>&1
$V forward $M --ffn cffn -w "$T/cffn_tr.safetensors" --input "$T/x.safetensors" -o "$T/ytr.safetensors" >"$T/ytr.log" 2>&1
check "forward on training-form cFFN weights builds the training form, saying so" \
    "[ $? -eq 0 ] && grep -q \"holds the training form (cFFN's branches): the model is built in it\" '$T/ytr.log'" \
    "$(cat "$T/ytr.log")"
check "... to the logits --train-form gives" "cmp -s '$T/ytf.safetensors' '$T/ytr.safetensors'"
expect "deployed cFFN weights with --train-form name the forms" 1 "deployed form of re-parameterised.*without --train-form" \
    $V forward $M --ffn cffn --train-form -w "$T/cffn_dep.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
expect "grad with 3 labels for 2 images refused, naming the input file" 1 \
    "^vitc: $T/x3lab.safetensors: labels must have shape (B,) matching the input batch (2), not (3,)" \
    $V grad $M -w "$T/w.safetensors" --input "$T/x3lab.safetensors" -o "$T/g.safetensors"
# --input whose tensors declare more than memory holds (sparse files of a few KB on disk): the shapes are refused from
# the header, before anything is allocated or read
/usr/bin/python3 - "$T" <<'EOF'
import json, struct, sys
def sparse(path, entries):  # (name, dtype, shape, bytes per element): the data section left a hole
    h, off = {}, 0
    for name, dt, shape, size in entries:
        n = size
        for d in shape: n *= d
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}; off += n
    b = json.dumps(h).encode(); b += b" " * (-len(b) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(b)) + b); f.truncate(8 + len(b) + off)
t = sys.argv[1]
sparse(f"{t}/in2tb.safetensors", [("input", "F16", [1, 1, 1 << 20, 1 << 20], 2)])
sparse(f"{t}/in512m.safetensors", [("input", "F16", [1, 1, 16384, 16384], 2)])
sparse(f"{t}/lab1tb.safetensors", [("input", "F32", [2, 1, 28, 28], 4), ("labels", "I64", [1 << 37], 8)])
EOF
expect "forward: a 2 TB --input refused by its shape, nothing allocated" 1 \
    "in2tb.safetensors: input has shape (1, 1, 1048576, 1048576) but vit_fmnist_tiny expects (B, 1, 28, 28)" \
    $V forward $M -w "$T/w.safetensors" --input "$T/in2tb.safetensors" -o "$T/y.safetensors"
peak=$(/usr/bin/python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' $V forward $M -w "$T/w.safetensors" \
    --input "$T/in512m.safetensors" -o "$T/y.safetensors")
check "forward: a 16384 x 16384 --input refused without reading its 1 GB of floats" "[ '$peak' -lt 300000 ]" \
    "peak RSS $peak KB"
expect "grad: 2^37 labels for 2 images refused by their shape, nothing allocated" 1 \
    "lab1tb.safetensors: labels must have shape (B,) matching the input batch (2), not (137438953472,)" \
    $V grad $M -w "$T/w.safetensors" --input "$T/lab1tb.safetensors" -o "$T/g.safetensors"
expect "grad with a label past the classes refused, naming it" 1 "label 99 of sample 1 is outside \[0, 10)" $V grad $M -w "$T/w.safetensors" --input "$T/xbad.safetensors" -o "$T/g.safetensors"
expect "deploy on deployed cFFN weights: already deployed, nothing to do" 1 "holds the deployed form already.*nothing to deploy" $V deploy $M --ffn cffn -w "$T/cffn_dep.safetensors" -o "$T/dd.safetensors"
expect "cFFN weights into a model without cFFN: says to build it with cFFN" 1 "model has no cFFN.*--ffn cffn" $V forward $M -w "$T/cffn_tr_nr.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
$V forward $M -w "$T/cffn_tr.safetensors" --input "$T/x.safetensors" -o "$T/ytr2.safetensors" >/dev/null 2>&1
check "... with the options the file records, cFFN is built in the training form" \
    "[ $? -eq 0 ] && cmp -s '$T/ytf.safetensors' '$T/ytr2.safetensors'"
$V forward $M --ffn cffn -w "$T/cffn_tr_nr.safetensors" --input "$T/x.safetensors" -o "$T/ytr3.safetensors" >/dev/null 2>&1
check "... and so without the record (a converted file: its .rep. branches say the form)" \
    "[ $? -eq 0 ] && cmp -s '$T/ytf.safetensors' '$T/ytr3.safetensors'"
$V forward vit_fmnist_small --ffn cffn -w "$T/cffn_tr.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors" \
    >"$T/ytro.log" 2>&1
check "... but not from another model's file (refused by its shapes, its form not taken)" \
    "[ $? -eq 1 ] && grep -q 'records the model options' '$T/ytro.log' && ! grep -q 'the model is built in it' '$T/ytro.log'" \
    "$(cat "$T/ytro.log")"
expect "plain weights into a cFFN model: says the file has no cFFN" 1 "made without cFFN" $V grad $M --ffn cffn -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/g.safetensors"
expect "deployed cFFN weights into a plain model: says so" 1 "factorised layers.*--ffn cffn" $V forward $M -w "$T/cffn_dep_nr.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
$V forward $M -w "$T/cffn_dep.safetensors" --input "$T/x.safetensors" -o "$T/ycd.safetensors" >"$T/ycd.log" 2>&1
check "... with the options the file records, the model is built with cFFN and runs, saying so" \
    "[ $? -eq 0 ] && grep -q 'built with the options .*cffn_dep.safetensors records: --ffn cffn$' '$T/ycd.log'" \
    "$(cat "$T/ycd.log")"
expect "plain weights into a deployed cFFN model: says so" 1 "made without cFFN" $V forward $M --ffn cffn -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
# Next-ViT + cFFN files whose metadata (the form record) was dropped: the `.rep.` branches, or their merges, tell the form
NV="nextvit_small_hmhsa_cffn --depths 1,1,5,1 --img-size 32 --num-classes 10"
$V init $NV --train-form -o "$T/nvt.safetensors" >/dev/null && $V deploy $NV -w "$T/nvt.safetensors" -o "$T/nvd.safetensors" >/dev/null
/usr/bin/python3 - "$T" <<'EOF2'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np, st
t = sys.argv[1]
for f in ("nvt", "nvd"):
    st.save(f"{t}/{f}_bare.safetensors", st.load(f"{t}/{f}.safetensors"))
st.save(f"{t}/x32.safetensors", {"input": np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)})
EOF2
$V forward $NV -w "$T/nvd.safetensors" --input "$T/x32.safetensors" -o "$T/nv_rec.safetensors" >/dev/null
$V forward $NV -w "$T/nvd_bare.safetensors" --input "$T/x32.safetensors" -o "$T/nv_bare.safetensors" >/dev/null 2>"$T/err.log"
rc=$?
check "Next-ViT deployed cFFN file without its form record: loads as deployed" "[ $rc -eq 0 ]" "rc $rc: $(tail -c 400 "$T/err.log")"
check "... to the same logits as with the record" "cmp -s '$T/nv_rec.safetensors' '$T/nv_bare.safetensors'"
expect "Next-ViT training-form cFFN file without its form record: refused, deploy named" 1 "vitc deploy" $V forward $NV -w "$T/nvt_bare.safetensors" --input "$T/x32.safetensors" -o "$T/nv_bare.safetensors"
expect "deploy of the bare deployed file says it is deployed" 1 "holds the deployed form already" $V deploy $NV -w "$T/nvd_bare.safetensors" -o "$T/nvdd.safetensors"
expect "--min-lr above --lr refused (contradictory: 2)" 2 "above the peak" $V train $M --data fashion-mnist --epochs 1 --lr 1e-3 --min-lr 10 --out "$T/mlr"
expect "--resume with --init-from refused (a usage error: 2)" 2 "contradict" $V train $M --data fashion-mnist --epochs 1 --out "$T/ri" --resume "$T/ri" --init-from "$T/w.safetensors"
for s in train val; do for c in a b; do mkdir -p "$T/allbad/$s/$c" && printf 'not an image' >"$T/allbad/$s/$c/x.png"; done; done
$V init $M --num-classes 2 -o "$T/w2.safetensors" >/dev/null
expect "eval over only unreadable images: exit status 1" 1 "no readable image" $V eval $M --num-classes 2 -w "$T/w2.safetensors" --data "$T/allbad"

# deploy whose merge overflows float32 (a BatchNorm weight of 1e37 over a zero variance): refused, nothing written
$V init deit_tiny_hmhsa_cffn --depths 1 --train-form -o "$T/cf.safetensors" >/dev/null 2>&1
/usr/bin/python3 - "$T/cf.safetensors" <<'PYEOF'
import sys
sys.path.insert(0, "tests/reference")
import st
t = st.load(sys.argv[1])
t["blocks.0.mlp.fc2_u.rep.0.bn.weight"][:] = 1e37
t["blocks.0.mlp.fc2_u.rep.0.bn.running_var"][:] = 0
t["blocks.0.mlp.fc2_u.rep.0.bn.running_mean"][:] = 1
st.save(sys.argv[1], t)
PYEOF
expect "a deploy whose merge overflows refused, naming the tensor" 1 "the merge makes 'blocks.0.mlp.fc2_u.bias' infinite" \
    $V deploy deit_tiny_hmhsa_cffn --depths 1 -w "$T/cf.safetensors" -o "$T/cfd.safetensors"
check "... writing nothing" "[ ! -e '$T/cfd.safetensors' ]"

# an output into a missing folder is refused before any work, so a command with two outputs writes neither
expect "-o into a missing folder refused at once" 1 "cannot write $T/nodir/w.safetensors: folder $T/nodir" \
    $V init $M -o "$T/nodir/w.safetensors"
expect "attention with --save-maps into a missing folder refused" 1 "folder $T/nodir" $V attention $M \
    -w "$T/w.safetensors" "$T/good.png" -o "$T/att_first.png" --save-maps "$T/nodir/m.safetensors"
check "... before writing its picture" "[ ! -e '$T/att_first.png' ]"

# attention takes --double-heads like the other commands that build a model
$V init $M --attn hmhsa --double-heads -o "$T/dh.safetensors" >/dev/null 2>&1
$V attention $M --attn hmhsa --double-heads -w "$T/dh.safetensors" "$T/good.png" -o "$T/dh.png" >"$T/dh.log" 2>&1
check "attention draws a --double-heads model" "[ $? -eq 0 ] && [ -s '$T/dh.png' ]" "$(cat "$T/dh.log")"
$V info $M --attn hmhsa --double-heads >"$T/dhi.log" 2>&1
$V info $M --attn hmhsa --double-heads --json >"$T/dhi.json" 2>&1
check "info says the heads are doubled to run" "grep -q 'heads 4 (doubled to run: --double-heads)' '$T/dhi.log' && \
    grep -q '\"double_heads\": 1' '$T/dhi.json'" "$(cat "$T/dhi.log" | head -4)"

# ... and CSwin's stripe widths (no shape shows them either): other widths are refused, naming the recorded ones; a
# fine-tuning start (--init-from) may change them, as the official 224 -> 384 fine-tuning does
CS="cswin_tiny_224 --dims 16 --depths 1 --heads 2 --img-size 64 --num-classes 4"
$V init $CS --windows 2,2,1,2 -o "$T/cs.safetensors" >/dev/null 2>&1
expect "CSwin weights made with stripes 2,2,1,2 refused by stripes 4,4,2,2" 1 "build it as it was made (--windows 2,2,1,2)" \
    $V predict $CS --windows 4,4,2,2 -w "$T/cs.safetensors" "$T/good.png"
$V predict $CS --windows 2,2,1,2 -w "$T/cs.safetensors" "$T/good.png" >"$T/csp.log" 2>&1
check "... and taken with them" "[ $? -eq 0 ]" "$(cat "$T/csp.log")"
for d in train/a train/b train/c train/d val/a val/b val/c val/d; do mkdir -p "$T/csd/$d" && cp "$T/good.png" "$T/csd/$d/1.png" && cp "$T/good.png" "$T/csd/$d/2.png"; done
$V train $CS --windows 4,4,2,2 --data "$T/csd" --batch-size 2 --epochs 1 --init-from "$T/cs.safetensors" \
    --out "$T/csft" >"$T/csft.log" 2>&1
check "... and --init-from takes them with other stripes, saying so" \
    "grep -q 'Done' '$T/csft.log' && grep -q 'stripe widths (CSwin) 2,2,1,2 in .*, 4,4,2,2 in the model' '$T/csft.log'" \
    "$(grep -v '^epoch\|^  ' "$T/csft.log" | tail -5)"
# a Swin's attention masks follow the image size: weights made at 56 px fine-tune at 112 px, where they are the only
# tensors of another shape (the strict loader, taken when nothing needs adapting, refused them)
$V init swin_fmnist_tiny --img-size 56 --num-classes 4 -o "$T/sw56.safetensors" >/dev/null 2>&1
$V train swin_fmnist_tiny --img-size 112 --num-classes 4 --data "$T/csd" --batch-size 2 --epochs 1 \
    --init-from "$T/sw56.safetensors" --out "$T/sw112" >"$T/sw112.log" 2>&1
check "--init-from a 56-px Swin into 112 px (other attn_mask shapes only) fine-tunes" "[ $? -eq 0 ] && \
    grep -q '^Done' '$T/sw112.log'" "$(tail -3 "$T/sw112.log")"

# weights record the heads each stage runs (no tensor shape shows them): a model built with other heads is refused
# instead of splitting its maps otherwise, and attention (whose --heads picks heads to draw) builds the recorded ones
$V init $M --heads 2 -o "$T/h2.safetensors" >/dev/null 2>&1
expect "weights made with --heads 2 refused by a model of 4 heads" 1 "was made for 2 attention heads" \
    $V forward $M --heads 4 -w "$T/h2.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors"
$V forward $M -w "$T/h2.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors" >"$T/h2r.log" 2>&1
check "... without --heads, the model is built with the 2 the file records, saying so" \
    "[ $? -eq 0 ] && grep -q 'records: --heads 2$' '$T/h2r.log'" "$(cat "$T/h2r.log")"
# ... and their attention: MSF's grouped projections in the other channel order have the same shapes (refused, exit
# 1); orig is the host's own attention on the same tensors (taken); other tensors name the attention made with
$V init $M --attn msf_g2 -o "$T/g2.safetensors" >/dev/null 2>&1
expect "weights made with --attn msf_g2 refused by msf_g2_block (same shapes, channels in another order)" 1 \
    "g2.safetensors was made with attention msf_g2 (per stage; metadata vitc_attn) but the model is built with \
msf_g2_block" $V eval $M --attn msf_g2_block -w "$T/g2.safetensors" --data fashion-mnist --test-subset 8
$V init $M --attn orig_g2 -o "$T/og2.safetensors" >/dev/null 2>&1
expect "... and orig_g2 weights by orig_g2_block" 1 "made with attention orig_g2 (per stage" \
    $V forward $M --attn orig_g2_block -w "$T/og2.safetensors" --input "$T/x.safetensors" -o "$T/yo.safetensors"
$V forward $M -w "$T/g2.safetensors" --input "$T/x.safetensors" -o "$T/yg2.safetensors" >"$T/g2r.log" 2>&1
check "... without --attn, the model is built with the msf_g2 the file records" \
    "[ $? -eq 0 ] && grep -q 'records: --attn msf_g2$' '$T/g2r.log'" "$(cat "$T/g2r.log")"
$V init $M --attn orig -o "$T/orig.safetensors" >/dev/null 2>&1
$V forward $M --attn orig -w "$T/orig.safetensors" --input "$T/x.safetensors" -o "$T/yo.safetensors" >/dev/null 2>&1
$V forward $M --attn mhsa -w "$T/orig.safetensors" --input "$T/x.safetensors" -o "$T/ym.safetensors" >"$T/om.log" 2>&1
check "weights made with --attn orig run as mhsa, the same network" "[ $? -eq 0 ] && /usr/bin/python3 -c '
import sys; sys.path.insert(0, \"tests/reference\"); import st, numpy as np
a, b = (st.load(sys.argv[i])[\"logits\"] for i in (1, 2)); sys.exit(not np.array_equal(a, b))' \
    '$T/yo.safetensors' '$T/ym.safetensors'" "$(cat "$T/om.log")"
$V init $M --attn refiner -o "$T/rf.safetensors" >/dev/null 2>&1
expect "weights made with --attn refiner, built with mhsa: the message names the attention they were made with" 1 \
    "It was made with attention refiner (metadata vitc_attn), the model is built with mhsa: build it as it was made \
(--attn refiner)" $V forward $M --attn mhsa -w "$T/rf.safetensors" --input "$T/x.safetensors" -o "$T/yr.safetensors"
rerecord "$T/g2.safetensors" "$T/rec_attn.safetensors" "vitc_attn=msf_g2;rm"
expect "an attention record vitc would not write is refused" 1 "metadata .msf_g2;rm. is not a list of attention \
names" $V forward $M --attn msf_g2 -w "$T/rec_attn.safetensors" --input "$T/x.safetensors" -o "$T/yr.safetensors"
for r in "msf_g2," ",msf_g2" "msf_g2,,mhsa" "Msf_g2" ""; do # a comma at either end or doubled, upper case, empty
    rerecord "$T/g2.safetensors" "$T/rec_attn.safetensors" "vitc_attn=$r"
    expect "... as is the record '$r'" 1 "metadata .$r. is not a list of attention names" $V forward $M \
        --attn msf_g2 -w "$T/rec_attn.safetensors" --input "$T/x.safetensors" -o "$T/yr.safetensors"
done
# a record vitc would not write: an option that is not the model's, one without its value, one that is not an option
for r in "bogus:--dtype int8:records the model option '--dtype': not a file vitc wrote" \
    "noval:--heads:records the model option --heads without a value" "word:heads 2:records the model option 'heads'" \
    "twice:--heads 2 --heads 4:records the model option --heads twice"; do
    rerecord "$T/h2.safetensors" "$T/rec_${r%%:*}.safetensors" "vitc_model_options=$(echo "$r" | cut -d: -f2)"
    expect "a weights record vitc would not write is refused: ${r%%:*}" 1 "$(echo "$r" | cut -d: -f3-)" \
        $V predict $M -w "$T/rec_${r%%:*}.safetensors" "$T/good.png"
done
# a record that parses but cannot make the model (3 heads on width 64, a size below the patch, a malformed list): the
# file is blamed (exit 1, as the C API's VITC_E_WEIGHTS), where the same options on the command line are a usage error
for r in "h3:--heads 3:not divisible by 3 heads" "s3:--img-size 3:below the patch size" \
    "d1x:--dims 1x:--dims '1x': expected comma-separated integers"; do
    rerecord "$T/h2.safetensors" "$T/rec_${r%%:*}.safetensors" "vitc_model_options=$(echo "$r" | cut -d: -f2)"
    expect "a weights record that builds no model blames the file: ${r%%:*}" 1 \
        "rec_${r%%:*}.safetensors records the model options .$(echo "$r" | cut -d: -f2).: .*$(echo "$r" | cut -d: -f3-)" \
        $V forward $M -w "$T/rec_${r%%:*}.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors"
done
expect "... the same option given on the command line is a usage error" 2 "not divisible by 3 heads" \
    $V forward $M --heads 3 -w "$T/rec_h3.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors"
expect "... and attention, which builds the recorded heads, blames the file too" 1 \
    "rec_h3.safetensors records the model options .--heads 3.: .*not divisible by 3 heads" \
    $V attention $M -w "$T/rec_h3.safetensors" "$T/good.png" -o "$T/h3.png"
rerecord "$T/h2.safetensors" "$T/vh3.safetensors" vitc_heads=3 vitc_model_options
expect "... as it does heads recorded only in vitc_heads" 1 "vh3.safetensors records the model options .--heads 3.: " \
    $V attention $M -w "$T/vh3.safetensors" "$T/good.png" -o "$T/h3.png"
# a record that builds (width 60) with an option given that does not fit it (8 heads): the option's usage error
$V init $M --dims 60 -o "$T/d60.safetensors" >/dev/null 2>&1
expect "a record that builds, with a given option that does not fit it, is a usage error" 2 "not divisible by 8 heads" \
    $V forward $M --heads 8 -w "$T/d60.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors"
# ... also for the options no record holds (--crop-pct, --train-form): the file was blamed, as if its record built
# nothing
$V init $M --img-size 8 -o "$T/s8.safetensors" >/dev/null 2>&1
expect "a record that builds, with a --crop-pct that does not fit it, is the option's usage error" 2 \
    "crop_pct 10 resizes" $V predict $M -w "$T/s8.safetensors" "$T/good.png" --crop-pct 10
expect "... and with --train-form on a model without re-parameterised blocks" 2 "has no re-parameterised blocks" \
    $V predict $M -w "$T/s8.safetensors" "$T/good.png" --train-form
# a list recorded with blanks after its commas (an earlier vitc's command line took "2, 2") still loads
$V init swin_fmnist_tiny --heads 2,4 -o "$T/sw24.safetensors" >/dev/null 2>&1
rerecord "$T/sw24.safetensors" "$T/rec_blank.safetensors" "vitc_model_options=--heads 2, 4"
$V predict swin_fmnist_tiny -w "$T/rec_blank.safetensors" "$T/good.png" >"$T/recb.log" 2>&1
check "a recorded list with blanks ('--heads 2, 4') still loads, as recorded" "[ $? -eq 0 ] && \
    grep -q 'records: --heads 2,4$' '$T/recb.log'" "$(cat "$T/recb.log")"
$V forward $M --heads 2 -w "$T/h2.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors" >"$T/h2f.log" 2>&1
check "... and taken with --heads 2" "[ $? -eq 0 ]" "$(cat "$T/h2f.log")"
$V attention $M -w "$T/h2.safetensors" "$T/good.png" --save-maps "$T/h2m.safetensors" >"$T/h2a.log" 2>&1
check "attention builds the recorded heads and says so" "[ $? -eq 0 ] && grep -q 'records 2 attention heads' '$T/h2a.log' && \
    /usr/bin/python3 -c \"import sys; sys.path.insert(0, 'tests/reference'); import st; \
sys.exit(st.load('$T/h2m.safetensors')['blocks.0.attn'].shape[1] != 2)\"" "$(cat "$T/h2a.log")"
$V attention $M -w <(cat "$T/h2.safetensors") "$T/good.png" -o "$T/h2p.png" >"$T/h2p.log" 2>&1
check "... reading its weights once (from a pipe)" "[ $? -eq 0 ] && grep -q 'records 2 attention heads' '$T/h2p.log' && \
    [ -s '$T/h2p.png' ]" "$(cat "$T/h2p.log")"
# ... also where the default heads do not divide the recorded widths (the first build had used the default heads)
$V init deit_tiny_patch16_224 --depths 1 --dims 64 --heads 4 --img-size 64 -o "$T/d64.safetensors" >/dev/null 2>&1
$V attention deit_tiny_patch16_224 -w "$T/d64.safetensors" "$T/good.png" -o "$T/d64.png" >"$T/d64.log" 2>&1
check "attention on weights of width 64 with 4 heads (3, the default, does not divide it)" "[ $? -eq 0 ] && \
    [ -s '$T/d64.png' ] && grep -q 'records 4 attention heads' '$T/d64.log'" "$(cat "$T/d64.log")"
# ... also where the heads shape tensors (Swin's relative-position tables: it had checked them against the default heads)
$V init swin_fmnist_tiny --heads 1,2 -o "$T/sh12.safetensors" >/dev/null 2>&1
$V attention swin_fmnist_tiny -w "$T/sh12.safetensors" "$T/good.png" -o "$T/sh12.png" >"$T/sh12.log" 2>&1
check "attention on Swin weights made with --heads 1,2: built with them" "[ $? -eq 0 ] && [ -s '$T/sh12.png' ] && \
    grep -q 'records 1,2 attention heads' '$T/sh12.log'" "$(cat "$T/sh12.log")"
/usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests/reference'); import st; w = st.load('$T/h2.safetensors'); \
st.save('$T/hbad.safetensors', w, metadata={'vitc_heads': 'abc'}); st.save('$T/hbad2.safetensors', w, metadata={'vitc_heads': '2,2'})"
expect "attention: a heads record that is no head count refused as such" 1 'vitc_heads metadata \"abc\" is not one head count per stage' \
    $V attention $M -w "$T/hbad.safetensors" "$T/good.png" -o "$T/hb.png"
expect "... nor one per stage" 1 'vitc_heads metadata \"2,2\" is not one head count per stage of vit_fmnist_tiny.s 1 stage' \
    $V attention $M -w "$T/hbad2.safetensors" "$T/good.png" -o "$T/hb.png"
$V init swin_fmnist_tiny -o "$T/swin_w.safetensors" >/dev/null 2>&1
expect "attention: another model's weights refused by their tensors (not by their heads)" 1 "weights do not match the model" \
    $V attention $M -w "$T/swin_w.safetensors" "$T/good.png" -o "$T/hb.png"
expect "eval: another model's weights named before the data's size error" 1 \
    "records the weights of vit_fmnist_tiny, not of deit_tiny_patch16_224" \
    $V eval deit_tiny_patch16_224 -w "$T/w.safetensors" --data fashion-mnist

# --out naming a file (or a folder below one): said as such
touch "$T/outfile"
expect "--out a file refused as a file" 1 "outfile is a file, not a folder" $V train $M --epochs 1 --train-subset 64 \
    --batch-size 32 --out "$T/outfile/run"

# Randomised SIGKILL: three kills of a 3-epoch run, each followed by --resume, must end with the uninterrupted run's
# weights and best weights (bit for bit) and one metrics.csv row per epoch. The first kill comes within 0.4 s of the
# first epoch's checkpoint, so inside the second epoch (about 1.5 s on the fastest CPU here): at least one resume
# from a checkpoint mid-run happens, and is checked; the other two at random moments of the ~5 s run (before,
# during or after a checkpoint, or after its end).
TR="$M --data fashion-mnist --batch-size 64 --lr 2e-3 --train-subset 768 --test-subset 128 --seed 5 --threads 1"
$V train $TR --epochs 3 --out "$T/ref" >/dev/null 2>&1
seed=${VITC_KILL_SEED:-$RANDOM}
echo "# SIGKILL delays from seed $seed (VITC_KILL_SEED reproduces them)"
RANDOM=$seed
$V train $TR --epochs 3 --out "$T/k" >/dev/null 2>&1 &
pid=$!
for i in 1 2 3; do
    if [ $i -eq 1 ]; then
        for _ in $(seq 600); do # the first epoch's checkpoint (or the run's end: then no resume, and the check fails)
            [ -e "$T/k/checkpoint.safetensors" ] || ! kill -0 $pid 2>/dev/null && break
            sleep 0.05
        done
        sleep "0.$((RANDOM % 5))"
    else
        sleep "$((RANDOM % 4)).$((RANDOM % 9 + 1))"
    fi
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    if [ -e "$T/k/checkpoint.safetensors" ]; then
        $V train $TR --epochs 3 --out "$T/k" --resume "$T/k" >>"$T/k.log" 2>&1 &
    else
        $V train $TR --epochs 3 --out "$T/k" --overwrite >>"$T/k.log" 2>&1 &
    fi
    pid=$!
done
wait $pid
[ -e "$T/k/weights.safetensors" ] || $V train $TR --epochs 3 --out "$T/k" --resume "$T/k" >>"$T/k.log" 2>&1
check "killed runs: at least one resumed from a checkpoint mid-run" \
    "grep -qE 'Resumed from .*checkpoint.safetensors at epoch [12],' '$T/k.log'" "$(tail -5 "$T/k.log")"
check "killed and resumed run: bit-identical weights" "cmp -s '$T/ref/weights.safetensors' '$T/k/weights.safetensors'" \
    "$(tail -5 "$T/k.log")"
check "... one metrics row per epoch" "[ \"\$(cut -d, -f1 '$T/k/metrics.csv' | tail -n +2 | tr '\n' ' ')\" = '1 2 3 ' ]" \
    "$(cat "$T/k/metrics.csv")"
check "... the same best weights" "cmp -s '$T/ref/weights_best.safetensors' '$T/k/weights_best.safetensors'"
# a write cut by SIGKILL leaves its temporary file (.vitc-PID-XXXXXX); the next run in the folder removes it
touch "$T/k/.vitc-999999999-zzzzzz"
$V train $TR --epochs 3 --out "$T/k" --resume "$T/k" >"$T/k2.log" 2>&1
check "... a resumed run removes a killed writer's temporary file" \
    "[ ! -e '$T/k/.vitc-999999999-zzzzzz' ] && grep -q 'removed 1 temporary file' '$T/k2.log'" "$(cat "$T/k2.log")"
check "... no temporary files left" "[ -z \"\$(ls -A '$T/k' | grep -E '[.]vitc-|tmp')\" ]" "$(ls -A "$T/k")"
# so does a command writing -o into a folder where an interrupted one left its temporary file (Ctrl-C: no handler),
# of this host (.vitc-HOST-PID-XXXXXX) or without a host; a living writer's stays
mkdir -p "$T/ko"
sleep 0 & wait $!; dead=$!
host=$(uname -n | tr -cd 'A-Za-z0-9' | cut -c1-16); host=${host:-host}
touch "$T/ko/.vitc-$host-$dead-zzzzzz" "$T/ko/.vitc-$dead-yyyyyy" "$T/ko/.vitc-$host-$$-xxxxxx"
$V init vit_fmnist_tiny -o "$T/ko/w.safetensors" >"$T/ko.log" 2>&1
check "init -o removes an interrupted writer's temporary files in the output's folder, saying so; a living one's stays" \
    "[ $? -eq 0 ] && [ ! -e '$T/ko/.vitc-$host-$dead-zzzzzz' ] && [ ! -e '$T/ko/.vitc-$dead-yyyyyy' ] && \
     [ -e '$T/ko/.vitc-$host-$$-xxxxxx' ] && grep -q 'removed 2 temporary files of an earlier unfinished write' '$T/ko.log'" \
    "$(cat "$T/ko.log"; ls -A "$T/ko")"
# attention's picture (-o) and maps (--save-maps) clear their folders' the same way
mkdir -p "$T/ko/maps"
touch "$T/ko/.vitc-$host-$dead-aaaaaa" "$T/ko/maps/.vitc-$host-$dead-bbbbbb"
$V attention vit_fmnist_tiny -w "$T/ko/w.safetensors" "$T/good.png" -o "$T/ko/a.png" \
    --save-maps "$T/ko/maps/a.safetensors" >"$T/ko_att.log" 2>&1
check "attention -o and --save-maps remove interrupted writers' temporary files in their folders, saying so" \
    "[ $? -eq 0 ] && [ -s '$T/ko/a.png' ] && [ ! -e '$T/ko/.vitc-$host-$dead-aaaaaa' ] && \
     [ ! -e '$T/ko/maps/.vitc-$host-$dead-bbbbbb' ] && [ \$(grep -c 'removed 1 temporary file' '$T/ko_att.log') -eq 2 ]" \
    "$(cat "$T/ko_att.log"; ls -A "$T/ko" "$T/ko/maps")"
# A file-size limit (ulimit -f, as a full disk) under the checkpoint's size: the epoch's writes fail with a message
# and exit 1, not a SIGXFSZ death mid-write; the last checkpoint stays as it was, no temporary file stays, and a
# resume without the limit trains the epoch again (one metrics row per epoch).
cp -r "$T/ref" "$T/full"
cp "$T/full/checkpoint.safetensors" "$T/full.ck"
(ulimit -f 200 && exec $V train $TR --epochs 4 --out "$T/full" --resume "$T/full") >"$T/full.log" 2>&1
rc=$?
check "file-size limit: the epoch's save fails with a message naming the last good checkpoint, exit 1" \
    "[ $rc -eq 1 ] && grep -q 'File too large; stopped before epoch 3.s checkpoint. The last good checkpoint is \
$T/full/checkpoint.safetensors' '$T/full.log'" "rc $rc: $(tail -c 400 "$T/full.log")"
check "... the checkpoint unchanged, no temporary file" "cmp -s '$T/full.ck' '$T/full/checkpoint.safetensors' && \
    [ -z \"\$(ls -A '$T/full' | grep -E '[.]vitc-')\" ]" "$(ls -A "$T/full")"
$V train $TR --epochs 4 --out "$T/full" --resume "$T/full" >"$T/full2.log" 2>&1
rc=$?
check "... a resume without the limit trains that epoch: one metrics row per epoch" \
    "[ $rc -eq 0 ] && [ \"\$(cut -d, -f1 '$T/full/metrics.csv' | tail -n +2 | tr '\n' ' ')\" = '1 2 3 4 ' ]" \
    "rc $rc: $(cat "$T/full/metrics.csv") $(tail -c 300 "$T/full2.log")"
# A checkpoint whose counters or optimiser state were altered is refused on --resume, naming what is wrong; one that
# is complete resumes only in its own folder or with more epochs.
/usr/bin/python3 - "$T" <<'PY'
import json, os, shutil, struct, sys
sys.path.insert(0, "tests/reference")
import numpy as np, st
t = sys.argv[1]
src = f"{t}/ref/checkpoint.safetensors"
buf = open(src, "rb").read()
meta = json.loads(buf[8:8 + struct.unpack("<Q", buf[:8])[0]]).get("__metadata__", {})
w = st.load(src)
def variant(name, settings=True, **changes):
    os.makedirs(f"{t}/{name}", exist_ok=True)
    v = dict(w); m = dict(meta)
    if not settings:  # a checkpoint from before the run's settings were recorded
        m = {k: meta[k] for k in ("model", "format", "world_size")}
    for k, val in changes.items():
        if k in meta: m[k] = val
        else: v[k.replace("__", "/")] = val
    st.save(f"{t}/{name}/checkpoint.safetensors", v, metadata=m)
vkey = next(k for k in w if k.startswith("optim/v/"))
neg = w[vkey].copy(); neg.flat[0] = -1.0
variant("ck_epoch", train__epoch=np.array([-3], np.int64))
variant("ck_step", train__step=np.array([1 << 60], np.int64))
variant("ck_far", train__epoch=np.array([1 << 62], np.int64), train__step=np.array([1 << 62], np.int64))
variant("ck_v", **{vkey.replace("/", "__"): neg})
variant("ck_ws", world_size="abc")
variant("ck_old", settings=False, train__step=w["train/step"] + 1)
variant("ck_best", best_epoch="3")
variant("ck_bs", **{"batch-size": "0"})
variant("ck_tr", **{"head.weight": np.ascontiguousarray(w["head.weight"].T)})
variant("ck_mo", **{"model-options": "--weights x.safetensors"})
variant("ck_rng", train__rng=np.array([1, 2, 3, 4], np.int64))  # vitc 0.6.0's shared Mixup/CutMix generator state
PY
for c in "ck_tr:tensor head.weight has shape (64, 10), the model's head.weight has (10, 64)" "ck_epoch:inconsistent" "ck_step:optimiser steps an epoch" "ck_old:settings of that run (its command.txt)" "ck_best:best epoch" "ck_far:not a checkpoint vitc wrote" "ck_v:negative" "ck_ws:malformed world_size"; do
    expect "resume from ${c%%:*} refused" 1 "${c#*:}" $V train $TR --epochs 3 --out "$T/${c%%:*}" --resume "$T/${c%%:*}"
done
$V train $TR --epochs 4 --out "$T/ck_rng" --resume "$T/ck_rng" >"$T/ck_rng.log" 2>&1
check "a checkpoint of vitc 0.6.0 (with train/rng, unused since) resumes" "[ $? -eq 0 ] && \
    grep -q 'Resumed from .* at epoch 3' '$T/ck_rng.log'" "$(tail -3 "$T/ck_rng.log")"
# a resume takes the settings a checkpoint records for the options it does not give, checked as if given
expect "a recorded batch size out of range refused" 1 "batch-size must be in \[1, 65536\], got 0 (recorded in" \
    $V train $M --epochs 3 --threads 1 --resume "$T/ck_bs"
expect "a recorded model option that is not one refused" 1 "records the model option '--weights'" \
    $V train $M --epochs 3 --threads 1 --resume "$T/ck_mo"
expect "a complete run resumed into another folder refused" 1 "nothing left to train" $V train $TR --epochs 3 --out "$T/k3" --resume "$T/ref"
expect "a resume asking for fewer epochs than the checkpoint has trained refused, naming enough" 1 \
    "is at epoch 3, past the 2 epochs asked for: a run cannot be shortened; give --epochs 4 or more" \
    $V train $TR --epochs 2 --resume "$T/ref"
# ... and in its own folder: said, nothing written (command.txt not appended, weights and metrics untouched), exit 0
cp -r "$T/ref" "$T/ref_done"
(cd "$T/ref_done" && stat -c '%n %i %s %y' -- *) >"$T/done_before.txt"
$V train $M --resume "$T/ref_done" >"$T/done.log" 2>&1
rc=$?
(cd "$T/ref_done" && stat -c '%n %i %s %y' -- *) >"$T/done_after.txt"
check "a complete run resumed in place: nothing to train, exit 0" \
    "[ $rc -eq 0 ] && grep -q 'Nothing to train: .* is at epoch 3, the end of a run of 3 epochs' '$T/done.log'" \
    "rc $rc: $(cat "$T/done.log")"
check "... no file of its folder written (the same inodes, sizes and times: command.txt, metrics.csv, weights)" \
    "diff '$T/done_before.txt' '$T/done_after.txt' >/dev/null" "$(diff "$T/done_before.txt" "$T/done_after.txt")"
# ... without the notes about a run to come (the deit recipe's 5-epoch warm-up in a run of 1 epoch)
$V train vit_fmnist_tiny --recipe deit --epochs 1 --train-subset 256 --test-subset 64 --batch-size 32 --threads 1 \
    --out "$T/rw" >"$T/rw.log" 2>&1 && $V train vit_fmnist_tiny --resume "$T/rw" >"$T/rw2.log" 2>&1
check "... a finished recipe run resumed: 'Nothing to train', no note on its warm-up (the run's first start had one)" \
    "grep -q 'Note: the warm-up' '$T/rw.log' && grep -q 'Nothing to train' '$T/rw2.log' && ! grep -q warm-up '$T/rw2.log'" \
    "$(cat "$T/rw2.log")"
# a training checkpoint given as weights: said so (not taken for a cFFN mix-up)
expect "a training checkpoint as --weights refused, naming it as one" 1 "It is a training checkpoint" \
    $V forward $M -w "$T/ref/checkpoint.safetensors" --input "$T/x.safetensors" -o "$T/yc.safetensors"
check "... without listing its optimiser and EMA tensors" "! grep -q 'unexpected: ' '$T/err.log'" "$(cat "$T/err.log")"
expect "... and as --init-from, naming the run's weights files" 1 "is a training checkpoint .*fine-tune from the run's" \
    $V train $M --init-from "$T/ref/checkpoint.safetensors" --epochs 1 --out "$T/ifc"
# deployed cFFN weights as a fine-tuning start: said so (the merged branches cannot be split again)
$V init $M --attn hmhsa --ffn cffn --train-form -o "$T/hc.safetensors" >/dev/null 2>&1 &&
    $V deploy $M --attn hmhsa --ffn cffn -w "$T/hc.safetensors" -o "$T/hd.safetensors" >/dev/null 2>&1
expect "deployed cFFN weights as --init-from refused, naming the form" 1 "they hold the deployed form of re-parameterised" \
    $V train $M --attn hmhsa --ffn cffn --data fashion-mnist --epochs 1 --init-from "$T/hd.safetensors" --out "$T/ifd"
# a plain model's weights into a cFFN model: not called a deployed form (it is none); the options that differ named
$V init $M -o "$T/plainmlp.safetensors" >/dev/null 2>&1
expect "plain MLP weights as --init-from of a cFFN model: the options named, no deployed-form advice" 1 \
    "the file records no model options, this model is built with .--ffn cffn." \
    $V train $M --ffn cffn --data fashion-mnist --epochs 1 --init-from "$T/plainmlp.safetensors" --out "$T/ifp"
check "... and not called the deployed form" "! grep -q 'deployed form' '$T/err.log'" "$(cat "$T/err.log")"
# a PyTorch checkpoint given straight to vitc: pointed at the converter
/usr/bin/python3 -c "import torch; torch.save({'model': {'a': torch.zeros(2)}}, '$T/ck.pth'); \
torch.save({'a': torch.zeros(2)}, '$T/ck_legacy.pth', _use_new_zipfile_serialization=False)"
for f in ck.pth ck_legacy.pth; do
    expect "a torch.save file ($f) as weights pointed at convert_checkpoint.py" 1 \
        "not safetensors but a .* (a PyTorch checkpoint.*convert it with /usr/bin/python3 tools/convert_checkpoint.py" \
        $V forward $M -w "$T/$f" --input "$T/x.safetensors" -o "$T/yc.safetensors"
done
# an image given as weights: said what it is (it had read as a header of 727905341920923785 bytes)
expect "a PNG as weights: named as one" 1 "good.png: not a safetensors file but a PNG image" \
    $V forward $M -w "$T/good.png" --input "$T/x.safetensors" -o "$T/yc.safetensors"
# what PyTorch's load_state_dict does without: a buffer the architecture defines (Swin's relative_position_index
# and attn_mask, which newer timm does not save) keeps its definition, a BatchNorm's num_batches_tracked reads 0
$V init swin_fmnist_tiny -o "$T/sw_full.safetensors" >/dev/null 2>&1
$V init $M --ffn cffn --train-form -o "$T/cf_full.safetensors" >/dev/null 2>&1
/usr/bin/python3 - "$T" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import st
T = sys.argv[1]
sw = st.load(f"{T}/sw_full.safetensors")
st.save(f"{T}/sw_nobuf.safetensors", {k: v for k, v in sw.items()
                                      if "relative_position_index" not in k and "attn_mask" not in k})
cf = st.load(f"{T}/cf_full.safetensors")
st.save(f"{T}/cf_nonbt.safetensors", {k: v for k, v in cf.items() if "num_batches_tracked" not in k})
rep = [k for k in cf if ".rep.0.bn.running_mean" in k][0]
st.save(f"{T}/cf_short.safetensors", {k: v for k, v in cf.items() if k != rep})
assert rep
PY
rcs=""
for w in sw_full sw_nobuf; do
    $V forward swin_fmnist_tiny -w "$T/$w.safetensors" --input "$T/x.safetensors" -o "$T/y_$w.safetensors" >"$T/nb_$w.log" 2>&1
    rcs="$rcs$?"
done
check "Swin weights without relative_position_index and attn_mask load, the same logits" \
    "[ $rcs = 00 ] && cmp -s '$T/y_sw_full.safetensors' '$T/y_sw_nobuf.safetensors'" "$(cat "$T/nb_sw_full.log" "$T/nb_sw_nobuf.log")"
$V forward $M --ffn cffn --train-form -w "$T/cf_nonbt.safetensors" --input "$T/x.safetensors" -o "$T/y_nbt.safetensors" \
    >"$T/nb.log" 2>&1
check "cFFN weights without num_batches_tracked load" "[ $? -eq 0 ]" "$(cat "$T/nb.log")"
$V forward $M --ffn cffn --train-form -w "$T/cf_short.safetensors" --input "$T/x.safetensors" -o "$T/y_s.safetensors" \
    >"$T/nb.log" 2>&1
check "a cFFN file short of one branch tensor: named as missing, no advice to drop cFFN" \
    "[ $? -eq 1 ] && grep -q 'missing 1,.*rep.0.bn.running_mean' '$T/nb.log' && ! grep -q -- '--ffn mlp' '$T/nb.log'" \
    "$(cat "$T/nb.log")"
# a heads record that is no list of head counts, and an input file without its tensor: said so, naming the file
expect "forward: a heads record that is no list of head counts refused as such" 1 \
    'hbad.safetensors: its vitc_heads metadata \"abc\" is not a list of head counts' \
    $V forward $M -w "$T/hbad.safetensors" --input "$T/x.safetensors" -o "$T/yh.safetensors"
expect "forward: an input file without 'input' named" 1 "w.safetensors: tensor 'input' not found in file" \
    $V forward $M -w "$T/w.safetensors" --input "$T/w.safetensors" -o "$T/yh.safetensors"
$V train $M --ffn cffn --init-from "$T/cf_nonbt.safetensors" --data fashion-mnist --epochs 1 \
    --train-subset 64 --test-subset 32 --batch-size 32 --threads 1 --out "$T/nbt_run" >"$T/nb.log" 2>&1
check "--init-from weights without num_batches_tracked fine-tunes" "[ $? -eq 0 ]" "$(tail -3 "$T/nb.log")"
# --init-from one of the files of the run folder that --overwrite replaces: refused (its weights would be lost)
cp -r "$T/nbt_run" "$T/ifown"
expect "--init-from the run folder's own weights with --overwrite refused" 1 \
    "is the earlier run's weights.safetensors in .*, which this run replaces" \
    $V train $M --ffn cffn --init-from "$T/ifown/weights.safetensors" --data fashion-mnist --epochs 1 \
    --train-subset 64 --test-subset 32 --batch-size 32 --threads 1 --out "$T/ifown" --overwrite
check "... and the file kept" "cmp -s '$T/nbt_run/weights.safetensors' '$T/ifown/weights.safetensors'"
# --init-from weights of input channels other than RGB's (adapted, tests/reference/test_recipe.py): refused, naming the
# tensor with both shapes
$V init $M --in-chans 2 -o "$T/c2.safetensors" >/dev/null 2>&1
expect "--init-from weights of 2 input channels into 1: both shapes named" 1 \
    "patch_embed.proj.weight (file \[[0-9]*,2,[0-9,]*\], model \[[0-9]*,1," \
    $V train $M --init-from "$T/c2.safetensors" --data fashion-mnist --epochs 1 --train-subset 64 --batch-size 32 --out "$T/c2run"
# --init-from through a pipe: read once, also where no tensor needs adapting (that path read the file a second time)
$V train $M --init-from <(cat "$T/w.safetensors") --data fashion-mnist --epochs 1 --train-subset 64 --test-subset 32 \
    --batch-size 32 --threads 1 --out "$T/ifpipe" >"$T/ifp.log" 2>&1
check "--init-from weights through a pipe" "[ $? -eq 0 ] && grep -q 'Fine-tuning from' '$T/ifp.log'" "$(cat "$T/ifp.log")"
# --name=value (argparse's form) is --name value; a flag given a value, an empty value and an unknown name refused
$V info $M --img-size=32 --json >"$T/eq.json" 2>&1
check "--img-size=32 taken as --img-size 32" "[ $? -eq 0 ] && grep -q '\"img_size\": 32' '$T/eq.json'" "$(head -c 300 "$T/eq.json")"
expect "a flag given a value refused (usage: 2)" 2 "option --json takes no value (got '1')" $V info $M --json=1
expect "an empty value after = refused (usage: 2)" 2 "bad value '' for --img-size" $V info $M --img-size=
expect "an unknown --name=value refused (usage: 2)" 2 "unknown option '--bogus'" $V info $M --bogus=3
