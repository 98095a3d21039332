#!/usr/bin/env bash
# Recomputes the PyTorch reference of every tests/fixtures/*/input.safetensors
# with scripts/torch_reference.py and compares it with the committed
# reference.safetensors next to it (every tensor within max|a-b|/max|b| <=
# 1e-6, see scripts/compare_safetensors.py). Exits 1 on any mismatch, on a
# missing reference, or when there are no fixtures at all.
#
#   scripts/check_fixtures.sh            compare
#   scripts/check_fixtures.sh --write    regenerate the committed references
#
# Needs Debian's PyTorch (/usr/bin/python3 with python3-torch); override with
# PYTHON=... . The inputs come from `build/tests/test_torch --write-input
# tests/fixtures`.
set -u
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
write=0
case "${1:-}" in
    "") ;;
    --write) write=1 ;;
    *) echo "usage: $0 [--write]" >&2; exit 2 ;;
esac
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    echo "check_fixtures: $PYTHON cannot import torch (apt-get install python3-torch)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0; bad=0
for inp in tests/fixtures/*/input.safetensors; do
    [ -f "$inp" ] || continue
    dir=$(dirname "$inp"); name=$(basename "$dir"); ref="$dir/reference.safetensors"
    n=$((n + 1))
    if [ "$write" = 1 ]; then
        if "$PYTHON" scripts/torch_reference.py "$inp" "$ref"; then
            echo "wrote $ref"
        else
            echo "FAIL $name: torch_reference.py failed"; bad=$((bad + 1))
        fi
        continue
    fi
    if [ ! -f "$ref" ]; then
        echo "FAIL $name: $ref missing (run $0 --write)"; bad=$((bad + 1)); continue
    fi
    if ! "$PYTHON" scripts/torch_reference.py "$inp" "$tmp/$name.safetensors"; then
        echo "FAIL $name: torch_reference.py failed"; bad=$((bad + 1)); continue
    fi
    "$PYTHON" scripts/compare_safetensors.py "$name" "$tmp/$name.safetensors" "$ref" 1e-6 || bad=$((bad + 1))
done
for ref in tests/fixtures/*/reference.safetensors; do
    [ -f "$ref" ] || continue
    [ -f "$(dirname "$ref")/input.safetensors" ] && continue
    echo "FAIL $(basename "$(dirname "$ref")"): reference without input.safetensors"; bad=$((bad + 1))
done
if [ "$n" = 0 ]; then
    echo "FAIL: no tests/fixtures/*/input.safetensors (run build/tests/test_torch --write-input tests/fixtures)"
    exit 1
fi
echo "$n fixtures, $bad failed"
[ "$bad" = 0 ]
