#!/usr/bin/env bash
# The planner's search time (docs/PERFORMANCE.md, "Search times"): the 1T-parameter
# search (Narayanan et al.'s largest row: 128 layers of 25600 channels, 160 heads,
# on 3072 A100s, global batch 3072), REPEAT times (default 3), each run's wall time
# and cleave plan's own "searched ... in" line. A figure, not a test: the test
# (tests/cli_plan.sh) checks that this search answers, not how fast.
#
#   bash bench/plan_search.sh            BUILD=build, REPEAT=3
set -u
cd "$(dirname "$0")/.." || exit 1
CLEAVE=${CLEAVE:-${BUILD:-build}/cleave}
for i in $(seq "${REPEAT:-3}"); do
    t0=$(date +%s.%N)
    out=$("$CLEAVE" plan --layers 128 --channels 25600 --heads 160 --vocab 51200 --context 2048 --devices 3072 \
          --global-batch-size 3072 --top 3 2>&1) || { echo "plan_search: cleave plan failed:"; echo "$out"; exit 1; }
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    printf 'run %d: %.2f s wall; %s\n' "$i" "$t" "$(printf '%s\n' "$out" | grep -i 'searched' | head -1)"
done
