#!/usr/bin/env bash
# The token cache beside a text (FILE.byte.tok) is used only when it matches:
# (a) a text replaced by other content of the same size with an older mtime
# (cp -p), and (b) a text rewritten within the cache's own second, are both
# tokenized afresh; (c) a cache with in-range tokens changed is noticed
# (a note on stderr), rebuilt, and trains exactly like a fresh cache; an
# old-format (CLTOK1) cache is rebuilt; two ranks share a rebuilt cache.
# "Fresh" runs train on a copy of the same text in a directory of its own.
set -u
source "$(dirname "$0")/lib.sh"
common=(--seq-len 32 --micro-batch-size 4 --global-batch-size 8 --steps 2 --sample-tokens 0)
mkdir -p "$tmp/w" "$tmp/fresh"
head -c 20000 data/kjv.txt > "$tmp/A.txt"
tail -c 20000 data/kjv.txt > "$tmp/B.txt"
head -c 40000 data/kjv.txt | tail -c 20000 > "$tmp/C.txt"
text=$tmp/w/text.txt
cache=$text.byte.tok

# run NAME TEXT [args]: trains on TEXT; NAME.out has the output, NAME.loss the losses
run() {
    local name=$1 data=$2; shift 2
    "$CLEAVE" train "${common[@]}" --data "$data" --log-file "$tmp/$name.jsonl" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    check "[ $? -eq 0 ]" "run $name failed: $(tail -3 "$tmp/$name.err")"
    grep '"loss"' "$tmp/$name.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/' | tr '\n' ' ' > "$tmp/$name.loss"
}
# fresh NAME SOURCE [args]: the same text with no cache beside it
fresh() {
    local name=$1 src=$2; shift 2
    rm -rf "$tmp/fresh" && mkdir "$tmp/fresh" && cp "$src" "$tmp/fresh/text.txt"
    run "$name" "$tmp/fresh/text.txt" "$@"
}
baseline() { grep -o 'unigram baseline loss [0-9.]*' "$tmp/$1.out"; }
same_run() { # same_run A B: the same header line and the same losses
    check "[ -s '$tmp/$1.loss' ] && cmp -s '$tmp/$1.loss' '$tmp/$2.loss' && [ \"\$(baseline $1)\" = \"\$(baseline $2)\" ]" \
        "$1 and $2 differ: [$(baseline "$1") $(cat "$tmp/$1.loss")] vs [$(baseline "$2") $(cat "$tmp/$2.loss")]"
}
fresh freshA "$tmp/A.txt"
fresh freshB "$tmp/B.txt"
fresh freshC "$tmp/C.txt"
check '[ "$(baseline freshA)" != "$(baseline freshB)" ] && [ "$(baseline freshB)" != "$(baseline freshC)" ]' \
    "the test texts should give different baselines: $(baseline freshA) $(baseline freshB) $(baseline freshC)"

# (a) replaced by an older-dated file of the same size
cp "$tmp/A.txt" "$text"
run a1 "$text"
same_run a1 freshA
check '[ -f "$cache" ]' "no cache written beside $text"
cp "$tmp/B.txt" "$tmp/B-old.txt" && touch -d '2001-01-01 00:00:00' "$tmp/B-old.txt"
cp -p "$tmp/B-old.txt" "$text"
check '[ "$text" -ot "$cache" ] && [ $(stat -c %s "$text") -eq 20000 ]' "setup: the new text should look older than the cache"
run a2 "$text"
same_run a2 freshB
run a3 "$text" # and the rebuilt cache is used as is
same_run a3 freshB
check '[ ! -s "$tmp/a3.err" ]' "a current cache gave a note: $(cat "$tmp/a3.err")"

# (b) rewritten within the cache's second (pinned there with touch -r)
cp "$tmp/C.txt" "$text" && touch -r "$cache" "$text"
run b1 "$text"
same_run b1 freshC

# (c) in-range tokens changed inside the cache's token area (bytes 1000..;
# low bytes of 2-byte tokens, each XOR 1, so every token stays below 256)
for off in 1000 1002 5000 20000; do
    b=$(od -An -tu1 -j $off -N1 "$cache" | tr -d ' ')
    printf "\\$(printf %03o $((b ^ 1)))" | dd of="$cache" bs=1 seek=$off conv=notrunc 2>/dev/null
done
run c1 "$text"
same_run c1 freshC
check 'grep -q "damaged" "$tmp/c1.err" && grep -q "rebuilding" "$tmp/c1.err" && [ $(wc -l < "$tmp/c1.err") -eq 1 ]' \
    "a damaged cache: expected one note on stderr, got: $(cat "$tmp/c1.err")"
check 'cmp -s "$cache" "$tmp/fresh/text.txt.byte.tok"' "the rebuilt cache differs from a fresh one"

# an old-format cache (CLTOK1 magic) is rebuilt
printf '1' | dd of="$cache" bs=1 seek=5 conv=notrunc 2>/dev/null
run v1 "$text"
same_run v1 freshC
check 'grep -q "CLTOK1" "$tmp/v1.err"' "old-format cache: $(cat "$tmp/v1.err")"
check 'cmp -s "$cache" "$tmp/fresh/text.txt.byte.tok"' "the old-format cache was not rebuilt"

# two ranks after the text changed: rank 0 rebuilds, rank 1 reads the new cache
cp "$tmp/A.txt" "$text" && touch -r "$cache" "$text"
run r2 "$text" --ranks 2 --dp 2
fresh freshA2 "$tmp/A.txt" --ranks 2 --dp 2
same_run r2 freshA2
check '[ $(grep -c "token cache" "$tmp/r2.err") -le 1 ]' "two ranks: more than one cache note: $(cat "$tmp/r2.err")"

finish cli_tokcache
