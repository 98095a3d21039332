#!/usr/bin/env bash
# Tokenizing the King James Bible (data/kjv.txt, 4.3 MB) with GPT-2's BPE:
#   new: `cleave tokenize` into an indexed dataset, on 1 and 2 threads
#        (bytes per second of the whole command, tokenizer loading included)
#   old: the start-up tokenization it replaces, `cleave train --data FILE`
#        on a copy with no token cache (load_text_tokens: one thread), a
#        one-step run, against the same one-step run on the indexed dataset
# alternated REPS times (the machine is shared: compare the ratios), then
# the resident size (VmHWM, /usr/bin/time -v) of a two-step run on a
# generated indexed corpus of BIG_GB (default 6) GB, a sparse .bin of token
# 0, against the 2.3 MB KJV one; the big files are removed at the end.
#   usage: bash bench/tokenize.sh   (REPS=2 BIG_GB=6; BIG_GB=0 leaves out the resident size)
set -eu
cd "$(dirname "$0")/.."
C=${CLEAVE:-build/cleave}
REPS=${REPS:-2}
BIG_GB=${BIG_GB:-6}
kjv=${CLEAVE_DATA:-data}/kjv.txt
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-tokbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bytes=$(stat -c %s "$kjv")
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# wall CMD...: its wall seconds; its CPU seconds (user + system) go to $tmp/cpu (on a loaded machine wall time is mostly waiting)
wall() {
    /usr/bin/time -o "$tmp/time" -f "%e %U %S" "$@" > "$tmp/last.out" 2>&1 || { cat "$tmp/last.out"; exit 1; }
    awk '{print $2 + $3}' "$tmp/time" > "$tmp/cpu"
    awk '{print $1}' "$tmp/time"
}
mbs() { echo "scale=2; $bytes / $1 / 1000000" | bc; }
one=(--tokenizer gpt2 --seq-len 64 --steps 1 --sample-tokens 0 --eval-batches 1)
for r in $(seq "$REPS"); do
    rm -f "$tmp"/kjv.*
    t2=$(wall "$C" tokenize "$kjv" --out "$tmp/kjv" --tokenizer gpt2 --threads 2)
    own2=$(grep -o '[0-9.]* MB/s' "$tmp/last.out"); c2=$(cat "$tmp/cpu")
    rm -f "$tmp"/kjv.*
    t1=$(wall "$C" tokenize "$kjv" --out "$tmp/kjv" --tokenizer gpt2 --threads 1)
    own1=$(grep -o '[0-9.]* MB/s' "$tmp/last.out"); c1=$(cat "$tmp/cpu")
    cp "$kjv" "$tmp/copy.txt"
    rm -f "$tmp"/copy.txt.*.tok
    to=$(wall "$C" train --data "$tmp/copy.txt" "${one[@]}"); co=$(cat "$tmp/cpu")
    ti=$(wall "$C" train --data "$tmp/kjv" "${one[@]}"); ci=$(cat "$tmp/cpu")
    echo "rep $r: tokenize 2 threads ${t2} s wall, $c2 s CPU ($(mbs "$t2") MB/s; encoding alone $own2)," \
         "1 thread ${t1} s wall, $c1 s CPU ($(mbs "$t1") MB/s; $own1);" \
         "train 1 step: text, no cache ${to} s wall, $co s CPU; indexed ${ti} s wall, $ci s CPU  (load $(cut -d' ' -f1 /proc/loadavg))"
done
cmp -s <(tail -c +121 "$tmp/copy.txt.gpt2.tok") <(head -c -2 "$tmp/kjv.bin") &&
    echo "the indexed tokens equal the start-up tokenization's (its cache), plus the end-of-document token"

[ "$BIG_GB" = 0 ] && exit 0
# resident size: a generated corpus of BIG_GB GB (sequences of at most 2^31-1 tokens: int32 lengths) vs KJV's
python3 - "$tmp/big" "$BIG_GB" << 'PY'
import struct, sys
pre, gb = sys.argv[1], float(sys.argv[2])
total = int(gb * 1e9) // 2          # uint16 tokens
seqs = []
while total > 0:
    seqs.append(min(total, 2**31 - 1)); total -= seqs[-1]
with open(pre + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(seqs), 2))
    f.write(struct.pack("<%di" % len(seqs), *seqs))
    at, ptr = 0, []
    for n in seqs: ptr.append(at); at += 2 * n
    f.write(struct.pack("<%dq" % len(seqs), *ptr) + struct.pack("<2q", 0, len(seqs)))
with open(pre + ".bin", "wb") as f:
    f.truncate(at)
PY
hwm() { /usr/bin/time -v "$C" train --data "$1" --tokenizer gpt2 --seq-len 64 --steps 2 --sample-tokens 0 --eval-batches 1 2>&1 >/dev/null |
        sed -n 's/.*Maximum resident set size (kbytes): //p'; }
small=$(hwm "$tmp/kjv")
t0=$(date +%s.%N)
big=$(hwm "$tmp/big")
tb=$(echo "$(date +%s.%N) - $t0" | bc)
echo "VmHWM, 2 steps of gpt2-tiny (gpt2 vocabulary): $(stat -c %s "$tmp/kjv.bin") B corpus ${small} KB; $(stat -c %s "$tmp/big.bin") B corpus ${big} KB (that run ${tb} s)"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
