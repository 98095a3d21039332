#!/usr/bin/env bash
# --dtype bf16 for the dense Llama family (issues 29 and 30; docs/ARCHITECTURE.md "bf16 mixed precision"):
# - against PyTorch: llama-tiny (2 of 4 key-value heads, its own lm_head) and multi-query tied, one batch, the
#   same weights (build/tests/llama_torch_driver --write-input, --grads-bf16; tests/llama_torch.py --autocast):
#   under torch.autocast's bf16 products the loss within 1e-4 relative and every gradient's cosine >= 0.9999
#   (where torch's bf16 matmul sums in bfloat16, an AVX2 CPU: the issue's 1e-2 and 0.99);
#   with cleave's product emulated (operands and output gradient rounded to bf16, float32 sums) 1e-5 and
#   0.99999, a bound torch's own fp32 gradients miss (so it tells bf16 from fp32); without torch a skip;
# - pp 2 under gpipe, 1f1b and zb-h1 and recompute selective and full: losses and norms bitwise equal to one
#   rank in bf16; dp 2 under ZeRO 0, 1 and 2, tp 2, tp 4 (past the 2 key-value heads), tp 2 x pp 2 under zb-h1
#   (the split backward's weight pass) and cp 2 over 20 steps:
#   the first step within 1e-4 relative, the losses within 1e-4, the gradient norms within 1e-3 (see near());
#   bf16 differs from fp32 by under 1%; dp 2 ZeRO 3 (BF16 gathers of the GEMM weights) bitwise ZeRO 2, untied and tied;
# - a resume is exact (5 steps, save, 5 more = 10 straight); `cleave generate` (KV cache, F32 on the master
#   weights) from the bf16 checkpoint gives the greedy tokens of the recomputing path;
# - sequence parallelism in bf16 is tests/cli_bf16_sp.sh's, the MoE block's tests/cli_bf16_moe.sh's.
set -u
source "$(dirname "$0")/lib.sh"
if have_torch "the comparison with PyTorch autocast"; then
    D="$BUILD/tests/llama_torch_driver"
    for shape in "2 0" "1 1"; do
        set -- $shape
        "$D" $1 $2 --write-input "$tmp/in$1.st" > /dev/null && "$D" $1 $2 --grads-bf16 "$tmp/in$1.st" "$tmp/b$1.st" > /dev/null
        rc=$?
        check '[ $rc -eq 0 ]' "llama_torch_driver $1 $2 failed (status $rc)"
        out=$(timeout 300 $PY "$(dirname "$0")/llama_torch.py" --autocast "$tmp/in$1.st" "$tmp/b$1.st" 2>&1)
        rc=$?
        echo "kv $1 tied $2: $out"
        check '[ $rc -eq 0 ] && grep -q "bf16 emulated: 2[01] gradients" <<<"$out"' "kv $1 tied $2 against torch autocast: $(tail -3 <<<"$out")"
    done
    # the emulated bound tells the formats apart: torch's float32 gradients of the same batch miss it
    timeout 300 $PY "$(dirname "$0")/llama_torch.py" "$tmp/in2.st" "$tmp/f2.st" > /dev/null 2>&1
    out=$(timeout 300 $PY "$(dirname "$0")/llama_torch.py" --autocast "$tmp/in2.st" "$tmp/f2.st" 2>&1)
    check 'grep -q "^FAILED: .*emulated grad" <<<"$out"' "torch's fp32 gradients should miss the emulated bf16 bound: $(tail -2 <<<"$out")"
fi

head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--model llama-tiny --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20
        --sample-tokens 0 --eval-batches 2 --threads 1 --comm-timeout 60)
figures() { log_figures "$@"; }
near() { runs_near "$@"; }
run() { train_run "$@"; }
run one --dtype bf16
run f32
out=$(near "$tmp/one.jsonl" "$tmp/f32.jsonl" 1e-2 1e-2 1e-2); _rc=$?
echo "bf16 against fp32: $out"
check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/one.jsonl")" != "$(figures "$tmp/f32.jsonl")" ]' \
    "bf16 should differ from fp32 (it computes in BF16) by under 1%: $out"
for lay in "--pp 2 --schedule gpipe" "--pp 2 --schedule 1f1b" "--pp 2 --schedule zb-h1" "--recompute selective" "--recompute full"; do
    name=$(tr -d ' -' <<<"$lay")
    run "$name" --dtype bf16 $lay
    check '[ -n "$(figures "$tmp/$name.jsonl")" ] && [ "$(figures "$tmp/$name.jsonl")" = "$(figures "$tmp/one.jsonl")" ]' \
        "bf16 $lay: losses/norms not bitwise equal to one rank: $(paste <(figures "$tmp/$name.jsonl") <(figures "$tmp/one.jsonl") | head -3)"
done
# dp: the gradients summed over ranks in another order; tp: row-parallel partial sums from BF16 operands summed in
# F32, tp 4 replicating each of the 2 key-value heads on 2 ranks; cp: the ring's F32 attention merges chunks
# (F32 sums in another order, then other roundings to BF16 where they feed a product: the fp32 runs of these layouts
# stay within 1e-7 of one rank, bf16's move by up to BF16's roundoff in places): the first step (the same weights)
# within 1e-4 (1.2e-6 at tp 2; 2.2e-5 at tp 4, where each replica of a key-value head narrows its own partial
# dk, dv before the product and the weight gradients are summed after), every step's loss within 1e-4, every
# step's gradient norm (a sum of squares over all parameters, the most sensitive figure: 6e-4 at tp 4 here)
# within 1e-3
for lay in "--dp 2 --zero 0" "--dp 2 --zero 1" "--dp 2 --zero 2" "--tp 2" "--tp 4" "--tp 2 --pp 2 --schedule zb-h1" "--cp 2"; do
    name=$(tr -d ' -' <<<"$lay")
    run "$name" --dtype bf16 $lay
    out=$(near "$tmp/$name.jsonl" "$tmp/one.jsonl" 1e-4 1e-4 1e-3); _rc=$?
    echo "bf16 $lay: $out"
    check '[ $_rc -eq 0 ]' "bf16 $lay: not within the bounds of one rank: $out"
done

# ZeRO 3 gathers q, k, v, o, gate, up, down and the logits' weight as BF16 (cl_kind.wlo): the same products as
# ZeRO 2's, so bit for bit its run; the tied head's weight (a multi-query tied shape) too
for shape in "" "--model llama --tie-embeddings 1"; do
    name=z2$(tr -d ' -' <<<"$shape"); run "$name" --dtype bf16 --dp 2 --zero 2 $shape
    run "${name}z3" --dtype bf16 --dp 2 --zero 3 $shape
    check '[ -n "$(figures "$tmp/${name}z3.jsonl")" ] && [ "$(figures "$tmp/${name}z3.jsonl")" = "$(figures "$tmp/$name.jsonl")" ]' \
        "bf16 ZeRO 3 ${shape:-llama-tiny}: not bitwise ZeRO 2's: $(paste <(figures "$tmp/${name}z3.jsonl") <(figures "$tmp/$name.jsonl") | head -3)"
done

# resume: exact at bf16; generation from the bf16 checkpoint (F32 decode on the master weights)
resume_exact --dtype bf16
bf16_checkpoint_generates

finish cli_bf16_llama
