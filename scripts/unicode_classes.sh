#!/usr/bin/env bash
# Measures, over every Unicode code point, where PCRE2's \p{L}, \p{N} and \s
# (PCRE2_UTF | PCRE2_UCP) differ from node's /u regexes, the dialect of
# gpt-3-encoder and @lenml/tokenizers, the references of cleave's GPT-2 and
# tokenizer.json pre-tokenizers; prints the differences as code point ranges
# (the lists in src/data/pretok.c come from here), then checks that cleave's
# rewritten classes (src/data/pretok.c, through PCRE2) equal node's exactly.
#   usage: bash scripts/unicode_classes.sh   (BUILD=build; needs node and PCRE2)
# The added letters and numbers are Unicode CL_PRETOK_UNICODE's (pretok.h).
# When node's Unicode is another (Debian 12's own node 18 has 15.0), the code
# points whose \p{L} or \p{N} differs between node's and PCRE2's own classes
# or that pretok.c adds are left out of the \p{L} and \p{N} comparison (their
# \s is still compared, and all other code points exactly), and it says how
# many. CLEAVE_TEST_NODE_UNICODE=15.0 stands in for node's version, to check
# that path here (tests/tools/driver.sh's node_unicode).
# Exit 0 when cleave's classes equal node's, 1 when not, 2 when it cannot run,
# 3 when they are equal but for those left out (node's Unicode is not pretok's).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
command -v node >/dev/null 2>&1 || { echo "unicode_classes: node is not installed"; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-ucls.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
source tests/tools/driver.sh
driver_make "$BUILD"
grep -q -- -lpcre2-8 <<<"$driver_libs" || { echo "unicode_classes: this build has no PCRE2"; exit 2; }
driver_link "$BUILD" tests/tools/unicode_classes.c "$tmp/classes"
"$tmp/classes" --raw >"$tmp/pcre2.txt"
"$tmp/classes" >"$tmp/cleave.txt"
node -e '
const L = /^\p{L}$/u, N = /^\p{N}$/u, S = /^\s$/u, out = [];
for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp), k = (L.test(c) ? 1 : 0) | (N.test(c) ? 2 : 0) | (S.test(c) ? 4 : 0);
    if (k) out.push(cp.toString(16).toUpperCase() + " " + k);
}
require("fs").writeFileSync(process.argv[1], out.join("\n") + "\n");' "$tmp/node.txt"
nu=$(node_unicode)
pu=$(pretok_unicode)
echo "node $(node --version) (Unicode $nu${CLEAVE_TEST_NODE_UNICODE:+, as CLEAVE_TEST_NODE_UNICODE says}); pretok.c's added classes: Unicode $pu; PCRE2 $(pkg-config --modversion libpcre2-8 2>/dev/null || echo '?')"
# ranges of code points in one file's class and not the other's: "node has" / "PCRE2 has"
python3 - "$tmp/pcre2.txt" "$tmp/node.txt" <<'PY'
import sys
def load(p):
    return {int(a, 16): int(k) for a, k in (l.split() for l in open(p))}
pc, nd = load(sys.argv[1]), load(sys.argv[2])
def ranges(cps):
    r = []
    for c in sorted(cps):
        if r and r[-1][1] == c - 1: r[-1][1] = c
        else: r.append([c, c])
    return "".join("\\x{%X}" % a if a == b else "\\x{%X}-\\x{%X}" % (a, b) for a, b in r)
for bit, name in ((1, "\\p{L}"), (2, "\\p{N}"), (4, "\\s")):
    a = {c for c, k in nd.items() if k & bit} - {c for c, k in pc.items() if k & bit}
    b = {c for c, k in pc.items() if k & bit} - {c for c, k in nd.items() if k & bit}
    print("%s: node has %d code points PCRE2 lacks: %s" % (name, len(a), ranges(a) or "-"))
    print("%s: PCRE2 has %d code points node lacks: %s" % (name, len(b), ranges(b) or "-"))
PY
if [ "$nu" != "$pu" ]; then
    # node's Unicode is not the one pretok.c's additions come from: all but those, exactly
    python3 - "$tmp/pcre2.txt" "$tmp/node.txt" "$tmp/cleave.txt" "$nu" "$pu" <<'PY' || exit 1
import sys
def load(p):
    return {int(a, 16): int(k) for a, k in (l.split() for l in open(p))}
pc, nd, cl = (load(p) for p in sys.argv[1:4])
cps = set(pc) | set(nd) | set(cl)
diff = {c for c in cps if (nd.get(c, 0) ^ pc.get(c, 0)) & 3}
# pretok.c's additions: letters or numbers to cleave that PCRE2's Unicode has not assigned (8)
added = {c for c in cps if pc.get(c, 0) & 8 and (cl.get(c, 0) & ~pc.get(c, 0)) & 3}
out = diff | added
bad = sorted(c for c in cps if (nd.get(c, 0) ^ cl.get(c, 0)) & (4 if c in out else 7))
print("node's Unicode %s is not %s, pretok.c's: %d code points left out of the \\p{L} and \\p{N} comparison"
      " (%d whose \\p{L} or \\p{N} differs between node's and PCRE2's own, %d in pretok.c's added ranges)"
      % (sys.argv[4], sys.argv[5], len(out), len(diff), len(added)))
if bad:
    c = bad[0]
    print("cleave's classes differ from node's on %d code points, first: U+%04X node %d cleave %d"
          % (len(bad), c, nd.get(c, 0), cl.get(c, 0)))
    sys.exit(1)
print("cleave's \\s equals node's on every code point, and \\p{L}, \\p{N} on the other %d" % (0x110000 - 0x800 - len(out)))
PY
    exit 3
fi
if cmp -s "$tmp/cleave.txt" "$tmp/node.txt"; then
    echo "cleave's \\p{L}, \\p{N} and \\s equal node's on all $(wc -l <"$tmp/node.txt") classed code points"
else
    echo "cleave's classes differ from node's: $(diff "$tmp/node.txt" "$tmp/cleave.txt" | grep -c '^[<>]') lines, first: $(diff "$tmp/node.txt" "$tmp/cleave.txt" | grep -m1 '^[<>]')"
    exit 1
fi
