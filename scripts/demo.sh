#!/usr/bin/env bash
# The README's first command: set up a fresh Debian 12 machine (as root),
# build cleave, and train the default GPT on the King James Bible, showing
# the loss fall below the unigram baseline and a generated sample at the end.
# Extra arguments go to `cleave train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -s -j"$(nproc)" build/cleave
exec ./build/cleave train --model gpt2-tiny --steps 600 --lr 3e-3 --micro-batch-size 16 \
    --eval-every 200 --log-every 50 "$@"
