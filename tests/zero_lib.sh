# Helpers of the ZeRO tests (tests/cli_zero.sh, tests/cli_zero2.sh, tests/cli_zero3.sh), sourced
# after lib.sh: runs logged to $tmp/NAME.jsonl, their figures compared, and
# cleave memory --measure held to formulas.
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
train() { # name args...: a run logged to $tmp/name.jsonl, its output in $tmp/name.out
    local name=$1; shift
    timeout 300 "$CLEAVE" train "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name ($*) failed: $(tail -3 "$tmp/$name.out")"
}
same() { # run ref [steps]: every step's loss and grad norm bitwise equal
    local run=$1 ref=$2 n=${3:-20} a b
    a=$(figures "$tmp/$run.jsonl"); b=$(figures "$tmp/$ref.jsonl")
    echo "$run vs $ref: $(printf '%s\n' "$a" | grep -c .) steps, $(paste -d' ' <(printf '%s\n' "$a") <(printf '%s\n' "$b") |
        awk '$1 == $3 && $2 == $4' | wc -l) with loss and grad norm bitwise equal"
    check '[ "$(printf "%s\n" "$a" | grep -c .)" -eq $n ] && [ "$a" = "$b" ]' \
        "$run: losses or grad norms differ from $ref's$(excerpt 4 "$(diff <(printf '%s\n' "$a") <(printf '%s\n' "$b"))")"
}
close() { # run ref tol steps: every loss within tol relative of ref's
    local rc
    echo -n "$1 vs $2: "
    paste <(losses "$tmp/$1.jsonl") <(losses "$tmp/$2.jsonl") | awk -v tol="$3" -v want="$4" '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r; if (d == 0) same++ }
        END { printf "%d steps, max rel diff %.3g, %d bitwise equal\n", n, worst, same; exit !(n == want && worst <= tol) }'
    rc=$?
    check '[ $rc -eq 0 ]' "$1: losses not within $3 relative of $2's"
}
mpi2() { mpin 2 "$@"; }
mpin() { # np name ref... args -- : np processes under MPI (--comm mpi; dp 2 if args say no more), logged as
    # name; bitwise equal to each ref
    local np=$1 name=$2 refs=() r; shift 2
    while [ "$1" != "--" ]; do refs+=("$1"); shift; done; shift
    if ! "$CLEAVE" --version | grep -q "mpi: yes" || ! command -v mpirun > /dev/null; then
        skip "MPI parts (this build has no MPI)" setup; return
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout 300 mpirun --oversubscribe -np $np "$CLEAVE" train "$@" --comm mpi --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name ($*) under MPI failed: $(tail -5 "$tmp/$name.out")"
    for r in "${refs[@]}"; do same "$name" "$r"; done
}
clipped() { # run: clipping really active (--grad-clip 1.0 clips steps whose norm is over 1)
    local k
    k=$(figures "$tmp/$1.jsonl" | awk '$2 > 1' | wc -l)
    echo "$1: grad norm over 1 (clipped) on $k of 20 steps"
    check '[ "$k" -gt 0 ]' "$1: no step's grad norm is over 1, so clipping was never active"
}
gathered() { # run N shard_floats: each step all-gathers the parameters once, (N-1) x 4 x shard bytes sent
    local bad want="[1, $((($2 - 1) * 4 * $3)), $((($2 - 1) * 4 * $3))]"
    bad=$(grep '"loss"' "$tmp/$1.jsonl" | grep -vc "\"allgather\": \[1, $((($2 - 1) * 4 * $3)), $((($2 - 1) * 4 * $3))\]")
    check '[ "$bad" -eq 0 ]' "$1: $bad steps without the dp all-gather $want$(excerpt 1 "$(grep -m1 '"loss"' "$tmp/$1.jsonl")")"
}

# ---- memory: predicted == measured, and the formulas with the padding --------
a16() { echo $(( ($1 + 15) / 16 * 16 )); }
gpt_part() { # C V CTX BLOCKS EMBED HEAD: a part's parameter floats, each tensor 16-aligned (src/model/describe.c)
    local C=$1 V=$(( ($2 + 127) / 128 * 128 )) X=$3 nb=$4 e=$5 h=$6 blk f # V padded to 128 (--make-vocab-size-divisible-by)
    blk=$(( 4 * $(a16 $C) + $(a16 $((3 * C * C))) + $(a16 $((3 * C))) + $(a16 $((C * C))) + $(a16 $C) \
          + $(a16 $((4 * C * C))) + $(a16 $((4 * C))) + $(a16 $((4 * C * C))) + $(a16 $C) ))
    f=$((nb * blk))
    [ "$e" = 1 ] && f=$((f + $(a16 $((V * C))) + $(a16 $((X * C)))))
    [ "$h" = 1 ] && f=$((f + 2 * $(a16 $C)))
    [ "$h" = 1 ] && [ "$e" = 0 ] && f=$((f + $(a16 $((V * C))))) # the head's own copy of the tied wte
    echo $f
}
padded() { # floats N: to a multiple of 16 N
    local q=$((16 * $2)); echo $(( ($1 + q - 1) / q * q ))
}
expect() { # floats head_wte_floats N ZERO: "params grads optimizer" bytes of one rank
    local P
    P=$(padded $1 $3); [ "$4" = 0 ] && P=$1
    echo "$((4 * P)) $((4 * P + 4 * $2)) $([ "$4" = 0 ] && echo $((8 * P)) || echo $((8 * P / $3)))"
}
mem() { # label "EXPECT_PP0|-" "EXPECT_PP1|-" args...: one point ("-": predicted == measured only)
    local label=$1 e0=$2 e1=$3; shift 3
    local out="$tmp/mem.json"
    if ! timeout 120 "$CLEAVE" memory --measure --json --threads 1 --eval-batches 1 "$@" > "$out" 2> "$tmp/mem.err"; then
        check false "memory --measure $*: failed$(excerpt 3 "$(cat "$tmp/mem.err")")"; return
    fi
    local res
    res=$(python3 - "$out" "$e0" "$e1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = [sys.argv[2].split(), sys.argv[3].split()]
bad, seen = [], set()
for r in rows:
    for k, v in r["predicted"].items():
        if r["measured"].get(k) != v:
            bad.append("rank %d %s: predicted %d, measured %d" % (r["rank"], k, v, r["measured"].get(k, -1)))
    w = want[r["pp_rank"]]
    for k, v in zip(("params", "grads", "optimizer"), w if w != ["-"] else []):
        if r["measured"][k] != int(v):
            bad.append("rank %d %s: measured %d, the formula %s" % (r["rank"], k, r["measured"][k], v))
    seen.add((r["pp_rank"], r["measured"]["params"], r["measured"]["grads"], r["measured"]["optimizer"]))
print("; ".join(bad) + "|" + "; ".join("pp rank %d: params %d grads %d optimizer %d" % s for s in sorted(seen))
      + " (%d ranks)" % len(rows))
PY
)
    check '[ -z "${res%%|*}" ]' "memory $label ($*): ${res%%|*}"
    echo "memory $label: ${res#*|}"
}

# gpt2-tiny (C 64) at --zero Z on pp 2 x dp 2 (E,t | t,L) and tp 2 x dp 2 with sp: every category
# predicted == measured, params grads optimizer == FN's formula (expect2 in cli_zero2.sh; expect3, with
# K working buffers of the largest unit's gather, in cli_zero3.sh). Uses $D, $hw and $blk.
# pp: the tied wte kept whole on both stages (stage 0's trimmed off the embedding's bucket, which keeps
# wpe; stage 1's own copy), stage 1 also the head's wte gradient; the largest unit a block on both.
# tp with sp: a block's slice (ln 4 x 64, c_attn 64 x 96 + 96, attn.c_proj 32 x 64 + 64, c_fc 64 x 128
# + 128, mlp.c_proj 128 x 64 + 64), wte's 128 rows, wpe 64 x 64, lnf 2 x 64; the layernorms' gradients
# whole (5 x 128 floats); a block's bucket trimmed of ln_1 at its end; the head's bucket (lnf only) empty.
# pp_mem with zb-h1 (the backward split into input and weight passes): the last stage keeps the LM head's
# lnf gradient whole too (2 x 64 floats: it comes in the input pass, the buckets are filled by the weight
# passes), so its head bucket is empty and it has one working buffer.
pp_mem() { # Z FN SCHEDULE [K]: gpt2-tiny on pp 2 x dp 2 (E,t | t,L)
    local z=$1 fn=$2 sch=$3 k=${4:-} w1=$hw nb1=2
    [ "$sch" = zb-h1 ] && w1=$((hw + 2 * 64)) nb1=1
    mem "gpt2-tiny pp 2 x dp 2 $sch zero $z" "$($fn "$(gpt_part 64 256 64 1 1 0)" 2 $hw 0 2 $blk ${k:+$k $blk})" \
        "$($fn "$(gpt_part 64 256 64 1 0 1)" 2 $w1 $hw $nb1 $blk ${k:+$k $blk})" \
        "${D[@]}" --dp 2 --pp 2 --pp-layout "E,t|t,L" --schedule $sch --zero $z
}
pp_tp_mem() { # Z FN [K]
    local z=$1 fn=$2 k=${3:-} tblk tpsi
    tblk=$((4 * 64 + 64 * 96 + 96 + 32 * 64 + 64 + 64 * 128 + 128 + 128 * 64 + 64))
    tpsi=$((2 * tblk + 128 * 64 + 64 * 64 + 2 * 64))
    pp_mem $z $fn 1f1b $k
    mem "gpt2-tiny tp 2 x dp 2 sp zero $z" "$($fn $tpsi 2 $((5 * 128)) $((128 * 64)) 2 $((tblk - 128)) ${k:+$k $tblk})" - \
        "${D[@]}" --dp 2 --tp 2 --sequence-parallel --zero $z
}

