# Shared start of the tests/cli_*.sh scripts (sourced): the build to test,
# a scratch directory removed on exit, a failure count, check, excerpt and
# finish, and mpi_or_skip for the tests of MPI runs.
BUILD=${BUILD:-build}
CLEAVE=${CLEAVE:-$BUILD/cleave}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# Counting: every check is a test case (passed or failed), every skip one
# case skipped; finish prints "NAME: P passed, F failed, S skipped", the
# line tests/run.sh adds up.
passed=0
skipped=0
# check 'shell condition' 'message when it is false'
check() { if eval "$1"; then passed=$((passed + 1)); else echo "FAILED: $2"; fail=$((fail + 1)); fi; }
# skip WHAT [setup]: a part that cannot run here, counted as a skip. With
# "setup" the missing thing is one scripts/setup.sh installs, so under
# CI=true (where the set-up ran) it is a failure, not a skip.
skip() {
    if [ "${2:-}" = setup ] && [ "${CI:-}" = true ]; then
        echo "FAILED: $1 is missing, though the set-up installs it (CI=true)"; fail=$((fail + 1))
    else
        echo "SKIP: $1"; skipped=$((skipped + 1))
    fi
}
# PY: the interpreter with PyTorch (Debian's python3-torch; the python3 first on PATH may lack it).
# have_torch WHAT: true where $PY imports torch; else WHAT is counted as a skip (a failure under CI=true,
# where scripts/setup.sh --python-torch ran)
PY=/usr/bin/python3
have_torch() { $PY -c 'import torch' 2> /dev/null || { skip "$1 (no torch for $PY)" setup; return 1; }; }
# excerpt N TEXT: TEXT's first N lines, each on a line of its own and
# indented, to end a check's message with what a command printed
excerpt() { printf '\n%s' "$(printf '%s\n' "$2" | head -n "$1" | sed 's/^/    /')"; }
# finish NAME: the tally line tests/run.sh adds up, and the exit status
finish() {
    echo "$1: $passed passed, $fail failed, $skipped skipped"
    [ $fail -eq 0 ]
}
# refused PATTERN ARGS...: cleave ARGS is bad input: exit 2, one line on stderr (notes aside) matching
# PATTERN, and nothing at $tmp/no (where the tests point --to); the line is echoed
refused() {
    rm -rf "$tmp/no"
    "$CLEAVE" "${@:2}" > /dev/null 2> "$tmp/err"
    local rc=$? n pat=$1
    n=$(grep -v '^cleave: note:' "$tmp/err" | wc -l)
    check '[ $rc -eq 2 ] && [ "$n" -eq 1 ] && grep -q -- "$pat" "$tmp/err" && [ ! -e "$tmp/no" ]' \
        "cleave ${*:2}: exit $rc, expected 2 with one line matching '$1':$(excerpt 3 "$(cat "$tmp/err")")"
    grep -v '^cleave: note:' "$tmp/err" | sed 's/^/  refused: /'
}
# mpi_or_skip NAME: for a test of MPI runs. Without MPI in the build or
# mpirun on the path: a skip (a failure under CI=true: the set-up installs
# OpenMPI), the tally, and exit; else what
# mpirun needs here (root allowed; under sanitizers leak detection off, as
# OpenMPI's own allocations show up as leaks at exit)
mpi_or_skip() {
    if ! "$CLEAVE" --version | grep -q "mpi: yes" || ! command -v mpirun > /dev/null; then
        skip "the MPI runs (no MPI in this build or no mpirun)" setup
        finish "$1"
        exit
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
}
# st_same A B: two safetensors files byte-equal but for the metadata's run id (a checkpoint records its
# run's, and two runs compared are two runs): the header's tensors, their hashes and the data all equal
st_same() {
    python3 - "$1" "$2" << 'PY'
import json, struct, sys
def part(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.get("__metadata__", {}).pop("cleave_run_id", None)
    return h, b[8 + n:]
sys.exit(part(sys.argv[1]) != part(sys.argv[2]))
PY
}
# log_figures LOG: a train --log-file's "loss grad_norm" per step, one line each
log_figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
# step_val_figures LOG: every step's line (loss, grad_norm and the rest, less the time and the learning rate) and every
# validation loss, as the log prints them (17 digits)
step_val_figures() { grep -E '"loss"|"val_loss"' "$1" | sed 's/, "ms".*//; s/"lr": [^,]*, //'; }
# same_both_ways NAME VAR=VALUE WHAT ARGS...: cleave train ARGS as it is ($tmp/NAME.jsonl) and again with VAR=VALUE in
# its environment ($tmp/NAME-alt.jsonl): both succeed and give the same step_val_figures, bit for bit (WHAT: what
# differs when they do not). Sets `figured` to the count of figures.
same_both_ways() {
    local name=$1 env=$2 what=$3; shift 3
    "$CLEAVE" train "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    local rc=$?
    env "$env" "$CLEAVE" train "$@" --log-file "$tmp/$name-alt.jsonl" > "$tmp/$name-alt.out" 2>&1
    local rc2=$?
    figured=$(step_val_figures "$tmp/$name.jsonl" | grep -c loss)
    check '[ $rc -eq 0 ] && [ $rc2 -eq 0 ]' "$name: a run failed (status $rc, $rc2): $(tail -2 "$tmp/$name.out")$(tail -2 "$tmp/$name-alt.out")"
    check '[ "$(step_val_figures "$tmp/$name.jsonl")" = "$(step_val_figures "$tmp/$name-alt.jsonl")" ]' \
        "$name: $what: $(diff <(step_val_figures "$tmp/$name.jsonl") <(step_val_figures "$tmp/$name-alt.jsonl") | head -4)"
}
# runs_near LOG_A LOG_B FIRST LOSSES NORMS [STEPS]: two train --log-files of 20 steps (or their first STEPS), the
# first step's loss and norm within FIRST relative, every step's loss within LOSSES, every step's norm within NORMS
# (prints the worst; status 1 if not)
runs_near() {
    local steps=${6:-20}
    paste <(log_figures "$1" | head -n "$steps") <(log_figures "$2" | head -n "$steps") | awk -v tf="$3" -v tl="$4" -v tg="$5" -v want="$steps" '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
        { n++; l = rel($1, $3); g = rel($2, $4); if (l > wl) wl = l; if (g > wg) wg = g; if (n == 1) first = l > g ? l : g }
        END { printf "%d steps, first step %.3g, losses %.3g, norms %.3g\n", n, first, wl, wg
              exit !(n == want && first <= tf && wl <= tl && wg <= tg) }'
}
# train_run NAME ARGS...: cleave train with the caller's common=(...) flags and ARGS, the log in $tmp/NAME.jsonl,
# the output in $tmp/NAME.out; a failure is a failed check
train_run() {
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}
# resume_exact ARGS...: with the caller's common=(...) flags and ARGS, 10 steps stopped after 5 and saved to $tmp/ck,
# resumed from it to step 10: steps 6-10's losses and norms equal to 10 straight steps'
resume_exact() {
    "$CLEAVE" train "${common[@]}" "$@" --steps 10 --stop-after 5 --save "$tmp/ck" > "$tmp/a.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$* 5 steps with --save: $(tail -2 "$tmp/a.out")"
    "$CLEAVE" train "${common[@]}" "$@" --steps 10 --resume "$tmp/ck" --log-file "$tmp/res.jsonl" > "$tmp/b.out" 2>&1
    "$CLEAVE" train "${common[@]}" "$@" --steps 10 --log-file "$tmp/ten.jsonl" > "$tmp/c.out" 2>&1
    check '[ -n "$(log_figures "$tmp/res.jsonl")" ] && [ "$(log_figures "$tmp/res.jsonl")" = "$(log_figures "$tmp/ten.jsonl" | tail -5)" ]' \
        "$* resume not exact: $(paste <(log_figures "$tmp/res.jsonl") <(log_figures "$tmp/ten.jsonl" | tail -5) | head -3)"
}
# bf16_checkpoint_generates: the checkpoint resume_exact --dtype bf16 left in $tmp/ck names its dtype in config.json,
# and greedy generation from it (F32 decode on the master weights) gives the same tokens with the KV cache as recomputing
bf16_checkpoint_generates() {
    check 'grep -q "\"cleave_dtype\": \"bf16\"" "$tmp/ck/config.json"' "the bf16 checkpoint's config.json names its dtype"
    local kv re rc
    kv=$("$CLEAVE" generate --checkpoint "$tmp/ck" --prompt "And God said" --tokens 24 --temperature 0 2>&1); rc=$?
    re=$("$CLEAVE" generate --checkpoint "$tmp/ck" --prompt "And God said" --tokens 24 --temperature 0 --no-kv-cache 2>&1)
    check '[ $rc -eq 0 ] && [ ${#kv} -gt 12 ] && [ "$kv" = "$re" ]' \
        "generate from a bf16 checkpoint: KV cache and recomputing differ or failed:$(excerpt 2 "$kv")$(excerpt 2 "$re")"
}
