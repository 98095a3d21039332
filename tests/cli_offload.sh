#!/usr/bin/env bash
# --offload-optimizer host: the AdamW moments live in a host memory of their
# own, outside the device and its cap; --offload-optimizer disk: in a file
# (unlinked at creation, its space reserved), streamed through four tiles. Losses are bitwise those without
# offload (the same update on the same numbers); `cleave memory --measure`
# predicts every device category and the host's bytes exactly, with the
# device's optimizer category 0 and the host holding both moments
# (8 bytes per parameter float, or per shard float under --zero 1), or for
# disk the file (fstat) holding them; a cap that refuses a run without
# offload (naming --offload-optimizer host as a fit) trains with it; a run
# killed with -9 while offloading to disk resumes from its last checkpoint
# bitwise and leaves no file behind; bad values and directories exit 2.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
C=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --steps 10 --sample-tokens 0 --eval-batches 2)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
mkdir -p "$tmp/od"
for mesh in "" "--dp 2 --zero 1" "--pp 2 --dp 2" "DISK" "DISK --dp 2 --zero 1" "DISK --model gpt2-mini --global-batch-size 4"; do
    off=(--offload-optimizer host)
    case "$mesh" in DISK*) off=(--offload-optimizer disk --offload-dir "$tmp/od"); mesh=${mesh#DISK} ;; esac
    "$CLEAVE" train "${C[@]}" $mesh --log-file "$tmp/a.jsonl" > "$tmp/a.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "no offload ($mesh) failed: $(tail -3 "$tmp/a.out")"
    "$CLEAVE" train "${C[@]}" $mesh "${off[@]}" --log-file "$tmp/b.jsonl" > "$tmp/b.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "offload ($mesh) failed: $(tail -3 "$tmp/b.out")"
    check '[ "$(losses "$tmp/a.jsonl")" = "$(losses "$tmp/b.jsonl")" ] && [ -n "$(losses "$tmp/a.jsonl")" ]' \
        "offload ($mesh): losses differ from no offload"
    check 'grep -q "host memory (offloaded optimizer state" "$tmp/b.out"' "offload ($mesh): the header does not show the host memory"
    timeout 120 "$CLEAVE" memory "${C[@]}" $mesh "${off[@]}" --measure --json > "$tmp/m.json" 2> "$tmp/err"
    _rc=$?; check '[ $_rc -eq 0 ]' "memory --measure ($mesh): $(cat "$tmp/err")"
    # predicted == measured everywhere; the device holds no moments; the host holds them (twice the moments' floats x 4)
    res=$(python3 - "$tmp/m.json" "${off[1]}" <<'PY'
import json, sys
bad = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k, v in r["predicted"].items():
        if r["measured"][k] != v:
            bad.append("rank %d %s: predicted %d, measured %d" % (r["rank"], k, v, r["measured"][k]))
    if r["predicted"]["optimizer"] != 0: bad.append("rank %d: device optimizer bytes %d" % (r["rank"], r["predicted"]["optimizer"]))
    if r["predicted"]["host"] <= 0 or r["predicted"]["host"] % 8: bad.append("rank %d: host bytes %d" % (r["rank"], r["predicted"]["host"]))
    if sys.argv[2] == "disk" and (r["predicted"]["disk"] <= 0 or r["measured"]["disk"] != r["predicted"]["disk"]):
        bad.append("rank %d: disk bytes predicted %d, the file has %d" % (r["rank"], r["predicted"]["disk"], r["measured"]["disk"]))
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
bad "needs --offload-dir" --offload-optimizer disk
bad "does not exist" --offload-optimizer disk --offload-dir "$tmp/missing"
# no room for the moments' file (a file-size limit stands in for a full disk,
# which needs no mount): refused at start with the bytes it wanted, not killed
# by SIGXFSZ, and nothing left behind
out=$(ulimit -f 64; "$CLEAVE" train "${C[@]}" --steps 1 --offload-optimizer disk --offload-dir "$tmp/od" 2>&1); rc=$?
check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q "cannot reserve [0-9]* bytes for the optimizer state: File too large"' \
    "offload file over the file-size limit: status $rc: $out"
# and a checkpoint (the moments from host memory) that cannot be written ends the run with a message and leaves no directory
out=$(ulimit -f 64; "$CLEAVE" train "${C[@]}" --steps 1 --offload-optimizer host --save "$tmp/full-ck" 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "saving checkpoint.*File too large"' "offload: a save over the file-size limit: status $rc: $(printf "%s" "$out" | tail -2)"
check '[ -z "$(ls -d "$tmp"/full-ck* 2>/dev/null)" ]' "a failed save left $(ls -d "$tmp"/full-ck* 2>/dev/null)"
check '[ -z "$(ls -A "$tmp/od")" ]' "the offload directory is not empty after the runs: $(ls -A "$tmp/od")"

# killed during the run: resume from the last checkpoint continues bitwise, nothing left in the directory
K=("${C[@]}" --steps 40 --save-every 10 --offload-optimizer disk --offload-dir "$tmp/od")
"$CLEAVE" train "${K[@]}" --save "$tmp/ref" --log-file "$tmp/ref.jsonl" > /dev/null 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the uninterrupted offloaded run failed"
"$CLEAVE" train "${K[@]}" --save "$tmp/ck" --log-file "$tmp/k.jsonl" > "$tmp/k.out" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q '"step": 1[3-9]' "$tmp/k.jsonl" 2>/dev/null && break; sleep 0.05; done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
at=$(sed -n 's/.*"step": \([0-9]*\).*/\1/p' "$tmp/ck/trainer_state.json" 2>/dev/null | head -1)
"$CLEAVE" train "${K[@]}" --resume "$tmp/ck" --log-file "$tmp/r.jsonl" > "$tmp/r.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "resume after kill -9 failed: $(tail -3 "$tmp/r.out")"
tail_ref=$(losses "$tmp/ref.jsonl" | tail -n +$((at + 1)))
check '[ -n "$tail_ref" ] && [ "$(losses "$tmp/r.jsonl")" = "$tail_ref" ]' "resumed (from step $at) losses differ from the uninterrupted run's"
echo "killed at step $(grep -c '"loss"' "$tmp/k.jsonl"), resumed from step $at: losses bitwise equal"
check '[ -z "$(ls -A "$tmp/od")" ]' "a killed run left files in the offload directory: $(ls -A "$tmp/od")"
finish cli_offload
