#!/usr/bin/env bash
# Same bits as another commit: builds commit OLD (and NEW, default: this
# working tree as it is) and trains the same runs with both, then compares
# every step's loss and gradient norm and every validation loss as printed
# with 17 digits (--log-file), byte for byte. A refactor that promises the
# same bits proves it with this script. GPT runs' bits changed at 41a58df
# (blockwise attention, another summation order): an OLD before it reports
# the GPT layouts as differing, by design.
#
#   bash scripts/compare_commit.sh OLD [NEW]        the layouts below, 20 steps each
#   TIME=N bash scripts/compare_commit.sh OLD [NEW] also one rank's step time on GPT-2 124M
#                                                   (cleave bench step, OLD and NEW alternating,
#                                                   N rounds each; prints the median ratio)
#   ONLY=REGEX ...                                  only the layouts whose name matches
#
# The GPT runs name models by shape (--layers, --channels, ...), not by
# preset name, so a renamed preset cannot make two commits train different
# models; the Llama and Mixtral runs (and the bf16 ones) need a commit that
# has them (bf16 since issue 29's first merge), else they report FAIL.
# Exit 0 when every run is identical, 1 when one differs or fails.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: bash scripts/compare_commit.sh OLD [NEW]" >&2; exit 2; }
old=$(git rev-parse --verify -q "$1^{commit}") || { echo "compare_commit: '$1' is not a commit" >&2; exit 2; }
new=""
if [ $# -eq 2 ]; then new=$(git rev-parse --verify -q "$2^{commit}") || { echo "compare_commit: '$2' is not a commit" >&2; exit 2; }; fi
[ -f data/kjv.txt ] || { echo "compare_commit: data/kjv.txt missing (run: bash scripts/setup.sh)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-compare.XXXXXX")
cleanup() {
    git worktree remove --force "$tmp/old" >/dev/null 2>&1
    [ -n "$new" ] && git worktree remove --force "$tmp/new" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT

build() { # DIR: make there, quietly; the binary is DIR/build/cleave
    (cd "$1" && make -s -j"$(nproc)" > "$tmp/make.$(basename "$1").log" 2>&1) ||
        { echo "compare_commit: building $1 failed:"; tail -n 20 "$tmp/make.$(basename "$1").log"; exit 1; }
}
git worktree add --detach -q "$tmp/old" "$old" || exit 1
build "$tmp/old"
OLDBIN=$tmp/old/build/cleave
if [ -n "$new" ]; then
    git worktree add --detach -q "$tmp/new" "$new" || exit 1
    build "$tmp/new"
    NEWBIN=$tmp/new/build/cleave
else
    make -s -j"$(nproc)" > "$tmp/make.this.log" 2>&1 || { echo "compare_commit: building this tree failed"; tail -n 20 "$tmp/make.this.log"; exit 1; }
    NEWBIN=$root/build/cleave
fi
echo "old: $old ($("$OLDBIN" --version))"
echo "new: ${new:-working tree} ($("$NEWBIN" --version))"

export CLEAVE_DATA=$root/data   # the digits for the MLP and CNN
head -c 400000 data/kjv.txt > "$tmp/text.txt"
tiny=(--layers 2 --channels 64 --heads 4 --context 64 --vocab 256 --seq-len 32 --data "$tmp/text.txt")
llama=(--model llama-tiny --seq-len 32 --data "$tmp/text.txt")   # the presets' shapes: 2 layers, 64 channels
mixtral=(--model mixtral-tiny --seq-len 32 --data "$tmp/text.txt")
small=(--layers 4 --channels 128 --heads 4 --context 128 --vocab 256 --seq-len 64 --data "$tmp/text.txt")
common=(--steps 20 --micro-batch-size 2 --global-batch-size 8 --threads 1 --eval-every 10 --eval-batches 2 --sample-tokens 0
        --comm-timeout 120)
# name|flags: every layout the issue names, and more
layouts=(
    "1 rank|${tiny[*]}"
    "1 rank, recompute selective|${tiny[*]} --recompute selective"
    "1 rank, recompute full|${tiny[*]} --recompute full"
    "1 rank, 4 layers x 128|${small[*]}"
    "pp 2 gpipe|${tiny[*]} --pp 2 --schedule gpipe"
    "pp 2 1f1b|${tiny[*]} --pp 2 --schedule 1f1b"
    "pp 2 zb-h1|${tiny[*]} --pp 2 --schedule zb-h1"
    "pp 2 interleaved x 2|${small[*]} --pp 2 --schedule interleaved --virtual-stages 2"
    "tp 2|${tiny[*]} --tp 2"
    "tp 2 sequence parallel|${tiny[*]} --tp 2 --sequence-parallel"
    "dp 2|${tiny[*]} --dp 2"
    "dp 2 zero 1|${tiny[*]} --dp 2 --zero 1"
    "dp 2 zero 2|${tiny[*]} --dp 2 --zero 2"
    "dp 2 zero 3|${tiny[*]} --dp 2 --zero 3"
    "tp 2 x pp 2 x dp 2 zero 1 sp|${small[*]} --tp 2 --pp 2 --dp 2 --zero 1 --sequence-parallel"
    "pp 2 x dp 2 zb-h1 zero 3|${tiny[*]} --pp 2 --dp 2 --zero 3 --schedule zb-h1"
    "offload host|${tiny[*]} --offload-optimizer host"
    "mlp|--model mlp"
    "mlp tp 2|--model mlp --tp 2"
    "cnn|--model cnn"
    "cnn dp 2 zero 1|--model cnn --dp 2 --zero 1"
    "bf16 1 rank|${tiny[*]} --dtype bf16"
    "bf16 tp 2 sequence parallel|${tiny[*]} --dtype bf16 --tp 2 --sequence-parallel"
    "bf16 pp 2 zb-h1|${tiny[*]} --dtype bf16 --pp 2 --schedule zb-h1"
    "bf16 dp 2 zero 2|${tiny[*]} --dtype bf16 --dp 2 --zero 2"
    "bf16 dp 2 zero 3 recompute full|${tiny[*]} --dtype bf16 --dp 2 --zero 3 --recompute full"
    "llama|${llama[*]}"
    "llama bf16 tp 2 x pp 2|${llama[*]} --dtype bf16 --tp 2 --pp 2"
    "mixtral bf16 dp 2 ep 2|${mixtral[*]} --dtype bf16 --dp 2 --ep 2"
)
figures() { # LOG: step loss norm / step val loss, 17 digits as logged
    sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2 \3/p
            s/.*"step": \([0-9]*\), "val_loss": \([^}]*\)}.*/\1 val \2/p' "$1"
}
bad=0; n=0
for entry in "${layouts[@]}"; do
    name=${entry%%|*}; flags=${entry#*|}
    [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]] && continue
    n=$((n + 1))
    # shellcheck disable=SC2206
    args=($flags)
    for side in old new; do
        bin=$OLDBIN; [ $side = new ] && bin=$NEWBIN
        "$bin" train "${common[@]}" "${args[@]}" --log-file "$tmp/$side.$n.jsonl" > "$tmp/$side.$n.out" 2>&1 ||
            { echo "FAIL $name: $side failed: $(tail -n 1 "$tmp/$side.$n.out")"; bad=$((bad + 1)); continue 2; }
        figures "$tmp/$side.$n.jsonl" > "$tmp/$side.$n.txt"
    done
    lines=$(wc -l < "$tmp/old.$n.txt")
    if [ "$lines" -lt 20 ]; then
        echo "FAIL $name: only $lines figures logged"; bad=$((bad + 1))
    elif cmp -s "$tmp/old.$n.txt" "$tmp/new.$n.txt"; then
        echo "same $name: $lines figures bit for bit (last loss $(grep -v val "$tmp/new.$n.txt" | tail -n 1 | cut -d' ' -f2))"
    else
        first=$(diff "$tmp/old.$n.txt" "$tmp/new.$n.txt" | sed -n '2p;4p' | tr '\n' ' ')
        echo "DIFF $name: $first"; bad=$((bad + 1))
    fi
done
echo "$((n - bad)) of $n runs identical"

if [ -n "${TIME:-}" ]; then
    # One rank's step on GPT-2 124M, old and new alternating (old first in odd rounds, new first in even
    # ones), so drift in the machine's speed hits both alike
    step=(bench step --layers 12 --channels 768 --heads 12 --context 1024 --vocab 50304 --seq-len 128 --micro-batch-size 4 --threads 1)
    : > "$tmp/times"
    for ((r = 1; r <= TIME; r++)); do
        order="old new"; [ $((r % 2)) -eq 0 ] && order="new old"   # neither side always runs first
        for side in $order; do
            bin=$OLDBIN; [ $side = new ] && bin=$NEWBIN
            ms=$("$bin" "${step[@]}" 2>&1 | sed -n 's/^step: \([0-9.]*\) ms.*/\1/p')
            [ -n "$ms" ] || { echo "FAIL: bench step ($side) printed no step time"; bad=$((bad + 1)); break 2; }
            echo "$side $ms" >> "$tmp/times"
            echo "round $r $side: $ms ms"
        done
    done
    med() { grep "^$1 " "$tmp/times" | cut -d' ' -f2 | sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
    mo=$(med old); mn=$(med new)
    awk -v o="$mo" -v n="$mn" 'BEGIN { printf "step time (median of rounds): old %.1f ms, new %.1f ms, new/old %.4f\n", o, n, n / o }'
fi
[ $bad -eq 0 ]
