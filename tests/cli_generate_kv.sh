#!/usr/bin/env bash
# cleave generate with a KV cache (src/nn/decode.c) against the recomputing
# path (--no-kv-cache) on gpt2-tiny (bytes), llama-tiny and mixtral-tiny
# (the MoE block's decode: 8 experts, top 2, dropless) checkpoints trained 40 steps, of a 32-token context: the same greedy tokens for a
# short prompt, for a prompt
# that with its 40 new tokens runs past the context (the window slides:
# each step runs the whole window again, as the recomputing path does) and
# for a prompt longer than the context; the same sampled tokens (seed,
# temperature, top-k); --timing prints prefill and decode tokens/s and the
# KV cache's bytes, predicted == measured, and --device-memory a byte short
# of model + cache is refused before the cache is allocated. And
# against PyTorch: 32 greedy tokens equal to those of the independent
# references recomputing each window (scripts/hf_eval.py --generate for
# GPT-2, tests/llama_torch.py --generate for Llama, tests/mixtral_torch.py
# --generate for Mixtral), for two prompts, one running past the context
# (skipped without torch, a failure under CI=true). An MoE model trained with
# a capacity factor is refused with the cache (a step's capacity would be its
# new rows', not the window's), in one line naming --no-kv-cache, which runs.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/generate_lib.sh"
for model in gpt2-tiny llama-tiny mixtral-tiny; do
    vocab=()
    [ $model = gpt2-tiny ] && vocab=(--vocab 256) # bytes, as the PyTorch reference reads them
    "$CLEAVE" train --model "$model" "${vocab[@]}" "${common[@]}" --save "$tmp/$model" > "$tmp/train.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$model: training failed:$(excerpt 3 "$(tail -3 "$tmp/train.out")")"
    for prompt in "And God said" "And the LORD spake unto Moses, saying" "$long"; do
        kv=$("$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "$prompt" --tokens 40 --temperature 0 2>&1)
        _rc=$?
        re=$("$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "$prompt" --tokens 40 --temperature 0 --no-kv-cache 2>&1)
        check '[ $_rc -eq 0 ] && [ -n "$kv" ] && [ "$kv" = "$re" ]' \
            "$model '${prompt:0:20}...': greedy tokens with the KV cache differ from recomputing:$(excerpt 2 "$kv")$(excerpt 2 "$re")"
    done
    kv=$("$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 40 --temperature 0.8 --top-k 40 --seed 5 2>&1)
    re=$("$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 40 --temperature 0.8 --top-k 40 --seed 5 --no-kv-cache 2>&1)
    check '[ -n "$kv" ] && [ "$kv" = "$re" ]' "$model: sampled tokens differ:$(excerpt 2 "$kv")$(excerpt 2 "$re")"
    "$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 8 --timing > /dev/null 2> "$tmp/err"
    check 'grep -Eq "^generate \(KV cache\): prefill [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tokens/s\); decode 7 tokens" "$tmp/err"' \
        "$model: --timing printed:$(excerpt 2 "$(cat "$tmp/err")")"
    # the decoder's bytes: predicted == measured; a cap a byte short of model + decoder refused up front
    # (exit 2, one line), exactly enough runs, and the recomputing path runs under the short cap
    read -r P M H < <(sed -n 's/^generate: KV cache and workspace \([0-9]*\) bytes predicted, \([0-9]*\) measured, beside the model.s \([0-9]*\)$/\1 \2 \3/p' "$tmp/err")
    check '[ -n "$P" ] && [ "$P" -gt 0 ] && [ "$P" = "$M" ]' "$model: KV cache predicted ${P:-?} bytes, measured ${M:-?}"
    refused "KV cache" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 8 --device-memory $((H + P - 1))
    "$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 8 --device-memory $((H + P)) > /dev/null 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$model: generate under a cap of model + KV cache exactly failed"
    "$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "And God" --tokens 8 --device-memory $((H + P - 1)) --no-kv-cache > /dev/null 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$model: --no-kv-cache under the short cap failed"
    if [ $torch = 0 ]; then
        skip "$model: the comparison with PyTorch (no torch for $PY)" setup
        continue
    fi
    ref=scripts/hf_eval.py
    [ $model = llama-tiny ] && ref=tests/llama_torch.py
    [ $model = mixtral-tiny ] && ref=tests/mixtral_torch.py
    for prompt in "And the LORD spake unto Moses" "And it came to pass"; do
        want=$(timeout 300 $PY $ref --generate "$tmp/$model" "$prompt" 32 2> "$tmp/pyerr")
        got=$("$CLEAVE" generate --checkpoint "$tmp/$model" --prompt "$prompt" --tokens 32 --temperature 0 2>&1)
        check '[ -n "$got" ] && [ "$got" = "$want" ]' "$model '$prompt': cleave's greedy tokens differ from PyTorch's:$(excerpt 2 "$got")$(excerpt 2 "$want")"
        echo "$model greedy, cleave (KV cache) = PyTorch: $(printf '%s' "$got" | od -An -c | tr -d '\n' | tr -s ' ' | head -c 120)"
    done
done
# a capacity factor: the cache refused before it is allocated, the recomputing path runs
"$CLEAVE" train --model mixtral-tiny --moe-capacity-factor 1.5 "${common[@]}" --steps 1 --save "$tmp/cf" > "$tmp/train.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mixtral-tiny with a capacity factor: training failed:$(excerpt 3 "$(tail -3 "$tmp/train.out")")"
refused "capacity factor.*--no-kv-cache" generate --checkpoint "$tmp/cf" --prompt "And God" --tokens 4
"$CLEAVE" generate --checkpoint "$tmp/cf" --prompt "And God" --tokens 4 --no-kv-cache > /dev/null 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mixtral-tiny with a capacity factor: --no-kv-cache failed"
finish cli_generate_kv
