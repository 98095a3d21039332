# Helpers of the Hugging Face checkpoint tests (tests/cli_hf_llama.sh, tests/cli_hf_mixtral.sh), sourced after
# lib.sh with PY set: directories made and compared by tests/hf_llama.py ($H), cleave convert runs, and a
# directory's loss as cleave eval and the PyTorch model $HF_TORCH (llama_torch.py, mixtral_torch.py) give it.
H="$PY $(dirname "$0")/hf_llama.py"
conv() { # name args...: cleave convert, output in $tmp/name.out
    local name=$1; shift
    timeout 300 "$CLEAVE" convert "$@" > "$tmp/$name.out" 2>&1
    local rc=$?
    check '[ $rc -eq 0 ]' "convert $name ($*) failed: $(tail -3 "$tmp/$name.out")"
}
same() { # want got what: hf_llama.py same
    local out
    out=$($H same "$1" "$2" 2>&1); local rc=$?
    check '[ $rc -eq 0 ]' "$3: $out"
}
score() { # what cleave-dir torch-dir: cleave eval's loss on $tmp/score.txt and $HF_TORCH --eval-hf's within 1e-5 relative
    local ours theirs
    ours=$(timeout 300 "$CLEAVE" eval --checkpoint "$2" --text "$tmp/score.txt" 2>&1 | sed -n 's/^eval loss: //p')
    theirs=$(timeout 300 $PY "$(dirname "$0")/$HF_TORCH" --eval-hf "$3" "$tmp/score.txt" 2>&1 | sed -n 's/^eval loss: //p')
    echo "$1: cleave $ours, PyTorch $theirs"
    check '[ -n "$ours" ] && [ -n "$theirs" ] && awk -v a="$ours" -v b="$theirs" "BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 1e-5*b)}"' \
        "$1: cleave eval loss '$ours', PyTorch '$theirs'"
}
