#!/usr/bin/python3
"""PyTorch evaluation of a Hugging Face GPT-2 checkpoint as `cleave convert`
writes it (the single-file format: DIR/model.safetensors with GPT-2's names
and Conv1D [in, out] layouts, DIR/config.json with GPT-2's keys), for the
check that a converted sharded checkpoint is the model cleave evaluates; or
as transformers writes one (names under "transformer.", lm_head and mask
buffers beside them, unread; no tokenizer key: a vocabulary below GPT-2's
is bytes).

    hf_eval.py DIR TEXT
    hf_eval.py --generate DIR PROMPT N

Byte tokenizer (token = byte), the text cut into consecutive non-overlapping
windows of n_positions + 1 tokens (the remainder dropped), as `cleave eval`
does; prints 'eval loss: X', the mean next-token cross-entropy. The model is
torch_reference.py's, built from stock torch.nn modules (no cleave code).
--generate continues PROMPT (bytes) by N greedy tokens, recomputing the
whole window (the last n_positions tokens, positions from 0) for each, and
writes the prompt and the new bytes to stdout as `cleave generate
--temperature 0` prints them, and its time on stderr
(tests/cli_generate_kv.sh, bench/generate.sh).
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402


def load(torch, d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    # Hugging Face's own config.json names no tokenizer: a vocabulary under GPT-2's is bytes (as cleave reads it)
    tok = cfg.get("tokenizer", "byte" if cfg["vocab_size"] < 50257 else "gpt2")
    if tok != "byte":
        print(f"hf_eval.py: {d}: only the byte tokenizer (got {tok!r})", file=sys.stderr)
        return None, cfg
    tensors, _ = ref.read_safetensors(os.path.join(d, "model.safetensors"))
    # GPT2LMHeadModel's files name GPT2Model's tensors under "transformer."
    tensors = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in tensors.items()}
    GPT, _ = ref.build_models(torch)
    model = GPT({k: cfg[k] for k in ("n_embd", "n_head", "n_layer", "n_positions", "vocab_size")})
    with torch.no_grad():
        for name, p, transposed in model.file_params():
            t = torch.from_numpy(np.ascontiguousarray(tensors[name]))
            p.copy_(t.t() if transposed else t)
    return model, cfg


def generate(d, prompt, n):
    torch = ref.setup_torch()
    model, cfg = load(torch, d)
    if model is None:
        return 2
    seq, T = list(prompt.encode()), cfg["n_positions"]
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([seq[-T:]], dtype=torch.int64)
            seq.append(int(model(x)[0, -1].argmax()))
    dt = time.perf_counter() - t0
    print(f"hf_eval.py: greedy (recomputing each window): {n} tokens in {dt:.4f} s ({n / dt if dt > 0 else 0:.1f} tokens/s)", file=sys.stderr)
    sys.stdout.buffer.write(bytes(seq) + b"\n")
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "--generate":
        return generate(argv[2], argv[3], int(argv[4]))
    if len(argv) != 3:
        print("usage: hf_eval.py DIR TEXT | --generate DIR PROMPT N", file=sys.stderr)
        return 2
    d, text = argv[1], argv[2]
    torch = ref.setup_torch()
    model, cfg = load(torch, d)
    if model is None:
        return 2
    ids = np.frombuffer(open(text, "rb").read(), dtype=np.uint8).astype(np.int64)
    W = cfg["n_positions"] + 1
    n = len(ids) // W
    win = torch.from_numpy(ids[: n * W].reshape(n, W))
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, 16):
            x = win[i : i + 16]
            logits = model(x[:, :-1])
            total += float(torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").double())
    print(f"eval loss: {total / (n * (W - 1)):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
