#!/usr/bin/env bash
# Expert parallelism's training (issue 33, "what it must show"): mixtral-tiny
# (8 experts, top-2) at --dp 4 --ep 4 for STEPS steps on the bundled King
# James Bible: the loss falling, and the load-balancing loss keeping every
# expert's share of the token-slots within 2x of the mean at the end (the
# step JSON's expert_share, summed over the ranks; the last step's and the
# mean of the last 10).
#
#   bash bench/moe_balance.sh                  # 200 steps, T 64, micro-batch 8
#   STEPS=50 bash bench/moe_balance.sh
#
# Prints the loss (the first and last step, and the means of the first and
# last 10), the aux loss, each expert's share over the mean (min and max) and
# whether both hold; exits 1 when either does not. Four thread ranks of one
# thread each.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-200}
make -s build/cleave >/dev/null
[ -f data/kjv.txt ] || bash scripts/setup.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmd=(./build/cleave train --model mixtral-tiny --data data/kjv.txt --steps "$STEPS" --seq-len 64 --micro-batch-size 8
     --global-batch-size 32 --dp 4 --ep 4 --threads 1 --sample-tokens 0 --eval-batches 4)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: ${cmd[*]}"
t0=$(date +%s)
"${cmd[@]}" --log-file "$tmp/run.jsonl" > "$tmp/run.out" 2>&1 || { tail -3 "$tmp/run.out"; exit 1; }
echo "ran $STEPS steps in $(( $(date +%s) - t0 )) s"
/usr/bin/python3 - "$tmp/run.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
n = min(10, len(rows))
first, last = sum(r["loss"] for r in rows[:n]) / n, sum(r["loss"] for r in rows[-n:]) / n
E = len(rows[-1]["expert_share"])
end = [s * E for s in rows[-1]["expert_share"]]
tail = [sum(r["expert_share"][e] for r in rows[-n:]) / n * E for e in range(E)]
falls = last < first
balanced = all(0.5 <= s <= 2 for s in end)
print("loss: step 1 %.4f, step %d %.4f; means of the first and last %d steps %.4f -> %.4f (%s)" %
      (rows[0]["loss"], len(rows), rows[-1]["loss"], n, first, last, "falling" if falls else "NOT falling"))
print("aux loss: step 1 %.4f, last %.4f; dropped slots (dropless) %d" % (rows[0]["moe_aux"], rows[-1]["moe_aux"], rows[-1]["moe_dropped"]))
print("share over the mean, last step: min %.3f max %.3f (%s); mean of the last %d steps: min %.3f max %.3f" %
      (min(end), max(end), "within 2x" if balanced else "NOT within 2x", n, min(tail), max(tail)))
print("last step's shares over the mean: " + " ".join("%.3f" % s for s in end))
sys.exit(0 if falls and balanced else 1)
PY
