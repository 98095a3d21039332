#!/usr/bin/env bash
# cleave generate with the KV cache split over ranks (threads; src/train/generate.c's
# cl_generate_split, src/nn/decode.c's pipeline stage): gpt2-tiny (bytes), llama-tiny (4 heads, 2
# KV heads) and mixtral-tiny checkpoints trained 40 steps, of a 32-token context. At tp 2, pp 2 and
# tp 2 x pp 2 (llama-tiny also tp 4, past its KV heads: each replicated on two ranks; mixtral-tiny's
# experts split by tp as in training) the same 32 greedy tokens as one rank's (and, for the split
# layouts of llama-tiny and mixtral-tiny, as PyTorch's: tests/llama_torch.py and
# tests/mixtral_torch.py --generate), for a prompt that runs past the context too, and the same
# sampled tokens (seed, temperature, top-k). A checkpoint saved sharded by a tp 2 run loads at pp 2.
# --timing: every rank's KV cache and workspace predicted == measured to the byte; --device-memory
# a byte short of the largest rank's model + decoder refused up front (exit 2, one line), exactly
# enough runs. --no-kv-cache with --tp is refused in one line.
# cleave generate --memory (from the checkpoint's config, nothing run): every rank's model bytes and
# decoder bytes equal what --timing measures, at one rank and every layout above; a split part shows no
# gradient buffer. A rank whose KV cache is refused after the cap check passed (CLEAVE_ALLOC_FAULT) fails every
# rank at once (exit 2, one line). Under mpirun (--comm mpi, one rank a process; a skip without MPI or
# mpirun): gpt2-tiny and llama-tiny at tp 2 x pp 2, llama-tiny at tp 4 and pp 2, mixtral-tiny at pp 2 print
# the threads' greedy and sampled text (rank 0 alone) and every rank's bytes; np other than tp x pp,
# --no-kv-cache, a cap a byte short, a missing checkpoint and a refused KV cache exit 2 on every rank with
# one line, no abort.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/generate_lib.sh"
gen() { "$CLEAVE" generate --checkpoint "$@" 2>&1; }
for model in gpt2-tiny llama-tiny mixtral-tiny; do
    vocab=()
    [ $model = gpt2-tiny ] && vocab=(--vocab 256) # bytes, as the PyTorch reference reads them
    "$CLEAVE" train --model "$model" "${vocab[@]}" "${common[@]}" --save "$tmp/$model" > "$tmp/train.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$model: training failed:$(excerpt 3 "$(tail -3 "$tmp/train.out")")"
    layouts=("--tp 2" "--pp 2" "--tp 2 --pp 2")
    [ $model = llama-tiny ] && layouts+=("--tp 4")
    one=$(gen "$tmp/$model" --prompt "And it came to pass" --tokens 32 --temperature 0)
    onel=$(gen "$tmp/$model" --prompt "$long" --tokens 32 --temperature 0)
    ones=$(gen "$tmp/$model" --prompt "And God" --tokens 32 --temperature 0.8 --top-k 40 --seed 5)
    for lay in "${layouts[@]}"; do
        # shellcheck disable=SC2086
        got=$(gen "$tmp/$model" --prompt "And it came to pass" --tokens 32 --temperature 0 $lay)
        check '[ -n "$one" ] && [ "$got" = "$one" ]' "$model $lay: greedy tokens differ from one rank's:$(excerpt 2 "$got")$(excerpt 2 "$one")"
        # shellcheck disable=SC2086
        got=$(gen "$tmp/$model" --prompt "$long" --tokens 32 --temperature 0 $lay)
        check '[ -n "$onel" ] && [ "$got" = "$onel" ]' "$model $lay, past the context: greedy tokens differ:$(excerpt 2 "$got")$(excerpt 2 "$onel")"
        # shellcheck disable=SC2086
        got=$(gen "$tmp/$model" --prompt "And God" --tokens 32 --temperature 0.8 --top-k 40 --seed 5 $lay)
        check '[ -n "$ones" ] && [ "$got" = "$ones" ]' "$model $lay: sampled tokens differ from one rank's:$(excerpt 2 "$got")$(excerpt 2 "$ones")"
        # every rank's decoder: predicted == measured
        # shellcheck disable=SC2086
        "$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 8 --timing $lay > /dev/null 2> "$tmp/err"
        nr=$(grep -c "^generate: rank [0-9]* KV cache and workspace" "$tmp/err")
        bad=$(sed -n 's/^generate: rank \([0-9]*\) KV cache and workspace \([0-9]*\) bytes predicted, \([0-9]*\) measured.*/\1 \2 \3/p' "$tmp/err" | awk '$2 != $3 || $2 == 0')
        want=$(($(echo "$lay" | sed 's/--tp \([0-9]\)/\1/; s/--pp \([0-9]\)/\1/; s/ / * /')))
        check '[ "$nr" = "$want" ] && [ -z "$bad" ] && grep -q "^generate (KV cache, tp" "$tmp/err"' \
            "$model $lay: --timing's per-rank bytes ($nr of $want ranks, mismatches: '$bad'):$(excerpt 6 "$(cat "$tmp/err")")"
    done
    # cleave generate --memory: each rank's bytes predicted from the config = what --timing measures, to the byte
    for lay in "" "${layouts[@]}"; do
        # shellcheck disable=SC2086
        "$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 8 --timing $lay > /dev/null 2> "$tmp/err"
        # shellcheck disable=SC2086
        "$CLEAVE" generate --checkpoint "$tmp/$model" --memory --prompt-tokens 7 --tokens 8 $lay > "$tmp/mem" 2>&1
        meas=$(sed -n 's/^generate:[ rank0-9]* KV cache and workspace [0-9]* bytes predicted, \([0-9]*\) measured, beside the model.s \([0-9]*\)$/\2 \1/p' "$tmp/err")
        pred=$(sed -n 's/^rank [0-9]* .*KV cache \([0-9]*\) for [0-9]* positions, decoder workspace \([0-9]*\); total \([0-9]*\) bytes.*/\1 \2 \3/p' "$tmp/mem" |
            awk '{ print $3 - $1 - $2, $1 + $2 }')
        check '[ -n "$pred" ] && [ "$pred" = "$meas" ]' \
            "$model ${lay:-one rank}: --memory's model and decoder bytes per rank differ from --timing's:$(excerpt 4 "$pred")$(excerpt 4 "$meas")"
    done
    # a split part holds no gradient buffer (cl_model_create_infer); one rank's loaded model does
    # shellcheck disable=SC2086
    "$CLEAVE" generate --checkpoint "$tmp/$model" --memory --prompt-tokens 7 --tokens 8 ${layouts[0]} > "$tmp/mem" 2>&1
    "$CLEAVE" generate --checkpoint "$tmp/$model" --memory --prompt-tokens 7 --tokens 8 > "$tmp/mem1" 2>&1
    check '[ "$(grep -c "^rank " "$tmp/mem")" -gt 1 ] && ! grep "^rank " "$tmp/mem" | grep -vq "gradient buffer 0," &&
           grep -q "gradient buffer [1-9]" "$tmp/mem1"' \
        "$model ${layouts[0]}: --memory shows a split part's gradient buffer (or none at one rank):$(excerpt 4 "$(cat "$tmp/mem" "$tmp/mem1")")"
    echo "$model: $(printf '%s' "$one" | head -c 60) (one rank = ${layouts[*]}); memory: $(head -1 "$tmp/mem" | cut -c1-200)"
done
refused "prompt-tokens" generate --checkpoint "$tmp/llama-tiny" --memory --tokens 8
# the cap, per rank: a byte short of the largest rank's model + decoder refused before any decoder is allocated
"$CLEAVE" generate --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --timing --tp 2 --pp 2 > /dev/null 2> "$tmp/err"
need=$(sed -n 's/^generate: rank [0-9]* KV cache and workspace \([0-9]*\) bytes predicted, [0-9]* measured, beside the model.s \([0-9]*\)$/\1 \2/p' "$tmp/err" | awk '{ t = $1 + $2; if (t > m) m = t } END { print m }')
check '[ -n "$need" ] && [ "$need" -gt 0 ]' "llama-tiny tp 2 x pp 2: no per-rank figures"
refused "KV cache" generate --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --tp 2 --pp 2 --device-memory $((need - 1))
"$CLEAVE" generate --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --tp 2 --pp 2 --device-memory "$need" > /dev/null 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "llama-tiny tp 2 x pp 2 under a cap of the largest rank's model + decoder exactly failed"
refused "no-kv-cache" generate --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --tp 2 --no-kv-cache
refused "tp" generate --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --tp 3
# a checkpoint saved sharded by a tp 2 run, loaded at pp 2: one rank's tokens of the same checkpoint
"$CLEAVE" train --model llama-tiny "${common[@]}" --steps 10 --tp 2 --save-format sharded --save "$tmp/sh" > "$tmp/train.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "llama-tiny tp 2 sharded: training failed:$(excerpt 3 "$(tail -3 "$tmp/train.out")")"
one=$(gen "$tmp/sh" --prompt "And it came to pass" --tokens 32 --temperature 0)
got=$(gen "$tmp/sh" --prompt "And it came to pass" --tokens 32 --temperature 0 --pp 2)
check '[ -n "$one" ] && [ "$got" = "$one" ]' "sharded tp 2 checkpoint at pp 2: greedy tokens differ:$(excerpt 2 "$got")$(excerpt 2 "$one")"
if [ $torch = 0 ]; then
    skip "the comparison with PyTorch (no torch for $PY)" setup
else
    for model in llama-tiny mixtral-tiny; do
        ref=tests/llama_torch.py lay=(--tp 2 --pp 2)
        [ $model = mixtral-tiny ] && ref=tests/mixtral_torch.py lay=(--pp 2)
        want=$(timeout 300 $PY $ref --generate "$tmp/$model" "And the LORD spake unto Moses" 32 2> "$tmp/pyerr")
        got=$(gen "$tmp/$model" --prompt "And the LORD spake unto Moses" --tokens 32 --temperature 0 "${lay[@]}")
        check '[ -n "$got" ] && [ "$got" = "$want" ]' "$model ${lay[*]}: greedy tokens differ from PyTorch's:$(excerpt 2 "$got")$(excerpt 2 "$want")"
    done
fi
# a rank refused after the cap check passed (its KV cache's allocation, by CLEAVE_ALLOC_FAULT): every rank learns it
# at the decoder's agreement and the run ends at once (exit 2, one line naming the rank), not at the 300 s timeout
t0=$(date +%s.%N)
CLEAVE_ALLOC_FAULT=device:1:activations:1 timeout -k 5 120 "$CLEAVE" generate --checkpoint "$tmp/llama-tiny" --prompt "And God" \
    --tokens 8 --tp 2 --pp 2 > /dev/null 2> "$tmp/err"
_rc=$?; dt=$(echo "$(date +%s.%N) - $t0" | bc)
echo "threads, rank 1's KV cache refused: exit $_rc after $dt s: $(head -1 "$tmp/err")"
check '[ $_rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "rank 1 (tp 1, stage 0).*CLEAVE_ALLOC_FAULT" "$tmp/err" &&
       [ "$(echo "$dt < 20" | bc)" = 1 ]' "threads: a rank refused at the decoder's allocation: exit $_rc after $dt s:$(excerpt 3 "$(cat "$tmp/err")")"

# under MPI (--comm mpi, one rank a process): the threads' tokens, rank 0 alone printing them, every rank's bytes
mpi_or_skip cli_generate_split
mpi() { timeout -k 5 120 mpirun --oversubscribe "$@"; }
bytes() { grep "^generate: rank [0-9]* KV cache" "$1" | sort; }
for run in "gpt2-tiny --tp 2 --pp 2" "llama-tiny --tp 2 --pp 2" "llama-tiny --tp 4" "llama-tiny --pp 2" "mixtral-tiny --pp 2"; do
    read -r model lay <<< "$run"
    np=$(($(echo "$lay" | sed 's/--tp \([0-9]\)/\1/; s/--pp \([0-9]\)/\1/; s/ / * /')))
    for how in "--temperature 0" "--temperature 0.8 --top-k 40 --seed 5"; do
        # shellcheck disable=SC2086
        want=$("$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And it came to pass" --tokens 24 $how $lay --timing 2> "$tmp/terr")
        # shellcheck disable=SC2086
        got=$(mpi -np $np "$CLEAVE" generate --comm mpi --checkpoint "$tmp/$model" --prompt "And it came to pass" --tokens 24 $how $lay \
            --timing 2> "$tmp/err")
        _rc=$?
        check '[ $_rc -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]' \
            "mpirun -np $np $model $lay $how: exit $_rc, the text differs from the threads' run:$(excerpt 2 "$got")$(excerpt 2 "$want")$(excerpt 3 "$(cat "$tmp/err")")"
    done
    bad=$(sed -n 's/^generate: rank \([0-9]*\) KV cache and workspace \([0-9]*\) bytes predicted, \([0-9]*\) measured.*/\1 \2 \3/p' "$tmp/err" | awk '$2 != $3 || $2 == 0')
    check '[ "$(bytes "$tmp/err" | grep -c "")" = "$np" ] && [ -z "$bad" ] && [ "$(bytes "$tmp/err")" = "$(bytes "$tmp/terr")" ] &&
           [ "$(grep -c "^generate (KV cache, tp [0-9]* x pp [0-9]* over MPI)" "$tmp/err")" = 1 ]' \
        "mpirun -np $np $model $lay --timing: each rank's bytes (predicted == measured, as the threads'), one tokens/s line:$(excerpt 6 "$(cat "$tmp/err")")"
    echo "mpirun -np $np $model $lay: $(printf '%s' "$got" | head -c 50) (= threads)"
done
# bad input: every rank exits 2, one line (rank 0's), no abort, no hang
mpi_refused() { # PATTERN ARGS...: mpirun ARGS exits 2 with one cleave line matching PATTERN
    local out rc pat=$1
    out=$(mpi "${@:2}" 2>&1); rc=$?
    check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | grep -c "^cleave")" -eq 1 ] && printf "%s" "$out" | grep -q "^cleave: error: .*$pat" &&
           ! printf "%s" "$out" | grep -q "MPI_ABORT\|AddressSanitizer"' "mpirun ${*:2}: exit $rc, want 2 and one line matching '$pat'$(excerpt 8 "$out")"
    printf '%s\n' "$out" | grep "^cleave" | sed 's/^/  refused: /'
}
mpi_refused "generates on 4 ranks, but this world has 3 (mpirun -np 4)" -np 3 "$CLEAVE" generate --comm mpi --checkpoint "$tmp/llama-tiny" --tokens 8 --tp 2 --pp 2
mpi_refused "no-kv-cache" -np 2 "$CLEAVE" generate --comm mpi --checkpoint "$tmp/llama-tiny" --tokens 8 --tp 2 --no-kv-cache
mpi_refused "KV cache.*do not fit" -np 4 "$CLEAVE" generate --comm mpi --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --tp 2 --pp 2 \
    --device-memory $((need - 1))
mpi_refused "checkpoint" -np 2 "$CLEAVE" generate --comm mpi --checkpoint "$tmp/none" --tokens 8 --tp 2
t0=$(date +%s.%N)
mpi_refused "rank 3 (tp 1, stage 1).*CLEAVE_ALLOC_FAULT" -x CLEAVE_ALLOC_FAULT=device:3:activations:1 -np 4 "$CLEAVE" generate --comm mpi \
    --checkpoint "$tmp/llama-tiny" --prompt "And God" --tokens 8 --tp 2 --pp 2
dt=$(echo "$(date +%s.%N) - $t0" | bc)
echo "mpirun -np 4, rank 3's KV cache refused: the job ended after $dt s (mpirun's start included)"
check '[ "$(echo "$dt < 60" | bc)" = 1 ]' "mpirun -np 4 with rank 3's KV cache refused took $dt s"
finish cli_generate_split
