#!/usr/bin/env bash
# Checkpoints that cannot be silently wrong (issue 27, part 1; docs/ARCHITECTURE.md, "Checkpoint
# integrity"). gpt2-tiny with 2 layers, saved sharded (--ranks 2 --dp 2 --zero 1) at steps 10 and 20 of
# one run and at step 20 of another run, and as a single file at step 10; then each way of mixing or
# damaging them, each refused by --resume, eval (and generate for the single file's model) and
# `cleave checkpoint verify` with exit 2, one line naming the file, the tensor or box and what differs,
# before any training step, every file of the checkpoint and of its sources byte-identical (sha256)
# afterwards:
# - one replica's shard from step 10 copied into step 20's directory (names the shard and the step);
# - a shard of the other run at the same step (names both run ids);
# - one bit flipped inside a tensor of a shard, of model.safetensors and of optimizer.safetensors
#   (names the file and the tensor; eval and generate read no moments, so the optimizer's flip is
#   refused by --resume and verify);
# - the index's byte counts, a box's byte range (moved; each file's size kept, so the hash refuses
#   them), config.json edited, a NaN written into a tensor, a shard removed;
# and the intact checkpoints verify (exit 0) and resume. A marker of version 1 (before hashes) is read
# with a one-line note, and verify says there is nothing to check it against.
set -u
source "$(dirname "$0")/lib.sh"
head -c 60000 data/kjv.txt > "$tmp/text.txt"
A=(--data "$tmp/text.txt" --layers 2 --vocab 300 --seq-len 16 --micro-batch-size 2 --global-batch-size 4 --steps 30
   --sample-tokens 0 --eval-batches 1 --log-every 100)
S=(--ranks 2 --dp 2 --zero 1 --save-format sharded)
run() { "$CLEAVE" "$@" > "$tmp/run.out" 2>&1 || { echo "FAILED: cleave $*: $(tail -2 "$tmp/run.out")"; fail=$((fail + 1)); }; }
run train "${A[@]}" "${S[@]}" --stop-after 10 --save "$tmp/s10"
run train "${A[@]}" "${S[@]}" --stop-after 20 --resume "$tmp/s10" --save "$tmp/s20"
run train "${A[@]}" "${S[@]}" --stop-after 20 --save "$tmp/o20" # another run (its own run id), the same step
run train "${A[@]}" --stop-after 10 --save "$tmp/f10"
rid() { sed -n 's/.*"run_id": "\([0-9a-f]*\)".*/\1/p' "$1/cleave-checkpoint.json"; }
check '[ "$(rid "$tmp/s10")" = "$(rid "$tmp/s20")" ] && [ "$(rid "$tmp/s20")" != "$(rid "$tmp/o20")" ]' \
    "run ids: s10 $(rid "$tmp/s10"), s20 $(rid "$tmp/s20"), o20 $(rid "$tmp/o20")"
sums() { (cd "$tmp" && sha256sum s10/* s20/* o20/* f10/*); }
sources=$(sums)

# refused NAME WANT DIR COMMAND...: exit 2, one line on stderr holding WANT, no step trained, DIR unchanged
refused() {
    local name=$1 want=$2 dir=$3 before after rc
    shift 3
    before=$(cd "$dir" && sha256sum ./*)
    timeout 120 "$CLEAVE" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    after=$(cd "$dir" && sha256sum ./*)
    check '[ $rc -eq 2 ] && [ "$(grep -c "" "$tmp/err")" -eq 1 ] && grep -q -- "$want" "$tmp/err" && ! grep -qE "^step +[0-9]+/" "$tmp/out" && [ "$before" = "$after" ]' \
        "$name ($1): exit $rc, want '$want'; stderr:$(excerpt 3 "$(cat "$tmp/err")")$([ "$before" = "$after" ] || echo "; the files changed")"
    echo "$name ($1): $(head -c 300 "$tmp/err")"
}
# every way of reading it: --resume, eval, checkpoint verify (and generate: gen=1)
all_refuse() { # NAME WANT DIR [gen]
    refused "$1" "$2" "$3" train "${A[@]}" "${S[@]}" --resume "$3"
    refused "$1" "$2" "$3" eval --checkpoint "$3" --text "$tmp/text.txt"
    refused "$1" "$2" "$3" checkpoint verify "$3"
    [ "${4:-0}" = 1 ] && refused "$1" "$2" "$3" generate --checkpoint "$3" --tokens 4
}
copy() { rm -rf "${tmp:?}/$2"; cp -r "$tmp/$1" "$tmp/$2"; }

# ---- intact: verify exit 0 ------------------------------------------------------------------------
for d in s10 s20 f10; do
    "$CLEAVE" checkpoint verify "$tmp/$d" > "$tmp/v.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && grep -q "intact" "$tmp/v.out"' "verify $d: exit $_rc: $(cat "$tmp/v.out")"
    echo "verify $d: $(cat "$tmp/v.out")"
done

# ---- mixed: a replica's shard from step 10 in step 20's directory ---------------------------------
copy s20 mix && cp "$tmp/s10/rank-00001.safetensors" "$tmp/mix/"
all_refuse "step 10's shard in step 20" "rank-00001.safetensors: written at step 10 .*of step 20" "$tmp/mix"
# ---- a shard of another run at the same step ----------------------------------------------------
copy s20 other && cp "$tmp/o20/rank-00001.safetensors" "$tmp/other/"
all_refuse "another run's shard" "rank-00001.safetensors: written at step 20 of run $(rid "$tmp/o20"), .*run $(rid "$tmp/s20"): a file from another run" "$tmp/other"
# ---- a shard pruned ------------------------------------------------------------------------------
copy s20 pruned && rm "$tmp/pruned/rank-00001.safetensors"
all_refuse "a shard removed" "rank-00001.safetensors" "$tmp/pruned"

# ---- one bit flipped inside a tensor --------------------------------------------------------------
copy s20 flip && name=$(python3 tests/ckpt_damage.py "$tmp/flip" flip rank-00000.safetensors '#0' 5)
all_refuse "a bit of shard $name" "rank-00000.safetensors: tensor '${name%%\[*}' param box .*content hash" "$tmp/flip"
copy f10 fmodel && python3 tests/ckpt_damage.py "$tmp/fmodel" flip model.safetensors h.1.attn.c_attn.weight 77 > /dev/null
all_refuse "a bit of model.safetensors" "model.safetensors: tensor 'h.1.attn.c_attn.weight': content hash" "$tmp/fmodel" 1
copy f10 fopt && python3 tests/ckpt_damage.py "$tmp/fopt" flip optimizer.safetensors exp_avg_sq.wpe.weight 3 > /dev/null
refused "a bit of optimizer.safetensors" "optimizer.safetensors: tensor 'exp_avg_sq.wpe.weight': content hash" "$tmp/fopt" \
    train "${A[@]}" --resume "$tmp/fopt"
refused "a bit of optimizer.safetensors" "optimizer.safetensors: tensor 'exp_avg_sq.wpe.weight': content hash" "$tmp/fopt" \
    checkpoint verify "$tmp/fopt"
# the same damages the checks behind the hashes refuse (tests/cli_bad_input.sh), here refused by the hash
copy f10 fnan && python3 tests/ckpt_damage.py "$tmp/fnan" value model.safetensors wte.weight 7 nan
refused "a NaN written into model.safetensors" "model.safetensors" "$tmp/fnan" eval --checkpoint "$tmp/fnan" --text "$tmp/text.txt"
# the edits keep each file's size (a digit for a digit), so the content hash is what refuses them
copy f10 fcfg && sed -i 's/"n_layer": 2,/"n_layer": 3,/' "$tmp/fcfg/config.json"
refused "config.json edited" "config.json: content hash" "$tmp/fcfg" eval --checkpoint "$tmp/fcfg" --text "$tmp/text.txt"

# ---- the index edited: its byte counts, a box's byte range ---------------------------------------
edit() { # NAME REGEX: a copy of s20 whose index has the last digit of each group of REGEX's first match changed
    copy s20 "$1"
    python3 - "$tmp/$1/cleave-index.json" "$2" << 'EOF'
import re, sys
p, rx = sys.argv[1], sys.argv[2]
t = open(p).read()
m = re.search(rx, t)
out = list(t)
for g in range(1, m.lastindex + 1):
    i = m.end(g) - 1
    out[i] = str((int(t[i]) + 4) % 10)
open(p, "w").write("".join(out))
EOF
}
edit ibytes '"bytes": ([0-9]+)'
all_refuse "the index's byte count" "cleave-index.json: content hash" "$tmp/ibytes"
edit irange '"param": \[\[[0-9]+, [0-9]+, [0-9]+, [0-9]+, [0-9]+, ([0-9]+), ([0-9]+),'
all_refuse "a box's byte range moved" "cleave-index.json: content hash" "$tmp/irange"
check 'cmp -s "$tmp/s20/cleave-index.json" "$tmp/irange/cleave-index.json"; [ $? -eq 1 ] && [ $(wc -c < "$tmp/irange/cleave-index.json") -eq $(wc -c < "$tmp/s20/cleave-index.json") ]' \
    "the box edit did not change the index, or changed its size"

# ---- the sources untouched; the intact ones still resume ----------------------------------------
check '[ "$(sums)" = "$sources" ]' "a refused command changed a source checkpoint"
"$CLEAVE" train "${A[@]}" "${S[@]}" --resume "$tmp/s20" > "$tmp/ok.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "^step .*30/30" "$tmp/ok.out"' "resume of the intact s20: exit $_rc: $(tail -2 "$tmp/ok.out")"

# ---- a checkpoint from before hashes (marker version 1): read with a note, nothing to verify ----------
copy f10 old && printf '{\n  "format": "cleave checkpoint",\n  "version": 1\n}\n' > "$tmp/old/cleave-checkpoint.json"
"$CLEAVE" eval --checkpoint "$tmp/old" --text "$tmp/text.txt" > "$tmp/old.out" 2> "$tmp/old.err"
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(grep -c "" "$tmp/old.err")" -eq 1 ] && grep -q "before cleave recorded content hashes" "$tmp/old.err"' \
    "a version 1 checkpoint: exit $_rc, stderr $(cat "$tmp/old.err")"
refused "a version 1 checkpoint" "nothing to verify it against" "$tmp/old" checkpoint verify "$tmp/old"
finish cli_ckpt_integrity
