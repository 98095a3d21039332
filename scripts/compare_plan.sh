#!/usr/bin/env bash
# Same plans as another commit: builds commit OLD (and uses NEW, default this
# working tree's build/cleave, built first) and runs `cleave plan --json` on
# both over models (gpt2-tiny .. gpt2-xl, mlp, cnn) and hardware (a100, h100,
# this machine: one calibration file, written once, read by both), the search
# and fixed configurations (tp with sequence parallelism, pp under zb-h1 and
# interleaved, ZeRO 3, recompute), then compares the outputs byte for byte.
# A refactor of the planner's costs or stage model proves it with this.
#
#   bash scripts/compare_plan.sh OLD          exit 0 when every plan is identical, 1 otherwise
#   OLDBIN=PATH bash scripts/compare_plan.sh OLD   OLD's cleave already built at PATH (not built again)
set -u
cd "$(dirname "$0")/.." || exit 1
[ $# -eq 1 ] || { echo "usage: bash scripts/compare_plan.sh OLD" >&2; exit 2; }
old=$(git rev-parse --verify -q "$1^{commit}") || { echo "compare_plan: '$1' is not a commit" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-plan.XXXXXX")
cleanup() { git worktree remove --force "$tmp/old" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
if [ -z "${OLDBIN:-}" ]; then
    git worktree add --detach -q "$tmp/old" "$old" || exit 1
    (cd "$tmp/old" && make -s -j"$(nproc)" > "$tmp/make.old.log" 2>&1) || { tail -n 20 "$tmp/make.old.log"; exit 1; }
    OLDBIN=$tmp/old/build/cleave
fi
make -s -j"$(nproc)" > "$tmp/make.new.log" 2>&1 || { tail -n 20 "$tmp/make.new.log"; exit 1; }
NEWBIN=$(pwd)/build/cleave
export CLEAVE_HW="$tmp/this.json"
"$NEWBIN" plan calibrate --repeat 1 > "$tmp/cal.log" 2>&1 || { echo "compare_plan: calibrate failed"; cat "$tmp/cal.log"; exit 1; }
cases=(
    "--model gpt2-tiny --devices 8 --global-batch-size 64"
    "--model gpt2 --devices 8 --global-batch-size 64"
    "--model gpt2-medium --devices 16 --global-batch-size 128 --hardware h100"
    "--model gpt2-large --devices 32 --global-batch-size 256"
    "--model gpt2-xl --devices 64 --global-batch-size 512 --seq-len 1024"
    "--model gpt2-xl --devices 64 --global-batch-size 512 --hardware h100 --precision fp32"
    "--model gpt2-large --devices 64 --global-batch-size 512 --dp 4 --tp 4 --pp 4 --micro-batch-size 2 --schedule zb-h1 --sequence-parallel"
    "--model gpt2-large --devices 64 --global-batch-size 512 --dp 8 --tp 2 --pp 4 --virtual-stages 3 --micro-batch-size 1 --schedule interleaved"
    "--model gpt2-large --devices 16 --global-batch-size 64 --dp 16 --tp 1 --pp 1 --zero 3 --micro-batch-size 2"
    "--model gpt2-medium --devices 8 --global-batch-size 64 --dp 2 --tp 2 --pp 2 --recompute selective --micro-batch-size 4"
    "--model mlp --devices 4 --global-batch-size 64"
    "--model cnn --devices 4 --global-batch-size 64"
    "--model mlp --devices 4 --global-batch-size 64 --hardware h100"
    "--model gpt2-tiny --devices 2 --global-batch-size 8 --hardware this"
    "--model gpt2-tiny --devices 2 --global-batch-size 8 --hardware this --dp 2 --tp 1 --pp 1 --zero 3 --micro-batch-size 4"
    "--model gpt2-mini --devices 2 --global-batch-size 8 --hardware this --dp 1 --tp 1 --pp 2 --schedule zb-h1"
    "--model mlp --devices 2 --global-batch-size 8 --hardware this"
    "--model cnn --devices 2 --global-batch-size 8 --hardware this"
    "--model gpt2 --devices 1 --global-batch-size 8 --hardware this"
)
n=0 bad=0
for c in "${cases[@]}"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    "$OLDBIN" plan $c --top 20 --json > "$tmp/old.$n" 2>&1; ro=$?
    # shellcheck disable=SC2086
    "$NEWBIN" plan $c --top 20 --json > "$tmp/new.$n" 2>&1; rn=$?
    if [ $ro -ne $rn ] || ! cmp -s "$tmp/old.$n" "$tmp/new.$n"; then
        bad=$((bad + 1))
        echo "DIFFERS ($ro/$rn): cleave plan $c"
        diff "$tmp/old.$n" "$tmp/new.$n" | head -n 6
    else
        echo "same ($(wc -c < "$tmp/new.$n") bytes, exit $rn): cleave plan $c"
    fi
done
echo "compare_plan: $((n - bad)) of $n plans identical to $1"
[ $bad -eq 0 ]
