#!/usr/bin/env bash
# Data as users have it (cleave/dataset.h): JSONL files, directories and
# Megatron-style blends "0.7 A 0.3 B", split by --split. A 0.7/0.3 blend
# trained over 10,000 samples draws each dataset within 1% of its weight
# (CLEAVE_DATA_LOG lists every sample's dataset); the same samples, and
# the same losses bit for bit, on dp 1 and dp 2, in a run stopped and
# resumed, and under mpirun; the default split is the old 90/10 (a plain
# text's run equals --split 9,1,0's); `cleave eval --split-part test`
# evaluates the test part; every bad input is one line and exit 2.
set -u
source "$(dirname "$0")/lib.sh"
python3 - "$tmp" <<'EOF'
import json, sys
t = open('data/kjv.txt', encoding='utf-8').read()
d = sys.argv[1]
a, b = t[:60000], t[300000:340000]
with open(d + '/web.jsonl', 'w') as f:
    for i in range(0, len(a), 500):
        f.write(json.dumps({"body": a[i:i + 500], "id": i}) + "\n")
open(d + '/books.txt', 'w').write(b)
open(d + '/bad1.jsonl', 'w').write('{"body": "ok"}\n{"body": 3}\n')
open(d + '/bad2.jsonl', 'w').write('{"body": "ok"}\n\n{"text": "x"}\n')
open(d + '/bad3.jsonl', 'w').write('{"body": "ok"}\nnot json\n')
EOF
blend="0.7 $tmp/web.jsonl 0.3 $tmp/books.txt"
common=(--seq-len 16 --micro-batch-size 4 --global-batch-size 8 --steps 6 --sample-tokens 0 --data-key body --threads 1)

# run NAME [args]: trains; NAME.loss has every loss line (%.17g), NAME.log.* each rank's samples
run() {
    local name=$1; shift
    CLEAVE_DATA_LOG=$tmp/$name.log "$CLEAVE" train "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2> "$tmp/$name.err"
    _rc=$?; check '[ $_rc -eq 0 ]' "run $name failed: $(tail -3 "$tmp/$name.err")"
    grep -o '"step": [0-9]*, "\(val_\)\?loss": [0-9.e+-]*' "$tmp/$name.jsonl" > "$tmp/$name.loss"
    cat "$tmp/$name.log".* 2> /dev/null | sort -n > "$tmp/$name.samples"
}
same() { # same A B WHAT: files A.WHAT and B.WHAT equal and not empty
    check "[ -s '$tmp/$1.$3' ] && cmp -s '$tmp/$1.$3' '$tmp/$2.$3'" "$1 and $2: $3 differ: $(diff "$tmp/$1.$3" "$tmp/$2.$3" | head -4)"
}

# 10,000 samples of a 0.7/0.3 blend: the counts within 1% of the weights
run big --data "$blend" --data-key body --seq-len 8 --micro-batch-size 100 --global-batch-size 200 --steps 50 --sample-tokens 0 --threads 1 --eval-batches 1
n0=$(awk '$2 == 0' "$tmp/big.samples" | wc -l); n1=$(awk '$2 == 1' "$tmp/big.samples" | wc -l)
check '[ $((n0 + n1)) -eq 10000 ] && [ $n0 -ge 6900 ] && [ $n0 -le 7100 ] && [ $n1 -ge 2900 ] && [ $n1 -le 3100 ]' \
    "10,000 samples of 0.7/0.3 drew $n0 and $n1"
check '[ "$(cut -d" " -f1 "$tmp/big.samples" | uniq | wc -l)" -eq 10000 ]' "samples logged twice or missing"

# every rank: dp 2 (threads) draws the same samples as dp 1 (the losses differ in the last bits: the
# replicas' gradient sum adds in another order; the same step-1 loss)
run dp1 "${common[@]}" --data "$blend"
run dp2 "${common[@]}" --data "$blend" --dp 2
same dp1 dp2 samples
check '[ "$(head -1 "$tmp/dp1.loss")" = "$(head -1 "$tmp/dp2.loss")" ]' "dp 1 and dp 2: step 1's loss differs"
check '[ -s "$tmp/dp2.log.0" ] && [ -s "$tmp/dp2.log.1" ] && ! cmp -s "$tmp/dp2.log.0" "$tmp/dp2.log.1"' "dp 2: each rank should draw its own slice"
check '[ "$(awk "\$2 == 1" "$tmp/dp1.samples" | wc -l)" -gt 0 ]' "the 6-step run never drew the second dataset"

# a resume: stopped after step 3 and resumed, the same samples and losses as the unbroken run
run part1 "${common[@]}" --data "$blend" --stop-after 3 --save "$tmp/ck"
run part2 "${common[@]}" --data "$blend" --resume "$tmp/ck"
cat "$tmp/part1.samples" "$tmp/part2.samples" | sort -n > "$tmp/parts.samples"
same dp1 parts samples
grep -v '"step": [123],' "$tmp/dp1.loss" | grep -v 'val_loss' > "$tmp/dp1.tail"
grep -v 'val_loss' "$tmp/part2.loss" > "$tmp/part2.tail"
same dp1 part2 tail
# the blend and --data-key are recorded: a resume without them takes them, a different one is refused
run part3 --seq-len 16 --micro-batch-size 4 --global-batch-size 8 --steps 6 --sample-tokens 0 --threads 1 --resume "$tmp/ck"
same part2 part3 loss
"$CLEAVE" train "${common[@]}" --data-key text --resume "$tmp/ck" > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q -- "--data-key text disagrees with the checkpoint.s body" "$tmp/e"' "another key on resume: rc $_rc: $(cat "$tmp/e")"
"$CLEAVE" train "${common[@]}" --split 8,1,1 --resume "$tmp/ck" > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q -- "--split 8,1,1 disagrees with the checkpoint.s 9,1,0" "$tmp/e"' "another split on resume: rc $_rc: $(cat "$tmp/e")"
"$CLEAVE" train "${common[@]}" --data "0.5 $tmp/web.jsonl 0.5 $tmp/books.txt" --resume "$tmp/ck" > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "disagrees with the checkpoint.s blend" "$tmp/e"' "another blend on resume: rc $_rc: $(cat "$tmp/e")"

# threads and MPI
if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    CLEAVE_DATA_LOG=$tmp/mpi.log timeout -k 5 300 mpirun --oversubscribe -np 2 "$CLEAVE" train "${common[@]}" --data "$blend" --comm mpi \
        --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "mpirun -np 2: rc $_rc: $(tail -3 "$tmp/mpi.out")"
    grep -o '"step": [0-9]*, "\(val_\)\?loss": [0-9.e+-]*' "$tmp/mpi.jsonl" > "$tmp/mpi.loss"
    cat "$tmp/mpi.log".* | sort -n > "$tmp/mpi.samples"
    same dp2 mpi samples
    same dp2 mpi loss
else
    skip "threads against MPI (no MPI in this build or no mpirun)" setup
fi

# a directory (sorted by name) and the default split
mkdir -p "$tmp/dir/sub" && cp "$tmp/web.jsonl" "$tmp/dir/a.jsonl" && cp "$tmp/books.txt" "$tmp/dir/b.txt" && touch "$tmp/dir/.hidden"
run dir "${common[@]}" --data "$tmp/dir"
check 'grep -q "data $tmp/dir: " "$tmp/dir.out"' "a directory: $(head -3 "$tmp/dir.out")"
echo x > "$tmp/dir/c.csv"
"$CLEAVE" train "${common[@]}" --data "$tmp/dir" > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "c.csv is neither .txt nor .jsonl" "$tmp/e" && [ $(wc -l < "$tmp/e") -eq 1 ]' "c.csv: rc $_rc $(cat "$tmp/e")"
rm "$tmp/dir/c.csv"
# the cache records the key and the files: a changed key or a new file re-tokenizes
"$CLEAVE" train "${common[@]}" --data "$tmp/dir" --data-key id > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "a.jsonl line 1: the field \"id\" is not a string" "$tmp/e"' "--data-key id: rc $_rc $(cat "$tmp/e")"
cp "$tmp/books.txt" "$tmp/dir/c.txt"
run dir2 "${common[@]}" --data "$tmp/dir"
check 'grep -q "rebuilding" "$tmp/dir2.err" && ! cmp -s "$tmp/dir.loss" "$tmp/dir2.loss"' "a new file in the directory did not re-tokenize"

head -c 40000 data/kjv.txt > "$tmp/plain.txt"
run plain1 "${common[@]}" --data "$tmp/plain.txt"
run plain2 "${common[@]}" --data "$tmp/plain.txt" --split 9,1,0
same plain1 plain2 loss
check 'grep -q "36000 training and 4000 validation tokens" "$tmp/plain1.out"' "the default split: $(grep '^data' "$tmp/plain1.out")"
run plain3 "${common[@]}" --data "$tmp/plain.txt" --split 949,50,1 --save "$tmp/ck2"
check 'grep -q "37960 training and 2000 validation tokens" "$tmp/plain3.out"' "--split 949,50,1: $(grep '^data' "$tmp/plain3.out")"

# cleave eval (windows of the model's context, 64): the test part, and the validation part equals
# training's last validation loss over all its windows
run plain4 "${common[@]}" --seq-len 64 --data "$tmp/plain.txt" --split 8,1,1 --eval-batches 0 --save "$tmp/ck3"
"$CLEAVE" eval --checkpoint "$tmp/ck3" --data "$tmp/plain.txt" --split 8,1,1 --split-part test > "$tmp/ev.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "test part: 4000 tokens, 61 windows" "$tmp/ev.out"' "eval test part: rc $_rc $(cat "$tmp/ev.out")"
"$CLEAVE" eval --checkpoint "$tmp/ck3" --data "$tmp/plain.txt" --split 8,1,1 --split-part validation > "$tmp/ev2.out" 2>&1
v_eval=$(sed -n 's/^eval loss: //p' "$tmp/ev2.out"); v_train=$(sed -n 's/.*"val_loss": \([0-9.e+-]*\).*/\1/p' "$tmp/plain4.jsonl" | tail -1)
check 'awk -v a="$v_eval" -v b="$v_train" "BEGIN { d = a - b; exit !(b > 0 && d < 1e-5 && d > -1e-5) }"' "eval's validation part $v_eval, training's $v_train"

# bad inputs: one line, exit 2, before step 1
bad() { # bad WHAT MESSAGE ARGS...: exits 2 with MESSAGE, one line, no step run
    local what=$1 msg=$2; shift 2
    "$CLEAVE" train "${common[@]}" "$@" > "$tmp/bad.out" 2> "$tmp/bad.err"
    _rc=$?; check '[ $_rc -eq 2 ] && grep -qF -- "$msg" "$tmp/bad.err" && [ $(wc -l < "$tmp/bad.err") -eq 1 ] && ! grep -q "^step" "$tmp/bad.out"' \
        "$what: rc $_rc, want 2 and '$msg': $(cat "$tmp/bad.err")"
}
bad "weight not a number" "the blend weight 'x' is not a number" --data "0.7 $tmp/web.jsonl x $tmp/books.txt"
bad "negative weight" "the blend weight -0.3 is negative" --data "0.7 $tmp/web.jsonl -0.3 $tmp/books.txt"
bad "weights sum to zero" "the blend weights sum to zero" --data "0 $tmp/web.jsonl 0 $tmp/books.txt"
bad "weight without path" "the weight 0.3 has no path after it" --data "0.7 $tmp/web.jsonl 0.3"
bad "missing blend file" "$tmp/none.txt: no such file" --data "0.7 $tmp/web.jsonl 0.3 $tmp/none.txt"
bad "not a string" "bad1.jsonl line 2: the field \"body\" is not a string" --data "$tmp/bad1.jsonl"
bad "key missing" "bad2.jsonl line 3: no field \"body\"" --data "$tmp/bad2.jsonl"
bad "not JSON" "bad3.jsonl line 2: not JSON" --data "$tmp/bad3.jsonl"
bad "split not a number" "--split 9,x: 'x' is not a number" --data "$tmp/plain.txt" --split 9,x
bad "split sums to zero" "--split 0,0,0: the parts sum to zero" --data "$tmp/plain.txt" --split 0,0,0
bad "no validation part" "validation 0" --data "$tmp/plain.txt" --split 1,0,0
"$CLEAVE" eval --checkpoint "$tmp/ck3" --data "$tmp/plain.txt" --split-part tests > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "split-part tests: not train, validation or test" "$tmp/e"' "eval --split-part tests: rc $_rc $(cat "$tmp/e")"
"$CLEAVE" eval --checkpoint "$tmp/ck3" --data "$tmp/plain.txt" --split-part test > /dev/null 2> "$tmp/e"
_rc=$?; check '[ $_rc -eq 2 ] && grep -q "test 0" "$tmp/e"' "eval of an empty test part: rc $_rc $(cat "$tmp/e")"

finish cli_blend
