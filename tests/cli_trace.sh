#!/usr/bin/env bash
# `cleave trace render`: a simulated 1f1b p 4 m 8 drawn as SVG with one box
# per compute action and the bubble 3/11 on every rank, also written as a
# Chrome trace (--json) that renders to the same SVG; every kind, interleaved
# labels with the chunk; --step picks a step of a two-step trace; --help;
# bad input (missing, non-JSON and truncated files, a negative dur, an absent
# step, conflicting or missing flags) exits 2 with one line naming it and
# leaves no output file.
set -u
source "$(dirname "$0")/lib.sh"
boxes() { grep -o '<rect class="act ' "$1" | wc -l; }

out=$("$CLEAVE" trace render --schedule 1f1b --pp 4 --micro-batches 8 --out "$tmp/a.svg" --json "$tmp/a.json" 2>&1); rc=$?
want='bubble: rank 0 0.2727; rank 1 0.2727; rank 2 0.2727; rank 3 0.2727'
check '[ "$rc" -eq 0 ] && printf "%s\n" "$out" | grep -qF "wrote $tmp/a.svg: step 1, 4 ranks, 64 compute actions; $want" &&
    [ "$(boxes "$tmp/a.svg")" -eq 64 ] && head -c 5 "$tmp/a.svg" | grep -q "<?xml" && tail -n 1 "$tmp/a.svg" | grep -qx "</svg>" &&
    grep -q "\"traceEvents\"" "$tmp/a.json" && [ ! -e "$tmp/a.svg.tmp" ] && [ ! -e "$tmp/a.json.tmp" ]' \
    "1f1b p 4 m 8 --json -> status $rc:$(excerpt 5 "$out")"

# the Chrome trace renders to the same picture and the same bubble
out=$("$CLEAVE" trace render "$tmp/a.json" --out "$tmp/b.svg" 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s\n" "$out" | grep -qF "64 compute actions; $want" && cmp -s "$tmp/a.svg" "$tmp/b.svg"' \
    "render a.json -> status $rc:$(excerpt 5 "$out")"

# every kind: boxes = compute actions (F + backwards), interleaved labels mb.chunk
for case in "gpipe|3|5|30" "zb-h1|4|8|96" "interleaved|4|8|128" "1f1b|1|3|6"; do
    IFS='|' read -r kind p m n <<< "$case"
    out=$("$CLEAVE" trace render --schedule "$kind" --pp "$p" --micro-batches "$m" --out "$tmp/k.svg" 2>&1); rc=$?
    check '[ "$rc" -eq 0 ] && [ "$(boxes "$tmp/k.svg")" -eq "$n" ] && printf "%s\n" "$out" | grep -qF "$n compute actions"' \
        "$kind p $p m $m -> status $rc, $(boxes "$tmp/k.svg" 2>/dev/null) boxes, want $n:$(excerpt 3 "$out")"
done
"$CLEAVE" trace render --schedule interleaved --pp 2 --micro-batches 4 --virtual-stages 3 --out "$tmp/i.svg" >/dev/null 2>&1
check 'grep -q ">3\.2</text>" "$tmp/i.svg" && ! grep -q ">3</text>" "$tmp/i.svg"' "interleaved labels mb.chunk"

# a two-step trace: --step picks one, 0 or no --step the first
cat > "$tmp/two.json" <<'EOF'
{"traceEvents":[
{"name":"F mb0 c0","ph":"X","pid":0,"tid":0,"ts":0,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":1}},
{"name":"F mb0 c0","ph":"X","pid":1,"tid":0,"ts":10,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":1}},
{"name":"F mb0 c0","ph":"X","pid":0,"tid":0,"ts":100,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":2}},
{"name":"F mb1 c0","ph":"X","pid":0,"tid":0,"ts":110,"dur":10,"args":{"kind":"FWD","mb":1,"chunk":0,"step":2}},
{"name":"F mb0 c0","ph":"X","pid":1,"tid":0,"ts":110,"dur":10,"args":{"kind":"FWD","mb":0,"chunk":0,"step":2}},
{"name":"gemm","ph":"X","pid":0,"tid":0,"ts":1,"dur":2}
]}
EOF
out=$("$CLEAVE" trace render "$tmp/two.json" --step 2 --out "$tmp/s2.svg" 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && [ "$(boxes "$tmp/s2.svg")" -eq 3 ] &&
    printf "%s\n" "$out" | grep -qF "step 2, 2 ranks, 3 compute actions; bubble: rank 0 0.0000; rank 1 0.5000"' \
    "--step 2 -> status $rc:$(excerpt 3 "$out")"
out=$("$CLEAVE" trace render "$tmp/two.json" --out "$tmp/s1.svg" 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && [ "$(boxes "$tmp/s1.svg")" -eq 2 ] && printf "%s\n" "$out" | grep -qF "step 1, 2 ranks"' \
    "no --step -> status $rc:$(excerpt 3 "$out")"

out=$("$CLEAVE" trace render --help 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s" "$out" | grep -q -- "--micro-batches" && printf "%s" "$out" | grep -q -- "--step"' \
    "render --help -> status $rc"
out=$("$CLEAVE" trace --help 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s" "$out" | grep -q "cleave trace render FILE"' "trace --help -> status $rc"
out=$("$CLEAVE" --help 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s" "$out" | grep -q "^  trace "' "cleave --help lists trace"

printf 'not json at all\n' > "$tmp/notjson.json"
printf '{"events": []}\n' > "$tmp/nokey.json"
printf '{"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":5,"dur":-1,"args":{"kind":"FWD"}}]}\n' > "$tmp/neg.json"
head -c 300 "$tmp/a.json" > "$tmp/cut.json"
printf '{"traceEvents":[{"ph":"X","pid":0,"tid":1,"ts":5,"dur":0,"args":{"kind":"SEND_ACT"}}]}\n' > "$tmp/nocomp.json"
expect() { # expect "words" args...: status 2, one line "cleave: error: ..." containing words, no SVG written
    local want=$1; shift
    local out rc lines
    rm -f "$tmp/x.svg"
    out=$("$CLEAVE" trace "$@" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s' "$out" | grep -c '' || true)
    check '[ "$rc" -eq 2 ] && printf "%s" "$out" | grep -q "^cleave: error: " && printf "%s" "$out" | grep -qiF -- "$want" &&
        [ "$lines" -eq 1 ] && [ ! -e "$tmp/x.svg" ]' "cleave trace $* -> status $rc, $lines lines, wanted '$want':$(excerpt 5 "$out")"
}
expect "cannot open $tmp/absent.json" render "$tmp/absent.json" --out "$tmp/x.svg"
expect "$tmp/notjson.json: not a JSON file" render "$tmp/notjson.json" --out "$tmp/x.svg"
expect "no \"traceEvents\"" render "$tmp/nokey.json" --out "$tmp/x.svg"
expect "negative dur" render "$tmp/neg.json" --out "$tmp/x.svg"
expect "$tmp/cut.json" render "$tmp/cut.json" --out "$tmp/x.svg"
expect "no compute events" render "$tmp/nocomp.json" --out "$tmp/x.svg"
expect "step 3 is not in the trace" render "$tmp/two.json" --step 3 --out "$tmp/x.svg"
expect "not an integer" render "$tmp/two.json" --step two --out "$tmp/x.svg"
expect "--out F.svg is required" render "$tmp/two.json"
expect "not both" render "$tmp/two.json" --schedule 1f1b --pp 2 --micro-batches 2 --out "$tmp/x.svg"
expect "--pp goes with --schedule" render "$tmp/two.json" --pp 2 --out "$tmp/x.svg"
expect "nothing to draw" render --out "$tmp/x.svg"
expect "--schedule needs --pp" render --schedule 1f1b --micro-batches 8 --out "$tmp/x.svg"
expect "--schedule needs --micro-batches" render --schedule 1f1b --pp 4 --out "$tmp/x.svg"
expect "unknown schedule 'zb-h2'" render --schedule zb-h2 --pp 4 --micro-batches 8 --out "$tmp/x.svg"
expect "multiple of the pipeline ranks" render --schedule interleaved --pp 4 --micro-batches 6 --out "$tmp/x.svg"
expect "must be" render --schedule 1f1b --pp 0 --micro-batches 8 --out "$tmp/x.svg"
expect "step 2 is not in the trace" render --schedule 1f1b --pp 2 --micro-batches 2 --step 2 --out "$tmp/x.svg"
expect "cannot create" render --schedule 1f1b --pp 2 --micro-batches 2 --out "$tmp/no/such/x.svg"
expect "unknown flag" render "$tmp/two.json" --out "$tmp/x.svg" --bogus
expect "unexpected argument 'extra'" render "$tmp/two.json" extra --out "$tmp/x.svg"
expect "unknown trace command 'draw'" draw "$tmp/two.json"
out=$("$CLEAVE" trace 2>&1); rc=$?
check '[ "$rc" -eq 2 ] && printf "%s" "$out" | grep -q "^usage: cleave trace render"' "bare 'cleave trace' -> status $rc"

finish cli_trace
