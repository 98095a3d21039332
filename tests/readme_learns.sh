#!/usr/bin/env bash
# Runs the README's first command as a new user would (from the repository
# root) and checks that the final validation loss is below the unigram
# baseline the run prints for the same corpus.
set -u
cd "$(dirname "$0")/.."
cmd=$(grep -m1 -E '^\s*bash scripts/demo\.sh' README.md | sed 's/^ *//')
[ -n "$cmd" ] || { echo "README.md does not open with the demo command"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
CI=${CI:-} eval "$cmd" --sample-tokens 100 > "$out" 2>&1
rc=$?
tail -n 12 "$out"
[ $rc -eq 0 ] || { echo "the README's first command failed with status $rc"; exit 1; }
uni=$(grep -o 'unigram baseline loss [0-9.]*' "$out" | awk '{print $4}')
val=$(grep -o 'validation loss [0-9.]*' "$out" | tail -1 | awk '{print $3}')
[ -n "$uni" ] && [ -n "$val" ] || { echo "could not read the losses"; exit 1; }
echo "validation loss $val, unigram baseline $uni"
awk -v v="$val" -v u="$uni" 'BEGIN { exit !(v < u) }' || { echo "validation loss did not fall below the unigram baseline"; exit 1; }
grep -q '^sample:' "$out" || { echo "no generated sample"; exit 1; }
# the one-rank refusal the README promises, with the figure it quotes
need=$(grep -o 'it needs [0-9.]* [KMG]iB' README.md | head -1 | sed 's/it needs //')
grep -A1 '^== one rank' "$out" | tail -1 | grep -q "^cleave: error: rank 0 needs $need but .*refused before allocating" ||
    { echo "the demo does not show the one-rank refusal the README promises (needs $need)"; exit 1; }
