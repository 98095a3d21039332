#!/usr/bin/env bash
# Tensor-parallel step (issue 14), two parts:
#
# 1. Step time: GPT-2 124M, micro-batch 4, sequence 256, one micro-batch a
#    step. In turns each round: one rank with two GEMM threads (the peer),
#    --tp 2 with one thread per rank, and --tp 2 --sequence-parallel. Median
#    step time of steps SKIP+1..STEPS from --log-file, tokens/s, the ratio to
#    the peer, and the share of the step that each tp rank spends inside
#    collectives. That share comes from a copy of build/cleave linked with
#    -Wl,--wrap on cl_comm_allreduce (F32 and F64), _reduce_scatter,
#    _allgather and cl_trainer_step (the same library objects; the wrappers
#    read the clock around each call on the calling rank's thread). A
#    collective's time on a rank splits into "wait" (from its call until the
#    last rank of the group has called, i.e. the peer is still computing or
#    descheduled) and "move" (from then until it returns: the copying and
#    folding themselves). Every run, the peer's included, uses that copy.
# 2. Bytes: the "comm" "tp" counts of --log-file (rank 0's, one step)
#    against the analytic per-step counts, at --tp 2 and 4, with and without
#    --sequence-parallel (the formulas are written out below).
#
#   bash bench/tp_step.sh                 # both parts
#   PART=1 STEPS=4 ROUNDS=3 bash bench/tp_step.sh
#   PART=2 BYTES_LAYERS=12 bash bench/tp_step.sh
#
# Knobs: MODEL (gpt2) SEQ (256) MICRO (4) STEPS (4) SKIP (1) ROUNDS (2) for
# part 1; BYTES_MODEL (gpt2) BYTES_LAYERS (2) BYTES_TPS ("2 4") for part 2.
# Ranks share this machine's cores with each other (and with whatever else
# runs): compare within a round, not across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${PART:-all}
model=${MODEL:-gpt2} seq=${SEQ:-256} micro=${MICRO:-4} steps=${STEPS:-4} skip=${SKIP:-1} rounds=${ROUNDS:-2}
bmodel=${BYTES_MODEL:-gpt2} blayers=${BYTES_LAYERS:-2} btps=${BYTES_TPS:-2 4}
[ -x build/cleave ] || { echo "tp_step: build first (make)" >&2; exit 2; }
[ "$steps" -gt "$skip" ] || { echo "tp_step: STEPS must exceed SKIP" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data="$tmp/text.txt"
head -c 600000 data/kjv.txt > "$data"

printf 'cpu: %s; %s cores; avx512: %s\n' "$(lscpu | sed -n 's/^Model name: *//p')" "$(nproc)" \
    "$(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/ $//;s/^$/none/')"

# ---- the timed copy of build/cleave ----------------------------------------
cat > "$tmp/wrap.c" <<'EOF'
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cleave/comm.h"
#include "cleave/train.h"

cl_status __real_cl_comm_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op);
cl_status __real_cl_comm_reduce_scatter(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt, cl_redop op);
cl_status __real_cl_comm_allgather(cl_comm *c, const void *in, void *out, size_t bytes_per_rank);
cl_status __real_cl_trainer_step(cl_trainer *t, cl_step_stats *st);
cl_status __wrap_cl_comm_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op);
cl_status __wrap_cl_comm_reduce_scatter(cl_comm *c, const void *in, void *o, size_t count_per_rank, cl_dtype dt, cl_redop op);
cl_status __wrap_cl_comm_allgather(cl_comm *c, const void *in, void *o, size_t bytes_per_rank);
cl_status __wrap_cl_trainer_step(cl_trainer *t, cl_step_stats *st);

enum { MAXEV = 8192 };
typedef struct { const char *kind; const void *comm; size_t bytes; double t0, t1; } ev;
static _Thread_local ev evs[MAXEV];
static _Thread_local int nev, me = -1, step, in_step;
static atomic_int nthreads;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void note(const char *kind, const void *c, size_t bytes, double t0) {
    double t1 = now();
    if (in_step && nev < MAXEV) evs[nev++] = (ev){kind, c, bytes, t0, t1};
}
cl_status __wrap_cl_comm_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op) {
    double t0 = now();
    cl_status s = __real_cl_comm_allreduce(c, buf, count, dt, op);
    note(dt == CL_F64 ? "allreduce_f64" : op == CL_RED_MAX ? "allreduce_max" : "allreduce", c, count * cl_dtype_size(dt), t0);
    return s;
}
cl_status __wrap_cl_comm_reduce_scatter(cl_comm *c, const void *in, void *o, size_t count_per_rank, cl_dtype dt, cl_redop op) {
    double t0 = now();
    cl_status s = __real_cl_comm_reduce_scatter(c, in, o, count_per_rank, dt, op);
    note("reduce_scatter", c, count_per_rank * cl_dtype_size(dt), t0);
    return s;
}
cl_status __wrap_cl_comm_allgather(cl_comm *c, const void *in, void *o, size_t bytes_per_rank) {
    double t0 = now();
    cl_status s = __real_cl_comm_allgather(c, in, o, bytes_per_rank);
    note("allgather", c, bytes_per_rank, t0);
    return s;
}
/* After each step, outside its timing: a line per collective, then the step. */
cl_status __wrap_cl_trainer_step(cl_trainer *t, cl_step_stats *st) {
    if (me < 0) me = atomic_fetch_add(&nthreads, 1);
    nev = 0;
    in_step = 1;
    double t0 = now();
    cl_status s = __real_cl_trainer_step(t, st);
    double t1 = now();
    in_step = 0;
    step++;
    pthread_mutex_lock(&mu);
    if (!out) {
        const char *p = getenv("TP_STEP_EVENTS");
        out = fopen(p ? p : "/dev/null", "w");
    }
    if (out) {
        for (int i = 0; i < nev; i++)
            fprintf(out, "C %d %d %d %s %p %zu %.9f %.9f\n", me, step, i, evs[i].kind, evs[i].comm, evs[i].bytes, evs[i].t0, evs[i].t1);
        fprintf(out, "S %d %d %.9f %.9f\n", me, step, t0, t1);
        fflush(out);
    }
    pthread_mutex_unlock(&mu);
    return s;
}
EOF
link=$(make -n -W cli/main.c build/cleave 2>/dev/null | tail -1)
case "$link" in *" -o build/cleave") ;; *) echo "tp_step: cannot read the link line of build/cleave from make -n" >&2; exit 1 ;; esac
cc_flags=${link%% build/obj/*}
$cc_flags -c "$tmp/wrap.c" -o "$tmp/wrap.o"
${link% -o build/cleave} "$tmp/wrap.o" \
    -Wl,--wrap=cl_comm_allreduce,--wrap=cl_comm_reduce_scatter,--wrap=cl_comm_allgather,--wrap=cl_trainer_step \
    -o "$tmp/cleave-timed"
timed="$tmp/cleave-timed"

run() { # name, then train flags; log in $tmp/$name.json, events in $tmp/$name.ev
    local name=$1
    shift
    TP_STEP_EVENTS="$tmp/$name.ev" "$timed" train "$@" --sample-tokens 0 --eval-batches 1 --log-every 1000000 \
        --data "$data" --log-file "$tmp/$name.json" >"$tmp/$name.out" 2>&1 || { cat "$tmp/$name.out" >&2; exit 1; }
}
median_ms() {
    grep -o '"ms": [0-9.]*' "$1" | awk -v skip="$skip" 'NR > skip { print $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'
}
# Per rank, means over the steps after SKIP: ms in collectives, of which wait and move, and % of the step.
coll() {
    awk -v skip="$skip" '
        $1 == "S" && $3 > skip { st[$2] += ($5 - $4) * 1e3; ns[$2]++; if ($2 + 1 > nr) nr = $2 + 1 }
        $1 == "C" && $3 > skip { k = $3 SUBSEP $4; t0[$2, k] = $8; t1[$2, k] = $9; key[k] = 1; if ($2 + 1 > nr) nr = $2 + 1 }
        END {
            for (k in key) {
                mx = -1
                for (r = 0; r < nr; r++) if (t0[r, k] > mx) mx = t0[r, k]
                for (r = 0; r < nr; r++) { w[r] += (mx - t0[r, k]) * 1e3; m[r] += (t1[r, k] - mx) * 1e3 }
            }
            out = ""
            for (r = 0; r < nr; r++) {
                n = ns[r] ? ns[r] : 1
                out = out sprintf("%s r%d %.0f (%.0f+%.0f) %.1f%%", r ? ";" : "", r, (w[r] + m[r]) / n, w[r] / n, m[r] / n, 100 * (w[r] + m[r]) / st[r])
            }
            print out
        }' "$1"
}

if [ "$part" = all ] || [ "$part" = 1 ]; then
    common=(--model "$model" --seq-len "$seq" --micro-batch-size "$micro" --global-batch-size "$micro" --steps "$steps")
    tok=$((micro * seq))
    printf '\npart 1: %s, micro-batch %s x sequence %s (%s tokens a step), %s steps, median of steps %s..%s\n' \
        "$model" "$micro" "$seq" "$tok" "$steps" $((skip + 1)) "$steps"
    printf 'collectives: per rank, ms a step in collectives (wait for the peer + move) and %% of the step\n'
    printf '%-5s %-22s %9s %9s %7s  %s\n' round config ms/step tokens/s "vs 1x2" collectives
    for r in $(seq "$rounds"); do
        run one.$r "${common[@]}" --threads 2
        run tp2.$r "${common[@]}" --tp 2 --threads 1
        run sp2.$r "${common[@]}" --tp 2 --sequence-parallel --threads 1
        base=$(median_ms "$tmp/one.$r.json")
        for c in one tp2 sp2; do
            case $c in one) label="1 rank, 2 threads" ;; tp2) label="tp 2, 1 thread each" ;; sp2) label="tp 2 + seq-par, 1 each" ;; esac
            ms=$(median_ms "$tmp/$c.$r.json")
            cs=-; [ "$c" = one ] || cs=$(coll "$tmp/$c.$r.ev")
            awk -v r="$r" -v l="$label" -v ms="$ms" -v b="$base" -v tok="$tok" -v cs="$cs" \
                'BEGIN { printf "%-5s %-22s %9.1f %9.1f %7.3f  %s\n", r, l, ms, tok / ms * 1e3, b / ms, cs }'
        done
    done
fi

# ---- part 2: bytes against the formulas ------------------------------------
# Per micro-batch of B x T tokens, C channels, L blocks, p = tp ranks, n = BTC floats:
#   without sequence parallelism, all-reduces of n floats: 2 per block forward and 2 backward, the
#     embedding's 1, the head's backward 1 (4L + 2); the head's forward adds a MAX all-reduce of BT
#     floats and a float64 all-reduce of 2BT (the sums of exponentials and the target logits);
#   with it, of n/p floats per rank: all-gathers 2 per block forward + 4 backward, the head's forward
#     and the embedding's backward (6L + 2); reduce-scatters 2 + 2 per block, the embedding's forward
#     and the head's backward (4L + 2); all-reduces: the head's MAX and float64 ones, and at the
#     step's end one of the (4L + 2) C floats of the layernorm parameters packed together, the sequence shards' partial sums.
# Bytes as comm.h counts them for rank r: all-reduce of k elements of e bytes: (p-1) k e when
# p k e <= 64 KiB, else (k - c + (p-1) c) e with c = rank r's chunk; all-gather and reduce-scatter
# (p-1) x the per-rank bytes. Sent = received for all three.
if [ "$part" = all ] || [ "$part" = 2 ]; then
    bseq=$seq bmicro=$micro
    printf '\npart 2: bytes a step, rank 0 of the tp group: --log-file "comm" "tp" against the formulas\n'
    printf '%s --layers %s, micro-batch %s x sequence %s, one micro-batch a step (step 2 of 2)\n' "$bmodel" "$blayers" "$bmicro" "$bseq"
    printf '%-4s %-3s %-15s %12s %12s %16s %16s %16s %s\n' tp sp kind calls formula "bytes sent" "bytes received" formula ""
    for p in $btps; do
        for sp in 0 1; do
            flags=(--model "$bmodel" --layers "$blayers" --seq-len "$bseq" --micro-batch-size "$bmicro" --global-batch-size "$bmicro"
                   --steps 2 --tp "$p" --threads 1)
            [ "$sp" = 1 ] && flags+=(--sequence-parallel)
            run bytes.$p.$sp "${flags[@]}"
            read -r L C < <(sed -n '1s/.*: \([0-9]*\) layers, \([0-9]*\) channels.*/\1 \2/p' "$tmp/bytes.$p.$sp.out")
            grep '"comm"' "$tmp/bytes.$p.$sp.json" | tail -1 | grep -o '"tp": {[^}]*}' | tr -d '"{}[]' | sed 's/^tp: //; s/, \([a-z]\)/\n\1/g' |
                awk -v p="$p" -v sp="$sp" -v L="$L" -v C="$C" -v B="$bmicro" -v T="$bseq" '
                function chunk0(k,  blocks, q, rem) { blocks = int((k + 15) / 16); q = int(blocks / p); rem = blocks % p
                    return (q + (rem > 0)) * 16 < k ? (q + (rem > 0)) * 16 : k }
                function ar(k, e) { return p * k * e <= 65536 ? (p - 1) * k * e : (k - chunk0(k) + (p - 1) * chunk0(k)) * e }
                BEGIN { n = B * T * C
                    if (!sp) { f["allreduce"] = 4 * L + 2 + 2; b["allreduce"] = (4 * L + 2) * ar(n, 4) + ar(B * T, 4) + ar(2 * B * T, 8) }
                    else { f["allgather"] = 6 * L + 2; b["allgather"] = f["allgather"] * (p - 1) * n / p * 4
                           f["reduce_scatter"] = 4 * L + 2; b["reduce_scatter"] = f["reduce_scatter"] * (p - 1) * n / p * 4
                           f["allreduce"] = 2 + 1; b["allreduce"] = ar(B * T, 4) + ar(2 * B * T, 8) + ar((4 * L + 2) * C, 4) } }
                { sub(/:/, "", $1); sub(/,/, "", $2); sub(/,/, "", $3); seen[$1] = 1
                  ok = ($2 == f[$1] && $3 == b[$1] && $4 == b[$1]) ? "equal" : "DIFFERENT"
                  printf "%-4s %-3s %-15s %12d %12d %16.0f %16.0f %16.0f %s\n", p, sp ? "on" : "off", $1, $2, f[$1], $3, $4, b[$1], ok }
                END { for (k in f) if (!(k in seen)) printf "%-4s %-3s %-15s %12s %12d %16s %16s %16.0f %s\n", p, sp ? "on" : "off", k, "-", f[k], "-", "-", b[k], "MISSING" }'
        done
    done
fi
