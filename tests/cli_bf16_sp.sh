#!/usr/bin/env bash
# --dtype bf16 with --tp N --sequence-parallel (issues 29 and 30; docs/ARCHITECTURE.md "Tensor parallelism",
# "bf16 mixed precision"), gpt2-tiny and llama-tiny, 20 steps each:
# - sp against the same layout without sp (tp 2, tp 2 x dp 2 ZeRO 1; llama-tiny tp 4 past its 2 key-value
#   heads): the layernorm (RMSNorm) outputs are gathered as BF16, the very values non-sp narrows, and the
#   row-parallel partial sums reduce-scattered in F32 in the communicator's rank order, the all-reduce's; so the
#   first step's loss is bitwise non-sp's. Not the whole run: the norms' weight gradients are partial sums over
#   each rank's rows, all-reduced (fp32 sp differs from fp32 tp the same way), so the first step's gradient norm
#   within 1e-9 relative, and every loss within 1e-4, every norm within 1e-3 (cli_bf16_llama.sh's tp bounds);
# - pp 2 under 1f1b and zb-h1 and recompute selective and full: bitwise tp 2 sp's; a resume exact;
#   under MPI (2 processes) bitwise the threads';
# - the tp traffic of every step equals tests/tp_comm.py --bf16's formulas: the norm outputs' gathers move
#   2 bytes an element (gpt2-tiny B 2, T 16, 4 micro-batches: rank 0's all-gathered bytes a step 155,648
#   against fp32 sp's 229,376), every reduction F32;
# - `train --auto --dtype bf16 --sequence-parallel` plans and trains tp 2 sp, its memory predicted == measured.
set -u
source "$(dirname "$0")/lib.sh"
tpcomm="$(dirname "$0")/tp_comm.py" # plain Python (json, sys)
head -c 300000 data/kjv.txt > "$tmp/text.txt"
base=(--data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20 --sample-tokens 0
      --eval-batches 2 --threads 1 --comm-timeout 60 --dtype bf16)
figures() { log_figures "$@"; }
run() { train_run "$@"; }
same() { # a b: bitwise equal losses and norms, 20 steps
    local a=$1 b=$2
    check '[ "$(figures "$tmp/$a.jsonl" | wc -l)" = 20 ] && [ "$(figures "$tmp/$a.jsonl")" = "$(figures "$tmp/$b.jsonl")" ]' \
        "$a: losses/norms not bitwise $b's: $(paste <(figures "$tmp/$a.jsonl") <(figures "$tmp/$b.jsonl") | head -3)"
}
near_sp() { # sp non-sp: the first step's loss bitwise, its norm within 1e-9; every loss within 1e-4, norm 1e-3
    local out
    out=$(paste <(figures "$tmp/$1.jsonl") <(figures "$tmp/$2.jsonl") | awk '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
        { n++; l = rel($1, $3); g = rel($2, $4); if (l > wl) wl = l; if (g > wg) wg = g
          if (n == 1) { same = $1 == $3; first = g } }
        END { printf "%d steps, first loss %s, first norm %.3g, losses %.3g, norms %.3g\n", n, same ? "bitwise" : "DIFFERS", first, wl, wg
              exit !(n == 20 && same && first <= 1e-9 && wl <= 1e-4 && wg <= 1e-3) }'); _rc=$?
    echo "$1 against $2: $out"
    check '[ $_rc -eq 0 ]' "$1 against $2: $out"
}

for model in gpt2-tiny llama-tiny; do
    m=${model%%-*}
    common=("${base[@]}" --model $model)
    run "${m}tp2" --tp 2
    run "${m}sp" --tp 2 --sequence-parallel
    near_sp "${m}sp" "${m}tp2"
    run "${m}dp" --tp 2 --dp 2 --zero 1
    run "${m}spdp" --tp 2 --sequence-parallel --dp 2 --zero 1
    near_sp "${m}spdp" "${m}dp"
    for lay in "--pp 2 --schedule 1f1b" "--pp 2 --schedule zb-h1" "--recompute selective" "--recompute full"; do
        name=$m$(tr -d ' -' <<<"$lay")
        run "$name" --tp 2 --sequence-parallel $lay
        same "$name" "${m}sp"
    done
    rm -rf "$tmp/ck" "$tmp/res.jsonl" "$tmp/ten.jsonl" # the logs append
    resume_exact --tp 2 --sequence-parallel
done
# llama-tiny at tp 4: each of its 2 key-value heads on 2 ranks
common=("${base[@]}" --model llama-tiny)
run llamatp4 --tp 4
run llamasp4 --tp 4 --sequence-parallel
near_sp llamasp4 llamatp4

# the traffic: the gathers of the norm outputs at 2 bytes
common=("${base[@]}")
run f32sp --tp 2 --sequence-parallel --dtype fp32
echo -n "tp traffic, gpt2-tiny tp 2 sp bf16: "
check 'python3 "$tpcomm" --bf16 "$tmp/gpt2sp.jsonl" 2 16 64 2 2 1 4' "bf16 tp 2 sp: traffic differs from the formulas"
echo -n "tp traffic, gpt2-tiny tp 2 sp fp32: "
check 'python3 "$tpcomm" "$tmp/f32sp.jsonl" 2 16 64 2 2 1 4' "fp32 tp 2 sp: traffic differs from the formulas"
gathered() { grep '"loss"' "$1" | tail -1 | sed 's/.*"allgather": \[[0-9]*, [0-9]*, \([0-9]*\)\].*/\1/'; }
echo "gpt2-tiny tp 2 sp, rank 0's all-gathered bytes a step: fp32 $(gathered "$tmp/f32sp.jsonl"), bf16 $(gathered "$tmp/gpt2sp.jsonl")"

# --auto in bf16 may choose sequence parallelism (the planner prices each configuration with the trainer's own
# memory statement, which refused bf16 sp before): asked for sp, it plans tp 2 sp, trains it, and that
# configuration's predicted memory is what it measures, to the byte
out=$(timeout 300 "$CLEAVE" train --auto --dtype bf16 --sequence-parallel --data "$tmp/text.txt" --seq-len 16 --steps 2 \
    --sample-tokens 0 --eval-batches 1 --threads 1 2>&1); _rc=$?
chose=$(sed -n 's/^auto: chose \(.*\) --global-batch-size.*/\1/p' <<<"$out")
echo "auto, bf16: chose $chose"
check '[ $_rc -eq 0 ] && grep -q -- "--tp 2 .*--sequence-parallel" <<<"$chose" && grep -q "^step 2: validation loss" <<<"$out"' \
    "train --auto --dtype bf16 --sequence-parallel: $(grep -m2 -e auto -e error <<<"$out")"
if [ -n "$chose" ]; then
    timeout 300 "$CLEAVE" memory --measure --json --dtype bf16 --data "$tmp/text.txt" --seq-len 16 --global-batch-size 8 \
        --threads 1 --eval-batches 1 $chose > "$tmp/auto_mem.json" 2> "$tmp/err"
    bad=$(python3 -c 'import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
print(len(rs) == 0 or any(r["predicted"] != r["measured"] for r in rs))' "$tmp/auto_mem.json" 2>&1)
    check '[ "$bad" = False ]' "memory --measure of --auto's choice ($chose): predicted != measured: $bad $(head -2 "$tmp/err")"
fi

mpi_or_skip cli_bf16_sp
for model in gpt2-tiny llama-tiny; do
    m=${model%%-*}
    timeout -k 5 300 mpirun --oversubscribe -np 2 "$CLEAVE" train "${base[@]}" --model $model --tp 2 --sequence-parallel \
        --comm mpi --log-file "$tmp/${m}mpi.jsonl" > "$tmp/${m}mpi.out" 2>&1
    _rc=$?
    check '[ $_rc -eq 0 ]' "$model tp 2 sp under MPI: $(tail -3 "$tmp/${m}mpi.out")"
    same "${m}mpi" "${m}sp"
done
finish cli_bf16_sp
