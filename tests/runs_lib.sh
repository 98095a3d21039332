# Helpers for the tests that compare short runs of gpt2-tiny (sourced after lib.sh): the first 300 kB of
# the King James Bible, the common flags of a 20-step run, and
#   figures FILE        each step's "loss grad_norm" from a --log-file
#   close A B TOL       20 steps, every loss and norm of A within TOL relative of B's (prints the worst)
#   run NAME ARGS...    cleave train with the common flags, logged to $tmp/NAME.jsonl (output $tmp/NAME.out)
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20 --sample-tokens 0
        --eval-batches 2 --threads 1 --comm-timeout 60)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
close() {
    paste <(figures "$1") <(figures "$2") | awk -v tol="$3" '
        { n++; for (i = 1; i <= 2; i++) { d = $i - $(i + 2); if (d < 0) d = -d; r = d / ($(i + 2) < 0 ? -$(i + 2) : $(i + 2)); if (r > worst) worst = r } }
        END { printf "%d steps, max rel diff %.3g\n", n, worst; exit !(n == 20 && worst <= tol) }'
}
run() {
    local name=$1; shift
    timeout 300 "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}
