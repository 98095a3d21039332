# Shared by tests/cli_moe_train.sh, cli_moe_ep.sh, cli_moe_ep_zero.sh, cli_moe_tp.sh and cli_bf16_moe.sh (sourced after lib.sh):
# mixtral-tiny's 20-step run on the King James Bible (common), a run's per-step figures (loss, grad norm, aux loss),
# run NAME ARGS (its log at $tmp/NAME.jsonl, a check that it succeeded), close and compare (two runs' figures within
# 1e-6 relative), same_routing (the steps two runs route alike).
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--model mixtral-tiny --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20 --sample-tokens 0
        --eval-batches 1 --threads 1 --comm-timeout 60)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*"moe_aux": \([^,]*\),.*/\1 \2 \3/'; }
run() { # name args...
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}
# close A B [FROM]: A's figures within 1e-6 relative of B's from step FROM on (A a run resumed there), step by
# step; prints the steps and the largest
close() {
    paste <(figures "$1") <(figures "$2" | tail -n +"${3:-1}") | awk '
        NF != 6 { bad = 1 }
        { n++; for (i = 1; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d; r = d / ($(i + 3) < 0 ? -$(i + 3) : $(i + 3)); if (r > w) w = r } }
        END { printf "%d steps, max rel diff %.3g\n", n, w + 0; exit !(n > 0 && !bad && w <= 1e-6) }'
}
compare() { # name reference steps
    local res a=$1 b=$2 n=$3
    res=$(close "$tmp/$a.jsonl" "$tmp/$b.jsonl"); _rc=$?
    echo "$a against $b: $res"
    check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/$a.jsonl" | wc -l)" -eq "$n" ]' "$a against $b: $res"
}
# same_routing A B: the number of first steps whose routing (dropped slots, token-slots per expert) A and B share
routed() { grep '"loss"' "$1" | sed 's/.*"moe_dropped": \([^,]*\), "expert_share": \(\[[^]]*\]\).*/\1 \2/'; }
same_routing() { paste -d'|' <(routed "$1") <(routed "$2") | awk -F'|' '$1 != $2 { exit } { n++ } END { print n + 0 }'; }
