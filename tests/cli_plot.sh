#!/usr/bin/env bash
# cleave plot: two runs' logs drawn as one SVG that a real XML parser
# (python3's xml.etree) accepts, with a polyline and a legend label per run
# (and the validation loss dashed), labelled axes; --metric; train --plot;
# bad input (no such log, a log without the metric, an empty log, not JSON,
# an unknown metric) exits 2 with one line.
source tests/lib.sh
head -c 200000 data/kjv.txt > "$tmp/text.txt"
train=(train --data "$tmp/text.txt" --steps 6 --seq-len 32 --micro-batch-size 2 --sample-tokens 0 --eval-every 3 --eval-batches 2)
"$CLEAVE" "${train[@]}" --seed 1 --log-file "$tmp/a.jsonl" > /dev/null 2>&1
"$CLEAVE" "${train[@]}" --seed 2 --lr 3e-3 --log-file "$tmp/b.jsonl" --plot "$tmp/train.svg" > "$tmp/train.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ -s "$tmp/a.jsonl" ] && [ -s "$tmp/b.jsonl" ]' "training for the logs failed$(excerpt 5 "$(cat "$tmp/train.out")")"
out=$("$CLEAVE" plot "$tmp/a.jsonl" "$tmp/b.jsonl" --out "$tmp/loss.svg" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "cleave plot failed: $out"
# svgcheck FILE RUNS LABEL... : parses FILE, prints what is wrong (nothing when right)
svgcheck() {
    python3 - "$@" <<'PY'
import sys, xml.etree.ElementTree as ET
path, runs, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ns = "{http://www.w3.org/2000/svg}"
try:
    root = ET.parse(path).getroot()
except Exception as e:
    print("not XML:", e); sys.exit()
if root.tag != ns + "svg": print("root is", root.tag)
lines = [p for p in root.iter(ns + "polyline") if p.get("class") == "run"]
if len(lines) != runs: print(len(lines), "run polylines, expected", runs)
for p in lines:
    pts = [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
    if len(pts) < 2: print("a polyline of", len(pts), "points")
texts = {t.get("class"): "".join(t.itertext()) for t in root.iter(ns + "text") if t.get("class")}
legend = ["".join(t.itertext()) for t in root.iter(ns + "text") if t.get("class") == "legend"]
for l in labels:
    if l not in legend: print("no legend label", l, "in", legend)
if texts.get("xlabel") != "step" or not texts.get("ylabel"): print("axis labels:", texts)
PY
}
bad=$(svgcheck "$tmp/loss.svg" 2 "$tmp/a.jsonl" "$tmp/b.jsonl")
check '[ -z "$bad" ]' "loss.svg: $bad"
check '[ $(grep -c "class=\"run val\"" "$tmp/loss.svg") -eq 2 ]' "loss.svg lacks the two validation lines"
out=$("$CLEAVE" plot "$tmp/a.jsonl" "$tmp/b.jsonl" --metric grad_norm --out "$tmp/norm.svg" 2>&1)
bad=$(svgcheck "$tmp/norm.svg" 2 "$tmp/a.jsonl" "$tmp/b.jsonl")
check '[ -z "$bad" ] && ! grep -q "run val" "$tmp/norm.svg" && grep -q "gradient norm" "$tmp/norm.svg"' "--metric grad_norm: $out $bad"
bad=$(svgcheck "$tmp/train.svg" 1 "$tmp/b.jsonl")
check '[ -z "$bad" ] && grep -q "^plot: $tmp/train.svg" "$tmp/train.out"' "train --plot: $bad"
# bad input: status 2, one line, nothing written
: > "$tmp/empty.jsonl"
printf 'not json\n' > "$tmp/junk.jsonl"
while IFS='|' read -r what args; do
    err=$(eval "\"\$CLEAVE\" plot $args --out \"\$tmp/bad.svg\"" 2>&1 >/dev/null)
    rc=$?
    check '[ $rc -eq 2 ] && [ $(printf "%s\n" "$err" | wc -l) -eq 1 ] && [ ! -e "$tmp/bad.svg" ] && ! printf "%s" "$err" | grep -q Sanitizer' \
        "$what: status $rc$(excerpt 3 "$err")"
done <<'ROWS'
missing log|"$tmp/none.jsonl"
log without the metric|"$tmp/a.jsonl" --metric bubble
empty log|"$tmp/a.jsonl" "$tmp/empty.jsonl"
not JSON|"$tmp/junk.jsonl"
unknown metric|"$tmp/a.jsonl" --metric nope
no log|
ROWS
finish cli_plot
