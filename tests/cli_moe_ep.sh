#!/usr/bin/env bash
# Expert parallelism, --ep N (issue 33 items 2-3), on mixtral-tiny, 20 steps of the King James Bible, --threads 1:
# - `cleave mesh --ep`: the expert-parallel groups are ep consecutive data-parallel ranks, the expert-data groups
#   the dp / ep ranks computing the same experts;
# - ep 2 and ep 4 against ep 1 at the same dp (dp 2 ep 2, dp 4 ep 2, dp 4 ep 4; ZeRO 1; recompute full; a capacity
#   factor), each rank holding only its E / ep experts: loss, grad norm and aux loss within 1e-6 relative at every
#   step; the step log's moe_a2a_bytes present with ep, absent without; --config's parallel.ep the flag's;
# - the memory predictor equal to the measured bytes at dp 2 ep 2 (dropless: the worst case, said so; with a
#   capacity factor) and dp 4 ep 4, the received rows counted (ep 2's activations above ep 1's), the parameters,
#   gradients and moments E / ep experts' (ep 1's less L E (1 - 1/ep) 3 C F floats each, C, F, L and E from the
#   checkpoint's config.json);
# - checkpoints: written at ep 2, resumed at ep 1 and ep 2 (single file and sharded), the resumed steps within 1e-6
#   of an ep 1 run that never stopped; one written at dp 4 ep 1 resumed at dp 4 ep 4 as well;
# - MPI (when built with it): dp 2 ep 2 and dp 4 ep 2 (expert-data groups of 2) bitwise equal to the threads runs;
# - ZeRO 1 with ep (dp 2 ep 2, dp 4 ep 2) within 1e-6 of ep 1 ZeRO 1, its sharded checkpoint resumed at ep 1 and
#   ep 4; ZeRO 2 with ep refused (not built with E / ep experts a rank);
# - bad settings refused in one line naming the flag.
set -u
source "$(dirname "$0")/lib.sh"

out=$("$CLEAVE" mesh --dp 4 --ep 2 2>&1)
check 'grep -q "^expert-parallel groups:   \[0, 1\] \[2, 3\]$" <<<"$out" && grep -q "^expert-data groups:       \[0, 2\] \[1, 3\]$" <<<"$out"' \
    "cleave mesh --dp 4 --ep 2: $(excerpt 12 "$out")"

source "$(dirname "$0")/moe_lib.sh"
run d2 --dp 2
run d4 --dp 4
run d2e2 --dp 2 --ep 2
compare d2e2 d2 20
run d4e2 --dp 4 --expert-model-parallel-size 2
compare d4e2 d4 20
run d4e4 --dp 4 --ep 4
compare d4e4 d4 20
# ZeRO 1: the moments sharded over the expert-data group (dp 2 ep 2: one rank, nothing sharded; dp 4 ep 2: two)
run z1 --dp 2 --zero 1
run z1e2 --dp 2 --ep 2 --zero 1
compare z1e2 z1 20
run z1d4 --dp 4 --zero 1
run z1d4e2 --dp 4 --ep 2 --zero 1
compare z1d4e2 z1d4 20
run rc --dp 2 --ep 2 --recompute full
compare rc d2 20
run cap --dp 2 --moe-capacity-factor 0.5
run cape2 --dp 2 --ep 2 --moe-capacity-factor 0.5
compare cape2 cap 20
check 'grep -q "\"moe_dropped\": [1-9]" "$tmp/cape2.jsonl"' "capacity 0.5 at ep 2: nothing dropped"
check '[ "$(grep -c "\"moe_a2a_bytes\": \[[1-9][0-9]*, [1-9][0-9]*\]" "$tmp/d2e2.jsonl")" -eq 20 ] && ! grep -q moe_a2a_bytes "$tmp/d2.jsonl"' \
    "moe_a2a_bytes: $(grep -o '"moe_a2a_bytes[^]]*]' "$tmp/d2e2.jsonl" | head -2)"

# --config: the parallel section's ep is the flag's
printf '{"parallel": {"dp": 2, "ep": 2}}\n' > "$tmp/cfg.json"
"$CLEAVE" train --config "$tmp/cfg.json" "${common[@]}" --steps 2 --log-file "$tmp/cfg.jsonl" > "$tmp/cfg.out" 2>&1
_rc=$?
run flags2 --dp 2 --ep 2 --steps 2
check '[ $_rc -eq 0 ] && [ "$(grep -c moe_a2a_bytes "$tmp/cfg.jsonl")" -eq 2 ] && [ "$(figures "$tmp/cfg.jsonl")" = "$(figures "$tmp/flags2.jsonl")" ]' \
    "--config with parallel.ep 2: status $_rc $(tail -2 "$tmp/cfg.out")"

# memory: predicted == measured at ep 2, the worst case said; ep 2 keeps more rows than ep 1
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 2000) > "$tmp/small.txt"
mem=(--model mixtral-tiny --data "$tmp/small.txt" --threads 1 --eval-batches 1 --micro-batch-size 2 --global-batch-size 4 --dp 2)
acts() { sed -n '1s/.*"predicted": {[^}]*"activations": \([0-9]*\).*/\1/p' "$1"; }
for args in "--ep 2" "--ep 2 --moe-capacity-factor 0.5" "--ep 2 --recompute selective" "--dp 4 --ep 4 --global-batch-size 8"; do
    "$CLEAVE" memory --measure --json "${mem[@]}" $args > "$tmp/m.json" 2> "$tmp/m.err"
    _rc=$?
    diff=$(python3 - "$tmp/m.json" <<'PY'
import json, sys
bad = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    bad += ["rank %d %s: predicted %d, measured %d" % (r["rank"], k, v, r["measured"][k]) for k, v in r["predicted"].items() if r["measured"][k] != v]
print("; ".join(bad))
PY
)
    ranks=2; [[ $args == *"--dp 4"* ]] && ranks=4
    check '[ $_rc -eq 0 ] && [ -z "$diff" ] && [ "$(wc -l < "$tmp/m.json")" -eq $ranks ]' "memory $args: status $_rc $diff $(head -2 "$tmp/m.err")"
done
cp "$tmp/m.json" "$tmp/m-dp4ep4.json" # the last point's
"$CLEAVE" memory --measure --json "${mem[@]}" --dp 4 --global-batch-size 8 > "$tmp/m-dp4.json" 2>&1
"$CLEAVE" memory --measure --json "${mem[@]}" --ep 2 > "$tmp/e2.json" 2>&1
"$CLEAVE" memory --measure --json "${mem[@]}" > "$tmp/e1.json" 2>&1
check '[ "$(acts "$tmp/e2.json")" -gt "$(acts "$tmp/e1.json")" ]' "activations at ep 2 ($(acts "$tmp/e2.json")) not above ep 1's ($(acts "$tmp/e1.json"))"
out=$("$CLEAVE" memory "${mem[@]}" --ep 2 2>&1)
check 'grep -q "worst case (every token-slot of every expert-parallel rank on one expert of this rank)" <<<"$out"' \
    "the worst case not stated: $(tail -2 <<<"$out")"

# checkpoints written at ep 2 resume at ep 1 (single file and sharded) as a run that never stopped
run full8 --dp 2 --steps 8
for fmt in single sharded; do
    "$CLEAVE" train "${common[@]}" --dp 2 --ep 2 --steps 8 --stop-after 4 --save "$tmp/ck-$fmt" --save-format $fmt > "$tmp/ck-$fmt.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "save at ep 2 ($fmt): $(tail -2 "$tmp/ck-$fmt.out")"
    for ep in 1 2; do
        run "res-$fmt$ep" --dp 2 --ep $ep --steps 8 --resume "$tmp/ck-$fmt"
        res=$(close "$tmp/res-$fmt$ep.jsonl" "$tmp/full8.jsonl" 5); _rc=$?
        echo "ep 2 checkpoint ($fmt) resumed at ep $ep: $res"
        check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/res-$fmt$ep.jsonl" | wc -l)" -eq 4 ]' "resume of an ep 2 checkpoint ($fmt) at ep $ep: $res"
    done
done

# ep 4 holds E / 4 experts: ep 1's parameters, gradients and moments less L E (3/4) 3 C F floats each (predicted = measured above)
drop=$(python3 - "$tmp/m-dp4.json" "$tmp/m-dp4ep4.json" "$tmp/ck-single/config.json" <<'PY'
import json, sys
one, four = (json.loads(open(f).readline())["predicted"] for f in sys.argv[1:3])
c = json.load(open(sys.argv[3]))
want = c["num_hidden_layers"] * c["num_local_experts"] * 3 // 4 * 3 * c["hidden_size"] * c["intermediate_size"] * 4
got = [one[k] - four[k] for k in ("params", "grads", "optimizer")]
print("ok" if got == [want, want, 2 * want] else "params, grads, optimizer dropped %s bytes, want %d, %d, %d" % (got, want, want, 2 * want))
PY
)
echo "ep 4 against ep 1 at dp 4: params $(sed -n '1s/.*"params": \([0-9]*\).*/\1/p' "$tmp/m-dp4ep4.json") of $(sed -n '1s/.*"params": \([0-9]*\).*/\1/p' "$tmp/m-dp4.json") bytes ($drop)"
check '[ "$drop" = ok ]' "memory at ep 4: $drop"

run full8d4 --dp 4 --steps 8
# a dp 4 ep 2 ZeRO 1 sharded checkpoint resumed at dp 4 ep 1 ZeRO 0 and ep 4 ZeRO 1
"$CLEAVE" train "${common[@]}" --dp 4 --ep 2 --zero 1 --steps 8 --stop-after 4 --save "$tmp/ck-z1" --save-format sharded > "$tmp/ck-z1.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "save at dp 4 ep 2 ZeRO 1: $(tail -2 "$tmp/ck-z1.out")"
for a in "--ep 1" "--ep 4 --zero 1"; do
    n=res-z1${a// /}
    run "$n" --dp 4 $a --steps 8 --resume "$tmp/ck-z1"
    res=$(close "$tmp/$n.jsonl" "$tmp/full8d4.jsonl" 5); _rc=$?
    echo "dp 4 ep 2 ZeRO 1 checkpoint resumed at $a: $res"
    check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/$n.jsonl" | wc -l)" -eq 4 ]' "resume of a dp 4 ep 2 ZeRO 1 checkpoint at $a: $res"
done

# a dp 4 ep 1 checkpoint resumed at dp 4 ep 4 (each rank reads its experts)
"$CLEAVE" train "${common[@]}" --dp 4 --steps 8 --stop-after 4 --save "$tmp/ck-d4" > "$tmp/ck-d4.out" 2>&1
run res-d4e4 --dp 4 --ep 4 --steps 8 --resume "$tmp/ck-d4"
res=$(close "$tmp/res-d4e4.jsonl" "$tmp/full8d4.jsonl" 5); _rc=$?
echo "dp 4 ep 1 checkpoint resumed at ep 4: $res"
check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/res-d4e4.jsonl" | wc -l)" -eq 4 ]' "resume of a dp 4 ep 1 checkpoint at ep 4: $res"

# refusals: one line, status 2, naming the flag
refused "--ep 2 with --zero 2 is not supported yet" train "${common[@]}" --dp 2 --ep 2 --zero 2
refused "--ep 4 must divide the 2 data-parallel" train "${common[@]}" --dp 2 --ep 4
refused "--ep 2: the model has no experts" train "${common[@]}" --model llama-tiny --dp 2 --ep 2
refused "--ep 4 must divide the 6 experts" train "${common[@]}" --dp 4 --ep 4 --experts 6
refused "--ep 2 with --zero 3" train "${common[@]}" --dp 2 --ep 2 --zero 3
refused "--ep 2 with --pp 2" train "${common[@]}" --dp 2 --pp 2 --ep 2
refused "--ep 3 must divide the 4 data-parallel" mesh --dp 4 --ep 3

# MPI: dp 2 ep 2 bitwise the threads run
if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout -k 5 300 mpirun --oversubscribe -np 2 "$CLEAVE" train "${common[@]}" --dp 2 --ep 2 --comm mpi --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "dp 2 ep 2 under MPI failed: $(tail -5 "$tmp/mpi.out")"
    check '[ "$(figures "$tmp/mpi.jsonl")" = "$(figures "$tmp/d2e2.jsonl")" ] && [ "$(figures "$tmp/mpi.jsonl" | wc -l)" -eq 20 ]' \
        "MPI and threads dp 2 ep 2 not bitwise equal: $(paste <(figures "$tmp/mpi.jsonl") <(figures "$tmp/d2e2.jsonl") | head -2)"
    timeout -k 5 300 mpirun --oversubscribe -np 4 "$CLEAVE" train "${common[@]}" --dp 4 --ep 2 --comm mpi --log-file "$tmp/mpi4.jsonl" > "$tmp/mpi4.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "dp 4 ep 2 under MPI failed: $(tail -5 "$tmp/mpi4.out")"
    check '[ "$(figures "$tmp/mpi4.jsonl")" = "$(figures "$tmp/d4e2.jsonl")" ] && [ "$(figures "$tmp/mpi4.jsonl" | wc -l)" -eq 20 ]' \
        "MPI and threads dp 4 ep 2 not bitwise equal: $(paste <(figures "$tmp/mpi4.jsonl") <(figures "$tmp/d4e2.jsonl") | head -2)"
else
    skip "MPI parts (this build has no MPI)" setup
fi
finish cli_moe_ep
