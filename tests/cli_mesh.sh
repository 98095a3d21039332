#!/usr/bin/env bash
# `cleave mesh`: the printed mesh and groups for dp 2 x tp 2 x pp 2 equal the
# expected text (Megatron-LM's order, tp fastest); --ranks derives a size;
# the Megatron-style long flags give the same output; Megatron's documented
# 16-rank example; bad meshes (wrong product, zero, negative, non-numeric,
# not divisible) exit 2 with one line naming the problem.
set -u
BUILD=${BUILD:-build}
CLEAVE=${CLEAVE:-$BUILD/cleave}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAILED: $*"; }

cat > "$tmp/want" <<'EOF'
mesh: 8 ranks = dp 2 x tp 2 x pp 2 (tp fastest, then dp, then pp)
tensor-parallel groups:   [0, 1] [2, 3] [4, 5] [6, 7]
data-parallel groups:     [0, 2] [1, 3] [4, 6] [5, 7]
pipeline-parallel groups: [0, 4] [1, 5] [2, 6] [3, 7]
embedding groups:         [0, 4] [1, 5] [2, 6] [3, 7]
model-parallel groups:    [0, 1, 4, 5] [2, 3, 6, 7]
rank 0: dp 0, tp 0, pp 0 | groups: tp 0, dp 0, pp 0, embedding 0, mp 0
rank 1: dp 0, tp 1, pp 0 | groups: tp 0, dp 1, pp 1, embedding 1, mp 0
rank 2: dp 1, tp 0, pp 0 | groups: tp 1, dp 0, pp 2, embedding 2, mp 1
rank 3: dp 1, tp 1, pp 0 | groups: tp 1, dp 1, pp 3, embedding 3, mp 1
rank 4: dp 0, tp 0, pp 1 | groups: tp 2, dp 2, pp 0, embedding 0, mp 0
rank 5: dp 0, tp 1, pp 1 | groups: tp 2, dp 3, pp 1, embedding 1, mp 0
rank 6: dp 1, tp 0, pp 1 | groups: tp 3, dp 2, pp 2, embedding 2, mp 1
rank 7: dp 1, tp 1, pp 1 | groups: tp 3, dp 3, pp 3, embedding 3, mp 1
EOF

same_as_want() { # same_as_want args...
    local rc
    "$CLEAVE" mesh "$@" > "$tmp/got" 2> "$tmp/err"; rc=$?
    if [ "$rc" -eq 0 ] && cmp -s "$tmp/want" "$tmp/got" && [ ! -s "$tmp/err" ]; then ok; else
        bad "cleave mesh $* -> status $rc, output differs:"; diff "$tmp/want" "$tmp/got" | head -20 | sed 's/^/    /'
        head -3 "$tmp/err" | sed 's/^/    /'
    fi
}
same_as_want --dp 2 --tp 2 --pp 2
same_as_want --ranks 8 --tp 2 --pp 2
same_as_want --ranks 8 --dp 2 --pp 2
same_as_want --ranks=8 --dp=2 --tp=2
same_as_want --data-parallel-size 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2

# Megatron-LM's documented example: 16 ranks, tp 2, pp 4 (so dp 2)
out=$("$CLEAVE" mesh --ranks 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 2>&1); rc=$?
want16='mesh: 16 ranks = dp 2 x tp 2 x pp 4 (tp fastest, then dp, then pp)
tensor-parallel groups:   [0, 1] [2, 3] [4, 5] [6, 7] [8, 9] [10, 11] [12, 13] [14, 15]
data-parallel groups:     [0, 2] [1, 3] [4, 6] [5, 7] [8, 10] [9, 11] [12, 14] [13, 15]
pipeline-parallel groups: [0, 4, 8, 12] [1, 5, 9, 13] [2, 6, 10, 14] [3, 7, 11, 15]
embedding groups:         [0, 12] [1, 13] [2, 14] [3, 15]
model-parallel groups:    [0, 1, 4, 5, 8, 9, 12, 13] [2, 3, 6, 7, 10, 11, 14, 15]'
if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | head -6)" = "$want16" ] && [ "$(printf '%s\n' "$out" | grep -c '^rank ')" -eq 16 ] &&
    printf '%s\n' "$out" | grep -qx 'rank 6: dp 1, tp 0, pp 1 | groups: tp 3, dp 2, pp 2, embedding -, mp 1'; then ok; else
    bad "16-rank example -> status $rc:"; printf '%s\n' "$out" | head -10 | sed 's/^/    /'
fi

# derived sizes: the first of dp, tp, pp left out
for case in "--ranks 8 --tp 2|dp 4 x tp 2 x pp 1" "--ranks 12 --dp 2 --pp 3|dp 2 x tp 2 x pp 3" "--ranks 6 --dp 3|dp 3 x tp 2 x pp 1" \
    "--ranks 5|dp 5 x tp 1 x pp 1" "|1 rank = dp 1 x tp 1 x pp 1" "--pp 3|3 ranks = dp 1 x tp 1 x pp 3"; do
    args=${case%%|*}; want=${case#*|}
    # shellcheck disable=SC2086
    first=$("$CLEAVE" mesh $args 2>&1 | head -1)
    if printf '%s' "$first" | grep -qF -- "$want"; then ok; else bad "cleave mesh $args: '$first', wanted '$want'"; fi
done

out=$("$CLEAVE" mesh --help 2>&1); rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q -- '--tensor-model-parallel-size'; then ok; else bad "--help -> status $rc"; fi

expect() { # expect "words" args...: status 2 and one line containing words
    local want=$1; shift
    local out rc lines
    out=$("$CLEAVE" mesh "$@" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s' "$out" | grep -c '' || true)
    if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -qiF -- "$want" && [ "$lines" -eq 1 ]; then ok; else
        bad "cleave mesh $* -> status $rc, $lines lines, wanted '$want':"; printf '%s\n' "$out" | head -5 | sed 's/^/    /'
    fi
}
expect "--dp 2 x --tp 3 x --pp 1 = 6 ranks, but the world has 4" --ranks 4 --dp 2 --tp 3 --pp 1
expect "= 8 ranks, but the world has 16" --ranks 16 --dp 2 --tp 2 --pp 2
expect "must be positive" --dp 0 --tp 2
expect "must be positive" --ranks 8 --tp 0
expect "must be positive" --tensor-model-parallel-size 0
expect "must be positive" --pp -2
expect "must be positive" --ranks -8
expect "must be positive" --ranks 0
expect "not an integer" --dp two
expect "not an integer" --pipeline-model-parallel-size 2x
expect "not an integer" --ranks ''
expect "cannot derive --dp" --ranks 4 --tp 3
expect "cannot derive --pp" --ranks 4 --dp 2 --tp 3
expect "same flag" --tp 2 --tensor-model-parallel-size 2
expect "at most" --dp 1000 --tp 1000
expect "unknown flag" --bogus 1
expect "needs a value" --tp
expect "unexpected argument" 8

echo "cli_mesh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
