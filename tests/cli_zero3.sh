#!/usr/bin/env bash
# ZeRO stage 3 end to end (issue 15's "What must hold", for stage 3):
# - equivalence: 20 steps of gpt2-tiny with gradient clipping active,
#   --zero 3 against --zero 2 and --zero 0 on the same mesh and batch.
#   Each unit's parameters are all-gathered from the shards just before it
#   runs: a copy, so a unit computes with the very bits --zero 0 holds, and
#   the gradients, norm and update are stage 2's. So the losses and grad
#   norms are bitwise --zero 2's always, and --zero 0's where stage 2 is
#   (one micro-batch per replica; see tests/cli_zero2.sh): dp 2 and dp 4
#   (threads), prefetch 0, 1 and 3, a GPT whose sizes do not divide, the
#   MLP at dp 4, dp 2 under MPI (bitwise the threads'), and with gradient
#   accumulation (bitwise --zero 2's, which is within 1e-6 of --zero 0's);
#   tp 2 x dp 2 with and without sp (bitwise both), pp 2 x dp 2 (1f1b,
#   interleaved, zb-h1) and tp 2 x pp 2 x dp 2 on 8 ranks (1f1b and zb-h1 with
#   sp) (bitwise --zero 2's, within 1e-6 of --zero 0's, as stage 2 under
#   accumulation); zb-h1 at prefetch 0 and 3 and under MPI (4 processes)
#   bitwise the threads' at prefetch 1.
# - gathers: a pass gathers the units that read their parameters in it: a
#   forward every unit, a backward's input pass all but the embedding, a
#   zb-h1 weight pass the blocks only (the head's weight gradient came in
#   its input pass; the embedding's reads only the tokens): the all-gathers
#   of stage 0 (embedding + a block) in a step of 4 micro-batches counted.
# - memory: cleave memory --measure, every category of every rank predicted
#   == measured, and params = 4 (Psi_p / N + K W): the shard, K = prefetch + 1
#   working buffers (at most the units with parameters) of W floats, the
#   largest unit's gather (a block; the LM head's is lnf + the tied wte);
#   grads and optimizer as --zero 2; also pp 2 x dp 2 (1f1b, zb-h1), tp 2 x
#   dp 2 (sp), and tp 2 x pp 2 x dp 2 zb-h1 (predicted == measured).
# - checkpoints: --zero 3's files are --zero 0's byte for byte; --zero 3
#   resumed from its own, from --zero 0's and --zero 2's, and --zero 0 from
#   --zero 3's, continue the uninterrupted run bitwise; pp 2 x dp 2's files are
#   --zero 2's and resume bitwise.
# - the demonstration: a GPT (8 layers) that one rank cannot train under a
#   --device-memory cap is refused at dp 1 with an out-of-memory message
#   (exit 2) and trains at dp 4 with --zero 3 under the same cap.
# - bad input: a negative --zero3-prefetch: exit 2, one line.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
base=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --steps 20 --sample-tokens 0 --eval-batches 2)
trio() { # name args...: name-z0, name-z2 and name-z3
    local name=$1; shift
    train "$name-z0" "$@"
    train "$name-z2" "$@" --zero 2
    train "$name-z3" "$@" --zero 3
}

# ---- equivalence ------------------------------------------------------------
trio dp2 "${base[@]}" --global-batch-size 4 --dp 2
trio dp4 "${base[@]}" --global-batch-size 8 --dp 4
clipped dp2-z0
for r in dp2 dp4; do same $r-z3 $r-z2; same $r-z3 $r-z0; done
for k in 0 3; do
    train dp2-z3-pf$k "${base[@]}" --global-batch-size 4 --dp 2 --zero 3 --zero3-prefetch $k
    same dp2-z3-pf$k dp2-z0
done
odd=(--layers 3 --channels 48 --heads 3 --vocab 300 --context 32)
trio odd4 "${base[@]}" "${odd[@]}" --global-batch-size 8 --dp 4
trio mlp4 --model mlp --micro-batch-size 2 --global-batch-size 8 --steps 20 --eval-batches 1 --dp 4
for r in odd4 mlp4; do same $r-z3 $r-z2; same $r-z3 $r-z0; done
trio dp2acc "${base[@]}" --global-batch-size 16 --dp 2
same dp2acc-z3 dp2acc-z2
close dp2acc-z3 dp2acc-z0 1e-6 20
# with tensor and pipeline parallelism: each tp rank's slices gathered over its replicas, each stage's units
# (the last stage's head with its own copy of the tied wte) per micro-batch pass: bitwise --zero 2's, and --zero 0's
# where stage 2's are (tp x dp, one micro-batch per replica); a pipeline is within 1e-6 of --zero 0 as stage 2
trio tp2dp2 "${base[@]}" --global-batch-size 4 --dp 2 --tp 2 --check-replicas
trio tp2dp2sp "${base[@]}" --global-batch-size 4 --dp 2 --tp 2 --sequence-parallel --check-replicas
for r in tp2dp2 tp2dp2sp; do same $r-z3 $r-z2; same $r-z3 $r-z0; done
trio pp2dp2 "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --schedule 1f1b
trio pp2dp2il "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --layers 4 --schedule interleaved --bucket-size 1
trio tp2pp2dp2 "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --tp 2 --sequence-parallel --schedule 1f1b --check-replicas
# zb-h1: the input pass (B) and the weight pass (W) of each micro-batch gather on their own
trio pp2dp2zb "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --schedule zb-h1
trio tp2pp2dp2zb "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --tp 2 --sequence-parallel --schedule zb-h1 --check-replicas
for r in pp2dp2 pp2dp2il tp2pp2dp2 pp2dp2zb tp2pp2dp2zb; do same $r-z3 $r-z2; close $r-z3 $r-z0 1e-6 20; done
check 'grep -q "ranks: 8 (threads backend)" "$tmp/tp2pp2dp2-z3.out"' "tp 2 x pp 2 x dp 2 does not run 8 ranks"
for k in 0 3; do
    train pp2dp2zb-z3-pf$k "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --schedule zb-h1 --zero 3 --zero3-prefetch $k
    same pp2dp2zb-z3-pf$k pp2dp2zb-z3
done
# stage 0's all-gathers a step (rank 0's log): 4 micro-batches x (F: embedding, block; B: block; W under
# zb-h1: block) + the norm's 2 (tests/cli_zero2.sh); 1f1b's combined backward gathers the block only
for r in pp2dp2:14 pp2dp2zb:18; do
    bad=$(grep '"loss"' "$tmp/${r%%:*}-z3.jsonl" | grep -vc "\"dp\": {[^}]*\"allgather\": \[${r#*:}, ")
    check '[ "$bad" -eq 0 ]' "${r%%:*}-z3: $bad steps without ${r#*:} all-gathers$(excerpt 1 "$(grep -m1 '"loss"' "$tmp/${r%%:*}-z3.jsonl")")"
done
# the validation losses and the sample too: evaluation and generation gather the units on every replica
for r in dp2 dp4; do
    check '[ "$(grep validation "$tmp/$r-z3.out")" = "$(grep validation "$tmp/$r-z0.out")" ]' "$r: --zero 3's validation loss differs"
done
train smp-z0 "${base[@]}" --global-batch-size 4 --dp 2 --steps 4 --sample-tokens 16
train smp-z3 "${base[@]}" --global-batch-size 4 --dp 2 --steps 4 --sample-tokens 16 --zero 3
check '[ "$(sed -n "/^sample:/,\$p" "$tmp/smp-z3.out")" = "$(sed -n "/^sample:/,\$p" "$tmp/smp-z0.out")" ]' \
    "--zero 3's sample differs from --zero 0's"
echo "validation losses and a 16-token sample: --zero 3's equal --zero 0's"

mpi2 mpi2-z3 dp2-z3 dp2-z0 -- "${base[@]}" --global-batch-size 4 --zero 3
# pp 2 x dp 2 zb-h1 under MPI: 4 processes, bitwise the threads'
mpin 4 mpi4zb-z3 pp2dp2zb-z3 -- "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --schedule zb-h1 --zero 3

# ---- memory: predicted == measured, and the formulas ---------------------------
D=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --bucket-size 1)
expect3() { # floats N whole head_wte nbuf bucket K W: "params grads optimizer" bytes of one rank under --zero 3
    local P S L
    P=$(padded $1 $2); S=$((P / $2))
    L=$(( $2 * (S < 16384 ? S : 16384) + 16384 ))
    echo "$((4 * (S + $7 * $8))) $((4 * (S + $3 + $4 + $5 * $6 + L))) $((8 * P / $2))"
}
C=64; hw=$((256 * C))
blk=$(gpt_part $C 256 64 1 0 0) # a block's floats: the largest unit (embedding: 256 x 64 + 64 x 64 = 20480)
psi=$(gpt_part $C 256 64 2 1 1)
echo "gpt2-tiny: Psi $psi floats, a block $blk (the largest gather)"
for n in 2 4; do
    mem "gpt2-tiny dp $n zero 3" "$(expect3 $psi $n 0 $hw 2 $blk 2 $blk)" - "${D[@]}" --dp $n --zero 3
done
for k in 0 2 9; do # K = k + 1 buffers, at most the 4 units with parameters
    K=$((k + 1 < 4 ? k + 1 : 4))
    mem "gpt2-tiny dp 4 zero 3 prefetch $k" "$(expect3 $psi 4 0 $hw 2 $blk $K $blk)" - "${D[@]}" --dp 4 --zero 3 --zero3-prefetch $k
done
psi8=$(gpt_part $C 256 64 8 1 1)
mem "gpt L8 dp 4 zero 3" "$(expect3 $psi8 4 0 $hw 2 $blk 2 $blk)" - "${D[@]}" --layers 8 --dp 4 --zero 3
p0=$((4 * psi8)); p3=$(expect3 $psi8 4 0 $hw 2 $blk 2 $blk | cut -d' ' -f1)
check '[ $p3 -lt $p0 ]' "gpt L8 dp 4: --zero 3's parameters ($p3 B) not below --zero 0's ($p0 B)"
echo "gpt L8 dp 4: parameters $p3 B under --zero 3 against $p0 B under --zero 0"
# pp 2 x dp 2 and tp 2 x dp 2 with sp (tests/zero_lib.sh): gradients as --zero 2's, the largest gather a block
# (the last stage's head gathers lnf + its own copy of wte, 128 + 16384 floats) or a block's slice
pp_tp_mem 3 expect3 2
pp_mem 3 expect3 zb-h1 2
mem "gpt2-tiny tp 2 x pp 2 x dp 2 sp zb-h1 zero 3" - - "${D[@]}" --dp 2 --pp 2 --tp 2 --sequence-parallel --schedule zb-h1 --zero 3

# ---- the demonstration: a GPT one rank cannot train under a cap trains at dp 4 with --zero 3 ----
G=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --layers 8 --steps 3 --sample-tokens 0
   --eval-batches 1 --bucket-size 1)
total() { timeout 120 "$CLEAVE" memory "${G[@]}" "$@" --json | python3 -c 'import json,sys; print(max(json.loads(l)["predicted"]["total"] for l in sys.stdin))'; }
t1=$(total); t4=$(total --dp 4 --zero 3)
cap=$((t4 + 4096))
check '[ "$t1" -gt "$cap" ]' "the demonstration's model fits one rank ($t1 B) under the cap ($cap B)"
out=$(timeout 120 "$CLEAVE" train "${G[@]}" --device-memory $cap 2>&1 >/dev/null); rc=$?
check '[ $rc -eq 2 ] && [ "$(printf "%s
" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q "needs .* but the cap is"' \
    "dp 1 under a cap of $cap B: status $rc: $out"
train demo-dp4-z3 "${G[@]}" --device-memory $cap --dp 4 --zero 3
check '[ "$(grep -c "\"loss\"" "$tmp/demo-dp4-z3.jsonl")" -eq 3 ]' "dp 4 --zero 3 under the cap did not train 3 steps"
echo "demonstration: gpt L8 needs $t1 B on one rank; under a cap of $cap B dp 1 is refused (exit 2: $out), dp 4 --zero 3 trains ($t4 B a rank)"

# ---- checkpoints: the same files; resume across zero 0, 2 and 3 ----------------
res=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --steps 6 --sample-tokens 0
     --eval-batches 2 --dp 2)
train full-z3 "${res[@]}" --zero 3
train half-z0 "${res[@]}" --stop-after 3 --save "$tmp/ck-z0"
train half-z2 "${res[@]}" --zero 2 --stop-after 3 --save "$tmp/ck-z2"
train half-z3 "${res[@]}" --zero 3 --stop-after 3 --save "$tmp/ck-z3"
for f in model.safetensors optimizer.safetensors; do
    check 'st_same "$tmp/ck-z3/$f" "$tmp/ck-z0/$f"' "the --zero 3 checkpoint's $f differs from --zero 0's"
done
echo "checkpoint dp 2 at step 3: --zero 3's model and optimizer files cmp-equal to --zero 0's"
grep '"loss"' "$tmp/full-z3.jsonl" | tail -n 3 > "$tmp/tail-z3.jsonl"
for from in z3 z0 z2; do
    train res-z3-from-$from "${res[@]}" --zero 3 --resume "$tmp/ck-$from"
    same res-z3-from-$from tail-z3 3
done
train res-z0-from-z3 "${res[@]}" --resume "$tmp/ck-z3"
same res-z0-from-z3 tail-z3 3
# pp 2 x dp 2 (4 micro-batches per replica): its own checkpoint, resumed bitwise; its files are --zero 2's
train ppfull-z3 "${res[@]}" --global-batch-size 16 --pp 2 --zero 3
train pphalf-z3 "${res[@]}" --global-batch-size 16 --pp 2 --zero 3 --stop-after 3 --save "$tmp/ck-pp-z3"
train pphalf-z2 "${res[@]}" --global-batch-size 16 --pp 2 --zero 2 --stop-after 3 --save "$tmp/ck-pp-z2"
for f in model.safetensors optimizer.safetensors; do
    check 'st_same "$tmp/ck-pp-z3/$f" "$tmp/ck-pp-z2/$f"' "the pp 2 x dp 2 --zero 3 checkpoint's $f differs from --zero 2's"
done
train ppres-z3 "${res[@]}" --global-batch-size 16 --pp 2 --zero 3 --resume "$tmp/ck-pp-z3"
grep '"loss"' "$tmp/ppfull-z3.jsonl" | tail -n 3 > "$tmp/tail-pp.jsonl"
same ppres-z3 tail-pp 3

# ---- bad input ----------------------------------------------------------------
bad() { # words args...
    local want=$1; shift
    local out rc
    out=$(timeout 60 "$CLEAVE" train "${base[@]}" --global-batch-size 4 "$@" 2>&1 >/dev/null); rc=$?
    check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q -- "$want"' \
        "bad input ($*): status $rc: $out"
}
bad "zero3-prefetch" --dp 2 --zero 3 --zero3-prefetch -1
finish cli_zero3
