# What the generation tests share (tests/cli_generate_kv.sh, tests/cli_generate_split.sh), sourced after
# tests/lib.sh: the text ($tmp/text.txt), the tiny checkpoints' training flags (common: 40 steps of a
# 32-token context), the PyTorch interpreter (PY; torch=0 without torch) and a prompt that runs past the
# context (long).
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 8 --global-batch-size 8 --steps 40 --lr 3e-3 --sample-tokens 0)
PY=/usr/bin/python3
torch=1
$PY -c 'import torch' 2> /dev/null || torch=0
long="In the beginning God created the heaven and the earth. And the earth was without form, and void"
