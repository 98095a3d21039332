#!/usr/bin/env bash
# The pre-tokenizers' character classes (src/data/pretok.c) against node's:
# over every code point, cleave's \p{L}, \p{N} and \s, rewritten and run by
# PCRE2, equal JavaScript's /u classes, which gpt-3-encoder and
# @lenml/tokenizers use (scripts/unicode_classes.sh); and a pattern the
# rewriting cannot express (\S inside a class) is refused with a message.
# Skips without node or PCRE2 (a failure under CI=true: the set-up installs both).
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
BUILD=${BUILD:-build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-ucls.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

BUILD=$BUILD bash scripts/unicode_classes.sh >"$tmp/out" 2>&1; _rc=$?
if [ $_rc -eq 2 ]; then
    if [ "${CI:-}" = true ]; then check false "$(cat "$tmp/out"), though the set-up installs it (CI=true)"; else skip "$(cat "$tmp/out")"; fi
    finish cli_unicode_classes
    exit
fi
check '[ $_rc -eq 0 ] && grep -q "equal node" "$tmp/out"' "cleave's \\p{L}, \\p{N}, \\s equal node's on every code point (rc $_rc: $(tail -n 1 "$tmp/out"))"

# a tokenizer.json whose regex has \S in a class: refused, naming the field
V=$(python3 -c 'import json
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + len(bs) - 1 - 188)
print(json.dumps({chr(c): b for b, c in zip(bs, cs)}))')
mkdir -p "$tmp/bad"
printf '%s' '{"model":{"type":"BPE","vocab":'"$V"',"merges":[]},"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"[\\S\\d]+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}}' \
    >"$tmp/bad/tokenizer.json"
echo hi >"$tmp/t.txt"
"$BUILD/cleave" tokenize --tokenizer hf --tokenizer-dir "$tmp/bad" --out "$tmp/x" "$tmp/t.txt" >"$tmp/bad.out" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && [ "$(wc -l <"$tmp/bad.out")" -eq 1 ] && grep -q "Regex.*inside a character class" "$tmp/bad.out"' \
    "a \\S inside a class is refused in one line naming the Regex field (rc $_rc: $(head -c 300 "$tmp/bad.out"))"
finish cli_unicode_classes
