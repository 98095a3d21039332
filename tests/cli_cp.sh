#!/usr/bin/env bash
# Context parallelism (issue 32, items 2-5), gpt2-tiny and llama-tiny on the King
# James Bible, T 16, 20 steps, --threads 1:
# - `cleave mesh --cp`: the dp x cp x tp x pp order (tp fastest, then cp, then dp,
#   then pp) and the context and data-context groups, as printed;
# - cp 2 and cp 4 (each sequence cut into 2 cp chunks, rank i holding chunks i and
#   2cp-1-i), cp 2 with tp 2, with pp 2, with dp 2 under ZeRO 1, under selective
#   and full recompute, and with tp 2 and sequence parallelism (sp's shards of each
#   context rank's rows): losses and gradient norms within 1e-6 relative of one device;
#   llama-tiny (RoPE, grouped-query attention) at cp 2, cp 4, cp 2 x tp 2, cp 2 x pp 2,
#   cp 2 x tp 2 with sequence parallelism the same;
# - a checkpoint saved at cp 2 resumes at cp 1 and one saved at cp 1 resumes at
#   cp 2, the resumed steps within 1e-6 of the uninterrupted run;
# - under mpirun -np 2, cp 2 within 1e-6 of one device too; under mpirun -np 4, cp 4 (ring and a2a) and
#   cp 2 x tp 2 with sequence parallelism bit for bit the threads' run;
# - --cp-comm a2a (all-to-all to a split of the heads, DeepSpeed Ulysses): cp 2 and
#   cp 4, cp 2 with tp 2 (and sequence parallelism), with pp 2, under full recompute, llama-tiny at cp 2, and
#   under mpirun -np 2, within 1e-6 of one device; its first step's loss the same
#   bits as one device's (each head's attention is the one-rank kernel's over the
#   whole sequence); refused where cp does not divide the heads (valid sizes named);
# - refusals before the run (exit 2, one line): a --seq-len that does not cut into
#   2 cp equal chunks (the nearest valid values named), a family without
#   sequences, --cp not dividing the ranks.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--model gpt2-tiny --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20
        --sample-tokens 0 --eval-batches 2 --threads 1 --comm-timeout 60)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
close() { # file_a file_b tol steps
    paste <(figures "$1") <(figures "$2") | awk -v tol="$3" -v want="$4" '
        { n++; for (i = 1; i <= 2; i++) { d = $i - $(i + 2); if (d < 0) d = -d; r = d / ($(i + 2) < 0 ? -$(i + 2) : $(i + 2)); if (r > worst) worst = r } }
        END { printf "%d steps, max rel diff %.3g\n", n, worst; exit !(n == want && worst <= tol) }'
}
run() { # name args...
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}

# ---- the mesh ---------------------------------------------------------------
cat > "$tmp/want" <<'EOF'
mesh: 8 ranks = dp 2 x cp 2 x tp 2 x pp 1 (tp fastest, then cp, then dp, then pp)
tensor-parallel groups:   [0, 1] [2, 3] [4, 5] [6, 7]
context-parallel groups:  [0, 2] [1, 3] [4, 6] [5, 7]
data-parallel groups:     [0, 4] [1, 5] [2, 6] [3, 7]
pipeline-parallel groups: [0] [1] [2] [3] [4] [5] [6] [7]
embedding groups:         [0] [1] [2] [3] [4] [5] [6] [7]
model-parallel groups:    [0, 1] [2, 3] [4, 5] [6, 7]
data-context groups:      [0, 2, 4, 6] [1, 3, 5, 7]
EOF
"$CLEAVE" mesh --dp 2 --cp 2 --tp 2 | head -8 > "$tmp/got"
check 'cmp -s "$tmp/got" "$tmp/want"' "cleave mesh --dp 2 --cp 2 --tp 2: $(diff "$tmp/got" "$tmp/want" | head -5)"
"$CLEAVE" mesh --ranks 8 --context-parallel-size 2 --tp 2 | head -8 > "$tmp/got2"
check 'cmp -s "$tmp/got2" "$tmp/want"' "--ranks 8 --context-parallel-size 2 --tp 2 did not derive dp 2"
line=$("$CLEAVE" mesh --dp 2 --cp 2 --tp 2 | grep '^rank 6:')
check '[ "$line" = "rank 6: dp 1, cp 1, tp 0, pp 0 | groups: tp 3, cp 2, dp 2, pp 6, embedding 6, mp 3, data-context 0" ]' "rank 6: $line"

# ---- losses against one device ----------------------------------------------
run one
for lay in "cp2 --cp 2" "cp4 --cp 4" "cp2tp2 --cp 2 --tp 2" "cp2pp2 --cp 2 --pp 2" "cp2dp2z1 --cp 2 --dp 2 --zero 1" \
           "cp2sel --cp 2 --recompute selective" "cp2full --cp 2 --recompute full" "cp2tp2sp --cp 2 --tp 2 --sequence-parallel"; do
    set -- $lay
    n=$1; shift
    run "$n" "$@"
    out=$(close "$tmp/$n.jsonl" "$tmp/one.jsonl" 1e-6 20); _rc=$?
    echo "$*: $out"
    check '[ $_rc -eq 0 ]' "$*: not within 1e-6 of one device: $out"
done
# Llama: RoPE at each token's place in the whole sequence, grouped-query attention (2 of 4 kv heads)
run lone --model llama-tiny
for lay in "lcp2 --cp 2" "lcp4 --cp 4" "lcp2tp2 --cp 2 --tp 2" "lcp2pp2 --cp 2 --pp 2" "lcp2tp2sp --cp 2 --tp 2 --sequence-parallel"; do
    set -- $lay
    n=$1; shift
    run "$n" --model llama-tiny "$@"
    out=$(close "$tmp/$n.jsonl" "$tmp/lone.jsonl" 1e-6 20); _rc=$?
    echo "llama-tiny $*: $out"
    check '[ $_rc -eq 0 ]' "llama-tiny $*: not within 1e-6 of one device: $out"
done
# all-to-all: each head group's attention over the whole sequence
for lay in "a2a2 --cp 2" "a2a4 --cp 4" "a2a2tp2 --cp 2 --tp 2" "a2a2pp2 --cp 2 --pp 2" "a2a2full --cp 2 --recompute full" \
           "a2a2tp2sp --cp 2 --tp 2 --sequence-parallel"; do
    set -- $lay
    n=$1; shift
    run "$n" --cp-comm a2a "$@"
    out=$(close "$tmp/$n.jsonl" "$tmp/one.jsonl" 1e-6 20); _rc=$?
    echo "a2a $*: $out"
    check '[ $_rc -eq 0 ]' "--cp-comm a2a $*: not within 1e-6 of one device: $out"
done
first() { grep -m1 '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
check '[ -n "$(first "$tmp/a2a2.jsonl")" ] && [ "$(first "$tmp/a2a2.jsonl")" = "$(first "$tmp/one.jsonl")" ]' \
    "a2a cp 2's first loss $(first "$tmp/a2a2.jsonl") is not one device's $(first "$tmp/one.jsonl")"
run la2a2 --model llama-tiny --cp 2 --cp-comm a2a
out=$(close "$tmp/la2a2.jsonl" "$tmp/lone.jsonl" 1e-6 20); _rc=$?
echo "llama-tiny a2a --cp 2: $out"
check '[ $_rc -eq 0 ]' "llama-tiny --cp 2 --cp-comm a2a: not within 1e-6 of one device: $out"
vl1=$(grep 'validation loss' "$tmp/one.out" | tail -1); vl2=$(grep 'validation loss' "$tmp/cp2.out" | tail -1)
check '[ -n "$vl1" ] && [ "$vl1" = "$vl2" ]' "validation at cp 2 ($vl2) differs from one device ($vl1)"

# ---- checkpoints across cp --------------------------------------------------
run half-cp2 --cp 2 --stop-after 10 --save "$tmp/ck-cp2"
run half-one --stop-after 10 --save "$tmp/ck-one"
run res-one --resume "$tmp/ck-cp2"
run res-cp2 --cp 2 --resume "$tmp/ck-one"
grep '"loss"' "$tmp/one.jsonl" | tail -10 > "$tmp/one-last.jsonl"
for n in res-one res-cp2; do
    grep '"loss"' "$tmp/$n.jsonl" | tail -10 > "$tmp/$n-last.jsonl"
    out=$(close "$tmp/$n-last.jsonl" "$tmp/one-last.jsonl" 1e-6 10); _rc=$?
    echo "$n: $out"
    check '[ $_rc -eq 0 ]' "$n: resumed steps not within 1e-6 of the uninterrupted run: $out"
done

# ---- refusals ---------------------------------------------------------------
refused() { # want-text args...
    local want=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" > "$tmp/ref.out" 2>&1
    _rc=$?; check '[ $_rc -eq 2 ] && grep -q -- "$want" "$tmp/ref.out" && [ $(wc -l < "$tmp/ref.out") -le 2 ]' \
        "$* : want exit 2 naming '$want', got $_rc: $(head -3 "$tmp/ref.out")"
}
refused "does not split into 2 x --cp 2 = 4 equal chunks: use --seq-len 16 or 20" --cp 2 --seq-len 18
refused "use --seq-len 24 or 30, or --cp 2 or 7" --cp 3 --seq-len 28
"$CLEAVE" train --model mlp --cp 2 --steps 1 > "$tmp/ref.out" 2>&1
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "the mlp family has no sequence to split" "$tmp/ref.out"' "mlp --cp 2: $_rc $(head -2 "$tmp/ref.out")"
refused "--cp 2 does not divide the world of 3 ranks" --cp 2 --ranks 3
# llama-tiny at tp 2 holds 2 query heads and 1 key-value head a rank
refused "the 2 query heads and 1 key-value heads of a tensor-parallel rank do not divide by 2: use --cp 1 or --cp-comm ring" \
    --model llama-tiny --tp 2 --cp 2 --cp-comm a2a
refused "unknown --cp-comm 'star' (ring or a2a)" --cp 2 --cp-comm star

# ---- MPI: the ring's group as processes ------------------------------------
mpi_or_skip cli_cp
timeout -k 5 180 mpirun --oversubscribe -np 2 "$CLEAVE" train --comm mpi "${common[@]}" --cp 2 --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mpirun -np 2 --cp 2 failed ($_rc): $(tail -3 "$tmp/mpi.out")"
out=$(close "$tmp/mpi.jsonl" "$tmp/one.jsonl" 1e-6 20); _rc=$?
echo "mpi --cp 2: $out"
check '[ $_rc -eq 0 ]' "mpi --cp 2: not within 1e-6 of one device: $out"
timeout -k 5 180 mpirun --oversubscribe -np 2 "$CLEAVE" train --comm mpi "${common[@]}" --cp 2 --cp-comm a2a --log-file "$tmp/mpia.jsonl" \
    > "$tmp/mpia.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mpirun -np 2 --cp 2 --cp-comm a2a failed ($_rc): $(tail -3 "$tmp/mpia.out")"
out=$(close "$tmp/mpia.jsonl" "$tmp/a2a2.jsonl" 0 20); _rc=$?
echo "mpi --cp 2 --cp-comm a2a: $out"
check '[ $_rc -eq 0 ]' "mpi --cp 2 --cp-comm a2a: not bit for bit the threads run: $out"
# cp 2 x tp 2 with sequence parallelism as four processes: bit for bit the threads' run
timeout -k 5 300 mpirun --oversubscribe -np 4 "$CLEAVE" train --comm mpi "${common[@]}" --cp 2 --tp 2 --sequence-parallel \
    --log-file "$tmp/mpisp.jsonl" > "$tmp/mpisp.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mpirun -np 4 --cp 2 --tp 2 --sequence-parallel failed ($_rc): $(tail -3 "$tmp/mpisp.out")"
out=$(close "$tmp/mpisp.jsonl" "$tmp/cp2tp2sp.jsonl" 0 20); _rc=$?
echo "mpi --cp 2 --tp 2 --sequence-parallel: $out"
check '[ $_rc -eq 0 ]' "mpi --cp 2 --tp 2 --sequence-parallel: not bit for bit the threads' run: $out"
# cp 4 as four processes, each exchange: bit for bit the threads' run
for c in ring a2a; do
    run "th4$c" --cp 4 --cp-comm "$c"
    timeout -k 5 300 mpirun --oversubscribe -np 4 "$CLEAVE" train --comm mpi "${common[@]}" --cp 4 --cp-comm "$c" \
        --log-file "$tmp/mpi4$c.jsonl" > "$tmp/mpi4$c.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "mpirun -np 4 --cp 4 --cp-comm $c failed ($_rc): $(tail -3 "$tmp/mpi4$c.out")"
    out=$(close "$tmp/mpi4$c.jsonl" "$tmp/th4$c.jsonl" 0 20); _rc=$?
    echo "mpi --cp 4 --cp-comm $c: $out"
    check '[ $_rc -eq 0 ]' "mpi --cp 4 --cp-comm $c: not bit for bit the threads' run: $out"
done
finish cli_cp
