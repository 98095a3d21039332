#!/usr/bin/env bash
# Tensor parallelism for the MoE block (issue 33 item 2: experts' MLPs split by tp, Megatron-core's expert tensor
# parallelism = tp; docs/ARCHITECTURE.md "Mixture of experts"), mixtral-tiny, 20 steps of the King James Bible,
# --threads 1:
# - tp 2 (with --check-replicas: the replicated router the same bits on both ranks at every step), tp 4, tp 2
#   with sequence parallelism (and recompute full), tp 2 pp 2 under zb-h1 against tp 1; dp 2 tp 2 ZeRO 3 against dp 2; tp 2 with capacity factor 0.5 against tp 1 with it (slots dropped);
#   dp 2 ep 2 tp 2 (4 ranks: the ep groups drawn from dp at each tp index) against dp 2 tp 2 and dp 2: loss, grad
#   norm and aux loss within 1e-6 relative at every step (cli_llama_layouts' bound for dense Llama tp);
# - --dtype bf16 tp 2 against bf16 on one rank within cli_bf16_moe's bounds for dp 2 (the steps of the same routing:
#   first step 1e-4, losses 1e-4, norms 1e-3; all 20 within 1e-2);
# - checkpoints: single-file and sharded, saved at tp 2 and at dp 2 ep 2 tp 2 (the experts' tp slices gathered
#   across the ep ranks), resumed at other tp and ep within 1e-6 of runs that never stopped;
# - MPI (when built with it): tp 2 and dp 2 ep 2 tp 2 bitwise equal to the threads runs.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/moe_lib.sh" # common, figures, run, close, compare, same_routing

run t1
run t2 --tp 2 --check-replicas
compare t2 t1 20
run t4 --tp 4
compare t4 t1 20
run t2sp --tp 2 --sequence-parallel
compare t2sp t1 20
# a split backward (zb-h1's weight pass runs the block's collectives again), full recompute under sp
run zb --tp 2 --pp 2 --schedule zb-h1
compare zb t1 20
run rf --tp 2 --sequence-parallel --recompute full
compare rf t1 20
run c1 --moe-capacity-factor 0.5
run c2 --tp 2 --moe-capacity-factor 0.5
compare c2 c1 20
check 'grep -q "\"moe_dropped\": [1-9]" "$tmp/c2.jsonl"' "capacity 0.5 at tp 2: nothing dropped"
run d2 --dp 2
run d2t2 --dp 2 --tp 2
compare d2t2 d2 20
run d2e2t2 --dp 2 --ep 2 --tp 2
compare d2e2t2 d2t2 20
compare d2e2t2 d2 20
run d2t2z3 --dp 2 --tp 2 --zero 3
compare d2t2z3 d2 20

# bf16: tp 2 sums the experts' partial results over the ranks (F32), so the BF16 router logits can differ by a BF16
# step from one rank's and some token-slot goes to another expert after a few steps (see cli_bf16_moe.sh): how many
# depends on the CPU's arithmetic (AVX-512: 4 or more; a Zen 3's AVX2, widened products: 3), so the tight bounds
# cover the steps that route alike, at least the first two (the weights before and after one update)
run b1 --dtype bf16
run bt2 --dtype bf16 --tp 2
k=$(same_routing "$tmp/bt2.jsonl" "$tmp/b1.jsonl")
out=$(runs_near "$tmp/bt2.jsonl" "$tmp/b1.jsonl" 1e-4 1e-4 1e-3 "$k"); _rc=$?
all=$(runs_near "$tmp/bt2.jsonl" "$tmp/b1.jsonl" 1e-2 1e-2 1e-2); _rc2=$?
echo "bf16 tp 2: the same routing as one rank for $k steps: $out; all: $all"
check '[ "$k" -ge 2 ] && [ $_rc -eq 0 ] && [ $_rc2 -eq 0 ]' "bf16 tp 2: not within the bounds of one rank: $k steps, $out; all: $all"

# checkpoints: 8 steps, saved after 4, resumed for the last 4
run full8 --steps 8
run full8d2 --dp 2 --steps 8
resumed() { # name checkpoint resume-args reference (check evaluates in its own scope: rn, not $1)
    local res rn=$1
    run "$rn" --steps 8 $3 --resume "$tmp/ck-$2" # word-splits $3 (flags)
    res=$(close "$tmp/$rn.jsonl" "$tmp/$4.jsonl" 5); _rc=$?
    echo "$rn: $res"
    check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/$rn.jsonl" | wc -l)" -eq 4 ]' "$rn: $res"
}
for fmt in single sharded; do
    "$CLEAVE" train "${common[@]}" --tp 2 --steps 8 --stop-after 4 --save "$tmp/ck-t2$fmt" --save-format $fmt > "$tmp/ck.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "save at tp 2 ($fmt): $(tail -2 "$tmp/ck.out")"
    "$CLEAVE" train "${common[@]}" --dp 2 --ep 2 --tp 2 --steps 8 --stop-after 4 --save "$tmp/ck-e2t2$fmt" --save-format $fmt > "$tmp/ck.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "save at dp 2 ep 2 tp 2 ($fmt): $(tail -2 "$tmp/ck.out")"
    # shellcheck disable=SC2086
    for tp in 1 4; do resumed "t2$fmt-at-tp$tp" "t2$fmt" "--tp $tp" full8; done
    resumed "e2t2$fmt-at-dp2" "e2t2$fmt" "--dp 2" full8d2
    resumed "e2t2$fmt-at-e2t2" "e2t2$fmt" "--dp 2 --ep 2 --tp 2" full8d2
done
# the single file of a dp 2 ep 2 tp 2 run has every expert whole: the same tensors and shapes as one rank's
st_shapes() { python3 -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
print(" ".join("%s:%s" % (k, h[k]["shape"]) for k in sorted(h) if k != "__metadata__"))' "$1"; }
"$CLEAVE" train "${common[@]}" --steps 8 --stop-after 4 --save "$tmp/ck-one" > "$tmp/ck.out" 2>&1
a=$(st_shapes "$tmp/ck-one/model.safetensors" 2>&1); b=$(st_shapes "$tmp/ck-e2t2single/model.safetensors" 2>&1)
check '[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "experts.7.w2.weight" <<<"$a"' "dp 2 ep 2 tp 2 single file's tensors differ from one rank's:$(excerpt 2 "$b")"

if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    for lay in "2 t2 --tp 2" "4 d2e2t2 --dp 2 --ep 2 --tp 2"; do
        set -- $lay
        np=$1 ref=$2; shift 2
        timeout -k 5 300 mpirun --oversubscribe -np "$np" "$CLEAVE" train "${common[@]}" "$@" --comm mpi --log-file "$tmp/mpi-$ref.jsonl" > "$tmp/mpi.out" 2>&1
        _rc=$?; check '[ $_rc -eq 0 ]' "$* under MPI failed: $(tail -5 "$tmp/mpi.out")"
        check '[ "$(figures "$tmp/mpi-$ref.jsonl" | wc -l)" -eq 20 ] && [ "$(figures "$tmp/mpi-$ref.jsonl")" = "$(figures "$tmp/$ref.jsonl")" ]' \
            "MPI and threads $* not bitwise equal: $(paste <(figures "$tmp/mpi-$ref.jsonl") <(figures "$tmp/$ref.jsonl") | head -2)"
    done
else
    skip "MPI parts (this build has no MPI)" setup
fi
finish cli_moe_tp
