#!/usr/bin/env bash
# The pre-tokenizers' character classes (src/data/pretok.c) against node's:
# over every code point, cleave's \p{L}, \p{N} and \s, rewritten and run by
# PCRE2, equal JavaScript's /u classes, which gpt-3-encoder and
# @lenml/tokenizers use (scripts/unicode_classes.sh); a build without PCRE2
# refuses --tokenizer gpt2 in one line. (A pattern the rewriting cannot
# express, \S inside a class, is among tests/cli_hf_tokenizer.sh's bad files.)
# Skips without node or PCRE2 (a failure under CI=true: the set-up installs both).
# When node's Unicode is not the one pretok.c's added letters and numbers come
# from (CL_PRETOK_UNICODE; Debian 12's own node 18 has 15.0, not 17.0), the
# script leaves those code points' \p{L} and \p{N} out (exit 3): all else is
# checked and the rest is one skip, also under CI=true (the set-up does not
# choose node's Unicode). To try that path with a node of the same Unicode:
# CLEAVE_TEST_NODE_UNICODE=15.0 bash tests/cli_unicode_classes.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
source tests/tools/driver.sh
BUILD=${BUILD:-build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-ucls.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

BUILD=$BUILD bash scripts/unicode_classes.sh >"$tmp/out" 2>&1; _rc=$?
if [ $_rc -eq 2 ]; then
    libs=$(sed -n 's/^Libs.private: //p' "$BUILD/cleave.pc")
    if ! grep -q -- -lpcre2-8 <<<"$libs"; then
        # without PCRE2, GPT-2's tokenizer (as hf's) is refused in one line naming PCRE2
        echo hi >"$tmp/t.txt"
        "$BUILD/cleave" tokenize --tokenizer gpt2 --out "$tmp/x" "$tmp/t.txt" >"$tmp/nop.out" 2>&1; _rc2=$?
        check '[ $_rc2 -eq 2 ] && [ "$(wc -l <"$tmp/nop.out")" -eq 1 ] && grep -q PCRE2 "$tmp/nop.out"' \
            "without PCRE2, --tokenizer gpt2 is refused in one line naming PCRE2 (rc $_rc2: $(head -c 300 "$tmp/nop.out"))"
    fi
    if [ "${CI:-}" = true ]; then check false "$(cat "$tmp/out"), though the set-up installs it (CI=true)"; else skip "$(cat "$tmp/out")"; fi
    finish cli_unicode_classes
    exit
fi
if [ $_rc -eq 3 ]; then
    check 'grep -q "equals node.s on every code point" "$tmp/out"' "cleave's \\s equals node's on every code point, \\p{L} and \\p{N} on all but the version-dependent ones ($(tail -n 1 "$tmp/out"))"
    skip "node's Unicode $(node_unicode) is not pretok.c's $(pretok_unicode): \\p{L} and \\p{N} not compared on $(grep -o '[0-9]* code points left out' "$tmp/out" | cut -d' ' -f1) version-dependent code points"
    finish cli_unicode_classes
    exit
fi
check '[ $_rc -eq 0 ] && grep -q "equal node" "$tmp/out"' "cleave's \\p{L}, \\p{N}, \\s equal node's on every code point (rc $_rc: $(tail -n 1 "$tmp/out"))"

finish cli_unicode_classes
