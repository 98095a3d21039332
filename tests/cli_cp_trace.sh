#!/usr/bin/env bash
# The context ring's transfers on the trace (issue 32: "the ring's transfers
# hidden behind compute as the trace shows"), gpt2-tiny on the King James Bible,
# T 16, 4 micro-batches of 2, --threads 1:
# - `cleave train --cp 2 --trace` (no pipeline needed) writes valid Chrome trace
#   JSON whose comm track (tid 1) holds RING_SEND and RING_RECV events: inside each
#   forward action 2 (cp - 1) per attention layer (cp - 1 sends, cp - 1 receives),
#   inside each backward 2 (cp - 1) (the rows again) + 2 cp (the key and value
#   gradient sums), each with 0 <= wait <= dur; the same at cp 4 and under
#   mpirun -np 2;
# - tracing leaves the losses' bits alone;
# - `cleave trace render` draws the transfers as strips and prints the hidden share
#   over the step's transfers (their count the sum of the above over the ranks);
# - the reader refuses a wait longer than its event; the run's mesh line names cp;
#   --trace without --pp or --cp is refused.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--model gpt2-tiny --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 3
        --sample-tokens 0 --eval-batches 2 --threads 1 --comm-timeout 60)
run() { # name args...
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}
# counts FILE CP LAYERS STEPS: every check of the trace's ring events, "ok N" (N ring events) or what is wrong
counts() {
    /usr/bin/python3 - "$@" <<'PY'
import json, sys, collections
path, cp, L, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
except Exception as x:
    print("not valid JSON: %s" % x); sys.exit(1)
# each kind (send, receive) a layer: cp - 1 rows exchanges forward; backward cp - 1 more and cp of the gradient sums
want = {"FWD": L * (cp - 1), "BWD": L * ((cp - 1) + cp)}
acts = [e for e in ev if e["args"]["kind"] in want]
ring = [e for e in ev if e["args"]["kind"] in ("RING_SEND", "RING_RECV")]
bad = []
inside = collections.Counter()
for r in ring:
    a = r["args"]
    if r["tid"] != 1 or r["cat"] != "comm": bad.append("not on the comm track")
    if not (0 <= a["wait"] <= r["dur"]): bad.append("wait %g outside [0, %g]" % (a["wait"], r["dur"]))
    host = [e for e in acts if e["pid"] == r["pid"] and e["args"]["step"] == a["step"] and e["args"]["mb"] == a["mb"]
            and e["ts"] - 1e-3 <= r["ts"] and r["ts"] + r["dur"] <= e["ts"] + e["dur"] + 1e-3]
    if len(host) != 1: bad.append("%d actions hold a ring event" % len(host)); continue
    inside[(id(host[0]), a["kind"])] += 1
for e in acts:
    for k in ("RING_SEND", "RING_RECV"):
        n = inside[(id(e), k)]
        if n != want[e["args"]["kind"]]:
            bad.append("rank %d step %d %s mb %d: %d %s, want %d" % (e["pid"], e["args"]["step"], e["args"]["kind"], e["args"]["mb"],
                                                                      n, k, want[e["args"]["kind"]]))
ranks = {e["pid"] for e in acts}
if len(ranks) != cp or len({e["args"]["step"] for e in acts}) != steps: bad.append("ranks %s, steps of %d actions" % (ranks, len(acts)))
print("bad: " + "; ".join(bad[:4]) if bad else "ok %d" % len(ring))
sys.exit(1 if bad else 0)
PY
}
layers=$("$CLEAVE" train "${common[@]}" --steps 1 2>&1 | sed -n 's/^model [^:]*: \([0-9]*\) layers.*/\1/p')
check '[ -n "$layers" ]' "no layer count in the header"

run plain --cp 2
run cp2 --cp 2 --trace "$tmp/cp2.json"
check 'grep -q "mesh dp 1 x cp 2 x tp 1 x pp 1" "$tmp/cp2.out"' "the mesh line does not name cp$(excerpt 6 "$(cat "$tmp/cp2.out")")"
out=$(counts "$tmp/cp2.json" 2 "$layers" 3); _rc=$?
echo "cp 2: $out"
check '[ $_rc -eq 0 ]' "cp 2 trace: $out"
check 'cmp -s <(grep -o "\"loss\": [^,]*" "$tmp/plain.jsonl") <(grep -o "\"loss\": [^,]*" "$tmp/cp2.jsonl")' \
    "--trace changed the losses"
"$CLEAVE" trace render "$tmp/cp2.json" --out "$tmp/cp2.svg" --step 2 > "$tmp/render.out" 2>&1
_rc=$?
# a step: 2 ranks x 4 micro-batches x layers x (2 (cp-1) + 2 (cp-1) + 2 cp) transfers (sends and receives)
want=$((2 * 4 * layers * 8))
check '[ $_rc -eq 0 ] && grep -q "^ring transfers (context parallelism): $want in step 2, .* ms waited: [0-9.]*% of the flight hidden" "$tmp/render.out"' \
    "render: want $want transfers and the hidden share: $(cat "$tmp/render.out")"
check '[ "$(grep -c "class=\"comm\"" "$tmp/cp2.svg")" -gt 0 ] && grep -q "ring transfer (in flight)" "$tmp/cp2.svg"' "the SVG draws no ring strips"
sed '0,/"wait":[0-9.]*/s//"wait":1e12/' "$tmp/cp2.json" > "$tmp/bad.json"
"$CLEAVE" trace render "$tmp/bad.json" --out "$tmp/bad.svg" > "$tmp/bad.out" 2>&1
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "args.wait 1e+12 must be from 0 to dur" "$tmp/bad.out"' "a wait past dur: $_rc $(cat "$tmp/bad.out")"
run cp4 --cp 4 --trace "$tmp/cp4.json" --trace-steps 2
out=$(counts "$tmp/cp4.json" 4 "$layers" 2); _rc=$?
echo "cp 4: $out"
check '[ $_rc -eq 0 ]' "cp 4 trace: $out"
# a2a: no ring, so no ring events (its all-to-alls block inside the passes)
run a2a --cp 2 --cp-comm a2a --trace "$tmp/a2a.json"
check '[ -s "$tmp/a2a.json" ] && ! grep -q RING_ "$tmp/a2a.json"' "a2a's trace holds ring events"
refused "trace needs --pp > 1 or --cp > 1" train "${common[@]}" --trace "$tmp/no.json"

mpi_or_skip cli_cp_trace
timeout -k 5 180 mpirun --oversubscribe -np 2 "$CLEAVE" train --comm mpi "${common[@]}" --cp 2 --trace "$tmp/mpi.json" \
    --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mpirun -np 2 --cp 2 --trace failed ($_rc): $(tail -3 "$tmp/mpi.out")"
out=$(counts "$tmp/mpi.json" 2 "$layers" 3); _rc=$?
echo "mpi cp 2: $out"
check '[ $_rc -eq 0 ]' "mpi cp 2 trace: $out"
finish cli_cp_trace
