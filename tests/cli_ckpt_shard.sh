#!/usr/bin/env bash
# Sharded checkpoints (issue 16, zero 0 to 3): gpt2-tiny with 6 layers and a
# vocabulary of 300 (not a multiple of 16; padded to 384 or 512 by tp), saved
# sharded at layout A after 10 of 20 steps, then for each pair A -> B:
# - load at B and gather into today's single file: model.safetensors and
#   optimizer.safetensors (both moments) byte-identical to the single file
#   the run at A writes at the same step (gathered by the old path), but for
#   the run id in the metadata (the two are different runs);
# - load at B, save sharded again, load that at (1,1,1,0) and gather:
#   byte-identical too;
# - resume at B for the last 10 steps: the losses equal the uninterrupted
#   run at A's (bitwise where the arithmetic order is the same: the layouts
#   differ only in zero or the backend; else within 1e-6 relative, the
#   tensor-parallel tests' tolerance: tp, pp and dp change the order of sums);
#   the ZeRO 3 pairs (tp,pp,dp,zero) (1,1,1,0) -> (2,2,2,3), (2,2,2,3) ->
#   (4,1,2,1), (1,1,4,3) -> (1,1,2,2) and (2,2,2,3) -> (2,2,2,2) (bitwise:
#   stage 3 computes with stage 2's bits) among them;
# - the bytes each rank reads (pread, counted): a tp 4 x dp 2 rank under
#   zero 1 under 20% of the checkpoint (its share is 1/6 plus the replicated
#   tensors); one rank loading all of it reads each stored byte exactly once
#   plus each file's 8-byte header length; a dp 4 rank under zero 3 reads
#   its shard, a quarter of it (plus what the shard cut shares);
# - damaged checkpoints: index not JSON, a version from the future, a shard
#   missing, a box out of range, overlapping boxes, a hole, a truncated
#   shard, a shape that disagrees: one line, exit 2;
# - faults in a save (CLEAVE_SAVE_FAULT: a rank fails, or the process is
#   killed with SIGKILL, mid-shard, after a shard, before and after the
#   index, after the rename), and kill -9 from outside: the last complete
#   checkpoint loads and continues bitwise (zero 1 and zero 3); the next
#   save removes the temporary directory a killed one left (its PID dead);
# - the MLP at tp 2 and the CNN (4-d weights) under ZeRO 1 to one rank;
# - the moments offloaded to disk saved and loaded; eval and generate read a
#   sharded checkpoint as they read the single file;
# - converted to the single file, PyTorch (scripts/hf_eval.py) evaluates it
#   to cleave eval's loss on the sharded checkpoint (within 2e-6).
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --layers 6 --vocab 300 --seq-len 32 --micro-batch-size 2 --global-batch-size 16 --steps 20
        --sample-tokens 0 --eval-batches 2)
L1=(--tp 1 --pp 1 --dp 1 --zero 0)
L2=(--tp 2 --pp 2 --dp 2 --zero 1)
L3=(--tp 4 --pp 1 --dp 2 --zero 1)
L4=(--tp 1 --pp 4 --dp 1 --zero 0 --schedule interleaved --virtual-stages 2)
L5=(--tp 1 --pp 1 --dp 4 --zero 1)
L6=(--tp 1 --pp 1 --dp 2 --zero 0)
L7=(--tp 2 --pp 1 --dp 1 --zero 0 --sequence-parallel)
L8=(--tp 2 --pp 1 --dp 1 --zero 0)
# ZeRO 3: every replica holds (and writes) only its shard of the parameters, cut along 16-float blocks
Z1=(--tp 2 --pp 2 --dp 2 --zero 3)
Z2=(--tp 1 --pp 1 --dp 4 --zero 3)
Z3=(--tp 1 --pp 1 --dp 2 --zero 2)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
run() { # name args...: cleave with the common flags, output in $tmp/name.out
    local name=$1; shift
    timeout 300 "$CLEAVE" "$@" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name ($*) failed: $(tail -3 "$tmp/$name.out")"
}
same_ckpt() { # dir dir what
    local ok=1
    for f in model.safetensors optimizer.safetensors; do st_same "$1/$f" "$2/$f" || ok=0; done
    check '[ $ok -eq 1 ]' "$3: the gathered tensors or moments differ from the ones saved"
    [ $ok -eq 1 ] && echo "$3: parameters and both moments bitwise equal"
}
close() { # file file_ref tol [n]: the last n (10) losses of ref against file's n
    local n=${4:-10}
    paste <(losses "$1") <(losses "$2" | tail -$n) | awk -v tol="$3" -v want=$n '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r; if (d == 0) same++ }
        END { printf "%d steps, max rel diff %.3g%s\n", n, worst, same == n ? " (bitwise equal)" : "";
              exit !(n == want && worst <= tol) }'
}
# layout A: the uninterrupted run, the sharded save at step 10 and the single file at step 10 (the old gather)
layout() { # name args...
    local name=$1; shift
    [ -d "$tmp/$name.sh" ] && return
    run $name.full train "${common[@]}" "$@" --log-file "$tmp/$name.full.jsonl"
    run $name.sh train "${common[@]}" "$@" --stop-after 10 --save "$tmp/$name.sh" --save-format sharded
    run $name.one train "${common[@]}" "$@" --stop-after 10 --save "$tmp/$name.one"
}
pair() { # A B tol args of A -- args of B
    local a=$1 b=$2 tol=$3; shift 3
    local A=() B=()
    while [ "$1" != "--" ]; do A+=("$1"); shift; done
    shift
    B=("$@")
    layout $a "${A[@]}"
    local p=$a-$b
    run $p.one convert "${common[@]}" "${B[@]}" --from "$tmp/$a.sh" --to "$tmp/$p.one"
    same_ckpt "$tmp/$a.one" "$tmp/$p.one" "$a -> $b"
    run $p.sh convert "${common[@]}" "${B[@]}" --from "$tmp/$a.sh" --to "$tmp/$p.sh" --save-format sharded
    run $p.back convert "${common[@]}" "${L1[@]}" --from "$tmp/$p.sh" --to "$tmp/$p.back"
    same_ckpt "$tmp/$a.one" "$tmp/$p.back" "$a -> $b -> sharded -> (1,1,1,0)"
    run $p.resume train "${common[@]}" "${B[@]}" --resume "$tmp/$a.sh" --log-file "$tmp/$p.resume.jsonl"
    echo -n "$a -> $b, 10 more steps against $a uninterrupted: "
    check 'close "$tmp/$p.resume.jsonl" "$tmp/$a.full.jsonl" $tol' "$a -> $b: the resumed losses differ from the uninterrupted run's"
}
pair L1 L2 1e-6 "${L1[@]}" -- "${L2[@]}"
pair L2 L3 1e-6 "${L2[@]}" -- "${L3[@]}"
pair L3 L4 1e-6 "${L3[@]}" -- "${L4[@]}"
pair L5 L6 1e-6 "${L5[@]}" -- "${L6[@]}"
pair L7 L8 1e-6 "${L7[@]}" -- "${L8[@]}"
pair L1 Z1 1e-6 "${L1[@]}" -- "${Z1[@]}"
pair Z1 L3 1e-6 "${Z1[@]}" -- "${L3[@]}"
pair Z2 Z3 1e-6 "${Z2[@]}" -- "${Z3[@]}"
# same arithmetic (only --zero differs: AdamW is elementwise, tests/cli_zero.sh): bitwise. A change of
# pp is not: uninterrupted runs at dp 2 and dp 2 x pp 2 already differ in the last bits of step 1's
# gradient norm (with or without clipping), so pairs that change pp, tp or dp hold to 1e-6 only
pair L6 L6z 0 "${L6[@]}" -- --tp 1 --pp 1 --dp 2 --zero 1
pair L2 L2z 0 "${L2[@]}" -- --tp 2 --pp 2 --dp 2 --zero 0
# stage 3 computes with stage 2's bits (a gather is a copy; tests/cli_zero3.sh), also under accumulation
pair Z1 Z1z 0 "${Z1[@]}" -- --tp 2 --pp 2 --dp 2 --zero 2

if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout 300 mpirun --oversubscribe -np 4 "$CLEAVE" train "${common[@]}" --tp 2 --dp 2 --zero 1 --comm mpi --stop-after 10 \
        --save "$tmp/mpi.sh" --save-format sharded > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "the MPI sharded save failed: $(tail -5 "$tmp/mpi.out")"
    layout T4z1 --tp 2 --dp 2 --zero 1
    run mpi.one convert "${common[@]}" --tp 2 --dp 2 --zero 1 --from "$tmp/mpi.sh" --to "$tmp/mpi.one"
    same_ckpt "$tmp/T4z1.one" "$tmp/mpi.one" "MPI (2,1,2,1) -> threads (2,1,2,1)"
    run mpi.resume train "${common[@]}" --tp 2 --dp 2 --zero 1 --resume "$tmp/mpi.sh" --log-file "$tmp/mpi.resume.jsonl"
    echo -n "MPI -> threads, 10 more steps: "
    check 'close "$tmp/mpi.resume.jsonl" "$tmp/T4z1.full.jsonl" 0' "MPI -> threads: the resumed losses differ"
else
    skip "MPI -> threads (this build has no MPI)" setup
fi

# the MLP (split by columns then rows) and the CNN (4-d convolution weights, not split) under ZeRO
for m in "mlp --tp 2" "cnn"; do
    set -- $m
    mc=(--model $1 --steps 6 --sample-tokens 0 --eval-batches 2 --global-batch-size 16 --micro-batch-size 4)
    run $1.one train "${mc[@]}" --stop-after 3 "${@:2}" --dp 2 --save "$tmp/$1.one"
    run $1.sh train "${mc[@]}" --stop-after 3 "${@:2}" --dp 2 --zero 1 --save "$tmp/$1.sh" --save-format sharded
    run $1.back convert "${mc[@]}" --dp 1 --from "$tmp/$1.sh" --to "$tmp/$1.back"
    same_ckpt "$tmp/$1.one" "$tmp/$1.back" "$m, dp 2, zero 1 -> one rank"
done
# the moments in a file (--offload-optimizer disk): saved from it and loaded into it
run off.sh train "${common[@]}" "${L5[@]}" --offload-optimizer disk --offload-dir "$tmp" --stop-after 10 --save "$tmp/off.sh" \
    --save-format sharded
run off.one convert "${common[@]}" "${L1[@]}" --from "$tmp/off.sh" --to "$tmp/off.one"
same_ckpt "$tmp/L5.one" "$tmp/off.one" "offloaded to disk (1,1,4,1) -> (1,1,1,0)"
run off.back convert "${common[@]}" "${L6[@]}" --offload-optimizer disk --offload-dir "$tmp" --from "$tmp/L5.sh" --to "$tmp/off.back"
same_ckpt "$tmp/L5.one" "$tmp/off.back" "(1,1,4,1) -> offloaded to disk (1,1,2,0)"
# eval and generate read a sharded checkpoint as they read the single file
e1=$("$CLEAVE" eval --checkpoint "$tmp/L2.sh" --text "$tmp/text.txt" 2>&1 | tail -1)
e2=$("$CLEAVE" eval --checkpoint "$tmp/L2.one" --text "$tmp/text.txt" 2>&1 | tail -1)
echo "eval of the sharded checkpoint: $e1; of the single file: $e2"
check '[ "$e1" = "$e2" ] && echo "$e1" | grep -q "^eval loss: [0-9]"' "eval differs: '$e1' vs '$e2'"
g1=$("$CLEAVE" generate --checkpoint "$tmp/L2.sh" --prompt "And" --tokens 20 --seed 3 2>&1)
g2=$("$CLEAVE" generate --checkpoint "$tmp/L2.one" --prompt "And" --tokens 20 --seed 3 2>&1)
check '[ "$g1" = "$g2" ]' "generate differs between the two formats"

# ---- faults during a save: the last complete checkpoint loads and continues bitwise --------
# (tp 2 x dp 2, zero 1 and zero 3, a save every 5 steps; the fault in the second save, at step 10)
faults() { # zero points...
    local z=$1; shift
    layout T4z$z --tp 2 --dp 2 --zero $z
    for point in "$@"; do for mode in fail kill; do
        name=z$z-${point%:*}-$mode
        rm -rf "$tmp/fault" "$tmp"/fault.tmp.*
        ( CLEAVE_SAVE_FAULT=rank:${point#*:}:${point%:*}:$mode:2 timeout 300 "$CLEAVE" train "${common[@]}" --tp 2 --dp 2 --zero $z \
            --save "$tmp/fault" --save-format sharded --save-every 5 > "$tmp/$name.out" 2>&1; exit $? ) 2> /dev/null
        rc=$?
        at=5
        [ "${point%:*}" = after-rename ] && at=10
        got=$(sed -n 's/^ *"step": \([0-9]*\),$/\1/p' "$tmp/fault/cleave-index.json" 2> /dev/null)
        check '[ $rc -ne 0 ] && [ "$got" = $at ]' "fault $name: exit $rc, the checkpoint left is at step '$got', not $at"
        [ $mode = fail ] && check '! ls -d "$tmp"/fault.tmp.* > /dev/null 2>&1' "fault $name left a temporary directory"
        timeout 300 "$CLEAVE" train "${common[@]}" --tp 2 --dp 2 --zero $z --resume "$tmp/fault" \
            --log-file "$tmp/$name.jsonl" > "$tmp/$name.resume.out" 2>&1
        _rc=$?; check '[ $_rc -eq 0 ]' "fault $name: the resume failed: $(tail -3 "$tmp/$name.resume.out")"
        echo -n "fault $name (exit $rc): resumed at step $got: "
        check 'close "$tmp/$name.jsonl" "$tmp/T4z$z.full.jsonl" 0 $((20 - at))' "fault $name: the resumed run differs"
    done; done
}
faults 1 mid-shard:2 after-shard:1 before-index:0 after-index:0 after-rename:0
faults 3 mid-shard:3 after-shard:2 after-index:0
# kill -9 from outside, wherever it lands (a save every step): what is there loads and trains on
rm -rf "$tmp/k9"
"$CLEAVE" train "${common[@]}" --tp 2 --dp 2 --steps 400 --save "$tmp/k9" --save-format sharded --save-every 1 \
    > "$tmp/k9.out" 2>&1 &
pid=$! # cleave itself (a timeout in between would survive its child)
for i in $(seq 50); do [ -e "$tmp/k9/cleave-index.json" ] && break; sleep 0.1; done
sleep 0.7
kill -9 $pid
{ wait $pid; } 2> /dev/null
got=$(sed -n 's/^ *"step": \([0-9]*\),$/\1/p' "$tmp/k9/cleave-index.json" 2> /dev/null)
timeout 300 "$CLEAVE" train "${common[@]}" --tp 2 --dp 2 --steps 400 --stop-after $((got + 1)) --resume "$tmp/k9" \
    > "$tmp/k9.resume.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ -n "$got" ]' "after kill -9 the checkpoint (step '$got') does not resume: $(tail -3 "$tmp/k9.resume.out")"
echo "kill -9 during sharded saves: the checkpoint left (step $got) resumes"
# what killed saves leave (DIR.tmp.PID.N) the next save removes when that PID is dead: only the files
# cleave writes, never a live PID's, a stranger's file, or through a symbolic link
dead=$(sh -c 'echo $$')
rm -rf "$tmp"/k9.tmp.*
mkdir "$tmp/k9.tmp.$dead.0" "$tmp/k9.tmp.$dead.1" "$tmp/k9.tmp.$$.2"
touch "$tmp/k9.tmp.$dead.0/rank-00000.safetensors" "$tmp/k9.tmp.$dead.1/notes.txt" "$tmp/k9.tmp.$$.2/rank-00000.safetensors"
ln -s "$tmp/L1.sh" "$tmp/k9.tmp.$dead.3"
run k9.again train "${common[@]}" "${Z2[@]}" --steps 2 --save "$tmp/k9" --save-format sharded
left=$(cd "$tmp" && ls -d k9.tmp.* | sort | tr '\n' ' ')
keep=$(printf '%s\n' "k9.tmp.$dead.1" "k9.tmp.$dead.3" "k9.tmp.$$.2" | sort | tr '\n' ' ')
echo "a save beside stale temporaries: left $left"
check '[ "$left" = "$keep" ] && [ -e "$tmp/L1.sh/rank-00000.safetensors" ]' \
    "stale temporaries: left '$left'"

# ---- bytes read: a tp 4 rank reads its boxes, not the model -------------------
# Each rank prints what it read in all (N), of that the shards' headers (H: their run id and step, checked
# against the index) and the blocks it read only to hash them (V: no rank read them whole for the load), and
# the bytes it hashed (X). The load's own reads are N - H - V; every stored byte is hashed by exactly one
# rank, so the X add up to the shards' data bytes.
reads() { # file: one line per rank, "load header verify hashed"
    sed -nE 's/.*read ([0-9]+) bytes \(([0-9]+) of headers, ([0-9]+) only to verify; ([0-9]+) hashed\).*/\1 \2 \3 \4/p' "$1" |
        awk '{ print $1 - $2 - $3, $2, $3, $4 }'
}
databytes() { # shards...: their data bytes (after the 8-byte length and the header)
    python3 -c '
import struct, sys
n = 0
for p in sys.argv[1:]:
    b = open(p, "rb").read()
    n += len(b) - 8 - struct.unpack("<Q", b[:8])[0]
print(n)' "$@"
}
CLEAVE_SHARD_READ_BYTES=1 timeout 300 "$CLEAVE" convert "${common[@]}" "${L3[@]}" --from "$tmp/L2.sh" --to "$tmp/bytes.one" \
    > "$tmp/bytes.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the tp 4 load failed: $(tail -3 "$tmp/bytes.out")"
total=$(cat "$tmp"/L2.sh/rank-*.safetensors | wc -c)
data=$(databytes "$tmp"/L2.sh/rank-*.safetensors)
read -r nr max hashed extra <<< "$(reads "$tmp/bytes.out" | awk '{ n++; if ($1 > m) m = $1; x += $4; v += $3 } END { print n, m + 0, x + 0, v + 0 }')"
# a tp 4 x dp 2 rank under zero 1 holds a quarter of each split parameter and half of that of its moments
# (1/6 of the checkpoint), plus the replicated tensors (layernorms, wpe, biases: about 2% here); the
# stored boxes are tp 2's column halves, which no tp 4 rank reads whole: those are read once more, shared
# out, to hash them
echo "tp 4 load of a $total-byte checkpoint: $nr ranks, the most read by one for the load $max bytes; $hashed hashed ($extra read only for that) of $data"
check '[ "$nr" -eq 8 ] && [ "$max" -gt 0 ] && [ "$max" -lt $((total * 20 / 100)) ] && [ "$hashed" -eq "$data" ] && [ "$extra" -le "$data" ]' \
    "a tp 4 rank read $max of $total bytes; $hashed hashed of $data"
# one rank holding everything reads every stored byte once, plus each file's 8-byte header length, and hashes
# it all from memory
CLEAVE_SHARD_READ_BYTES=1 timeout 300 "$CLEAVE" convert "${common[@]}" "${L1[@]}" --from "$tmp/L2.sh" --to "$tmp/bytes1.one" \
    > "$tmp/bytes1.out" 2>&1
want=$(( $(databytes "$tmp"/L2.sh/rank-*.safetensors) + 8 * $(ls "$tmp"/L2.sh/rank-*.safetensors | wc -l) ))
read -r got head extra hashed <<< "$(reads "$tmp/bytes1.out")"
echo "one rank loading it all: read $got bytes for the load (+ $head of headers, $extra only to verify; $hashed hashed), the data and the 8-byte lengths are $want"
check '[ "$got" = "$want" ] && [ "$extra" = 0 ] && [ "$hashed" -eq "$data" ]' "one rank read $got bytes, not the $want stored; $extra to verify, $hashed hashed"
# ZeRO 3 at dp 4: each rank reads its shard of the parameters and moments only; at tp 1 and pp 1 every
# stored element is in exactly one rank's shard, so the ranks together read each stored byte once (plus
# their 8-byte header lengths), each about a quarter; the blocks a shard cut splits are read once more, by
# one rank, to hash them
CLEAVE_SHARD_READ_BYTES=1 timeout 300 "$CLEAVE" convert "${common[@]}" "${Z2[@]}" --from "$tmp/L1.sh" --to "$tmp/bytes3.one" \
    > "$tmp/bytes3.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the zero 3 load failed: $(tail -3 "$tmp/bytes3.out")"
want=$(databytes "$tmp"/L1.sh/rank-*.safetensors)
read -r nr sum max hashed extra <<< "$(reads "$tmp/bytes3.out" | awk '{ n++; s += $1; if ($1 > m) m = $1; x += $4; v += $3 } END { print n, s, m, x, v }')"
echo "zero 3 dp 4 load of $want data bytes: $nr ranks read $sum in all for the load, the most $max; $hashed hashed, $extra read only for that"
check '[ "$nr" -eq 4 ] && [ "$sum" -eq $((want + 4 * 8)) ] && [ "$max" -lt $((want * 26 / 100)) ] && [ "$hashed" -eq "$want" ] && [ "$extra" -lt $((want * 30 / 100)) ]' \
    "zero 3 ranks read $sum bytes in all (the most $max), not the $want stored once; $hashed hashed, $extra extra"

# the converted single file is a Hugging Face GPT-2 checkpoint: PyTorch (scripts/hf_eval.py, stock torch.nn)
# evaluates it to the loss cleave's eval gives on the sharded one
if have_torch "the PyTorch evaluation"; then
    h=$($PY scripts/hf_eval.py "$tmp/bytes1.one" "$tmp/text.txt" 2>&1 | tail -1)
    c=$("$CLEAVE" eval --checkpoint "$tmp/L2.sh" --text "$tmp/text.txt" 2>&1 | tail -1)
    echo "PyTorch on the converted file: $h; cleave eval on the sharded checkpoint: $c"
    check 'awk -v a="${h#eval loss: }" -v b="${c#eval loss: }" "BEGIN { d = a - b; exit !(a > 0 && d < 2e-6 && d > -2e-6) }"' \
        "PyTorch's loss '$h' differs from cleave's '$c'"
fi

# ---- damaged checkpoints: one line, exit 2 ------------------------------------
# the index's own checks, behind the content hashes (which refuse each of these first: tests/cli_ckpt_integrity.sh)
export CLEAVE_CKPT_VERIFY=0
refused() { # name dir: --resume of dir exits 2 with one line on stderr
    local name=$1 dir=$2
    timeout 60 "$CLEAVE" train "${common[@]}" "${L8[@]}" --resume "$dir" > "$tmp/bad.out" 2> "$tmp/bad.err"
    local rc=$?
    check '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/bad.err") -eq 1 ] && ! grep -q "^step" "$tmp/bad.out"' \
        "$name: exit $rc, stderr:$(excerpt 4 "$(cat "$tmp/bad.err")")"
    echo "$name: $(cat "$tmp/bad.err")"
}
edit() { # name python-statements on d (the index) [checkpoint]: a copy of it (L2.sh) with the index edited
    rm -rf "$tmp/$1"
    cp -r "$tmp/${3:-L2}.sh" "$tmp/$1"
    python3 - "$tmp/$1/cleave-index.json" "$2" <<'EOF'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
exec(sys.argv[2])
json.dump(d, open(p, "w"))
EOF
}
cp -r "$tmp/L2.sh" "$tmp/notjson" && echo '{"format": ' > "$tmp/notjson/cleave-index.json"
refused "index not JSON" "$tmp/notjson"
edit future 'd["version"] = 3'
refused "version from the future" "$tmp/future"
cp -r "$tmp/L2.sh" "$tmp/missing" && rm "$tmp/missing/rank-00003.safetensors"
refused "missing shard" "$tmp/missing"
edit outside 'd["tensors"][0]["param"][0][3] += 1000'
refused "box out of range" "$tmp/outside"
edit overlap 'b = d["tensors"][1]["exp_avg"]; b.append(list(b[0]))'
refused "overlapping boxes" "$tmp/overlap"
edit hole 'd["tensors"][2]["param"].pop()'
refused "a hole" "$tmp/hole"
edit shape 'd["tensors"][0]["shape"] = [301, 64]'
refused "shape disagrees" "$tmp/shape"
edit badname 'd["files"][0]["name"] = "../../etc/passwd"'
refused "file name outside the checkpoint" "$tmp/badname"
edit bytes 'd["tensors"][3]["param"][0][6] += 4'
refused "byte range of the wrong size" "$tmp/bytes"
cp -r "$tmp/L2.sh" "$tmp/short" && truncate -s 1000 "$tmp/short/rank-00000.safetensors"
refused "truncated shard" "$tmp/short"
# ZeRO 3's boxes (a replica's shard cuts a matrix mid-row: a partial row is a box of one row): the first
# partial-row parameter box moved one column on (the same area, so an overlap and a hole), or dropped
z3part='t, j = next((t, j) for t in d["tensors"] for j, b in enumerate(t["param"]) if b[3] == 1 and b[4] < t["matrix"][1] and t["matrix"][0] > 1)'
edit z3overlap "$z3part"'; t["param"][j][2] += 1' Z1
refused "zero 3: a partial row moved onto its neighbour" "$tmp/z3overlap"
edit z3hole "$z3part"'; t["param"].pop(j)' Z1
refused "zero 3: a partial row missing" "$tmp/z3hole"
unset CLEAVE_CKPT_VERIFY
finish cli_ckpt_shard
