#!/usr/bin/env bash
# End-to-end training checks on a Fashion-MNIST subset: the loss goes down; --resume continues exactly (same
# metrics and bit-identical weights as an uninterrupted run); a NaN loss stops with a message naming the step and
# keeps the last good checkpoint, and so does a NaN validation (of the weights or their EMA) before anything of its
# epoch is written; eval refuses logits that are not finite; no temp files are left; curves.png is a PNG; metrics.csv never repeats an epoch
# (resume after a crash, --overwrite); a folder holding another run, another model's checkpoint, a foreign
# metrics.csv, a second run on a locked folder and an empty --out are refused at start-up (a refused run leaves no
# folder); drop-path (resume-exact); a warm-up lr above the peak is refused, a recipe's warm-up longer than the run
# noted; --augment turns augmentation back on in a resume of a --no-augment run; a stop asked (a signal,
# --fault-stop-step) checkpoints mid-epoch, or after the epoch at its last step, and resumes to the uninterrupted run's
# weights; eval and bad arguments.
. "$(dirname "$0")/lib.sh"
V=./vitc

COMMON="vit_fmnist_tiny --data fashion-mnist --batch-size 64 --lr 2e-3 --train-subset 1024 --test-subset 256 --seed 3 --log-every 8"

$V train $COMMON --epochs 3 --out "$T/new/a" >"$T/a.log" 2>&1
mv "$T/new/a" "$T/a"
check "train runs (creating parent folders)" "[ -s '$T/a/metrics.csv' ]" "$(tail -3 "$T/a.log")"
check "progress lines" "grep -Eq '^Train: 0 \[ *8/16 \( *50%\)\]  Loss: .* Time: .*/s  LR: ' '$T/a.log'"
l1=$(sed -n 2p "$T/a/metrics.csv" | cut -d, -f3)
l3=$(sed -n 4p "$T/a/metrics.csv" | cut -d, -f3)
check "loss goes down ($l1 -> $l3)" "awk 'BEGIN{exit !($l3 < $l1)}'"
check "curves.png is a PNG" "[ \"\$(head -c 4 '$T/a/curves.png' | tail -c 3)\" = PNG ]"
check "no temp files left" "[ -z \"\$(ls -A '$T/a' | grep -E 'tmp|[.]vitc-')\" ]"
check "command recorded" "grep -q 'vitc train' '$T/a/command.txt'"
# a command line of any length is recorded whole (it was cut at 2047 bytes, losing the options after a long path)
mkdir -p "$T/d" && long=$(cd "$T" && for i in $(seq 500); do printf 'd/../'; done)lng
(cd "$T" && "$OLDPWD/vitc" train vit_fmnist_tiny --epochs 1 --train-subset 64 --test-subset 32 --batch-size 32 \
    --warmup-epochs 0 --out "$long" --seed 7) >"$T/lng.log" 2>&1
check "a 2.6 kB command line recorded whole in command.txt" "[ $? -eq 0 ] && [ \$(wc -c <'$T/lng/command.txt') -gt 2600 ] \
    && tail -c 10 '$T/lng/command.txt' | grep -q -- '--seed 7$'" "$(tail -3 "$T/lng.log")"
# curves.gp and curves.png are replaced through temporary files: a FIFO put at curves.gp is refused with a warning
# (the run goes on), and `gnuplot curves.gp` in the folder still draws curves.png
cp -r "$T/a" "$T/fifo" && rm "$T/fifo/curves.gp" "$T/fifo/curves.png" && mkfifo "$T/fifo/curves.gp"
timeout 300 $V train $COMMON --epochs 4 --resume "$T/fifo" --out "$T/fifo" >"$T/fifo.log" 2>&1
check "a FIFO at curves.gp: warned, the run completes" "[ $? -eq 0 ] && grep -q 'curves.gp: it exists and is not a regular file' \
    '$T/fifo.log' && [ -p '$T/fifo/curves.gp' ]" "$(tail -3 "$T/fifo.log")"
cp "$T/a/curves.png" "$T/a.png" && rm "$T/a/curves.png" && (cd "$T/a" && gnuplot curves.gp)
check "gnuplot curves.gp in the run folder draws curves.png" "cmp -s '$T/a.png' '$T/a/curves.png'"
# the best validation top-1's weights: the epoch the Best line names is metrics.csv's first highest test_acc
best=$(awk -F, 'NR > 1 && (NR == 2 || $6 > m) {m = $6; e = $1 - 1} END {print e}' "$T/a/metrics.csv")
check "Best line names metrics.csv's best epoch ($best)" "grep -q '^Best: epoch $best, Acc@1 ' '$T/a.log'" "$(grep Best "$T/a.log")"
# (the tensors compared: weights_best's header also records its epoch)
check "... its weights are weights_best.safetensors (the final weights iff it is the last epoch)" \
    "[ -s '$T/a/weights_best.safetensors' ] && [ -s '$T/a/weights.safetensors' ] && \
    { cmp -s <(st_data '$T/a/weights_best.safetensors') \
    <(st_data '$T/a/weights.safetensors'); [ \$? -eq \$(( $best == 2 ? 0 : 1 )) ]; }"

$V train $COMMON --epochs 1 --out "$T/b" >"$T/b1.log" 2>&1 &&
    $V train $COMMON --epochs 3 --out "$T/b" --resume "$T/b" >"$T/b2.log" 2>&1
check "resume runs" "[ $? -eq 0 ] && grep -q 'Resumed from' '$T/b2.log'" "$(tail -3 "$T/b2.log")"
check "the default warm-up of 1 epoch in a run of 1 (per-step, never at the peak) is noted" "grep -qF 'Note: the \
warm-up of 1 epoch (the default --warmup-epochs) does not end within the run'\''s 1 epoch: the learning rate rises for \
the whole run' '$T/b1.log' && ! grep -q 'Note: the warm-up' '$T/b2.log'" "$(head -5 "$T/b1.log")"
check "resume gives identical metrics" "[ -s '$T/a/metrics.csv' ] && diff <(cut -d, -f1-6 '$T/a/metrics.csv') <(cut -d, -f1-6 '$T/b/metrics.csv') >/dev/null"
check "resume gives bit-identical weights" "cmp -s '$T/a/weights.safetensors' '$T/b/weights.safetensors'"
check "... and the same best weights" "cmp -s '$T/a/weights_best.safetensors' '$T/b/weights_best.safetensors'"

# a stop asked (SIGINT, SIGTERM, SIGHUP, SIGUSR1; --fault-stop-step N asks during step N) ends the run at the end of
# its optimiser step with a checkpoint of that point, exit status 128 + the signal; a resume goes on from that batch
# of the epoch (or from the next epoch, when asked at an epoch's last step) to the uninterrupted run's numbers
$V train $COMMON --epochs 3 --fault-stop-step 21 --out "$T/st" >"$T/st1.log" 2>&1
check "a stop asked mid-epoch: exit 130, said, a checkpoint of the 6 steps into epoch 1" "[ $? -eq 130 ] && \
    grep -qF 'Stopped as asked at epoch 1, batch 6 of 16 (step 22): $T/st/checkpoint.safetensors holds the run there' \
    '$T/st1.log' && [ \"\$(meta '$T/st/checkpoint.safetensors' part_steps)\" = 6 ] && \
    [ \$(wc -l <'$T/st/metrics.csv') -eq 2 ]" "$(tail -3 "$T/st1.log")"
cp -r "$T/st" "$T/st_ck"
$V train vit_fmnist_tiny --resume "$T/st" >"$T/st2.log" 2>&1
check "... its resume goes on from batch 6 of epoch 1" "[ $? -eq 0 ] && grep -qF 'Resumed from $T/st/checkpoint.\
safetensors at epoch 1, step 22, after batch 6 of 16 (where it was stopped)' '$T/st2.log' && \
    grep -q '^Train: 1 \[  16/16' '$T/st2.log' && ! grep -q '^Train: 1 \[   8/16' '$T/st2.log'" \
    "$(head -4 "$T/st2.log")"
check "... to the uninterrupted run's metrics and bit-identical weights" \
    "diff <(cut -d, -f1-6 '$T/a/metrics.csv') <(cut -d, -f1-6 '$T/st/metrics.csv') >/dev/null && \
    cmp -s '$T/a/weights.safetensors' '$T/st/weights.safetensors'" "$(cat "$T/st/metrics.csv")"
$V train $COMMON --epochs 3 --fault-stop-step 15 --out "$T/se" >"$T/se1.log" 2>&1
check "a stop asked at an epoch's last step: the epoch is validated and written, then the run stops" "[ $? -eq 130 ] \
    && grep -qF 'Stopped as asked after epoch 0 (step 16)' '$T/se1.log' && grep -q '^Test: epoch 0 ' '$T/se1.log' \
    && [ \$(wc -l <'$T/se/metrics.csv') -eq 2 ] && ! meta '$T/se/checkpoint.safetensors' part_steps >/dev/null 2>&1" \
    "$(tail -3 "$T/se1.log")"
$V train vit_fmnist_tiny --resume "$T/se" >"$T/se2.log" 2>&1
check "... its resume goes on from the next epoch to bit-identical weights" "[ $? -eq 0 ] && \
    cmp -s '$T/a/weights.safetensors' '$T/se/weights.safetensors'" "$(tail -3 "$T/se2.log")"
# with accumulation the stop waits for the optimiser step: 2 micro-batches of 32 a step
ACC="vit_fmnist_tiny --data fashion-mnist --batch-size 32 --accum-steps 2 --lr 2e-3 --train-subset 512 \
--test-subset 128 --seed 5 --epochs 2"
$V train $ACC --out "$T/sa" >"$T/sa.log" 2>&1 && $V train $ACC --fault-stop-step 10 --out "$T/sb" >"$T/sb1.log" 2>&1
check "with --accum-steps 2, the stop comes after the step's second micro-batch" "[ $? -eq 130 ] && \
    grep -qF 'Stopped as asked at epoch 1, batch 6 of 16 (step 11)' '$T/sb1.log'" "$(tail -3 "$T/sb1.log")"
$V train vit_fmnist_tiny --resume "$T/sb" >"$T/sb2.log" 2>&1
check "... and its resume ends with the uninterrupted run's weights" "[ $? -eq 0 ] && \
    cmp -s '$T/sa/weights.safetensors' '$T/sb/weights.safetensors'" "$(tail -3 "$T/sb2.log")"
# a real signal, wherever it lands: SIGINT once epoch 1 has begun, then SIGTERM, each resumed to the same weights
# (env resets SIGINT, which a script's background job ignores)
for sig in INT TERM; do
    env --default-signal=INT $V train $COMMON --epochs 3 --out "$T/sig$sig" >"$T/sig$sig.log" 2>"$T/sig$sig.err" &
    pid=$!
    for _ in $(seq 600); do grep -q '^Train: 1 ' "$T/sig$sig.log" && break; sleep 0.05; done
    kill -$sig $pid; wait $pid; rc=$?
    check "SIG$sig during epoch 1: exit $((128 + $(kill -l $sig))), said on stderr, a stop line" \
        "[ $rc -eq $((128 + $(kill -l $sig))) ] && grep -q '^Stopped as asked ' '$T/sig$sig.log' && \
        grep -qF 'vitc: train: stopping at the end of this optimiser step' '$T/sig$sig.err'" \
        "rc $rc: $(tail -2 "$T/sig$sig.log") $(cat "$T/sig$sig.err")"
    $V train vit_fmnist_tiny --resume "$T/sig$sig" >"$T/sig${sig}2.log" 2>&1
    check "... resumed: bit-identical weights to the run never stopped" "[ $? -eq 0 ] && \
        cmp -s '$T/a/weights.safetensors' '$T/sig$sig/weights.safetensors'" "$(tail -3 "$T/sig${sig}2.log")"
done
# signals ignored when vitc starts stay ignored: nohup's SIGHUP, a script's background job's SIGINT
nohup $V train $COMMON --epochs 2 --out "$T/nohup" >"$T/nohup.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q '^Train: 1 ' "$T/nohup.log" && break; sleep 0.05; done
kill -HUP $pid; kill -INT $pid; wait $pid
check "SIGHUP under nohup and SIGINT to a script's background job are ignored, as they were: the run ends" \
    "[ $? -eq 0 ] && ! grep -q 'Stopped as asked' '$T/nohup.log' && grep -q '^Done: 2 epochs' '$T/nohup.log'" \
    "$(tail -3 "$T/nohup.log")"
# the rest of a stopped epoch keeps its order of images and micro-batches: settings that change them are refused
# until the epoch ends (as many images a step, the step count fits)
for opt in "--batch-size 32 --accum-steps 2" "--seed 4" "--repeated-aug"; do
    rm -rf "$T/ord" && cp -r "$T/st_ck" "$T/ord"
    $V train vit_fmnist_tiny --resume "$T/ord" $opt >"$T/ord.log" 2>&1
    check "a resume of a run stopped mid-epoch with $opt is refused" "[ $? -eq 1 ] && grep -qF 'was stopped 6 \
optimiser steps into epoch 1, whose order of images and micro-batches the resume goes on with' '$T/ord.log'" \
        "$(tail -2 "$T/ord.log")"
done
# a checkpoint's record of the part of an epoch is checked: malformed values or values out of range (more images
# right or skipped than its steps took, a loss sum past float's range, a time), or none (its step count then does
# not fit the epochs)
for kv in part_steps=0 part_steps=abc part_steps=99 part_loss=nan part_correct=-1 part_correct=385 part_skipped=385 \
    part_loss=1e300 part_seconds=1e300 part_skipped; do
    rm -rf "$T/bp" && cp -r "$T/st_ck" "$T/bp"
    rerecord "$T/st_ck/checkpoint.safetensors" "$T/bp/checkpoint.safetensors" "$kv"
    $V train vit_fmnist_tiny --resume "$T/bp" >"$T/bp.log" 2>&1
    check "a checkpoint's part of an epoch $kv is refused" "[ $? -eq 1 ] && grep -q 'not a checkpoint vitc wrote' \
        '$T/bp.log'" "$(tail -2 "$T/bp.log")"
done
rm -rf "$T/bp" && cp -r "$T/st_ck" "$T/bp"
rerecord "$T/st_ck/checkpoint.safetensors" "$T/bp/checkpoint.safetensors" part_steps part_correct part_skipped \
    part_loss part_seconds
$V train vit_fmnist_tiny --resume "$T/bp" >"$T/bp.log" 2>&1
check "a checkpoint stopped mid-epoch without its part is refused" "[ $? -eq 1 ] && grep -qF 'is at step 22 after 1 \
epoch, but this run takes 16 optimiser steps an epoch' '$T/bp.log'" "$(tail -2 "$T/bp.log")"

# a row written just before a crash (metrics.csv is appended before the checkpoint) is dropped by the resume
echo "4,64,1,1,1,1,0.001,1,1" >>"$T/b/metrics.csv"
$V train $COMMON --epochs 3 --out "$T/b" --resume "$T/b" >"$T/b3.log" 2>&1
check "resume drops metrics rows past its checkpoint" \
    "diff <(cut -d, -f1-6 '$T/a/metrics.csv') <(cut -d, -f1-6 '$T/b/metrics.csv') >/dev/null" "$(cat "$T/b/metrics.csv")"

check "a resume that changes nothing prints no note" "! grep -q '^Note:' '$T/b3.log'" "$(grep Note "$T/b3.log")"

# the checkpoint records the run's settings: a resume whose batch breaks the step count is refused, naming the change;
# one that keeps the images an optimiser step resumes, with a note naming every setting it changes
$V train $COMMON --epochs 4 --batch-size 32 --out "$T/rs" --resume "$T/b" >"$T/rs.log" 2>&1
check "a resume with another batch size is refused, naming it" "[ $? -eq 1 ] && grep -q 'Changed: batch-size 64 → 32; \
resume with the checkpoint.s values, or with its 64 images an optimiser step' '$T/rs.log'" "$(cat "$T/rs.log")"
check "... leaving no run folder" "[ ! -e '$T/rs' ]"
$V train $COMMON --epochs 4 --batch-size 32 --accum-steps 2 --lr 1e-3 --out "$T/rs" --resume "$T/b" >"$T/rs.log" 2>&1
check "... the same images an optimiser step resume, with a note of every change" "[ $? -eq 0 ] && grep -q \
'^Note: this resumed run changes batch-size 64 → 32, accum-steps 1 → 2, epochs 3 → 4, lr 0.002 → 0.001$' '$T/rs.log'" \
    "$(head -3 "$T/rs.log")"

# a resume into another folder that stops before its first checkpoint leaves there the copies it made (the source's
# metrics rows, its best weights): the same resume again replaces them; a file of the user's there is still refused
$V train $COMMON --epochs 4 --out "$T/rl" --resume "$T/b" --fault-nan-step 48 >"$T/rl1.log" 2>&1
check "a resume into another folder stopped before its first checkpoint" "[ $? -eq 1 ] && [ -s '$T/rl/metrics.csv' ] && \
    [ ! -e '$T/rl/checkpoint.safetensors' ]" "$(tail -2 "$T/rl1.log")"
$V train $COMMON --epochs 4 --out "$T/rl" --resume "$T/b" >"$T/rl2.log" 2>&1
check "... the same resume again runs, replacing what the first try left" "[ $? -eq 0 ] && \
    [ \$(grep -c . '$T/rl/metrics.csv') -eq 5 ] && [ -s '$T/rl/checkpoint.safetensors' ]" "$(tail -3 "$T/rl2.log")"
mkdir -p "$T/rl3" && printf 'epoch,mine\n' >"$T/rl3/metrics.csv"
$V train $COMMON --epochs 4 --out "$T/rl3" --resume "$T/b" >"$T/rl3.log" 2>&1
check "... but a metrics.csv that is not the source run's copy is refused" "[ $? -eq 1 ] && \
    grep -q 'holds metrics.csv but no checkpoint' '$T/rl3.log' && grep -q mine '$T/rl3/metrics.csv'" "$(cat "$T/rl3.log")"
mkdir -p "$T/rl4" && cp "$T/b/metrics.csv" "$T/rl4/" && cp "$T/b/weights.safetensors" "$T/rl4/weights_best.safetensors"
$V train $COMMON --epochs 4 --out "$T/rl4" --resume "$T/b" >"$T/rl4.log" 2>&1
check "... and so is a weights_best.safetensors that is not the source's" "[ $? -eq 1 ] && \
    grep -q 'no checkpoint' '$T/rl4.log' && cmp -s '$T/b/weights.safetensors' '$T/rl4/weights_best.safetensors'" \
    "$(cat "$T/rl4.log")"

# a resume takes what its checkpoint records for the options it does not give (the recipe and its Mixup, EMA and
# repeated augmentation, the model options, the data, the seed) and continues in that folder, as if never stopped
RC="$COMMON --recipe deit --heads 2 --no-augment --warmup-lr 1e-4"
$V train $RC --epochs 2 --out "$T/u" >"$T/u.log" 2>&1
$V train $RC --epochs 1 --out "$T/v" >"$T/v1.log" 2>&1 && $V train vit_fmnist_tiny --resume "$T/v" --epochs 2 >"$T/v2.log" 2>&1
check "a resume giving only --epochs takes the checkpoint's settings (the note names nothing else)" \
    "[ $? -eq 0 ] && grep -q '^Note: this resumed run changes epochs 1 → 2$' '$T/v2.log'" "$(grep -v '^ ' "$T/v2.log")"
check "... bit-identical weights and EMA to the run never stopped" \
    "cmp -s '$T/u/weights.safetensors' '$T/v/weights.safetensors' && \
     cmp -s '$T/u/weights_ema.safetensors' '$T/v/weights_ema.safetensors'"
check "... command.txt holds both commands" "[ \$(grep -c 'vitc train' '$T/v/command.txt') -eq 2 ]" "$(cat "$T/v/command.txt")"
$V train vit_fmnist_tiny --resume "$T/v" --epochs 3 --no-model-ema >"$T/v3.log" 2>&1
check "... an option given overrides it, named in the note" "[ $? -eq 0 ] && grep -q \
'^Note: this resumed run changes epochs 2 → 3, model-ema 1 → 0, model-ema-decay 0.99996 → 0$' \
'$T/v3.log'" "$(head -3 "$T/v3.log")"
check "... the earlier EMA weights removed, said (not left beside newer weights)" "[ ! -e '$T/v/weights_ema.safetensors' ] && \
    grep -q '^Note: removed weights_ema.safetensors' '$T/v3.log'" "$(grep Note "$T/v3.log")"
# a checkpoint whose model options record builds no model (3 heads on width 64): the checkpoint blamed (exit 1)
cp -r "$T/v" "$T/vbad"
rerecord "$T/v/checkpoint.safetensors" "$T/vbad/checkpoint.safetensors" "model-options=--heads 3"
$V train vit_fmnist_tiny --resume "$T/vbad" --epochs 4 >"$T/vbad.log" 2>&1
check "... a checkpoint recording model options that build no model is named (exit 1)" "[ $? -eq 1 ] && grep -q \
'vbad/checkpoint.safetensors records the model options \"--heads 3\": .*not divisible by 3 heads' '$T/vbad.log'" \
    "$(cat "$T/vbad.log")"
cp -r "$T/v" "$T/vh"
$V train vit_fmnist_tiny --resume "$T/vh" --epochs 4 --heads 4 >"$T/vh.log" 2>&1
check "... but not the heads the checkpoint was trained with (its maps would split into other heads)" \
    "[ $? -eq 1 ] && grep -q 'checkpoint.safetensors was made for 2 attention heads .* built with 4' '$T/vh.log'" \
    "$(cat "$T/vh.log")"
# ... nor the attention (MSF's grouped projections in the other channel order: the same shapes), on --resume or
# --init-from
$V train $COMMON --attn msf_g2 --epochs 1 --out "$T/ag" >"$T/ag.log" 2>&1
$V train vit_fmnist_tiny --resume "$T/ag" --epochs 2 --attn msf_g2_block >"$T/agr.log" 2>&1
check "... nor the attention the checkpoint was trained with (msf_g2 resumed as msf_g2_block)" "[ $? -eq 1 ] && grep -q \
'checkpoint.safetensors was made with attention msf_g2 (per stage; metadata vitc_attn) but the model is built with \
msf_g2_block' '$T/agr.log'" "$(cat "$T/agr.log")"
$V train $COMMON --attn msf_g2_block --epochs 1 --init-from "$T/ag/weights.safetensors" --out "$T/agi" >"$T/agi.log" 2>&1
check "... and --init-from refuses it too" "[ $? -eq 1 ] && grep -q 'made with attention msf_g2 (per stage' '$T/agi.log'" \
    "$(cat "$T/agi.log")"
# ... nor fewer blocks: the checkpoint's tensors of the blocks left out would be dropped (its files stay as they were)
cp -r "$T/v" "$T/vd"
$V train vit_fmnist_tiny --resume "$T/vd" --epochs 4 --depths 2 >"$T/vd.log" 2>&1
check "... nor with fewer blocks (--depths 2): refused naming a tensor the smaller model lacks, the folder unchanged" \
    "[ $? -eq 1 ] && grep -q 'vd/checkpoint.safetensors holds tensor blocks.2.norm1.weight, which the model being resumed \
does not have' '$T/vd.log' && diff -r '$T/v' '$T/vd' >/dev/null" "$(cat "$T/vd.log"; diff -r "$T/v" "$T/vd" | head -3)"
# ... another --recipe: the note names it and how the learning rate now moves (per step, not DeiT's per epoch)
cp -r "$T/v" "$T/vr"
$V train vit_fmnist_tiny --resume "$T/vr" --epochs 4 --recipe swin --batch-size 64 --repeated-aug >"$T/vr.log" 2>&1
check "... a resume under another recipe names the changed lr updates" "[ $? -eq 0 ] && grep -q \
'^Note: this resumed run changes recipe deit → swin, lr-update per epoch (DeiT.s lag) → per step, epochs 3 → 4, ' \
'$T/vr.log'" "$(head -3 "$T/vr.log")"

rm "$T/v/weights_best.safetensors"
$V train vit_fmnist_tiny --resume "$T/v" --epochs 4 >"$T/v4.log" 2>&1
check "... a resume whose folder lost weights_best.safetensors says so, and the Best line tells whether it came back" \
    "grep -q 'weights_best.safetensors is missing; the next epoch above Acc@1' '$T/v4.log' && \
     if [ -e '$T/v/weights_best.safetensors' ]; then grep -q '^Best: .*; its weights in ' '$T/v4.log'; \
     else grep -q '^Best: .*; its weights are missing' '$T/v4.log'; fi" "$(grep -v '^ ' "$T/v4.log")"

# weights_best records its epoch; a resume finding one of an epoch its checkpoint does not name as the best (a run
# stopped between weights_best and the checkpoint, here made by editing the record) removes it rather than keep it
/usr/bin/python3 - "$T/u" <<'PYEOF' >"$T/be.log" 2>&1
import json, struct, sys
def meta(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; return json.loads(b[8:8 + n])["__metadata__"]
w, c = meta(sys.argv[1] + "/weights_best.safetensors"), meta(sys.argv[1] + "/checkpoint.safetensors")
sys.exit(0 if w.get("vitc_epoch") == str(int(c["best_epoch"]) + 1) else "vitc_epoch %s, best_epoch %s" % (w.get("vitc_epoch"), c["best_epoch"]))
PYEOF
check "weights_best records the epoch (from 1) the checkpoint names as the best" "[ $? -eq 0 ]" "$(cat "$T/be.log")"
cp -r "$T/u" "$T/stale"
/usr/bin/python3 - "$T/stale/weights_best.safetensors" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["__metadata__"]["vitc_epoch"] = "7"
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PYEOF
$V train vit_fmnist_tiny --resume "$T/stale" --epochs 3 >"$T/stale.log" 2>&1
check "... a weights_best of another epoch than the checkpoint's best is removed on resume, and said" \
    "[ $? -eq 0 ] && grep -q 'weights_best.safetensors holds epoch 6.s weights (a run stopped before its checkpoint), not \
the best epoch [0-9]*.s: removed' '$T/stale.log'" "$(grep -v '^ ' "$T/stale.log")"

# a model with integer buffers (Swin's relative_position_index) checkpoints them whole: its resume is bit-exact too
SW="swin_fmnist_tiny --data fashion-mnist --batch-size 32 --train-subset 256 --test-subset 128 --seed 2"
$V train $SW --epochs 2 --out "$T/sw1" >"$T/sw1.log" 2>&1
$V train $SW --epochs 1 --out "$T/sw2" >"$T/sw2.log" 2>&1 && $V train swin_fmnist_tiny --resume "$T/sw2" --epochs 2 >"$T/sw3.log" 2>&1
check "Swin: resume gives bit-identical weights" \
    "[ $? -eq 0 ] && cmp -s '$T/sw1/weights.safetensors' '$T/sw2/weights.safetensors'" "$(tail -2 "$T/sw3.log")"

# drop-path: masks follow (seed, step), so a resumed run still equals the uninterrupted one, and training changes
$V train $COMMON --epochs 2 --drop-path 0.3 --out "$T/dp" >"$T/dp.log" 2>&1 &&
    $V train $COMMON --epochs 1 --drop-path 0.3 --out "$T/dq" >"$T/dq1.log" 2>&1 &&
    $V train $COMMON --epochs 2 --drop-path 0.3 --out "$T/dq" --resume "$T/dq" >"$T/dq2.log" 2>&1
check "drop-path runs and resumes" "[ $? -eq 0 ]" "$(tail -n 2 "$T/dp.log" "$T/dq2.log")"
check "drop-path resume gives bit-identical weights" "cmp -s '$T/dp/weights.safetensors' '$T/dq/weights.safetensors'"
check "drop-path changes training" "[ -n \"\$(sed -n 3p '$T/dp/metrics.csv' | cut -d, -f3)\" ] && \
    [ \"\$(sed -n 3p '$T/dp/metrics.csv' | cut -d, -f3)\" != \"\$(sed -n 3p '$T/a/metrics.csv' | cut -d, -f3)\" ]"
$V train $COMMON --epochs 1 --drop-path 1.5 --out "$T/c" >"$T/dpb.log" 2>&1
check "bad --drop-path rejected" "[ $? -ne 0 ] && grep -q 'drop-path must be' '$T/dpb.log'"
$V train $COMMON --epochs 1 --batch-size 4096 --out "$T/refused/run" >"$T/refused.log" 2>&1
check "a run refused at set-up (batch larger than an epoch: a usage error, 2) leaves no run folder" \
    "[ $? -eq 2 ] && grep -q 'larger than the 1024 images' '$T/refused.log' && [ ! -e '$T/refused' ]" "$(cat "$T/refused.log")"
$V bench simplevit_ti_msf --batch-size 1 --train --drop-path 0.1 >"$T/dps.log" 2>&1
check "drop-path refused where the official code has none" "[ $? -ne 0 ] && grep -q 'has no drop-path' '$T/dps.log'"

cp "$T/b/checkpoint.safetensors" "$T/good.safetensors"
$V train $COMMON --epochs 5 --out "$T/b" --resume "$T/b" --fault-nan-step 52 >"$T/nan.log" 2>&1
rc=$?
check "NaN stops training" "[ $rc -ne 0 ] && [ $rc -lt 128 ]" "rc $rc"
check "NaN message names the step" "grep -q 'loss is NaN at step 52' '$T/nan.log'" "$(tail -2 "$T/nan.log")"
check "last good checkpoint kept" "cmp -s '$T/good.safetensors' '$T/b/checkpoint.safetensors'"
$V train $COMMON --epochs 5 --out "$T/b" --resume "$T/b" --fault-batch-step 52 >"$T/fb.log" 2>&1
rc=$?
check "a failing batch stops training with its message, the checkpoint kept" "[ $rc -eq 1 ] && \
    grep -q '^vitc: the batch of step 52 failed (--fault-batch-step)' '$T/fb.log' && \
    cmp -s '$T/good.safetensors' '$T/b/checkpoint.safetensors'" "rc $rc: $(tail -2 "$T/fb.log")"
# a gradient too large for AdamW's squared average (v = Inf freezes its parameter, the loss stays finite) stops the
# run at the epoch's end, naming the state, before a checkpoint that a resume would refuse is written
$V train $COMMON --epochs 5 --out "$T/b" --resume "$T/b" --fault-grad-step 50 >"$T/fg.log" 2>&1
rc=$?
check "an Inf AdamW moment stops training at the epoch's end with its name, the checkpoint kept" "[ $rc -eq 1 ] && \
    grep -q '^vitc: the optimiser state optim/v/.* holds NaN or Inf after epoch 3' '$T/fg.log' && \
    cmp -s '$T/good.safetensors' '$T/b/checkpoint.safetensors'" "rc $rc: $(tail -2 "$T/fg.log")"
# a NaN that meets a ReLU after a BatchNorm (Next-ViT's stem) stays NaN, as in PyTorch: the loss shows it
$V train nextvit_small --depths 1,1,5,1 --in-chans 1 --img-size 28 --num-classes 10 --data fashion-mnist \
    --train-subset 64 --test-subset 32 --batch-size 16 --epochs 1 --fault-nan-step 2 --out "$T/nvnan" >"$T/nvnan.log" 2>&1
rc=$?
check "NaN through Next-ViT's conv-BN-ReLU stem stops training" "[ $rc -eq 1 ] && grep -q 'loss is NaN at step 2' '$T/nvnan.log'" \
    "rc $rc: $(tail -2 "$T/nvnan.log")"

# a validation whose logits are not finite (a NaN in its first input: --fault-nan-eval EPOCH) with a finite training
# loss stops the run before anything of that epoch is written, naming the epoch, the cause and the last good checkpoint
# same A B FILE...: A/FILE and B/FILE are identical for each FILE
same() { local a=$1 b=$2 f; shift 2; for f in "$@"; do cmp -s "$a/$f" "$b/$f" || return 1; done; }
mkdir "$T/good" && cp "$T/b/"{checkpoint.safetensors,metrics.csv,weights.safetensors,weights_best.safetensors} "$T/good/"
$V train $COMMON --epochs 5 --out "$T/b" --resume "$T/b" --fault-nan-eval 3 >"$T/nanev.log" 2>&1
rc=$?
check "a NaN validation stops training (exit 1)" "[ $rc -eq 1 ] && grep -q '^Train: 3 \[ *16/16' '$T/nanev.log'" \
    "rc $rc: $(tail -3 "$T/nanev.log")"
check "... naming the epoch, the cause and the last good checkpoint" "grep -qF 'vitc: validation of epoch 3 failed: \
image 0: the model'\''s logits are not finite (class 0 is nan): the weights overflow on this image; stopped before \
writing that epoch. The last good checkpoint is $T/b/checkpoint.safetensors' '$T/nanev.log'" "$(tail -2 "$T/nanev.log")"
check "... before its Test line and anything of the epoch is written (checkpoint, metrics, weights)" \
    "! grep -q '^Test: epoch 3' '$T/nanev.log' && same '$T/good' '$T/b' checkpoint.safetensors metrics.csv \
     weights.safetensors weights_best.safetensors" "$(cat "$T/b/metrics.csv")"
SMALL="vit_fmnist_tiny --data fashion-mnist --train-subset 256 --test-subset 128 --epochs 1"
$V train $SMALL --model-ema --out "$T/em" >"$T/em.log" 2>&1
cp -r "$T/em" "$T/em0"
$V train vit_fmnist_tiny --resume "$T/em" --epochs 2 --fault-nan-eval 1 >"$T/emn.log" 2>&1
rc=$?
check "... the EMA's validation too (the weights' Test line printed), the run folder unchanged" "[ $rc -eq 1 ] && \
    grep -q '^Test: epoch 1 ' '$T/emn.log' && grep -qF 'vitc: validation of the model EMA at epoch 1 failed: image 0: \
the model'\''s logits are not finite (class 0 is nan)' '$T/emn.log' && grep -qF 'that epoch. The last good checkpoint \
is $T/em/checkpoint.safetensors' '$T/emn.log' && same '$T/em0' '$T/em' checkpoint.safetensors metrics.csv \
    weights.safetensors weights_ema.safetensors" "rc $rc: $(tail -3 "$T/emn.log")"
$V train vit_fmnist_tiny --resume "$T/em" --epochs 2 --out "$T/em2" --fault-nan-eval 1 >"$T/em2.log" 2>&1
check "... a resume into another folder names the checkpoint it resumed, and writes none" "[ $? -eq 1 ] && grep -qF \
'The last good checkpoint is $T/em/checkpoint.safetensors' '$T/em2.log' && [ ! -e '$T/em2/checkpoint.safetensors' ]" \
    "$(tail -2 "$T/em2.log")"
$V train vit_fmnist_tiny --resume "$T/em" --epochs 2 --out "$T/em3" --fault-nan-step 2 >"$T/em3.log" 2>&1
check "... and so does a NaN loss in its first epoch" "[ $? -eq 1 ] && grep -qF \
'loss is NaN at step 2 (epoch 1, batch 1 of 2, as the progress lines count); stopped. The last good checkpoint is \
$T/em/checkpoint.safetensors' '$T/em3.log'" "$(tail -2 "$T/em3.log")"
# an EMA of decay 0 (the weights themselves, allowed) is an EMA all the same: its resume keeps it
$V train $SMALL --model-ema --model-ema-decay 0 --out "$T/ez" >/dev/null 2>&1 &&
    $V train vit_fmnist_tiny --resume "$T/ez" --epochs 2 >"$T/ez.log" 2>&1
check "a resume of a run with --model-ema-decay 0 keeps its EMA" "[ $? -eq 0 ] && grep -q '^Test (EMA): epoch 1' \
    '$T/ez.log' && ! grep -q 'model-ema' '$T/ez.log'" "$(grep -v '^ ' "$T/ez.log")"
# --model-ema given again on a resume keeps the recorded decay (it fell back to the default 0.99996)
$V train $SMALL --model-ema --model-ema-decay 0.9 --out "$T/ed" >/dev/null 2>&1 &&
    $V train vit_fmnist_tiny --resume "$T/ed" --epochs 2 --model-ema >"$T/ed.log" 2>&1
check "... and one repeating --model-ema keeps the recorded decay" "[ $? -eq 0 ] && grep -q '^Test (EMA): epoch 1' \
    '$T/ed.log' && ! grep -q 'model-ema-decay' '$T/ed.log'" "$(grep -v '^ ' "$T/ed.log")"
# another model's checkpoint is named as such before its recorded options are tried on this model
$V train swin_fmnist_tiny --depths 1,1 --data fashion-mnist --train-subset 64 --test-subset 32 --batch-size 32 \
    --epochs 1 --out "$T/swrun" >/dev/null 2>&1 &&
    $V train vit_fmnist_tiny --resume "$T/swrun" --epochs 2 >"$T/swrun.log" 2>&1
check "a resume under another model says whose checkpoint it is (not that its --depths 1,1 does not fit)" \
    "[ $? -eq 1 ] && grep -qF 'holds a checkpoint of swin_fmnist_tiny, not vit_fmnist_tiny' '$T/swrun.log'" \
    "$(cat "$T/swrun.log")"
/usr/bin/python3 - "$T" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np, st
w = st.load(f"{sys.argv[1]}/a/weights.safetensors")
w["head.weight"] = np.full_like(w["head.weight"], 3e38)  # finite weights whose logits overflow float32
st.save(f"{sys.argv[1]}/big.safetensors", w)
PY
$V eval vit_fmnist_tiny --weights "$T/big.safetensors" --data fashion-mnist --test-subset 64 >"$T/ebig.log" 2>&1
check "eval of weights whose logits overflow: exit 1, naming the image and the class, no accuracy" "[ $? -eq 1 ] && \
    grep -q \"^vitc: image 0: the model's logits are not finite (class [0-9] is \" '$T/ebig.log' && \
    ! grep -q 'accuracy' '$T/ebig.log'" "$(cat "$T/ebig.log")"

cp -r "$T/a" "$T/old"
cp "$T/old/metrics.csv" "$T/old.csv"
cp "$T/old/checkpoint.safetensors" "$T/old.ckpt"
$V train $COMMON --epochs 1 --out "$T/old" >"$T/old.log" 2>&1
rc=$?
check "a fresh run in a folder holding another run is refused" "[ $rc -eq 1 ] && grep -q -- '--overwrite' '$T/old.log'" \
    "rc $rc: $(cat "$T/old.log")"
check "... and leaves its history untouched" "cmp -s '$T/old.csv' '$T/old/metrics.csv' && cmp -s '$T/old.ckpt' '$T/old/checkpoint.safetensors'"
$V train $COMMON --epochs 1 --out "$T/old" --overwrite >"$T/old.log" 2>&1
check "--overwrite starts a new metrics.csv" "[ \$(wc -l <'$T/old/metrics.csv') -eq 2 ]" "$(cat "$T/old/metrics.csv")"
# --overwrite with a checkpoint of another folder: the folder then holds that run alone (its metrics rows up to the
# checkpoint, then the new ones, the clock going on; no file of the replaced run, e.g. its EMA weights)
OW="vit_fmnist_tiny --data fashion-mnist --train-subset 256 --test-subset 64 --batch-size 64 --threads 1"
$V train $OW --epochs 2 --out "$T/ow_a" >/dev/null 2>&1
$V train $OW --epochs 1 --model-ema --out "$T/ow_b" >/dev/null 2>&1
$V train $OW --epochs 3 --resume "$T/ow_a" --out "$T/ow_b" --overwrite >"$T/ow.log" 2>&1
rc=$?
r=$(/usr/bin/python3 - "$T/ow_a/metrics.csv" "$T/ow_b/metrics.csv" <<'EOF'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
secs = [float(r["seconds"]) for r in b]
ok = [r["epoch"] for r in b] == ["1", "2", "3"] and b[:2] == a[:2] and secs == sorted(secs) and secs[2] > secs[1]
print("ok" if ok else f"{[(r['epoch'], r['step'], r['seconds']) for r in b]}")
EOF
)
check "--resume A --out B --overwrite: B holds A's rows, then its own, seconds going on; B's EMA file gone" \
    "[ $rc -eq 0 ] && [ '$r' = ok ] && [ ! -e '$T/ow_b/weights_ema.safetensors' ]" "rc $rc: $r $(tail -2 "$T/ow.log")"
# a replacing run that fails before its first checkpoint leaves nothing of the run it replaced to resume
$V train $OW --epochs 1 --out "$T/ow_b" --overwrite --fault-nan-step 1 >"$T/ow2.log" 2>&1
rc=$?
check "... one that fails at its first steps leaves no file of the replaced run (checkpoint, weights, metrics)" \
    "[ $rc -eq 1 ] && [ ! -e '$T/ow_b/checkpoint.safetensors' ] && [ ! -e '$T/ow_b/weights.safetensors' ] && \
     [ ! -e '$T/ow_b/metrics.csv' ]" "rc $rc: $(ls "$T/ow_b")"
$V train $OW --epochs 3 --resume "$T/ow_a" --overwrite >"$T/ow3.log" 2>&1
check "--overwrite on a run resumed in its own folder refused (no effect: 2)" "[ $? -eq 2 ] && \
    grep -q 'no effect on a run resumed in its own folder' '$T/ow3.log'" "$(cat "$T/ow3.log")"
$V train vit_fmnist_small --data fashion-mnist --epochs 1 --out "$T/old" --resume "$T/old" >"$T/other.log" 2>&1
check "resuming another model's checkpoint is refused" "[ $? -eq 1 ] && grep -q 'checkpoint of vit_fmnist_tiny' '$T/other.log'" \
    "$(cat "$T/other.log")"
# weights (or curves) with no checkpoint beside them are not a run's to replace: a fresh run there is refused and
# leaves them; --overwrite replaces them
mkdir -p "$T/userw" && cp "$T/good.safetensors" "$T/userw/weights.safetensors"
$V train $COMMON --epochs 1 --out "$T/userw" >"$T/userw.log" 2>&1
check "a folder holding weights.safetensors but no checkpoint is refused, the file kept" "[ $? -eq 1 ] && \
    grep -q 'holds weights.safetensors but no checkpoint.safetensors' '$T/userw.log' && \
    cmp -s '$T/good.safetensors' '$T/userw/weights.safetensors' && [ ! -e '$T/userw/metrics.csv' ]" "$(cat "$T/userw.log")"
mkdir -p "$T/foreign"
printf 'a,b,c\n1,2,3\n' >"$T/foreign/metrics.csv"
$V train $COMMON --epochs 1 --out "$T/foreign" >"$T/foreign.log" 2>&1
check "a foreign metrics.csv is refused at start-up, nothing written beside it" "[ $? -eq 1 ] && \
    grep -q 'holds metrics.csv but no checkpoint.safetensors .*: there is nothing to resume; replace it with \
--overwrite' '$T/foreign.log' && ! grep -q '^Train:' '$T/foreign.log' && \
    [ \"\$(ls -A '$T/foreign')\" = metrics.csv ] && grep -q '^1,2,3' '$T/foreign/metrics.csv'" "$(cat "$T/foreign.log")"
# --overwrite replaces a run folder's files (here a foreign metrics.csv; below, another run's)
$V train $COMMON --epochs 1 --out "$T/foreign" --overwrite >"$T/foreign.log" 2>&1
check "... and replaced with --overwrite" "[ $? -eq 0 ] && head -1 '$T/foreign/metrics.csv' | grep -q '^epoch,step' && \
    ! grep -q '^1,2,3' '$T/foreign/metrics.csv'" "$(tail -3 "$T/foreign.log")"
$V train $COMMON --epochs 2 --out "$T/locked" >"$T/l1.log" 2>&1 &
first=$!
for _ in $(seq 50); do [ -e "$T/locked/.lock" ] && break; sleep 0.1; done
$V train $COMMON --epochs 1 --out "$T/locked" --overwrite >"$T/l2.log" 2>&1
rc=$?
wait $first
check "two runs on one folder: the second is refused" "[ $rc -eq 1 ] && grep -q 'in use by another vitc process' '$T/l2.log'" \
    "rc $rc: $(cat "$T/l2.log")"
check "... and the first one completes" "[ \$(wc -l <'$T/locked/metrics.csv') -eq 3 ]"
# resuming a folder whose run holds its lock and has no checkpoint yet (a run still in its first epoch; the lock held
# here by python's fcntl lock, which is the kind vitc takes) says so, rather than that the checkpoint is missing
mkdir -p "$T/starting"
/usr/bin/python3 -c "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)" \
    "$T/starting/.lock" >"$T/holder.log" &
holder=$!
for _ in $(seq 50); do grep -q held "$T/holder.log" && break; sleep 0.1; done
$V train vit_fmnist_tiny --resume "$T/starting" >"$T/rs.log" 2>&1
rc=$?
kill $holder 2>/dev/null; wait $holder 2>/dev/null
check "--resume of a run still before its first checkpoint says it is running" \
    "[ $rc -eq 1 ] && grep -q 'a vitc process is running there and has written no checkpoint yet' '$T/rs.log'" \
    "rc $rc: $(cat "$T/rs.log")"

$V eval vit_fmnist_tiny --weights "$T/a/weights.safetensors" --data fashion-mnist --test-subset 256 >"$T/e.log" 2>&1
check "eval prints accuracy" "grep -Eq 'top-1 accuracy [0-9.]+%' '$T/e.log'" "$(cat "$T/e.log")"
# a zeroed head ties every logit: the first tied index is top-1 (class 0), and the first five (classes 0-4) are
# top-5, as torch's topk orders ties, not every class (it had counted top-5 100%)
/usr/bin/python3 - "$T/a/weights.safetensors" "$T/tie.safetensors" <<'PYEOF'
import sys
sys.path.insert(0, "tests/reference")
import st
t = st.load(sys.argv[1])
t["head.weight"][...] = 0
t["head.bias"][...] = 0
st.save(sys.argv[2], t)
PYEOF
$V eval vit_fmnist_tiny --weights "$T/tie.safetensors" --data fashion-mnist --test-subset 256 >"$T/tie.log" 2>&1
tie_want=$(/usr/bin/python3 -c "
import gzip
l = gzip.open('/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz').read()[8:8 + 256]
print('top-1 accuracy %.2f%%, top-5 accuracy %.2f%%' % (100 * sum(x == 0 for x in l) / 256, 100 * sum(x < 5 for x in l) / 256))")
check "eval of tied logits: top-1 and top-5 take the first tied classes (${tie_want})" \
    "[ -n '$tie_want' ] && grep -qF '$tie_want' '$T/tie.log'" "$(cat "$T/tie.log")"

$V train no_such_model --data fashion-mnist --out "$T/c" >"$T/u.log" 2>&1
check "unknown model rejected" "[ $? -ne 0 ] && grep -q \"unknown model 'no_such_model'\" '$T/u.log'"
$V train vit_fmnist_tiny --data cifar --out "$T/c" >"$T/d.log" 2>&1
check "unknown dataset rejected" "[ $? -ne 0 ] && grep -q 'unknown dataset' '$T/d.log'"
$V train deit_tiny_patch16_224 --data fashion-mnist --out "$T/c" >"$T/s.log" 2>&1
check "wrong input size rejected" "[ $? -ne 0 ] && grep -q 'img-size 28' '$T/s.log'"
$V train refiner_vit_s_dense --num-classes 2 --img-size 32 --data fashion-mnist --out "$T/rd" >"$T/rd.log" 2>&1
check "a Refiner _dense model (eval adds a token-labelling head vitc cannot train) refused (2), naming the plain one" \
    "[ $? -eq 2 ] && grep -q 'untrained head. Train refiner_vit_s (' '$T/rd.log' && [ ! -e '$T/rd' ]" \
    "$(cat "$T/rd.log")"
# Refined-ViT's cos_reg term (2 pairs of block maps by default): a training graph of too few blocks for it is refused,
# naming --cos-reg; the model itself is not (info, and eval of the run's weights); a checkpoint of vitc 0.6.0 (no
# cos-reg setting recorded) resumes without the term, as it trained, and says so
RF="refiner_vit_s --data fashion-mnist --img-size 28 --in-chans 1 --num-classes 10 --dims 64 --heads 2 --train-subset 32
    --test-subset 16 --batch-size 16 --threads 1"
$V train $RF --depths 2 --epochs 1 --out "$T/rf2" >"$T/rf2.log" 2>&1
check "Refined-ViT with 2 blocks: its default cos_reg over 2 pairs refused, naming --cos-reg" "[ $? -eq 1 ] && \
    grep -q 'cos_reg: the term over 2 pairs of block maps needs 3 blocks, the model has 2: give --cos-reg 1 or fewer' \
    '$T/rf2.log' && [ ! -e '$T/rf2' ]" "$(cat "$T/rf2.log")"
$V train $RF --depths 2 --epochs 1 --cos-reg 1 --out "$T/rf2" >"$T/rf2.log" 2>&1 && \
    $V eval refiner_vit_s --weights "$T/rf2/weights.safetensors" --data fashion-mnist --test-subset 16 >"$T/rf2e.log" 2>&1
check "... with --cos-reg 1 it trains, and its weights evaluate (the term is a training setting)" "[ $? -eq 0 ] && \
    grep -q 'top-1 accuracy' '$T/rf2e.log'" "$(tail -n 3 "$T/rf2.log" "$T/rf2e.log")"
$V train $RF --depths 4 --epochs 1 --out "$T/rf4" >"$T/rf4.log" 2>&1
check "... a 4-block run records cos-reg 2" "[ $? -eq 0 ] && [ \"\$(meta '$T/rf4/checkpoint.safetensors' cos-reg)\" = 2 ]" \
    "$(tail -3 "$T/rf4.log")"
rerecord "$T/rf4/checkpoint.safetensors" "$T/rf4/ck.safetensors" cos-reg && mv "$T/rf4/ck.safetensors" "$T/rf4/checkpoint.safetensors"
$V train refiner_vit_s --resume "$T/rf4" --epochs 2 >"$T/rf4r.log" 2>&1
check "... its checkpoint without the setting (vitc 0.6.0) resumes with --cos-reg 0, said" "[ $? -eq 0 ] && \
    grep -q 'records no cos-reg setting (vitc 0.6.0 or earlier, which had no cos_reg term): resumed with --cos-reg 0' \
    '$T/rf4r.log' && [ \"\$(meta '$T/rf4/checkpoint.safetensors' cos-reg)\" = 0 ]" "$(grep -v '^ ' "$T/rf4r.log")"
$V bench vit_fmnist_tiny --batch-size 8 --iters 2 >"$T/bench.log" 2>&1
check "bench reports img/s and GFLOP/s" "grep -q 'img/s' '$T/bench.log' && grep -q 'GFLOP/s' '$T/bench.log'"
$V bench vit_fmnist_tiny --batch-size 8 --iters 2 --train --profile >"$T/prof.log" 2>&1
check "bench --profile: time per op with its kind (a fused op's share in GEMM calls), the split by kind and the 12 slowest nodes" \
    "grep -Eq '^linear(\\.[a-z_]+)? +[0-9.]+ +[0-9.]+% +[0-9]+ +gemm$' '$T/prof.log' &&
     grep -Eq '^attention +[0-9.]+ +[0-9.]+% +[0-9]+ +fused \\([0-9.]+% in GEMM calls\\)$' '$T/prof.log' &&
     grep -Eq '^by kind: GEMM ops [0-9.]+%, .* [0-9.]+% \\([0-9.]+% in their GEMM calls\\), other ops [0-9.]+%; '\
'outside GEMM calls [0-9.]+%$' '$T/prof.log' &&
     [ \$(sed -n '/^slowest nodes/,/img.s/p' '$T/prof.log' | grep -Ec '^[0-9]+ ') -eq 12 ]" \
    "$(cat "$T/prof.log")"
# numeric options: a value outside its range, NaN/Inf or garbage is refused (never replaced by the default); blanks
# around a value too, leading as trailing
$V info vit_fmnist_tiny --img-size " 28" >"$T/r.log" 2>&1
check "refused: an integer with a leading blank" "[ $? -eq 2 ] && grep -qF \"bad value ' 28' for --img-size\" '$T/r.log'" \
    "$(cat "$T/r.log")"
while IFS='|' read -r args want; do
    $V $args >"$T/r.log" 2>&1
    rc=$?
    check "refused: vitc $args" "[ $rc -eq 2 ] && grep -qF -- \"$want\" '$T/r.log'" "rc $rc: $(cat "$T/r.log")"
done <<'EOF'
info deit_tiny_patch16_224 --img-size 0|--img-size must be in [1, 4096], got 0
info deit_tiny_patch16_224 --img-size -5|--img-size must be in [1, 4096], got -5
info deit_tiny_patch16_224 --num-classes 0|--num-classes must be in [1, 100000], got 0
bench vit_fmnist_tiny --batch-size 0|--batch-size must be in [1, 65536], got 0
bench vit_fmnist_tiny --batch-size 100000000|--batch-size must be in [1, 65536]
train vit_fmnist_tiny --lr nan|bad value 'nan' for --lr (not finite; expected a number in (0, 10])
train vit_fmnist_tiny --lr 0|--lr must be in (0, 10], got 0
train vit_fmnist_tiny --smoothing inf|bad value 'inf' for --smoothing (not finite; expected a number in [0, 1))
train vit_fmnist_tiny --smoothing 1|--smoothing must be in [0, 1), got 1
train vit_fmnist_tiny --lr 0x1p-3|bad value '0x1p-3' for --lr (not a decimal number; expected a number in (0, 10])
train vit_fmnist_tiny --epochs 1x|bad value '1x' for --epochs (not an integer; expected an integer in [1, 1000000])
info vit_fmnist_tiny --img-size 2.5|bad value '2.5' for --img-size (not an integer; expected an integer in [1, 4096])
info nextvit_small --heads 4|Next-ViT's widths (96, 256, 512, 1024) and heads (3, 6, 12, 24
info pvt_tiny --attn msf|stage 1 attention 'msf' is not defined in PVT
info vit_fmnist_tiny_gap --attn gma --heads 3|stage 1 attention gma always runs 8 heads, so --heads 3 can have no effect there
info groupmixformer_m --heads 8,8,4,8|stage 3 attention gma always runs 8 heads
info swin_t --heads 2 --attn gma|attention 'gma' is not defined in Swin's torchvision layout
predict deit_tiny_patch16_224 -w w.safetensors --topk 65 x.png|--topk 65: at most 64 classes are listed per image (deit_tiny_patch16_224 has 1000)
grad vit_fmnist_tiny --lr 1e-3|--lr has no effect with --steps 1
grad vit_fmnist_tiny --steps 1 --weight-decay 0.1|--weight-decay has no effect with --steps 1
train vit_fmnist_tiny --model-ema-decay 0.9|--model-ema-decay has no effect without a weight EMA
train vit_fmnist_tiny --data fashion-mnist --epochs 1 --cooldown-epochs 1000000 --out /dev/null/run|at most 1000000 epochs (here 1 and 1000000 of cooldown)
train vit_fmnist_tiny --cos-reg 2|vit_fmnist_tiny has no cos_reg term (the Refiner's official training alone adds one)
grad refiner_vit_s --cos-reg 65|--cos-reg must be in [0, 64], got 65
train vit_fmnist_tiny --mixup-prob 0.5|--mixup-prob has no effect with mixing off
train vit_fmnist_tiny --mixup 0.8 --mixup-switch-prob 0.3|--mixup-switch-prob chooses between Mixup and CutMix
train vit_fmnist_tiny --epochs 2 --warmup-epochs 3|--warmup-epochs 3 does not end within the run (--epochs 2)
train vit_fmnist_tiny --epochs 2 --warmup-epochs 2|--warmup-epochs 2 does not end within the run (--epochs 2): the learning rate would never reach its peak; give less than 2
train vit_fmnist_tiny --recipe deit --epochs 3 --warmup-epochs 2|--warmup-epochs 2 does not end within the run (--epochs 3) (the learning rate changes once an epoch, after it, as DeiT's main.py steps it): the learning rate would never reach its peak; give at most 1
train vit_fmnist_tiny --warmup-epochs 0 --warmup-lr 1e-7|--warmup-lr has no effect without a warm-up (--warmup-epochs is 0)
info swin_fmnist_tiny --windows +7|--windows '+7': expected comma-separated integers in [1, 65536]
train vit_fmnist_tiny --recipe nope|unknown recipe 'nope' (known: default, deit
train vit_fmnist_tiny --recipe list --epochs 3|--recipe list prints the recipes and takes no other option (got --epochs)
bench vit_fmnist_tiny --workers 2|--workers sets the input pipeline's threads, which only --data DIR runs
bench vit_fmnist_tiny --drop-path 0.1|--drop-path acts only in a training step
bench vit_fmnist_tiny --ffn cffn --train --train-form|a training step (--train) always runs the training form
bench vit_fmnist_tiny --train --no-prepack|--no-prepack concerns inference graphs; a training step (--train) keeps no prepared weight copies
train vit_fmnist_tiny --no-prepack|unknown option '--no-prepack'
eval vit_fmnist_tiny --weights w.safetensors --classes c.json|--classes checks an image folder's classes
init vit_fmnist_tiny -o -w|option -o needs a value, got the option -w
init vit_fmnist_tiny --seed 99999999999999999999999|--seed must be in [0, 9.2e+18], got 99999999999999999999999
train vit_fmnist_tiny --epochs 99999999999999999999|--epochs must be in [1, 1000000], got 99999999999999999999
list extra|vitc list: unexpected argument 'extra'
EOF
$V bench deit_tiny_patch16_224 --batch-size 65536 --iters 1 >"$T/big.log" 2>&1
rc=$?
check "a tensor over 2^31 elements is refused with a message" \
    "[ $rc -eq 1 ] && grep -q \"exceed the engine's limit\" '$T/big.log'" "rc $rc: $(cat "$T/big.log")"

for c in list info init forward grad train eval bench deploy predict; do
    $V $c --help >"$T/h.log" 2>&1
    check "$c --help" "[ $? -eq 0 ] && grep -q usage '$T/h.log'"
done
# a file that cannot be opened: the message names the option that gave it
$V predict vit_fmnist_tiny -w "$T/none.safetensors" "$T/none.png" >"$T/nw.log" 2>&1
check "a missing --weights file named as --weights" \
    "[ $? -eq 1 ] && grep -q '^vitc: --weights: cannot open .*none.safetensors' '$T/nw.log'" "$(cat "$T/nw.log")"
$V init vit_fmnist_tiny -o "$T/nw.safetensors" >/dev/null &&
    $V forward vit_fmnist_tiny -w "$T/nw.safetensors" --input "$T/none.safetensors" -o "$T/no.safetensors" \
    >"$T/ni.log" 2>&1
check "... and a missing --input file as --input" \
    "[ $? -eq 1 ] && grep -q '^vitc: --input: cannot open .*none.safetensors' '$T/ni.log'" "$(cat "$T/ni.log")"
ver=$(sed -n 's/^#define VITC_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' include/vitc/api.h | paste -sd.)
check "vitc --version prints api.h's version ($ver)" "[ \"\$($V --version)\" = 'vitc $ver' ]" "$($V --version 2>&1)"

# bench --profile --json: stdout is exactly one JSON object, the profile table goes to stderr
$V bench vit_fmnist_tiny --batch-size 2 --iters 2 --json --profile >"$T/pj.json" 2>"$T/pj.err"
check "bench --profile --json: stdout is one JSON object, the table on stderr" \
    "[ $? -eq 0 ] && /usr/bin/python3 -m json.tool '$T/pj.json' >/dev/null && grep -q '^slowest nodes' '$T/pj.err'" \
    "$(head -c 600 "$T/pj.json")"

# explicit --min-lr and --warmup-lr are used as given, not scaled with the batch by the swin recipe (as --lr is not)
$V train $SMALL --recipe swin --batch-size 16 --min-lr 1e-5 --warmup-lr 1e-6 --out "$T/sw" >"$T/sw.log" 2>&1
check "--recipe swin --min-lr 1e-5 --warmup-lr 1e-6: recipe.json and the printed recipe hold them unscaled" \
    "[ $? -eq 0 ] && grep -q '\"min_lr\":.1e-05,' '$T/sw/recipe.json' && grep -q '\"warmup_lr\":.1e-06,' '$T/sw/recipe.json' \
     && grep -Eq '^  min_lr +1e-05$' '$T/sw.log' && grep -Eq '^  warmup_lr +1e-06$' '$T/sw.log'" \
    "$(grep -E 'lr' "$T/sw/recipe.json" 2>/dev/null) $(tail -2 "$T/sw.log")"
check "... and says that on Fashion-MNIST the recipe's DeiT transforms do not run (crop + flip)" \
    "grep -q '^Train transform: crop + flip: the recipe.s DeiT transforms (.*) run on image folders only' '$T/sw.log'" \
    "$(grep -v '^Train:' "$T/sw.log" | head -5)"

# a final learning rate above the peak is refused whatever its source, naming it and the way out
$V train $SMALL --lr 1e-6 --out "$T/lo" >"$T/lo.log" 2>&1
check "--lr 1e-6 under the default --min-lr 1e-5 refused, naming the default and --min-lr" \
    "[ $? -eq 2 ] && grep -qF 'final learning rate 1e-05 (the default --min-lr) is above the peak 1e-06 (--lr): give --min-lr' \
     '$T/lo.log' && [ ! -e '$T/lo' ]" "$(cat "$T/lo.log")"
$V train $SMALL --recipe deit --batch-size 2 --out "$T/lo" >"$T/lo.log" 2>&1
check "... and under a recipe's, naming the recipe" \
    "[ $? -eq 2 ] && grep -qF \"(the deit recipe's --min-lr) is above the peak\" '$T/lo.log'" "$(cat "$T/lo.log")"
# so is a warm-up starting above the peak (it would lower the learning rate), naming both values and their sources
$V train $SMALL --lr 1e-4 --warmup-lr 1e-3 --out "$T/lo" >"$T/lo.log" 2>&1
check "--warmup-lr 1e-3 above --lr 1e-4 refused, naming both" "[ $? -eq 2 ] && grep -qF \
\"vitc: the warm-up's starting learning rate 0.001 (--warmup-lr) is above the peak 0.0001 (--lr): the warm-up would \
lower the learning rate to its peak; give --warmup-lr at most 0.0001 (e.g. --warmup-lr 0)\" '$T/lo.log' && \
    [ ! -e '$T/lo' ]" "$(cat "$T/lo.log")"
$V train $SMALL --recipe deit --lr 1e-7 --min-lr 0 --out "$T/lo" >"$T/lo.log" 2>&1
check "... and a recipe's above a given --lr, naming the recipe" "[ $? -eq 2 ] && grep -qF \
\"starting learning rate 1e-06 (the deit recipe's --warmup-lr) is above the peak 1e-07 (--lr)\" '$T/lo.log'" \
    "$(cat "$T/lo.log")"
$V train $SMALL --lr 5e-7 --out "$T/lo" >"$T/lo.log" 2>&1
check "... both defaults above --lr 5e-7: both named at once" "[ $? -eq 2 ] && grep -qF \
'final learning rate 1e-05 (the default --min-lr) is above the peak 5e-07' '$T/lo.log' && grep -qF \
'starting learning rate 1e-06 (the default --warmup-lr) is above the peak 5e-07' '$T/lo.log'" "$(cat "$T/lo.log")"

# a recipe's warm-up longer than the run (not given: given, it is refused) runs as timm's scheduler would, never
# reaching the peak, with a note saying so and how to change it; the note names the checkpoint on a resume
check "a recipe's warm-up longer than the run: a note naming it and the way out" "grep -qF \
\"Note: the warm-up of 5 epochs (the deit recipe's --warmup-epochs) does not end within the run's 1 epoch (the \
learning rate changes once an epoch, after it, as DeiT's main.py steps it): the learning rate stays at the warm-up's \
first value 0.0001 for the whole run, never reaching its peak 0.002; give --warmup-epochs at most 0 to change it\" \
'$T/v1.log'" "$(grep -v '^ ' "$T/v1.log" | head -5)"
check "... a resume taking it from the checkpoint says so too (2 epochs under DeiT's lag: still the first value)" \
    "grep -qF \"Note: the warm-up of 5 epochs (--warmup-epochs recorded in $T/v/checkpoint.safetensors) does not end \
within the run's 2 epochs (the learning rate changes once an epoch, after it, as DeiT's main.py steps it): the learning \
rate stays at the warm-up's first value\" '$T/v2.log'" "$(grep -v '^ ' "$T/v2.log" | head -5)"
check "... and a warm-up within the run gets no note" "! grep -q 'Note: the warm-up' '$T/a.log' '$T/b2.log'"
mkdir -p "$T/nodata"
$V train vit_fmnist_tiny --recipe deit --epochs 1 --data "$T/nodata" --out "$T/nd" >"$T/nd.log" 2>&1
check "... the note comes after the data's checks: a run refused for its folder prints only the error" \
    "[ $? -eq 1 ] && ! grep -q 'Note: the warm-up' '$T/nd.log' && grep -q 'nodata' '$T/nd.log'" "$(cat "$T/nd.log")"

# --augment turns augmentation back on when resuming a --no-augment run (a resume takes the recorded setting)
check "weight files, the EMA's too, record the model, the options that changed it and the heads" \
    "[ \"\$(meta '$T/u/weights_ema.safetensors' vitc_model_options)\" = '--heads 2' ] && \
     [ \"\$(meta '$T/u/weights_best.safetensors' vitc_model_options)\" = '--heads 2' ] && \
     [ \"\$(meta '$T/u/weights_ema.safetensors' vitc_model)\" = vit_fmnist_tiny ] && \
     [ \"\$(meta '$T/u/weights_ema.safetensors' vitc_heads)\" = 2 ]"
$V train $SMALL --no-augment --out "$T/na" >"$T/na.log" 2>&1
$V train vit_fmnist_tiny --resume "$T/na" --epochs 2 --out "$T/na0" >"$T/na0.log" 2>&1
check "a resume of a --no-augment run stays without augmentation" "[ $? -eq 0 ] && \
    [ \"\$(meta '$T/na0/checkpoint.safetensors' augment)\" = 0 ] && grep -q '^Note: this resumed run changes epochs 1 → 2$' \
    '$T/na0.log'" "$(grep -v '^ ' "$T/na0.log" | head -5)"
$V train vit_fmnist_tiny --resume "$T/na" --epochs 2 --augment --out "$T/na1" >"$T/na1.log" 2>&1
check "... with --augment it augments again, named in the note and recorded" "[ $? -eq 0 ] && \
    [ \"\$(meta '$T/na1/checkpoint.safetensors' augment)\" = 1 ] && \
    grep -q '^Note: this resumed run changes epochs 1 → 2, augment 0 → 1$' '$T/na1.log'" \
    "$(grep -v '^ ' "$T/na1.log" | head -5)"
$V train vit_fmnist_tiny --resume "$T/na1" --epochs 3 --no-augment --augment >"$T/na2.log" 2>&1
check "... --augment with --no-augment refused as a contradiction (a usage error: 2)" "[ $? -eq 2 ] && \
    grep -q -- '--augment and --no-augment contradict each other' '$T/na2.log'" "$(cat "$T/na2.log")"
# --test-subset 0 takes every test image again in a resume of a subset run (SMALL's 128)
$V train vit_fmnist_tiny --resume "$T/na" --epochs 2 --test-subset 0 --out "$T/ts0" >"$T/ts0.log" 2>&1
check "a resume with --test-subset 0 evaluates every test image, recorded and named in the note" "[ $? -eq 0 ] && \
    [ \"\$(meta '$T/ts0/checkpoint.safetensors' test-subset)\" = 0 ] && \
    grep -q '^Note: this resumed run changes epochs 1 → 2, test-subset 128 → 0$' '$T/ts0.log'" "$(cat "$T/ts0.log")"

# options that change nothing: a notice where refusing would break scripts; a resume's recorded settings never count
$V train foo --recipe list >"$T/rl.log" 2>&1
check "train foo --recipe list: the unknown model refused (2)" "[ $? -eq 2 ] && grep -q \"unknown model 'foo'\" '$T/rl.log'" \
    "$(head -3 "$T/rl.log")"
$V train groupmixformer_s --recipe list >"$T/rls.log" 2>&1
check "train MODEL --recipe list: a recipe leaving drop-path to the model shows the model's rate (GroupMixFormer-S 0.2)" \
    "[ $? -eq 0 ] && awk '/^Recipe groupmixformer/ {g = 1} g && \$1 == \"drop_path\" {print \$2; exit}' '$T/rls.log' | grep -qx 0.2" \
    "$(grep -A25 '^Recipe groupmixformer' "$T/rls.log")"
$V train $SMALL --bucket-mib 8 --no-overlap --out "$T/bk" >"$T/bk.log" 2>&1
check "--bucket-mib and --no-overlap outside mpirun: a notice, and the run goes on" "[ $? -eq 0 ] && grep -q \
'^vitc: notice: --bucket-mib and --no-overlap: gradient averaging happens only under mpirun' '$T/bk.log'" "$(head -3 "$T/bk.log")"
$V train vit_fmnist_tiny --resume "$T/bk" --epochs 2 --model-ema-decay 0.9 >"$T/bk2.log" 2>&1
check "... --model-ema-decay refused on the resume of a run without an EMA" \
    "[ $? -eq 2 ] && grep -q 'model-ema-decay has no effect' '$T/bk2.log'" "$(cat "$T/bk2.log")"
$V train vit_fmnist_tiny --resume "$T/bk" --epochs 2 >"$T/bk2.log" 2>&1
check "... its resume, whose recorded --mixup-prob, --mixup-switch-prob and --warmup-epochs are not given, runs" \
    "[ $? -eq 0 ] && ! grep -q 'no effect\\|notice' '$T/bk2.log'" "$(head -3 "$T/bk2.log")"
/usr/bin/python3 -c "from PIL import Image; Image.new('L', (28, 28), 90).save('$T/img.png')"
$V predict vit_fmnist_tiny -w "$T/a/weights.safetensors" --topk 100 "$T/img.png" >"$T/pk.log" 2>"$T/pk.err"
check "predict --topk above the classes: a notice, all 10 listed" "[ $? -eq 0 ] && \
    grep -q '^vitc: notice: --topk 100 is more than the 10 classes of vit_fmnist_tiny: listing 10' '$T/pk.err' && \
    [ \$(grep -c '^  [0-9]*\\. class' '$T/pk.log') -eq 10 ]" "$(cat "$T/pk.err" "$T/pk.log")"
$V predict vit_fmnist_tiny -w "$T/a/weights.safetensors" --batch-size 65 $(printf "$T/img.png %.0s" $(seq 65)) \
    >"$T/pb.log" 2>"$T/pb.err"
check "predict --batch-size 65 runs 65 images in one batch (no progress lines), not capped at 64" \
    "[ $? -eq 0 ] && [ \$(grep -c '^$T/img.png' '$T/pb.log') -eq 65 ] && ! grep -q '^predict' '$T/pb.err'" \
    "$(head -3 "$T/pb.err")"

# help: what each option does in that command
# (an option's help on one line: its first and the indented lines that continue it, as --help fills them)
help_line() {
    $V "$1" --help | awk -v re="^  $2 " 'BEGIN {pad = sprintf("%21s", "")} $0 ~ re {if (p) print s; p = 1; s = $0; next}
        p && index($0, pad) == 1 && substr($0, 22, 1) != " " {s = s " " substr($0, 22); next}
        p {print s; p = 0} END {if (p) print s}'
}
check "grad --help: --steps runs N passes and N-1 AdamW steps; --lr and --weight-decay give their defaults" \
    "help_line grad --steps | grep -q 'N-1 in all' && help_line grad --lr | grep -q 'default 1e-3' && \
     help_line grad --weight-decay | grep -q 'default 0;'" "$(help_line grad '--(steps|lr|weight-decay)')"
check "forward --help: --features writes one map per stage; --img-size defaults to the input's" \
    "help_line forward --features | grep -q 'one per stage' && ! help_line forward --features | grep -q four && \
     help_line forward --img-size | grep -q 'size of .input.'" "$(help_line forward '--(features|img-size)')"
check "attention --help: --heads selects the heads to draw; info --help: --heads is the architecture's" \
    "help_line attention --heads | grep -q 'heads to draw' && ! help_line attention --heads | grep -q 'per stage' && \
     ! help_line info --heads | grep -q draw" "$(help_line attention --heads)"
check "bench --help: --data implies --train; predict --help: --json is JSON Lines" \
    "help_line bench --data | grep -q 'implies --train' && help_line predict --json | grep -q 'JSON Lines'" \
    "$(help_line bench --data; help_line predict --json)"
$V bench vit_fmnist_tiny --data fashion-mnist --dtype int8 >"$T/b8.log" 2>&1
check "bench --data --dtype int8 refused (contradictory: 2) naming --data, not an option never given" \
    "[ $? -eq 2 ] && grep -qF 'for inference, but --data (which implies --train)' '$T/b8.log' && \
     ! grep -q 'without --train' '$T/b8.log'" "$(cat "$T/b8.log")"

# vitc help COMMAND; a long list is quoted in part, so that the message keeps its reason
$V help train >"$T/ht.log" 2>&1
check "vitc help train prints train's help" "[ $? -eq 0 ] && head -1 '$T/ht.log' | grep -q '^usage: vitc train '" \
    "$(head -2 "$T/ht.log")"
$V help train extra >"$T/ht2.log" 2>&1
check "vitc help with a stray argument refused (2)" "[ $? -eq 2 ] && grep -q \"unexpected argument 'extra'\" '$T/ht2.log'" \
    "$(cat "$T/ht2.log")"
long=$(printf '1,%.0s' $(seq 300))1
$V attention vit_fmnist_tiny "$T/img.png" -o "$T/att.png" --blocks "$(seq -s, 1 300)" >"$T/lb.log" 2>&1
check "an over-long --blocks list: the message quotes 60 characters and keeps the reason" \
    "[ $? -eq 2 ] && grep -q \"^vitc: --blocks '1,2,.*\\.\\.\\.': more than 256 indices\" '$T/lb.log' && \
     [ \$(wc -c <'$T/lb.log') -lt 200 ]" "$(cat "$T/lb.log")"
$V info vit_fmnist_tiny --dims "$long" >"$T/ld.log" 2>&1
check "... and an over-long --dims list" \
    "[ $? -eq 2 ] && grep -q '(601 characters): 301 values, but the model has 1 stage' '$T/ld.log'" "$(cat "$T/ld.log")"
