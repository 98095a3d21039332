#!/usr/bin/env bash
# `cleave trace render`: a simulated 1f1b p 4 m 8 drawn as SVG with one box
# per compute action and the bubble 3/11 on every rank, also written as a
# Chrome trace (--json) that renders to the same SVG; every kind, interleaved
# labels with the chunk; --step picks a step of a two-step trace; --help;
# bad input (missing, non-JSON and truncated files, a negative dur, an absent
# step, conflicting or missing flags) exits 2 with one line naming it and
# leaves no output file.
set -u
BUILD=${BUILD:-build}
CLEAVE=${CLEAVE:-$BUILD/cleave}
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAILED: $*"; }
dir=$(mktemp -d /tmp/cl_cli_trace_XXXXXX)
trap 'rm -rf "$dir"' EXIT
boxes() { grep -o '<rect class="act ' "$1" | wc -l; }

out=$("$CLEAVE" trace render --schedule 1f1b --pp 4 --micro-batches 8 --out "$dir/a.svg" --json "$dir/a.json" 2>&1); rc=$?
want='bubble: rank 0 0.2727; rank 1 0.2727; rank 2 0.2727; rank 3 0.2727'
if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -qF "wrote $dir/a.svg: step 1, 4 ranks, 64 compute actions; $want" &&
    [ "$(boxes "$dir/a.svg")" -eq 64 ] && head -c 5 "$dir/a.svg" | grep -q '<?xml' && tail -n 1 "$dir/a.svg" | grep -qx '</svg>' &&
    grep -q '"traceEvents"' "$dir/a.json" && [ ! -e "$dir/a.svg.tmp" ] && [ ! -e "$dir/a.json.tmp" ]; then ok; else
    bad "1f1b p 4 m 8 --json -> status $rc:"; printf '%s\n' "$out" | head -5 | sed 's/^/    /'
fi

# the Chrome trace renders to the same picture and the same bubble
out=$("$CLEAVE" trace render "$dir/a.json" --out "$dir/b.svg" 2>&1); rc=$?
if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -qF "64 compute actions; $want" && cmp -s "$dir/a.svg" "$dir/b.svg"; then ok; else
    bad "render a.json -> status $rc:"; printf '%s\n' "$out" | head -5 | sed 's/^/    /'
fi

# every kind: boxes = compute actions (F + backwards), interleaved labels mb.chunk
for case in "gpipe|3|5|30" "zb-h1|4|8|96" "interleaved|4|8|128" "1f1b|1|3|6"; do
    IFS='|' read -r kind p m n <<< "$case"
    out=$("$CLEAVE" trace render --schedule "$kind" --pp "$p" --micro-batches "$m" --out "$dir/k.svg" 2>&1); rc=$?
    if [ "$rc" -eq 0 ] && [ "$(boxes "$dir/k.svg")" -eq "$n" ] && printf '%s\n' "$out" | grep -qF "$n compute actions"; then ok; else
        bad "$kind p $p m $m -> status $rc, $(boxes "$dir/k.svg" 2>/dev/null) boxes, want $n:"; printf '%s\n' "$out" | head -3 | sed 's/^/    /'
    fi
done
"$CLEAVE" trace render --schedule interleaved --pp 2 --micro-batches 4 --virtual-stages 3 --out "$dir/i.svg" >/dev/null 2>&1
if grep -q '>3\.2</text>' "$dir/i.svg" && ! grep -q '>3</text>' "$dir/i.svg"; then ok; else bad "interleaved labels mb.chunk"; fi

# a two-step trace: --step picks one, 0 or no --step the first
cat > "$dir/two.json" <<'EOF'
{"traceEvents":[
{"name":"F mb0 c0","ph":"X","pid":0,"tid":0,"ts":0,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":1}},
{"name":"F mb0 c0","ph":"X","pid":1,"tid":0,"ts":10,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":1}},
{"name":"F mb0 c0","ph":"X","pid":0,"tid":0,"ts":100,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":2}},
{"name":"F mb1 c0","ph":"X","pid":0,"tid":0,"ts":110,"dur":10,"args":{"kind":"FWD","mb":1,"chunk":0,"step":2}},
{"name":"F mb0 c0","ph":"X","pid":1,"tid":0,"ts":110,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":2}},
{"name":"gemm","ph":"X","pid":0,"tid":0,"ts":1,"dur":2}
]}
EOF
out=$("$CLEAVE" trace render "$dir/two.json" --step 2 --out "$dir/s2.svg" 2>&1); rc=$?
if [ "$rc" -eq 0 ] && [ "$(boxes "$dir/s2.svg")" -eq 3 ] &&
    printf '%s\n' "$out" | grep -qF 'step 2, 2 ranks, 3 compute actions; bubble: rank 0 0.0000; rank 1 0.5000'; then ok; else
    bad "--step 2 -> status $rc:"; printf '%s\n' "$out" | head -3 | sed 's/^/    /'
fi
out=$("$CLEAVE" trace render "$dir/two.json" --out "$dir/s1.svg" 2>&1); rc=$?
if [ "$rc" -eq 0 ] && [ "$(boxes "$dir/s1.svg")" -eq 2 ] && printf '%s\n' "$out" | grep -qF 'step 1, 2 ranks'; then ok; else
    bad "no --step -> status $rc:"; printf '%s\n' "$out" | head -3 | sed 's/^/    /'
fi

out=$("$CLEAVE" trace render --help 2>&1); rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q -- '--micro-batches' && printf '%s' "$out" | grep -q -- '--step'; then ok; else
    bad "render --help -> status $rc"; fi
out=$("$CLEAVE" trace --help 2>&1); rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q 'cleave trace render FILE'; then ok; else bad "trace --help -> status $rc"; fi
out=$("$CLEAVE" --help 2>&1); rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q '^  trace '; then ok; else bad "cleave --help lists trace"; fi

printf 'not json at all\n' > "$dir/notjson.json"
printf '{"events": []}\n' > "$dir/nokey.json"
printf '{"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":5,"dur":-1,"args":{"kind":"FWD"}}]}\n' > "$dir/neg.json"
head -c 300 "$dir/a.json" > "$dir/cut.json"
printf '{"traceEvents":[{"ph":"X","pid":0,"tid":1,"ts":5,"dur":0,"args":{"kind":"SEND_ACT"}}]}\n' > "$dir/nocomp.json"
expect() { # expect "words" args...: status 2, one line "cleave: error: ..." containing words, no SVG written
    local want=$1; shift
    local out rc lines
    rm -f "$dir/x.svg"
    out=$("$CLEAVE" trace "$@" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s' "$out" | grep -c '' || true)
    if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q '^cleave: error: ' && printf '%s' "$out" | grep -qiF -- "$want" &&
        [ "$lines" -eq 1 ] && [ ! -e "$dir/x.svg" ]; then ok; else
        bad "cleave trace $* -> status $rc, $lines lines, wanted '$want':"; printf '%s\n' "$out" | head -5 | sed 's/^/    /'
    fi
}
expect "cannot open $dir/absent.json" render "$dir/absent.json" --out "$dir/x.svg"
expect "$dir/notjson.json: not a JSON file" render "$dir/notjson.json" --out "$dir/x.svg"
expect "no \"traceEvents\"" render "$dir/nokey.json" --out "$dir/x.svg"
expect "negative dur" render "$dir/neg.json" --out "$dir/x.svg"
expect "$dir/cut.json" render "$dir/cut.json" --out "$dir/x.svg"
expect "no compute events" render "$dir/nocomp.json" --out "$dir/x.svg"
expect "step 3 is not in the trace" render "$dir/two.json" --step 3 --out "$dir/x.svg"
expect "not an integer" render "$dir/two.json" --step two --out "$dir/x.svg"
expect "--out F.svg is required" render "$dir/two.json"
expect "not both" render "$dir/two.json" --schedule 1f1b --pp 2 --micro-batches 2 --out "$dir/x.svg"
expect "--pp goes with --schedule" render "$dir/two.json" --pp 2 --out "$dir/x.svg"
expect "nothing to draw" render --out "$dir/x.svg"
expect "--schedule needs --pp" render --schedule 1f1b --micro-batches 8 --out "$dir/x.svg"
expect "--schedule needs --micro-batches" render --schedule 1f1b --pp 4 --out "$dir/x.svg"
expect "unknown schedule 'zb-h2'" render --schedule zb-h2 --pp 4 --micro-batches 8 --out "$dir/x.svg"
expect "multiple of the pipeline ranks" render --schedule interleaved --pp 4 --micro-batches 6 --out "$dir/x.svg"
expect "must be" render --schedule 1f1b --pp 0 --micro-batches 8 --out "$dir/x.svg"
expect "step 2 is not in the trace" render --schedule 1f1b --pp 2 --micro-batches 2 --step 2 --out "$dir/x.svg"
expect "cannot create" render --schedule 1f1b --pp 2 --micro-batches 2 --out "$dir/no/such/x.svg"
expect "unknown flag" render "$dir/two.json" --out "$dir/x.svg" --bogus
expect "unexpected argument 'extra'" render "$dir/two.json" extra --out "$dir/x.svg"
expect "unknown trace command 'draw'" draw "$dir/two.json"
out=$("$CLEAVE" trace 2>&1); rc=$?
if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q '^usage: cleave trace render'; then ok; else bad "bare 'cleave trace' -> status $rc"; fi

echo "cli_trace: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
