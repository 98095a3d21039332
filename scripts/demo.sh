#!/usr/bin/env bash
# The README's first command: set up a fresh Debian 12 machine (as root),
# build cleave, and train the default GPT on the King James Bible as a
# two-stage pipeline (two ranks as threads in this process), each rank
# under a memory cap that one rank cannot train the model under: first the
# one-rank attempt and its error, then the pipeline, its stages, the bubble
# per step, the validation loss falling below the unigram baseline, a sample,
# and a Chrome trace of the last steps drawn as the pipeline diagram.
# Extra arguments go to the pipeline's `cleave train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -s -j"$(nproc)" build/cleave
cap=3584KiB
run=(--model gpt2-tiny --micro-batch-size 2 --global-batch-size 32 --device-memory $cap)
echo "== one rank, capped at $cap:"
if ./build/cleave train "${run[@]}" --steps 1 --sample-tokens 0 --eval-batches 1 > build/one-rank.out 2>&1; then
    echo "(it fit: the cap no longer shows the point)"
else
    grep -m1 '^cleave: error:' build/one-rank.out # the refusal (the planner's proposals follow it in the file)
fi
echo "== a 2-stage pipeline (1F1B, 16 micro-batches per step), each rank capped at $cap:"
./build/cleave train "${run[@]}" --pp 2 --schedule 1f1b --steps 600 --lr 3e-3 --eval-every 200 --log-every 50 \
    --trace build/pipeline-trace.json --trace-steps 2 "$@"
./build/cleave trace render build/pipeline-trace.json --out build/pipeline.svg
echo "open build/pipeline-trace.json in https://ui.perfetto.dev; build/pipeline.svg is the pipeline diagram of one step"
