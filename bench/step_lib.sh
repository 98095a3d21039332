# Shared by the benchmarks that time `cleave train` runs side by side (sourced after M, WARMUP and tmp
# are set): ms LOG, the mean of a log's step-line ms after WARMUP steps; run NAME ARGS..., trains
# ./build/cleave train "${M[@]}" ARGS with its log at $tmp/NAME.jsonl, prints its ms a step and keeps
# the best (smallest) in best[NAME].
ms() { /usr/bin/python3 -c '
import json, sys
w = int(sys.argv[2]); v = [json.loads(l)["ms"] for l in open(sys.argv[1]) if "\"loss\"" in l][w:]
print(sum(v) / len(v))' "$1" "$WARMUP"; }
declare -A best
run() { # name args...
    local name=$1; shift
    ./build/cleave train "${M[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1 || { tail -3 "$tmp/$name.out"; exit 1; }
    local t; t=$(ms "$tmp/$name.jsonl")
    echo "  $name: $t ms a step"
    if [ -z "${best[$name]:-}" ] || awk -v a="$t" -v b="${best[$name]}" 'BEGIN { exit !(a < b) }'; then best[$name]=$t; fi
}
