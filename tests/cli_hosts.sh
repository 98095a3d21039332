#!/usr/bin/env bash
# Training across two hosts (issue 16): two network namespaces joined by
# veth links, one MPI rank in each, OpenMPI's TCP transport between them
# (scripts/two_hosts.sh makes and removes them; docs/ARCHITECTURE.md
# "Across hosts").
# - gpt2-tiny at dp 2 and at pp 2 across the hosts: losses and gradient
#   norms bitwise those of the threads backend, and the data link carried
#   at least the bytes the log says rank 0 sent and received.
# - a lost peer, three ways (rank 1's process killed with -9; the data link
#   cut with `ip link set ... down`; both links cut), mid-run with
#   --comm-timeout 5: the job ends non-zero within 10 s (measured: about
#   1, 5.5 and 4 s), no hang (each run bounded by `timeout`), with a message naming
#   the lost peer's host (and rank where cleave or mpirun knows it); the
#   last checkpoint is complete and byte-identical to a threads run stopped
#   at its step, and resuming it on one host as one rank (threads, dp 1)
#   continues at the next step, within 1e-6 of the uninterrupted run.
# A skip without MPI (a failure under CI=true: the set-up installs it), or
# where network namespaces cannot be made (not root).
set -u
source "$(dirname "$0")/lib.sh"
if ! "$CLEAVE" --version | grep -q "mpi: yes" || ! command -v mpirun > /dev/null; then
    skip "cli_hosts: this build has no MPI (or mpirun is missing)" setup
    finish cli_hosts; exit
fi
if ! why=$(scripts/two_hosts.sh probe 2>&1); then
    skip "cli_hosts: cannot make network namespaces here: $why"
    finish cli_hosts; exit
fi
id=t$$
trap 'scripts/two_hosts.sh down "$id"; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT HUP
scripts/two_hosts.sh up "$id" || { echo "FAILED: two_hosts.sh up $id"; exit 1; }
h1=cleave-$id-h1 h2=cleave-$id-h2
case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
cleave=$(readlink -f "$CLEAVE")
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --sample-tokens 0
        --eval-batches 2 --bucket-size 64KiB --threads 1)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
steps_of() { grep '"loss"' "$1" | grep -o '"step": [0-9]*' | awk '{ print $2 }' | tr '\n' ' '; }
# bytes rank 0 sent and received, summed over the log's steps and groups
logged_bytes() { grep -o '\[[0-9]*, [0-9]*, [0-9]*\]' "$1" | tr -d '[],' | awk '{ s += $2 + $3 } END { print s + 0 }'; }
link_bytes() { # bytes through h1's end of the data link so far
    ip netns exec "$h1" sh -c 'echo $(( $(cat /sys/class/net/clv0/statistics/tx_bytes) + $(cat /sys/class/net/clv0/statistics/rx_bytes) ))'
}
across() { timeout -k 10 300 scripts/two_hosts.sh run "$id" -- "$cleave" train "${common[@]}" --comm mpi "$@"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# ---- the same bits as threads, over the link ----
for mesh in "dp 2" "pp 2"; do
    set -- $mesh
    name=$1$2
    flags=(--steps 20 --"$1" "$2")
    [ "$1" = pp ] && flags+=(--schedule 1f1b)
    "$CLEAVE" train "${common[@]}" "${flags[@]}" --log-file "$tmp/threads-$name.jsonl" > "$tmp/threads-$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "threads $mesh failed: $(tail -3 "$tmp/threads-$name.out")"
    before=$(link_bytes)
    across "${flags[@]}" --log-file "$tmp/hosts-$name.jsonl" > "$tmp/hosts-$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$mesh across hosts failed: $(tail -5 "$tmp/hosts-$name.out")"
    moved=$(( $(link_bytes) - before ))
    logged=$(logged_bytes "$tmp/hosts-$name.jsonl")
    check 'grep -q "ranks: 2 (mpi backend)" "$tmp/hosts-$name.out"' "$mesh across hosts: not 2 MPI ranks"
    check '[ -n "$(figures "$tmp/hosts-$name.jsonl")" ] && [ "$(figures "$tmp/hosts-$name.jsonl")" = "$(figures "$tmp/threads-$name.jsonl")" ]' \
        "$mesh across hosts: losses and norms are not bitwise those of threads"
    check '[ "$logged" -gt 0 ] && [ "$moved" -ge "$logged" ]' \
        "$mesh across hosts: the data link moved $moved bytes, the log says rank 0 sent and received $logged"
    echo "$mesh across hosts: 20 steps bitwise equal to threads; data link $moved bytes (logged $logged)"
done

# ---- a lost peer ----
# lose HOW: start a long run that saves every 10 steps, and once it has
# saved twice lose rank 1 HOW (kill, cut data, cut all); sets rc, took,
# out, dir
lose() {
    local how=$1 t0 pid p
    out=$tmp/lost-$how.out dir=$tmp/ck-$how
    across --dp 2 --steps 100000 --comm-timeout 5 --save "$dir" --save-every 10 > "$out" 2>&1 &
    local job=$!
    for _ in $(seq 600); do
        grep -aq "saved .* at step 20" "$out" && break
        kill -0 $job 2>/dev/null || break
        sleep 0.1
    done
    t0=$(date +%s.%N)
    case $how in
    kill)
        pid=""
        for p in $(scripts/two_hosts.sh pids "$id" h2); do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = cleave ] && pid=$p; done
        if [ -n "$pid" ]; then kill -9 "$pid"; else echo "FAILED: no cleave process on $h2"; fail=$((fail + 1)); fi ;;
    cut-data) scripts/two_hosts.sh cut "$id" data ;;
    cut-all) scripts/two_hosts.sh cut "$id" all ;;
    esac
    wait $job
    rc=$?
    took=$(secs "$t0")
}

# unrun FILE: a checkpoint's JSON without the run's identifier, the hashes of files that record it, and
# the marker's entry for run_config.json (the configuration as launched: --comm mpi and its hosts here,
# threads in the reference, so its size differs by design)
unrun() { sed -e '/"run_id"/d' -e '/"run_config.json"/d' -e 's/"hash": "[0-9a-f]*"//' "$1"; }
# check_resume HOW: the checkpoint the lost run left is whole, equal to a
# threads run's at its step, and resumes on one host as one rank
check_resume() {
    local how=$1 s f
    s=$(grep -o '"step": [0-9]*' "$dir/trainer_state.json" 2>/dev/null | awk '{ print $2 }')
    check '[ -n "$s" ] && [ "$s" -ge 20 ] && [ $((s % 10)) -eq 0 ]' "$how: no checkpoint at a multiple of 10 from step 20 (step '${s:-}')"
    [ -n "$s" ] || return
    "$CLEAVE" train "${common[@]}" --dp 2 --steps 100000 --stop-after "$s" --save "$tmp/ref-$how" > "$tmp/ref-$how.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$how: threads reference to step $s failed: $(tail -3 "$tmp/ref-$how.out")"
    # every byte but the run's identifier (each run mints its own) and the file hashes that cover it
    for f in model.safetensors optimizer.safetensors; do
        check 'st_same "$dir/$f" "$tmp/ref-$how/$f"' "$how: the checkpoint's $f differs from a threads run's at step $s"
    done
    for f in cleave-checkpoint.json config.json trainer_state.json; do
        check 'cmp -s <(unrun "$dir/$f") <(unrun "$tmp/ref-$how/$f")' "$how: the checkpoint's $f differs from a threads run's at step $s"
    done
    # one rank on one host (threads, dp 1) from the checkpoint, against the uninterrupted run
    "$CLEAVE" train "${common[@]}" --steps 100000 --stop-after $((s + 5)) --resume "$dir" \
        --log-file "$tmp/resumed-$how.jsonl" > "$tmp/resumed-$how.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$how: resuming at dp 1 failed: $(tail -3 "$tmp/resumed-$how.out")"
    "$CLEAVE" train "${common[@]}" --dp 2 --steps 100000 --stop-after $((s + 5)) --log-file "$tmp/whole-$how.jsonl" \
        > "$tmp/whole-$how.out" 2>&1
    check '[ "$(steps_of "$tmp/resumed-$how.jsonl")" = "$((s + 1)) $((s + 2)) $((s + 3)) $((s + 4)) $((s + 5)) " ]' \
        "$how: the resumed run's steps are '$(steps_of "$tmp/resumed-$how.jsonl")', not $((s + 1))..$((s + 5))"
    worst=$(paste <(figures "$tmp/resumed-$how.jsonl" | awk '{ print $1 }') \
                  <(figures "$tmp/whole-$how.jsonl" | tail -n 5 | awk '{ print $1 }') |
            awk '{ n++; d = $1 - $2; if (d < 0) d = -d; r = d / $2; if (r > w) w = r } END { printf "%d %.3g", n, w }')
    check '[ "${worst% *}" -eq 5 ] && less "${worst#* }" 1.000001e-6' \
        "$how: resumed losses differ from the uninterrupted run's: 5 steps wanted, got (steps, max rel diff) $worst"
    echo "$how: checkpoint at step $s equal to threads'; resumed as 1 rank: steps $((s + 1))..$((s + 5)), max rel diff ${worst#* }"
}

lose kill
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && less "$took" 10' "kill -9 of rank 1: status $rc after $took s: $(tail -3 "$out")"
check 'grep -q "rank 1 .*on node $h2 exited on signal 9" "$out"' "kill -9 of rank 1: no message naming rank 1 on $h2: $(tail -5 "$out")"
echo "kill -9 of rank 1 on $h2: the job ended with status $rc in $took s"
check_resume kill
scripts/two_hosts.sh down "$id" && scripts/two_hosts.sh up "$id"

lose cut-data
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && less "$took" 10' "data link cut: status $rc after $took s: $(tail -3 "$out")"
# both ranks time out at about the same moment; the first to abort may end the other before it prints
lost="rank 0: timed out after 5.0 s in .* waiting for rank 1 on host $h2|rank 1: timed out after 5.0 s in .* waiting for rank 0 on host $h1"
check 'grep -Eq "$lost" "$out"' "data link cut: no message naming the lost peer and its host: $(grep cleave: "$out" | head -3)"
echo "data link cut: the job ended with status $rc in $took s: $(grep -Eom1 "$lost" "$out")"
check_resume cut-data
scripts/two_hosts.sh down "$id" && scripts/two_hosts.sh up "$id"

lose cut-all
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && less "$took" 10' "both links cut: status $rc after $took s: $(tail -3 "$out")"
check 'grep -q "lost communication with a remote daemon" "$out" && grep -q "Remote daemon.*on node $h2" "$out" ||
       grep -q "timed out after 5.0 s in .* waiting for rank 1 on host $h2" "$out"' \
    "both links cut: no message naming $h2: $(tail -8 "$out")"
echo "both links cut: the job ended with status $rc in $took s: $(grep -m1 -o 'lost communication with a remote daemon\|timed out .*' "$out")"
check_resume cut-all

finish cli_hosts
