#!/usr/bin/env bash
# cleave generate with the KV cache split over ranks (threads; src/train/generate.c's
# cl_generate_split, src/nn/decode.c's pipeline stage): gpt2-tiny (bytes), llama-tiny (4 heads, 2
# KV heads) and mixtral-tiny checkpoints trained 40 steps, of a 32-token context. At tp 2, pp 2 and
# tp 2 x pp 2 (llama-tiny also tp 4, past its KV heads: each replicated on two ranks; mixtral-tiny pp
# 2 only, its experts take no tp) the same 32 greedy tokens as one rank's (and, for the split
# layouts of llama-tiny and mixtral-tiny, as PyTorch's: tests/llama_torch.py and
# tests/mixtral_torch.py --generate), for a prompt that runs past the context too, and the same
# sampled tokens (seed, temperature, top-k). A checkpoint saved sharded by a tp 2 run loads at pp 2.
# --timing: every rank's KV cache and workspace predicted == measured to the byte; --device-memory
# a byte short of the largest rank's model + decoder refused up front (exit 2, one line), exactly
# enough runs. --no-kv-cache with --tp and an MoE model at --tp 2 are refused in one line.
# cleave generate --memory (from the checkpoint's config, nothing run): every rank's model bytes and
# decoder bytes equal what --timing measures, at one rank and every layout above.
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
    [ $model = mixtral-tiny ] && layouts=("--pp 2")
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
refused "tp" generate --checkpoint "$tmp/mixtral-tiny" --prompt "And God" --tokens 8 --tp 2
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
finish cli_generate_split
