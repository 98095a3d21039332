#!/usr/bin/env bash
# Megatron-LM indexed datasets and `cleave tokenize`:
# - scripts/megatron_indexed.py (written from the format's description, as
#   preprocess_data.py --append-eod + IndexedDatasetBuilder write it) writes
#   a dataset from the GPT-2 ids that the npm package gpt-3-encoder gives
#   for a text file and a JSONL file's lines; `cleave tokenize` on the same
#   files writes byte-identical .bin and .idx (and the script reads cleave's
#   files back to the same documents);
# - --threads 1 and 2 (with pieces small enough to cut the documents) give
#   identical files;
# - a tokenize killed after a batch (the test hook) resumes to the same
#   bytes; a finished dataset is refused without --overwrite;
# - cleave trains on the script-written dataset (finite losses, equal to
#   training on cleave's own), and a --stop-after/--resume run on it
#   continues bitwise;
# - bad JSONL lines and each damaged dataset (truncated or mismatched .idx,
#   bad magic, version, dtype, pointers, lengths, document index, token ids
#   past the vocabulary) exit 2 with one line naming the file, before step 1;
#   so does --data PREFIX.bin, naming the prefix to give.
set -u
source "$(dirname "$0")/lib.sh"
py=scripts/megatron_indexed.py
gpt2=${CLEAVE_DATA:-data}/gpt2

# the documents: a text file, and JSONL lines (one with Unicode, one empty, an extra field)
head -c 20000 data/kjv.txt > "$tmp/a.txt"
python3 - "$tmp/b.jsonl" << 'PY'
import json, sys
lines = open("data/kjv.txt", encoding="utf-8").read()[20000:40000].split("\n\n")[:12]
lines += ["caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600  it's  they're\t", ""]
with open(sys.argv[1], "w") as f:
    for i, t in enumerate(lines):
        f.write(json.dumps({"id": i, "text": t}) + "\n")
PY
tk=("$CLEAVE" tokenize "$tmp/a.txt" "$tmp/b.jsonl" --tokenizer gpt2)

"${tk[@]}" --out "$tmp/c" --threads 1 > "$tmp/c.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ -f "$tmp/c.bin" ] && [ -f "$tmp/c.idx" ]' "cleave tokenize failed ($_rc): $(tail -2 "$tmp/c.out")"
check '[ ! -e "$tmp/c.tokenize" ] && [ ! -e "$tmp/c.bin.part" ] && [ ! -e "$tmp/c.lens.part" ]' "a finished tokenize left its part files"

# the reference: node's GPT-2 ids per document, written by the script
if command -v node > /dev/null && [ -f "$gpt2/js/index.js" ]; then
    cat > "$tmp/enc.js" << 'JS'
const fs = require("fs");
const { encode } = require(require("path").resolve(process.argv[2], "index.js"));
const docs = [encode(fs.readFileSync(process.argv[3], "utf8"))];
for (const l of fs.readFileSync(process.argv[4], "utf8").split("\n")) if (l) docs.push(encode(JSON.parse(l).text));
process.stdout.write(JSON.stringify(docs));
JS
    node "$tmp/enc.js" "$gpt2/js" "$tmp/a.txt" "$tmp/b.jsonl" > "$tmp/ref.json"
    python3 "$py" write "$tmp/m" --vocab 50257 --eod 50256 "$tmp/ref.json"
    check 'cmp -s "$tmp/c.bin" "$tmp/m.bin"' "cleave tokenize's .bin differs from the script's (node's ids, preprocess_data.py's layout)"
    check 'cmp -s "$tmp/c.idx" "$tmp/m.idx"' "cleave tokenize's .idx differs from the script's: $(cmp "$tmp/c.idx" "$tmp/m.idx")"
else
    skip "the comparison with gpt-3-encoder's ids (node or $gpt2/js missing)" setup
    python3 "$py" read "$tmp/c" | python3 -c 'import json,sys; print(json.dumps([d[:-1] for d in json.load(sys.stdin)["documents"] if d]))' > "$tmp/ref.json"
    python3 "$py" write "$tmp/m" --vocab 50257 --eod 50256 "$tmp/ref.json"
fi
# the script reads cleave's files: 15 documents, the empty one without tokens, the others ending in 50256
python3 "$py" read "$tmp/c" > "$tmp/c.json" 2> "$tmp/read.err"
_rc=$?
check '[ $_rc -eq 0 ] && python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
docs = d[\"documents\"]
sys.exit(not (d[\"dtype\"] == 8 and len(docs) == 15 and docs[-1] == [] and all(x and x[-1] == 50256 for x in docs[:-1])))" "$tmp/c.json"' \
    "the script does not read cleave's dataset as 15 documents of uint16 ending in <|endoftext|>: $(head -c 300 "$tmp/c.json" "$tmp/read.err")"

# threads: the same files from 1 and 2 threads, documents cut into many pieces
CLEAVE_TOKENIZE_PIECE=700 "${tk[@]}" --out "$tmp/t1" --threads 1 > /dev/null 2>&1
CLEAVE_TOKENIZE_PIECE=700 "${tk[@]}" --out "$tmp/t2" --threads 2 > /dev/null 2>&1
check 'cmp -s "$tmp/t1.bin" "$tmp/c.bin" && cmp -s "$tmp/t2.bin" "$tmp/c.bin" && cmp -s "$tmp/t2.idx" "$tmp/c.idx"' \
    "tokenizing in 700-byte pieces on 1 and 2 threads does not give the whole-document files"

# resume: killed (test hook) after 2 batches of ~2 KB, with tokens written past the record
CLEAVE_TOKENIZE_BATCH=2000 CLEAVE_TOKENIZE_KILL_AFTER=2 "${tk[@]}" --out "$tmp/r" > "$tmp/r1.out" 2>&1
_rc=$?
check '[ $_rc -eq 137 ] && [ -f "$tmp/r.tokenize" ] && [ ! -e "$tmp/r.idx" ]' "the killed tokenize ($_rc) left no progress record or a finished .idx"
CLEAVE_TOKENIZE_BATCH=2000 "${tk[@]}" --out "$tmp/r" > "$tmp/r2.out" 2>&1
_rc=$?
check '[ $_rc -eq 0 ] && grep -q "resuming .* at document 4 " "$tmp/r2.out"' "the second tokenize did not resume at document 4 ($_rc): $(cat "$tmp/r2.out")"
check 'cmp -s "$tmp/r.bin" "$tmp/c.bin" && cmp -s "$tmp/r.idx" "$tmp/c.idx"' "the resumed tokenize's files differ from an uninterrupted run's"
# overwrite: refused, then allowed
"${tk[@]}" --out "$tmp/c" > "$tmp/o.out" 2>&1
_rc=$?
check '[ $_rc -eq 2 ] && [ $(wc -l < "$tmp/o.out") -eq 1 ] && grep -q "finished dataset.*--overwrite" "$tmp/o.out"' \
    "tokenizing over a finished dataset was not refused in one line ($_rc): $(cat "$tmp/o.out")"
"${tk[@]}" --out "$tmp/c" --overwrite > "$tmp/o.out" 2>&1
_rc=$?
check '[ $_rc -eq 0 ] && cmp -s "$tmp/c.bin" "$tmp/m.bin"' "--overwrite failed or changed the output ($_rc): $(tail -1 "$tmp/o.out")"

# bad JSONL: the file and line named, as --data's reader (the same one) names them, exit 2, nothing finished
printf '{"text": "a"}\n{"text": nope}\n' > "$tmp/bad1.jsonl"
printf '{"text": "a"}\n{"body": "b"}\n' > "$tmp/bad2.jsonl"
printf '{"text": "a"}\n\n[1]\n' > "$tmp/bad3.jsonl"
for b in "bad1.jsonl line 2: not JSON" "bad2.jsonl line 2: no field \"text\"" "bad3.jsonl line 3: not a JSON object"; do
    f=${b%% *}
    "$CLEAVE" tokenize "$tmp/$f" --out "$tmp/x_$f" > "$tmp/bad.out" 2>&1
    _rc=$?
    check '[ $_rc -eq 2 ] && [ $(wc -l < "$tmp/bad.out") -eq 1 ] && grep -qF "$b" "$tmp/bad.out" && [ ! -e "$tmp/x_$f.idx" ]' \
        "tokenize $f: want exit 2 and '$b', got $_rc: $(cat "$tmp/bad.out")"
done
# a blank line holds no document, for tokenize as for --data (one reader): the same dataset as without them
printf '{"text": "a b"}\n\n  \r\n{"text": "c"}\n\n' > "$tmp/blank.jsonl"
printf '{"text": "a b"}\n{"text": "c"}\n' > "$tmp/noblank.jsonl"
"$CLEAVE" tokenize "$tmp/blank.jsonl" --out "$tmp/bl" > "$tmp/bl.out" 2>&1
_rc=$?
"$CLEAVE" tokenize "$tmp/noblank.jsonl" --out "$tmp/nb" > /dev/null 2>&1
check '[ $_rc -eq 0 ] && cmp -s "$tmp/bl.bin" "$tmp/nb.bin" && cmp -s "$tmp/bl.idx" "$tmp/nb.idx"' \
    "blank JSONL lines were not skipped by tokenize ($_rc): $(cat "$tmp/bl.out")"

# training on the script's dataset equals training on cleave's own
run=(--tokenizer gpt2 --seq-len 16 --micro-batch-size 2 --steps 3 --sample-tokens 0 --eval-batches 1)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }
"$CLEAVE" train --data "$tmp/m" "${run[@]}" --log-file "$tmp/m.jsonl" > "$tmp/tm.out" 2>&1
_rc=$?
check '[ $_rc -eq 0 ] && grep -q "data .*/m: .* training and .* validation tokens" "$tmp/tm.out"' "training on the script's dataset failed ($_rc): $(tail -2 "$tmp/tm.out")"
lm=$(losses "$tmp/m.jsonl")
check 'python3 -c "import math,sys; v=[float(x) for x in sys.argv[1:]]; sys.exit(not (len(v) == 3 and all(math.isfinite(x) for x in v)))" $lm' "losses on the script's dataset: [$lm]"
"$CLEAVE" train --data "$tmp/c" "${run[@]}" --log-file "$tmp/cc.jsonl" > /dev/null 2>&1
check '[ "$(losses "$tmp/cc.jsonl")" = "$lm" ]' "losses on cleave's dataset [$(losses "$tmp/cc.jsonl")] differ from the script's [$lm]"
# resume on an indexed dataset: stop at 2, resume to 3, bitwise
"$CLEAVE" train --data "$tmp/m" "${run[@]}" --stop-after 2 --save "$tmp/ck" > "$tmp/s.out" 2>&1
"$CLEAVE" train --resume "$tmp/ck" --steps 3 --sample-tokens 0 --eval-batches 1 --log-file "$tmp/res.jsonl" > "$tmp/res.out" 2>&1
_rc=$?
check '[ $_rc -eq 0 ] && [ "$(losses "$tmp/res.jsonl")" = "$(echo "$lm" | cut -d" " -f3) " ]' \
    "the resumed run on the indexed dataset ($_rc) gave [$(losses "$tmp/res.jsonl")], the straight one [$lm]: $(tail -1 "$tmp/res.out")"

# damaged datasets: each exits 2 with one line naming the file, before step 1
python3 - "$tmp/m" "$tmp" << 'PY'
import struct, sys
pre, d = sys.argv[1], sys.argv[2]
idx, bin_ = open(pre + ".idx", "rb").read(), open(pre + ".bin", "rb").read()
n, D = struct.unpack("<QQ", idx[18:34])
L, P, X = 34, 34 + 4 * n, 34 + 12 * n  # lengths, pointers, document index
def put(name, i, b=bin_):
    open(d + "/" + name + ".idx", "wb").write(i)
    open(d + "/" + name + ".bin", "wb").write(b)
put("trunc", idx[:-5])
put("short", idx[:20])
put("magic", b"MMIDIDY" + idx[7:])
put("version", idx[:9] + struct.pack("<Q", 2) + idx[17:])
put("float", idx[:17] + bytes([6]) + idx[18:])
put("code", idx[:17] + bytes([9]) + idx[18:])
put("binshort", idx, bin_[:-2])
put("pointer", idx[:P + 8] + struct.pack("<q", 4) + idx[P + 16:])
put("length", idx[:L] + struct.pack("<i", struct.unpack("<i", idx[L:L + 4])[0] + 1) + idx[L + 4:])
put("docend", idx[:-8] + struct.pack("<q", n - 1))
put("docorder", idx[:X] + struct.pack("<q", 1) + idx[X + 8:])
put("vocab", idx, bin_[:-2] + struct.pack("<H", 60000))
PY
for c in "trunc:truncated" "short:truncated" "magic:no MMIDIDX header" "version:version 2" "float:dtype code 6 (float64)" \
    "code:dtype code 9" "binshort:m.bin\|binshort.bin" "pointer:pointer is 4" "length:sequence 1.s pointer" \
    "docend:document index" "docorder:document index entry 0 is 1" "vocab:outside the model's vocabulary"; do
    name=${c%%:*} want=${c#*:}
    "$CLEAVE" train --data "$tmp/$name" --tokenizer byte --vocab 50257 --seq-len 16 --steps 1 > "$tmp/bad.out" 2>&1
    _rc=$?
    check '[ $_rc -eq 2 ] && [ $(grep -c . "$tmp/bad.out") -eq 1 ] && grep -q "$name\.\(idx\|bin\)" "$tmp/bad.out" && grep -q "$want" "$tmp/bad.out" && ! grep -q "^step" "$tmp/bad.out"' \
        "train --data $name: want exit 2 and one line with '$want', got $_rc: $(head -3 "$tmp/bad.out")"
done
# a file of the pair named instead of the prefix: refused, naming the prefix
"$CLEAVE" train --data "$tmp/m.bin" --tokenizer byte --vocab 50257 --seq-len 16 --steps 1 > "$tmp/bad.out" 2>&1
_rc=$?
check '[ $_rc -eq 2 ] && grep -q "give its prefix, --data $tmp/m$" "$tmp/bad.out"' "train --data m.bin: want exit 2 naming the prefix, got $_rc: $(head -2 "$tmp/bad.out")"

# an indexed dataset is one more source of a blend: beside a text, 0.7/0.3, both drawn in proportion
head -c 60000 data/kjv.txt > "$tmp/blend_a.txt"
"$CLEAVE" tokenize "$tmp/blend_a.txt" --out "$tmp/blendA" --tokenizer byte > /dev/null 2>&1
tail -c 60000 data/kjv.txt > "$tmp/blend_b.txt"
rm -f "$tmp/blend.log.0"
CLEAVE_DATA_LOG="$tmp/blend.log" "$CLEAVE" train --data "0.7 $tmp/blendA 0.3 $tmp/blend_b.txt" --tokenizer byte --seq-len 16 \
    --micro-batch-size 10 --global-batch-size 100 --steps 5 --sample-tokens 0 --eval-batches 1 > "$tmp/blend.out" 2>&1
_rc=$?
n0=$(awk '$2 == 0' "$tmp/blend.log.0" 2> /dev/null | wc -l)
n1=$(awk '$2 == 1' "$tmp/blend.log.0" 2> /dev/null | wc -l)
echo "blend of an indexed prefix (0.7) and a text (0.3): $n0 and $n1 of 500 samples"
check '[ $_rc -eq 0 ] && [ "$n0" -eq 350 ] && [ "$n1" -eq 150 ]' \
    "blend of an indexed dataset and a text: exit $_rc, samples $n0/$n1 (want 350/150): $(tail -2 "$tmp/blend.out")"
finish cli_indexed
