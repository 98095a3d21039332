#!/usr/bin/env bash
# The keep policy of kept checkpoints (--save DIR holding step-NNNNNNNN
# directories and latest), in both formats (sharded: 2 ranks, --dp 2 --zero 1):
# - issue 27's case: DIR holds steps 10 and 20; a run resumed from step 10
#   with --save-keep 1 is refused before step 1 (exit 2, one line naming
#   step-00000020), every file in DIR byte-identical after; a fresh run into
#   DIR too (the resume point is 0);
# - with --discard-newer-checkpoints it runs: step 20 is deleted after its
#   first save (sharded: a first save failed by CLEAVE_SAVE_FAULT leaves
#   every file as it was), --save-keep 1 leaves step-00000012 alone;
# - another lineage's older steps, and one whose run id cannot be read, are
#   never pruned; keep 1 and keep 2 over several saves prune only this
#   lineage's older steps (the note names the others);
# - --resume DIR --save DIR without --save-keep adds steps and moves latest,
#   pruning none; from an older step it is refused like the above;
# - --discard-newer-checkpoints where a newer step is not a cleave
#   checkpoint, or without a kept directory: one line, exit 2.
set -u
source "$(dirname "$0")/lib.sh"
head -c 200000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --sample-tokens 0 --eval-batches 1
    --steps 30)
hashes() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
listing() { ls -A "$1" | tr '\n' ' '; }
# refused NAME DIR args...: exit 2, one line, DIR's files unchanged
refused() {
    local name=$1 d=$2; shift 2
    local before; before=$(hashes "$d")
    out=$("$CLEAVE" train "${common[@]}" "$@" 2>&1); rc=$?
    check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ]' "$name: status $rc$(excerpt 4 "$out")"
    check '[ "$(hashes "$d")" = "$before" ]' "$name: the files in $d changed"
}
# ran NAME args...: exit 0
ran() {
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" > "$tmp/run.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name: exit $_rc: $(tail -2 "$tmp/run.out")"
}

for fmt in single sharded; do
    fx=(--save-format "$fmt")
    [ $fmt = sharded ] && fx+=(--dp 2 --zero 1)
    # one lineage's steps 10 and 20 (latest: 20), and another's 2 and 4
    base=$tmp/$fmt-base other=$tmp/$fmt-other
    ran "$fmt: the first run" "${fx[@]}" --save "$base" --save-every 10 --save-keep 5 --stop-after 20
    ran "$fmt: another run" "${fx[@]}" --save "$other" --save-every 2 --save-keep 5 --stop-after 4
    check '[ "$(listing "$base")" = "latest step-00000010 step-00000020 " ] && [ "$(listing "$other")" = "latest step-00000002 step-00000004 " ]' \
        "$fmt: the runs left $(listing "$base") and $(listing "$other")"
    [ $fmt = sharded ] && check '[ -e "$base/step-00000020/rank-00001.safetensors" ]' "sharded: rank 1 wrote no shard"

    # issue 27: resumed at 10, step 20 beyond it
    d=$tmp/$fmt-a
    cp -a "$base" "$d"
    refused "$fmt: steps beyond the resume point" "$d" "${fx[@]}" --resume "$d/step-00000010" --save "$d" --save-every 2 \
        --save-keep 1 --stop-after 12
    check 'printf "%s" "$out" | grep -q "step-00000020" && ! printf "%s" "$out" | grep -q "step-00000010" && printf "%s" "$out" | grep -q -- "--discard-newer-checkpoints"' \
        "$fmt: the refusal does not name step 20 alone and the flag: $out"
    refused "$fmt: a fresh run into DIR" "$d" "${fx[@]}" --save "$d" --save-every 2 --save-keep 1 --stop-after 2
    check 'printf "%s" "$out" | grep -q "step-00000010, step-00000020"' "$fmt: the fresh run's refusal does not name both steps: $out"
    refused "$fmt: without --save-keep" "$d" "${fx[@]}" --resume "$d/step-00000010" --save "$d" --save-every 2 --stop-after 12

    # the flag: step 20 deleted once step 12 is saved, then keep 1 prunes step 10
    if [ $fmt = sharded ]; then
        before=$(hashes "$d")
        ( CLEAVE_SAVE_FAULT=rank:0:after-index:fail:1 "$CLEAVE" train "${common[@]}" "${fx[@]}" --resume "$d/step-00000010" \
            --save "$d" --save-every 2 --save-keep 1 --stop-after 12 --discard-newer-checkpoints > "$tmp/fault.out" 2>&1 )
        _rc=$?
        check '[ $_rc -ne 0 ] && [ "$(hashes "$d")" = "$before" ]' \
            "sharded: a failed first save with the flag: exit $_rc, DIR $(listing "$d")"
    fi
    ran "$fmt: --discard-newer-checkpoints" "${fx[@]}" --resume "$d/step-00000010" --save "$d" --save-every 2 --save-keep 1 \
        --stop-after 12 --discard-newer-checkpoints
    check '[ "$(listing "$d")" = "latest step-00000012 " ] && [ "$(cat "$d/latest")" = step-00000012 ]' \
        "$fmt: with the flag DIR holds $(listing "$d")"

    # another lineage's older steps: keep 1 over three saves prunes only this run's
    d=$tmp/$fmt-c
    cp -a "$other" "$d"
    old=$(hashes "$d" | grep step-)
    ran "$fmt: keep 1 beside another lineage" "${fx[@]}" --resume "$base/step-00000010" --save "$d" --save-every 2 \
        --save-keep 1 --stop-after 16
    check '[ "$(listing "$d")" = "latest step-00000002 step-00000004 step-00000016 " ] && [ "$(hashes "$d" | grep -v step-00000016 | grep step-)" = "$old" ]' \
        "$fmt: keep 1 left $(listing "$d")"
    check 'grep -q "note: .*step-00000002, step-00000004" "$tmp/run.out"' "$fmt: no note names the other lineage's steps"

    # keep 2 over three saves: this lineage's 10 (its run id made unreadable), 20, 22 and 24 are older
    # than 26; 10 and the other lineage's 2 and 4 stay, 20 and 22 go
    d=$tmp/$fmt-k
    cp -a "$base" "$d"
    cp -a "$other/step-00000002" "$other/step-00000004" "$d/"
    sed -i 's/"run_id": *"[0-9a-f]*", *//' "$d/step-00000010/"{trainer_state.json,cleave-index.json} 2> /dev/null
    ! cat "$d/step-00000010/"{trainer_state.json,cleave-index.json} 2> /dev/null | grep -q '"run_id"'
    _rc=$?; check '[ $_rc -eq 0 ]' "$fmt: step 10's state still records its run id"
    old=$(hashes "$d" | grep -v step-00000020 | grep step-)
    ran "$fmt: keep 2" "${fx[@]}" --resume "$d" --save "$d" --save-every 2 --save-keep 2 --stop-after 26
    check '[ "$(listing "$d")" = "latest step-00000002 step-00000004 step-00000010 step-00000024 step-00000026 " ] && [ "$(cat "$d/latest")" = step-00000026 ]' \
        "$fmt: keep 2 left $(listing "$d")"
    check '[ "$(hashes "$d" | grep -v "step-0000002[46]" | grep step-)" = "$old" ]' "$fmt: keep 2 changed steps it left"

    # --resume DIR --save DIR without --save-keep: adds steps, moves latest, prunes none
    d=$tmp/$fmt-r
    cp -a "$base" "$d"
    old=$(hashes "$d" | grep step-)
    ran "$fmt: --resume DIR --save DIR" "${fx[@]}" --resume "$d" --save "$d" --save-every 2 --stop-after 24
    check '[ "$(listing "$d")" = "latest step-00000010 step-00000020 step-00000022 step-00000024 " ] && [ "$(cat "$d/latest")" = step-00000024 ]' \
        "$fmt: --save DIR without --save-keep left $(listing "$d")"
    check '[ "$(hashes "$d" | grep -v "step-0000002[24]" | grep step-)" = "$old" ]' "$fmt: the earlier steps changed"
    check 'grep -q "note: .*prun" "$tmp/run.out"' "$fmt: no note says the kept directory is added to"
    refused "$fmt: --save DIR from an older step" "$d" "${fx[@]}" --resume "$d/step-00000020" --save "$d" --save-every 2 --stop-after 22
    check 'printf "%s" "$out" | grep -q "step-00000022, step-00000024"' "$fmt: the refusal does not name 22 and 24: $out"
done

# the flag deletes only cleave checkpoints, and only in a kept directory
d=$tmp/single-r
mkdir "$d/step-00000030" && echo mine > "$d/step-00000030/notes.txt"
refused "a user's newer step directory" "$d" --resume "$d" --save "$d" --save-every 2 --stop-after 26 --discard-newer-checkpoints
check 'printf "%s" "$out" | grep -q "notes.txt"' "the refusal does not name the user's file: $out"
refused "the flag without a kept directory" "$tmp/single-base" --save "$tmp/plain" --steps 2 --discard-newer-checkpoints
check '[ ! -e "$tmp/plain" ]' "a refused run made its --save directory"
finish cli_ckpt_keep
