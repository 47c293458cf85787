#!/usr/bin/env bash
# The three parts together: an image-folder run with `--recipe deit` (a few steps on the test ImageFolder of
# test_folder.sh) trains through the loader with the DeiT per-image transform (RandAugment, RandomErasing,
# RandomResizedCrop), Mixup/CutMix, the weight EMA and repeated augmentation, prints the recipe and writes
# recipe.json; `--recipe msf` runs its three-augment; a plain folder run keeps crop + flip; and under mpirun -np 2 the same folder run with the per-image
# transform on (Mixup and drop-path off, repeated augmentation on) gives the losses and test metrics of one process
# with the two ranks' batches together (each copy of an image gets its keyed draws whichever rank loads it).
. "$(dirname "$0")/lib.sh"
V=./vitc
PY=/usr/bin/python3
make_test_imagefolder

COMMON="vit_fmnist_tiny --data $F/png --train-subset 512 --test-subset 100 --epochs 1 --seed 4 --threads 1 --log-every 1000"
$V train $COMMON --recipe deit --batch-size 32 --out "$T/deit" >"$T/deit.log" 2>&1
check "folder run with --recipe deit trains" "[ $? -eq 0 ] && [ \$(wc -l <'$T/deit/metrics.csv') -eq 2 ]" \
    "$(tail -5 "$T/deit.log")"
check "... prints the recipe" "grep -q 'rand-m9-mstd0.5-inc1' '$T/deit.log' && grep -q 'Test (EMA):' '$T/deit.log'" \
    "$(head -40 "$T/deit.log")"
check "... writes recipe.json" "$PY -c \"import json,sys; r=json.load(open('$T/deit/recipe.json')); \
sys.exit(not (r['aa'] == 'rand-m9-mstd0.5-inc1' and r['reprob'] == 0.25))\"" "$(cat "$T/deit/recipe.json" 2>/dev/null)"
check "... with the DeiT per-image transform" \
    "grep -q '^Train transform: DeiT .*ra_layers=2' '$T/deit.log' && grep -q '^Train transform: DeiT .*reprob=0.25' '$T/deit.log'" \
    "$(grep -i transform "$T/deit.log")"
check "... RASampler's ⌊512/256⌋·256 = 512 images an epoch in batches of 32: 16 steps" \
    "grep -q '^1,16,' '$T/deit/metrics.csv'" "$(cat "$T/deit/metrics.csv")"
$V train $COMMON --recipe msf --batch-size 32 --out "$T/msf" >"$T/msf.log" 2>&1
check "folder run with --recipe msf trains with its three-augment (and no RandAugment)" "[ $? -eq 0 ] && \
    grep -q '^Train transform: DeiT .*ra_layers=0 .*three=1' '$T/msf.log'" "$(grep -i transform "$T/msf.log"; tail -3 "$T/msf.log")"
$V train $COMMON --batch-size 32 --out "$T/plain" >"$T/plain.log" 2>&1
check "a plain folder run keeps crop + flip" "[ $? -eq 0 ] && grep -q '^Train transform: crop + flip' '$T/plain.log'" \
    "$(tail -5 "$T/plain.log")"

if command -v mpirun >/dev/null; then
    use_mpirun
    EQ="$COMMON --recipe deit --mixup 0 --cutmix 0 --drop-path 0 --no-model-ema --workers 1 --lr 1e-3"
    $V train $EQ --batch-size 64 --out "$T/one" >"$T/one.log" 2>&1
    check "one process, folder, DeiT transform, repeated augmentation" "[ $? -eq 0 ]" "$(tail -5 "$T/one.log")"
    $MPI $V train $EQ --batch-size 32 --out "$T/two" >"$T/two.log" 2>&1
    check "mpirun -np 2 on the folder runs" "[ $? -eq 0 ] && [ \$(grep -o 'Test: epoch' '$T/two.log' | wc -l) -eq 1 ]" \
        "$(tail -8 "$T/two.log")"
    # train loss/acc and test loss/acc/acc5 within 1e-4 relative (summation order differs)
    err=$(paste -d, <(tail -n +2 "$T/one/metrics.csv") <(tail -n +2 "$T/two/metrics.csv") | awk -F, '{h = NF / 2
        for (c = 3; c <= h; c++) if (c != 7 && c != 8 && c != 9) { d = $c - $(c + h); if (d < 0) d = -d
        m = $(c + h) < 0 ? -$(c + h) : $(c + h); r = d / (m > 1e-30 ? m : 1e-30); if (r > w) w = r } n++}
        END {if (n != 1) print 1; else printf "%.3g\n", w}')
    check "2 ranks x 32 = 1 process x 64 on the folder (max rel. diff $err)" "awk 'BEGIN{exit !($err < 1e-4)}'" \
        "$(cat "$T/one/metrics.csv" "$T/two/metrics.csv")"
else
    bad "mpirun" "not installed (Debian openmpi-bin; make deps-test)"
fi
