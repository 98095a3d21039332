#!/usr/bin/env bash
# Issue 32's long-sequence demonstration: a Llama-shaped model (4 layers, 256
# wide, 8 heads, 4 key-value heads, byte vocabulary) at T = 16384 under a
# per-rank device-memory cap that one rank cannot meet and four context ranks
# can.
#
#   bash bench/cp_long.sh              # CAP=512MiB CP=4 STEPS=1 COMM=ring
#   COMM=a2a bash bench/cp_long.sh     # the all-to-all variant
#
# 1. `cleave memory` at cp 1: the rank's predicted total, over the cap;
#    `cleave train` at cp 1 under the cap is refused before it allocates.
# 2. `cleave memory --measure` at cp CP under the cap: every rank's predicted
#    categories against those measured over a real step, to the byte.
# 3. `cleave train` at cp CP under the cap for STEPS steps (the loss printed).
# Each rank runs on one thread; on 2 cores a step takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
CAP=${CAP:-512MiB}
CP=${CP:-4}
STEPS=${STEPS:-1}
COMM=${COMM:-ring}
make -s build/cleave >/dev/null
[ -f data/kjv.txt ] || bash scripts/setup.sh >/dev/null
M=(--model llama --layers 4 --channels 256 --heads 8 --kv-heads 4 --ffn-channels 688 --vocab 256 --context 16384
   --seq-len 16384 --micro-batch-size 1 --global-batch-size 1 --threads 1 --eval-batches 1 --sample-tokens 0)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== cp 1 under --device-memory $CAP"
./build/cleave memory "${M[@]}" | tail -2
if ./build/cleave train "${M[@]}" --steps 1 --device-memory "$CAP" > /tmp/cp_long_1.out 2>&1; then
    echo "cp 1 trained under $CAP: not the demonstration (raise T or lower CAP)"; exit 1
fi
echo "refused before it allocates: $(head -1 /tmp/cp_long_1.out)"
echo "== cp $CP ($COMM) under --device-memory $CAP: predicted against measured"
./build/cleave memory --measure --json "${M[@]}" --cp "$CP" --cp-comm "$COMM" --device-memory "$CAP" > /tmp/cp_long_m.json
/usr/bin/python3 - /tmp/cp_long_m.json <<'PY'
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    d = [k for k in r["predicted"] if r["predicted"][k] != r["measured"][k]]
    bad += len(d)
    print("rank %d: predicted total %d B, measured %d B%s" % (r["rank"], r["predicted"]["total"], r["measured"]["total"],
          "" if not d else ", differ in " + ", ".join(d)))
print("every category equal on every rank" if not bad else "%d categories differ" % bad)
sys.exit(1 if bad else 0)
PY
echo "== cp $CP ($COMM): $STEPS step(s) under $CAP"
t0=$SECONDS
./build/cleave train "${M[@]}" --cp "$CP" --cp-comm "$COMM" --steps "$STEPS" --device-memory "$CAP" 2>&1 | grep -E 'step +[0-9]+/|peak|error' | tail -4
echo "($((SECONDS - t0)) s)"
