#!/usr/bin/env bash
# cleave memory: the prediction of every rank's device bytes equals what the
# device measures, to the byte, category by category, over a grid of models
# (gpt2-tiny shapes, one with a vocabulary not a multiple of 16, the CNN,
# the MLP and llama-tiny), meshes (1 rank, dp 2, pp 2 and 4 under every schedule, m < p and
# m not a multiple of p, context parallelism: cp 2 and 4, with dp 2 ZeRO 3, pp 2, tp 2), recompute modes and micro-batch sizes; and the cap
# is a promise: capped at exactly the predicted peak a run trains three
# steps; one byte less is refused before anything is allocated (status 2,
# the message names rank, cap and what would fit, no step trained), unless
# the balanced partition finds another cut under that cap, which must then
# measure within it.
set -u
source "$(dirname "$0")/lib.sh"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 2000) > "$tmp/text.txt"
G=(--threads 1 --eval-batches 1)
D=(--data "$tmp/text.txt")
points=0

# compare JSON: every rank's predicted and measured categories equal
compare() {
    python3 - "$1" <<'PY'
import json, sys
bad = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k, v in r["predicted"].items():
        if r["measured"][k] != v:
            bad.append("rank %d %s: predicted %d, measured %d" % (r["rank"], k, v, r["measured"][k]))
print("; ".join(bad))
PY
}
peak_of() { python3 -c 'import json,sys; print(max(json.loads(l)["predicted"]["total"] for l in open(sys.argv[1])))' "$1"; }

point() { # point ARGS...: one grid point (GPT points read the small text)
    points=$((points + 1))
    case " $* " in *" --model cnn "*|*" --model mlp "*) ;; *) set -- "${D[@]}" "$@" ;; esac
    local out="$tmp/p$points.json"
    if ! timeout 120 "$CLEAVE" memory --measure --json "${G[@]}" "$@" > "$out" 2> "$tmp/err"; then
        check false "memory --measure $*: failed$(excerpt 3 "$(cat "$tmp/err")")"
        return
    fi
    local diff
    diff=$(compare "$out")
    check '[ -z "$diff" ]' "grid point $*: $diff"
    [ -n "${CL_MEMORY_CAPS:-1}" ] || return
    local peak
    peak=$(peak_of "$out")
    timeout 120 "$CLEAVE" train "${G[@]}" "$@" --steps 3 --sample-tokens 0 --device-memory "${peak}B" > "$tmp/cap.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && grep -q "step *3/3" "$tmp/cap.out"' "grid point $* capped at its predicted peak $peak B does not train$(excerpt 3 "$(tail -3 "$tmp/cap.out")")"
    # one byte less: refused up front, or (a balanced cut may move) a layout that fits and measures so
    timeout 120 "$CLEAVE" memory --measure --json "${G[@]}" "$@" --device-memory "$((peak - 1))B" > "$tmp/less.json" 2> "$tmp/less.err"
    local rc=$? over=""
    [ $rc -eq 0 ] && over=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["measured"]["total"] > int(sys.argv[2]) or r["measured"] != r["predicted"]: print("rank", r["rank"], r)' "$tmp/less.json" $((peak - 1)))
    check '{ [ $rc -eq 0 ] && [ -z "$over" ]; } || { [ $rc -eq 2 ] && grep -q "refused before allocating" "$tmp/less.err" && [ "$(grep -c "" "$tmp/less.err")" -eq 1 ]; }' \
        "grid point $* capped one byte under $peak B: status $rc $over$(excerpt 3 "$(cat "$tmp/less.err")")"
}

# one rank: shapes, recompute, micro-batch
for mb in 1 4; do
    for rc in none selective full; do point --micro-batch-size $mb --recompute $rc; done
done
point --layers 3 --channels 48 --heads 3 --vocab 300 --context 32 --micro-batch-size 2
point --model cnn --micro-batch-size 4
point --model mlp --micro-batch-size 1
# data parallel
point --dp 2 --micro-batch-size 2 --global-batch-size 8
# pipelines: every schedule, m < p, m not a multiple of p
for sch in gpipe 1f1b zb-h1; do
    point --pp 2 --schedule $sch --micro-batch-size 2 --global-batch-size 8
    point --pp 4 --schedule $sch --layers 4 --micro-batch-size 1 --global-batch-size 3
done
point --pp 2 --schedule interleaved --virtual-stages 2 --layers 4 --micro-batch-size 1 --global-batch-size 4
point --pp 4 --schedule interleaved --virtual-stages 2 --layers 6 --micro-batch-size 1 --global-batch-size 8
point --pp 2 --schedule 1f1b --recompute selective --micro-batch-size 4 --global-batch-size 4
point --pp 2 --schedule zb-h1 --recompute full --micro-batch-size 1 --global-batch-size 5
point --pp 2 --dp 2 --schedule 1f1b --micro-batch-size 1 --global-batch-size 6
point --pp 2 --model cnn --schedule zb-h1 --micro-batch-size 2 --global-batch-size 8
point --pp 2 --model mlp --schedule gpipe --micro-batch-size 4 --global-batch-size 8
# Llama (llama-tiny: its rotary tables counted): one rank under each recompute mode, pp 2, dp 2 ZeRO 3, tp 2 with
# sequence parallelism under zb-h1 (the split backward's kept collectives)
for rc in none selective full; do point --model llama-tiny --micro-batch-size 2 --recompute $rc; done
point --model llama-tiny --pp 2 --schedule 1f1b --micro-batch-size 2 --global-batch-size 4
point --model llama-tiny --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 4
point --model llama-tiny --tp 2 --sequence-parallel --pp 2 --schedule zb-h1 --micro-batch-size 1 --global-batch-size 4
# key-value heads replicated past tp = kv (--kv-heads 1 at tp 2: each rank the one head; its gradient summed over both)
point --model llama --kv-heads 1 --tp 2 --micro-batch-size 2 --global-batch-size 4
# bf16 mixed precision (issue 29): the BF16 weight copy beside the F32 master (params 1.5 x fp32's), the GEMM
# inputs saved as BF16 (ln_1, ln_2, GELU and ln_f outputs), the backward's BF16 operands in the workspace
for rc in none full; do point --dtype bf16 --micro-batch-size 2 --recompute $rc; done
point --dtype bf16 --pp 2 --schedule zb-h1 --micro-batch-size 2 --global-batch-size 8
point --dtype bf16 --dp 2 --zero 2 --micro-batch-size 2 --global-batch-size 8
# ZeRO 3 in bf16: the shard's BF16 copy beside the F32 shard, the working buffers as fp32's (BF16 pieces in them)
point --dtype bf16 --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 8
point --dtype bf16 --dp 4 --zero 3 --zero3-prefetch 2 --micro-batch-size 2 --global-batch-size 8
point --dtype bf16 --dp 2 --pp 2 --schedule zb-h1 --zero 3 --micro-batch-size 2 --global-batch-size 8
point --model llama-tiny --dtype bf16 --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 8
# --grad-reduce-dtype bf16: the BF16 staging of the reduction (the gradient buffer's image at ZeRO 0-1, each
# bucket working buffer's at ZeRO 2-3) under grads
point --grad-reduce-dtype bf16 --dp 2 --micro-batch-size 2 --global-batch-size 8
point --grad-reduce-dtype bf16 --dp 2 --pp 2 --zero 1 --micro-batch-size 2 --global-batch-size 8
point --grad-reduce-dtype bf16 --dtype bf16 --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 8
point --dtype bf16 --tp 2 --micro-batch-size 2 --global-batch-size 4
f32=$("$CLEAVE" memory --json --model gpt2-tiny); b16=$("$CLEAVE" memory --json --model gpt2-tiny --dtype bf16)
cat_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["predicted"][sys.argv[2]])' "$1" "$2"; }
pf=$(cat_of "$f32" params); pb=$(cat_of "$b16" params); af=$(cat_of "$f32" activations); ab=$(cat_of "$b16" activations)
echo "gpt2-tiny: params fp32 $pf B, bf16 $pb B; activations fp32 $af B, bf16 $ab B"
# 3C floats a token a block (ln_1 and ln_2 C/2 each, GELU's 4C -> 2C) and the head's C/2, at B 8, T 64, C 64, 2 blocks
check '[ $((pf * 3)) -eq $((pb * 2)) ] && [ $((af - ab)) -eq $(((2 * 3 * 64 + 32) * 512 * 4)) ]' \
    "bf16 params should be 1.5 x fp32's and the activations 3C a token a block + C/2 smaller: $pf/$pb, $af/$ab"
# the dense Llama in bf16: input_layernorm's, post_attention_layernorm's and model.norm's outputs and the SwiGLU
# product saved as BF16, the backward's BF16 gradient and o_proj input at the workspace's end; tp 4 past llama-tiny's
# 2 key-value heads
for rc in none selective full; do point --model llama-tiny --dtype bf16 --micro-batch-size 2 --recompute $rc; done
point --model llama-tiny --dtype bf16 --pp 2 --schedule zb-h1 --micro-batch-size 2 --global-batch-size 8
point --model llama-tiny --dtype bf16 --dp 2 --zero 2 --micro-batch-size 2 --global-batch-size 8
point --model llama-tiny --dtype bf16 --tp 4 --micro-batch-size 2 --global-batch-size 4
point --model llama-tiny --dtype bf16 --cp 2 --micro-batch-size 2
# bf16 with sequence parallelism: the norms' BF16 outputs on each rank's T/tp rows, gathered as BF16 into the
# workspace fp32 sizes (tests/cli_bf16_sp.sh)
point --dtype bf16 --tp 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 4
point --dtype bf16 --tp 2 --sequence-parallel --pp 2 --schedule zb-h1 --recompute selective --micro-batch-size 2 --global-batch-size 8
point --model llama-tiny --dtype bf16 --tp 2 --sequence-parallel --recompute selective --micro-batch-size 2 --global-batch-size 4
point --model llama-tiny --dtype bf16 --tp 4 --sequence-parallel --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 8
f32=$("$CLEAVE" memory --json --model llama-tiny); b16=$("$CLEAVE" memory --json --model llama-tiny --dtype bf16)
pf=$(cat_of "$f32" params); pb=$(cat_of "$b16" params); af=$(cat_of "$f32" activations); ab=$(cat_of "$b16" activations)
echo "llama-tiny: params fp32 $pf B, bf16 $pb B; activations fp32 $af B, bf16 $ab B"
# a token a block: the two norms' C/2 each and the SwiGLU product's F/2 (C 64, F 172), and the head's C/2, at B 8,
# T 64, 2 blocks
check '[ $((pf * 3)) -eq $((pb * 2)) ] && [ $((af - ab)) -eq $(((2 * (64 + 86) + 32) * 512 * 4)) ]' \
    "llama-tiny bf16 params should be 1.5 x fp32's and the activations C + F/2 a token a block + C/2 smaller: $pf/$pb, $af/$ab"
# context parallelism (--cp): each rank's activations for its T / cp tokens, the gathered qkv rows, their gradients and
# one chunk's lse per chunk counted as workspace; ZeRO's shards over dp x cp
point --cp 2 --micro-batch-size 2
point --cp 4 --seq-len 32 --micro-batch-size 1 --global-batch-size 2
point --cp 2 --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 4
point --cp 2 --pp 2 --schedule 1f1b --micro-batch-size 2 --global-batch-size 4
point --model llama-tiny --cp 2 --tp 2 --recompute selective --micro-batch-size 2
point --cp 2 --tp 2 --sequence-parallel --micro-batch-size 2
point --model llama-tiny --cp 2 --tp 2 --sequence-parallel --recompute selective --micro-batch-size 2
# --cp-comm a2a: the exchange's buffers, the gathered output and its gradient, the whole sequence's backward tiles
point --cp 2 --cp-comm a2a --micro-batch-size 2
point --cp 4 --cp-comm a2a --seq-len 32 --micro-batch-size 1 --global-batch-size 2
point --model llama-tiny --cp 2 --cp-comm a2a --pp 2 --schedule 1f1b --micro-batch-size 2 --global-batch-size 4
acts() { "$CLEAVE" memory --json "${G[@]}" "${D[@]}" --micro-batch-size 2 --seq-len 64 "$@" | head -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["predicted"]["activations"])'; }
a1=$(acts); a2=$(acts --cp 2); a4=$(acts --cp 4)
check '[ -n "$a1" ] && [ $((a2 * 2)) -eq "$a1" ] && [ $((a4 * 4)) -eq "$a1" ]' "activations per rank at T 64: cp 1 $a1, cp 2 $a2, cp 4 $a4 (want 1/cp)"

# the zb-h1 runs of the issue: they train or are refused up front
for cap in 3.3MiB 3.4MiB; do
    out=$(timeout 120 "$CLEAVE" train "${G[@]}" "${D[@]}" --pp 2 --schedule zb-h1 --micro-batch-size 2 --global-batch-size 16 \
        --device-memory $cap --steps 2 --sample-tokens 0 2>&1); rc=$?
    check '{ [ $rc -eq 0 ] && printf "%s" "$out" | grep -q "step *2/2"; } || { [ $rc -eq 2 ] && printf "%s" "$out" | grep -q "refused before allocating" && ! printf "%s" "$out" | grep -q "^step"; }' \
        "zb-h1 under $cap: status $rc$(excerpt 3 "$(printf "%s" "$out" | tail -3)")"
done
# a refusal proposes what fits
out=$(timeout 60 "$CLEAVE" train "${G[@]}" "${D[@]}" --micro-batch-size 8 --device-memory 6MiB --steps 1 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "Fits with .*--micro-batch-size 4: peak"' "no proposal: $out"
# Mixtral (mixtral-tiny's MoE blocks): dropless sized for the worst case (and said so), a capacity factor exact,
# recompute selective / full, pp 2, dp 2 ZeRO 3; mixtral-8x7b's F32 weights 4 x 46,702,792,704 bytes
for rc in none selective full; do point --model mixtral-tiny --micro-batch-size 2 --recompute $rc; done
point --model mixtral-tiny --micro-batch-size 2 --moe-capacity-factor 0.5
point --model mixtral-tiny --pp 2 --schedule 1f1b --micro-batch-size 2 --global-batch-size 4
point --model mixtral-tiny --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 4
# the MoE block in bf16: ln2, the experts' gathered rows and their SwiGLU product BF16 (the rest as fp32's), the
# backward's BF16 gradient array (dye, dgate and dup, dlogits in turn) and the attention half's at the scratch's end
for rc in none selective full; do point --model mixtral-tiny --dtype bf16 --micro-batch-size 2 --recompute $rc; done
point --model mixtral-tiny --dtype bf16 --micro-batch-size 2 --moe-capacity-factor 0.5
point --model mixtral-tiny --dtype bf16 --pp 2 --schedule 1f1b --micro-batch-size 2 --global-batch-size 4
point --model mixtral-tiny --dtype bf16 --dp 2 --zero 2 --micro-batch-size 2 --global-batch-size 4
point --model mixtral-tiny --dtype bf16 --dp 2 --zero 3 --micro-batch-size 2 --global-batch-size 4
# expert parallelism: the received rows and their results, dropless (the worst case) and at a capacity; ep 4 holding E / 4 experts, ZeRO 1 at ep 2 sharding the moments over the expert-data group; pp 2 dp 2 ep 2 under zb-h1 (each stage's experts over its ep group)
point --model mixtral-tiny --dp 2 --ep 2 --micro-batch-size 2 --global-batch-size 4
point --model mixtral-tiny --dp 2 --ep 2 --micro-batch-size 2 --global-batch-size 4 --moe-capacity-factor 0.5
point --model mixtral-tiny --dp 4 --ep 4 --micro-batch-size 2 --global-batch-size 8
point --model mixtral-tiny --dp 4 --ep 2 --zero 1 --micro-batch-size 2 --global-batch-size 8
point --model mixtral-tiny --pp 2 --dp 2 --ep 2 --schedule zb-h1 --micro-batch-size 2 --global-batch-size 8
# ZeRO 2 and 3 at ep 2: the gradients' and parameters' shards over the expert-data group too (fp32 and bf16)
point --model mixtral-tiny --dp 4 --ep 2 --zero 2 --micro-batch-size 2 --global-batch-size 8
point --model mixtral-tiny --dp 4 --ep 2 --zero 3 --micro-batch-size 2 --global-batch-size 8
point --model mixtral-tiny --dtype bf16 --dp 4 --ep 2 --zero 2 --micro-batch-size 2 --global-batch-size 8
point --model mixtral-tiny --dtype bf16 --dp 4 --ep 2 --zero 3 --micro-batch-size 2 --global-batch-size 8
point --model mixtral-tiny --dtype bf16 --dp 2 --ep 2 --micro-batch-size 2 --global-batch-size 4
point --model mixtral-tiny --dtype bf16 --dp 2 --ep 2 --micro-batch-size 2 --global-batch-size 4 --moe-capacity-factor 0.5
# tensor parallelism for the MoE block (cli_moe_tp): the experts' F / tp columns, the gathered ln2 and the combine's
# partial sums under sp; with ep 2 at dp 2
point --model mixtral-tiny --tp 2 --micro-batch-size 2
point --model mixtral-tiny --tp 2 --sequence-parallel --micro-batch-size 2 --recompute selective
point --model mixtral-tiny --tp 2 --sequence-parallel --micro-batch-size 2 --recompute full --moe-capacity-factor 0.5
point --model mixtral-tiny --tp 2 --ep 2 --dp 2 --micro-batch-size 2 --global-batch-size 4
point --model mixtral-tiny --dtype bf16 --tp 2 --sequence-parallel --micro-batch-size 2
out=$(timeout 60 "$CLEAVE" memory "${D[@]}" --model mixtral-tiny 2>&1)
check 'grep -q "dropless, expert rows sized for the worst case" <<<"$out"' "mixtral-tiny: the worst case not stated: $(tail -2 <<<"$out")"
_p=$(timeout 60 "$CLEAVE" memory --json --model mixtral-8x7b --seq-len 4096 --micro-batch-size 1 2>&1 | sed -n 's/.*"params": \([0-9]*\).*/\1/p')
check '[ "$_p" = 186811170816 ]' "mixtral-8x7b's F32 weights: '$_p' bytes, not 4 x 46702792704"
echo "cli_memory: $points grid points"
finish cli_memory
