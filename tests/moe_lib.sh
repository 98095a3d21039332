# Shared by tests/cli_moe_train.sh and cli_moe_ep.sh (sourced after lib.sh): mixtral-tiny's 20-step run on the
# King James Bible (common), a run's per-step figures (loss, grad norm, aux loss) and run NAME ARGS (its log at
# $tmp/NAME.jsonl, a check that it succeeded).
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--model mixtral-tiny --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20 --sample-tokens 0
        --eval-batches 1 --threads 1 --comm-timeout 60)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*"moe_aux": \([^,]*\),.*/\1 \2 \3/'; }
run() { # name args...
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}
