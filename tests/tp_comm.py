#!/usr/bin/env python3
"""The tensor-parallel traffic of a GPT step from the code's collectives, as
include/cleave/comm.h counts bytes, against a --log-file's "comm" "tp" of
every step (rank 0's counts: the log is world rank 0's).
usage: tp_comm.py [--bf16] LOG B T C LAYERS TP SP MICRO_BATCHES [NPARAMS]
(NPARAMS: a run with --check-replicas, which ends each step with 1
all-gather of an 8-byte hash per parameter of the model description;
--bf16: a --dtype bf16 run, whose gathers of the layernorm outputs, the
column-parallel products' inputs, move BF16: 2 bytes an element, not 4)
Per micro-batch (N = B*T token rows, R = N/tp rows a rank holds with sp):
  not sp: forward  embedding 1 all-reduce [N*C]; per block 2 all-reduces [N*C]
                   (after attn.c_proj and mlp.c_proj); head 1 all-reduce MAX [N]
                   and 1 f64 all-reduce [2N] (sum of exponentials, target logit)
          backward per block 2 all-reduces [N*C] (the copies before c_attn and
                   c_fc); head 1 all-reduce [N*C] (the copy before the logits)
  sp:     forward  embedding 1 reduce-scatter [R*C per rank]; per block 2
                   all-gathers [R*C per rank] (before c_attn, c_fc) and 2
                   reduce-scatters (after the row-parallel projections); head
                   1 all-gather, the same MAX and f64 all-reduces
          backward per block 4 all-gathers (2 of the gradients, 2 re-gathers of
                   the layernorm outputs for the weight gradients) and 2
                   reduce-scatters; head 1 reduce-scatter; embedding 1 all-gather
          per step: 1 all-reduce [(4L+2) C] of the layernorm parameters'
                   gradients (2 per layernorm, 2 per block + ln_f) packed
                   together: the partial sums over each rank's rows
  bf16 (sp): the 2L + 1 forward gathers and the 2L re-gathers of the layernorm
          outputs move 2-byte elements; the gathers of the output gradients
          and every reduction stay F32 (4 bytes)
Bytes: all-reduce of n elements of es bytes over p ranks: (p-1) n es when
p n es <= 64 KiB, else (n - c + (p-1) c) es, c = rank 0's chunk (16-element
blocks, the first ranks one block more); reduce-scatter (p-1) * per-rank
count * 4; all-gather (p-1) * per-rank bytes. Sent = received for each."""
import json
import sys


def chunk0(n, p):
    blocks = (n + 15) // 16
    q, rem = divmod(blocks, p)
    return min((q + (1 if rem > 0 else 0)) * 16, n)


def allreduce_bytes(n, es, p):
    if p == 1:
        return 0
    if p * n * es <= 64 * 1024:
        return (p - 1) * n * es
    c = chunk0(n, p)
    return (n - c + (p - 1) * c) * es


def expected(B, T, C, L, p, sp, m, nparams=0, bf16=False):
    N = B * T
    calls = {"allreduce": 0, "reduce_scatter": 0, "allgather": 0}
    nbytes = dict.fromkeys(calls, 0)

    def add(kind, k, b):
        calls[kind] += k
        nbytes[kind] += k * b

    for _ in range(m):
        head_max, head_f64 = allreduce_bytes(N, 4, p), allreduce_bytes(2 * N, 8, p)
        add("allreduce", 1, head_max)
        add("allreduce", 1, head_f64)
        if not sp:
            act = allreduce_bytes(N * C, 4, p)
            add("allreduce", 1, act)          # embedding forward
            add("allreduce", 2 * L, act)      # blocks forward
            add("allreduce", 2 * L, act)      # blocks backward
            add("allreduce", 1, act)          # head backward
        else:
            R = N // p
            shard = (p - 1) * R * C * 4
            norm = (p - 1) * R * C * (2 if bf16 else 4)  # a layernorm output gathered
            add("reduce_scatter", 1, shard)   # embedding forward
            add("allgather", 2 * L, norm)     # blocks forward
            add("reduce_scatter", 2 * L, shard)
            add("allgather", 1, norm)         # head forward
            add("reduce_scatter", 1, shard)   # head backward
            add("allgather", 2 * L, shard)    # blocks backward: the output gradients
            add("allgather", 2 * L, norm)     # and the layernorm outputs again
            add("reduce_scatter", 2 * L, shard)
            add("allgather", 1, shard)        # embedding backward
    if sp:
        add("allreduce", 1, allreduce_bytes((4 * L + 2) * C, 4, p))
    if nparams:
        add("allgather", 1, (p - 1) * 8 * nparams)
    return {k: [calls[k], nbytes[k], nbytes[k]] for k in calls if calls[k]}


def main():
    args = sys.argv[1:]
    bf16 = args[0] == "--bf16"
    if bf16:
        args = args[1:]
    log = args[0]
    B, T, C, L, p, sp, m = (int(x) for x in args[1:8])
    nparams = int(args[8]) if len(args) > 8 else 0
    want = expected(B, T, C, L, p, sp, m, nparams, bf16)
    bad, steps = [], 0
    for line in open(log):
        r = json.loads(line)
        if "loss" not in r:
            continue
        steps += 1
        got = r["comm"]["tp"]
        if got != want:
            bad.append("step %d: tp traffic %s, the formulas give %s" % (r["step"], got, want))
    print("%d steps, each tp %s" % (steps, json.dumps(want)))
    for b in bad[:3]:
        print("FAILED: " + b)
    return 1 if bad or steps == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
