#!/usr/bin/env bash
# --offload-optimizer host: the AdamW moments live in a host memory of their
# own, outside the device and its cap. Losses are bitwise those without
# offload (the same update on the same numbers); `cleave memory --measure`
# predicts every device category and the host's bytes exactly, with the
# device's optimizer category 0 and the host holding both moments
# (8 bytes per parameter float, or per shard float under --zero 1); a cap
# that refuses a run without offload (naming --offload-optimizer host as a
# fit) trains with it; bad values exit 2.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
C=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --steps 10 --sample-tokens 0 --eval-batches 2)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
for mesh in "" "--dp 2 --zero 1" "--pp 2 --dp 2"; do
    "$CLEAVE" train "${C[@]}" $mesh --log-file "$tmp/a.jsonl" > "$tmp/a.out" 2>&1
    check '[ $? -eq 0 ]' "no offload ($mesh) failed: $(tail -3 "$tmp/a.out")"
    "$CLEAVE" train "${C[@]}" $mesh --offload-optimizer host --log-file "$tmp/b.jsonl" > "$tmp/b.out" 2>&1
    check '[ $? -eq 0 ]' "offload ($mesh) failed: $(tail -3 "$tmp/b.out")"
    check '[ "$(losses "$tmp/a.jsonl")" = "$(losses "$tmp/b.jsonl")" ] && [ -n "$(losses "$tmp/a.jsonl")" ]' \
        "offload ($mesh): losses differ from no offload"
    check 'grep -q "host memory (offloaded optimizer state" "$tmp/b.out"' "offload ($mesh): the header does not show the host memory"
    timeout 120 "$CLEAVE" memory "${C[@]}" $mesh --offload-optimizer host --measure --json > "$tmp/m.json" 2> "$tmp/err"
    check '[ $? -eq 0 ]' "memory --measure ($mesh): $(cat "$tmp/err")"
    # predicted == measured everywhere; the device holds no moments; the host holds them (twice the moments' floats x 4)
    res=$(python3 - "$tmp/m.json" <<'PY'
import json, sys
bad = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k, v in r["predicted"].items():
        if r["measured"][k] != v:
            bad.append("rank %d %s: predicted %d, measured %d" % (r["rank"], k, v, r["measured"][k]))
    if r["predicted"]["optimizer"] != 0: bad.append("rank %d: device optimizer bytes %d" % (r["rank"], r["predicted"]["optimizer"]))
    if r["predicted"]["host"] <= 0 or r["predicted"]["host"] % 8: bad.append("rank %d: host bytes %d" % (r["rank"], r["predicted"]["host"]))
print("; ".join(bad))
PY
)
    check '[ -z "$res" ]' "memory with offload ($mesh): $res"
done
# one replica without ZeRO: the host holds 2 moments x the part's floats = the device's parameter bytes x 2
timeout 120 "$CLEAVE" memory "${C[@]}" --offload-optimizer host --json > "$tmp/m1.json" 2> "$tmp/err"
check 'python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline())[\"predicted\"]; sys.exit(not (r[\"host\"] == 2 * r[\"params\"]))" "$tmp/m1.json"' \
    "host bytes are not twice the parameter bytes: $(cat "$tmp/m1.json")"
# a cap between the offloaded and the plain peak: refused without offload, naming the fit; trains with it
peak=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["predicted"]["total"])' "$tmp/m1.json")
cap=$((peak + 4096))
out=$("$CLEAVE" train "${C[@]}" --steps 2 --device-memory "$cap" 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "Fits with --offload-optimizer host"' "cap $cap without offload: status $rc: $out"
out=$("$CLEAVE" train "${C[@]}" --steps 2 --device-memory "$cap" --offload-optimizer host 2>&1); rc=$?
check '[ $rc -eq 0 ]' "cap $cap with offload: status $rc: $(printf "%s" "$out" | tail -3)"
bad() { # want, args...
    local want=$1; shift
    local out rc
    out=$("$CLEAVE" train "${C[@]}" --steps 1 "$@" 2>&1); rc=$?
    check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q -- "$want"' "bad ($*): status $rc: $out"
}
bad "unknown --offload-optimizer" --offload-optimizer gpu
bad "needs --offload-optimizer disk" --offload-dir "$tmp"
bad "disk is not yet" --offload-optimizer disk --offload-dir "$tmp" # update this row when disk offload is built
finish cli_offload
