#!/usr/bin/python3
"""The peer of `cleave bench step`: the same GPT-2 training step in PyTorch.

    gpt2_torch.py --layers 12 --channels 768 --heads 12 --vocab 50304 \
                  --seq-len 256 --micro-batch-size 4 --threads 2 --steps 3 --warmup 1

Builds GPT-2 from stock torch.nn modules (learned positions, pre-layernorm
blocks, GELU with the tanh approximation, causal softmax attention, the
language-model head tied to the token embedding), trains it with AdamW
(betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices, none on biases and
layernorms) and gradient clipping at 1.0, on random byte tokens: what cleave
does per step. Prints one line a script can read:

    torch step: <ms> ms, <tokens/s> tokens/s, <GFLOP/s> GFLOP/s, peak RSS <MiB> MiB

With --autocast bf16 the forward and the loss run under
torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's bf16 mixed precision:
F32 master weights, BF16 matmuls through oneDNN) and the line starts
"torch bf16 step:" (bench/bf16_step.sh).

FLOPs are the model's, counted as cleave counts them (describe.c): per
sample 2*T*12*C^2 + 4*T^2*C per block plus 2*T*C*V for the head, forward,
and three times that for forward + backward. Thread settings come from the
caller (bench/torch_step.sh sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
OMP_WAIT_POLICY=PASSIVE); --threads also calls torch.set_num_threads.
"""
import argparse
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.attn = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc_proj = nn.Linear(4 * C, C)
        self.NH = NH
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
        hs = C // self.NH
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH, T) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("layers", 12), ("channels", 768), ("heads", 12), ("vocab", 50304), ("context", 1024), ("seq-len", 256),
                          ("micro-batch-size", 4), ("threads", 1), ("steps", 3), ("warmup", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16), F32 master weights and AdamW")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    L, C, NH, V, T, B = a.layers, a.channels, a.heads, a.vocab, a.seq_len, a.micro_batch_size
    model = GPT(L, C, NH, V, max(a.context, T))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    data = torch.randint(0, 256, (B, T + 1))
    x, y = data[:, :T].contiguous(), data[:, 1:].contiguous()
    total = 0.0
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.autocast == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            total += dt
    per = total / a.steps
    flop = 3.0 * B * (L * (2.0 * T * 12 * C * C + 4.0 * T * T * C) + 2.0 * T * C * V)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch{' bf16' if a.autocast == 'bf16' else ''} step: {per * 1e3:.1f} ms, {B * T / per:.1f} tokens/s, {flop / per / 1e9:.1f} GFLOP/s, "
          f"peak RSS {rss:.1f} MiB (loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
