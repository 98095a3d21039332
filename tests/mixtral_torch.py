"""An independent Mixtral in PyTorch, written from Hugging Face's
MixtralForCausalLM equations (transformers' modeling_mixtral), for
tests/cli_moe_train.sh: the attention half is tests/llama_torch.py's (Llama's
equations: RMSNorm, rotary, grouped-query attention), the MLP is
MixtralSparseMoeBlock:

    router_logits = h @ gate            (gate [C, E] as cleave stores it)
    p = softmax(router_logits, F32)     over the E experts
    top-k of p                          ties to the lower expert (a stable sort;
                                        torch.topk does not promise an order)
    w = p[top] / sum p[top]             (Mixtral renormalizes)
    y = sum over the slots of w * w2(silu(w1 h) * w3 h), index_add_ per expert

and the load-balancing loss per block in cleave's per-slot form,
E * sum_e f_e P_e (f_e: share of the N K token-slots routed to e; P_e: mean
p), summed over the blocks. HF's load_balancing_loss_func counts f per token
(it sums to K), so its value is K times this one for one block; the script
checks that relation on every block, and that it pools the blocks before the
product (it is not the sum of per-block terms) is why cleave's sum is
computed here, not HF's. moe_capacity_factor > 0 drops, per expert, the
slots after its first ceil(cf N K / E) in token order (slot t K + i).

    mixtral_torch.py IN OUT
    mixtral_torch.py --eval-hf DIR TEXT
    mixtral_torch.py --generate DIR PROMPT N

--generate continues PROMPT (bytes) by N greedy tokens with a checkpoint
cleave saved, as llama_torch.py --generate does (its loop, this file's
model: the whole window recomputed for each new token), for
tests/cli_generate_kv.sh.

IN: written by build/tests/moe_torch_driver --write-input. OUT: "loss" (F64,
the mean cross-entropy), "aux" (F64, the sum over blocks), "dropped" (F64),
"grad.<name>" (F32) of loss + router_aux_loss_coef * aux, autograd in F32.

--eval-hf scores a Hugging Face MixtralForCausalLM directory (config.json
with MixtralConfig's keys; one model.safetensors or HF's shards; F32 or
BF16 widened; nn.Linear's [out, in] turned to [in, out]) on TEXT as `cleave
eval --checkpoint DIR --text TEXT` does (tests/llama_torch.py's windows),
the mean next-token cross-entropy without the aux loss, printed as
'eval loss: X' (tests/cli_hf_mixtral.sh)."""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from format_ref import write_st  # noqa: E402
from llama_ref import read_st  # noqa: E402
from llama_torch import attention_half, evaluate, generate, rms_norm, rotary  # noqa: E402


def hf_load_balancing(probs, top, E, K):
    # transformers' load_balancing_loss_func for one layer without an attention mask
    expert_mask = F.one_hot(top, E)  # [N, K, E]
    tokens_per_expert = expert_mask.float().mean(0)  # [K, E]
    router_prob_per_expert = probs.mean(0)  # [E]
    return (tokens_per_expert * router_prob_per_expert[None, :]).sum() * E


def moe(h, p, E, K, cf, stats):
    N, C = h.shape
    logits = h @ p("block_sparse_moe.gate")
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices
    top = order[:, :K]  # [N, K]
    w = probs.gather(1, top)
    w = w / w.sum(-1, keepdim=True)
    # the aux loss, cleave's per-slot form
    f = F.one_hot(top.reshape(-1), E).float().mean(0)
    P = probs.mean(0)
    aux = E * (f * P).sum()
    hf = hf_load_balancing(probs.detach(), top, E, K)
    assert abs(hf.item() - K * aux.item()) <= 1e-5 * abs(hf.item()), (hf.item(), K * aux.item())
    # capacity: per expert, the slots after its first `cap` in slot order (t K + i) are dropped
    keep = torch.ones(N, K, dtype=torch.bool)
    if cf > 0:
        cap = math.ceil(cf * N * K / E)
        seen = [0] * E
        flat = top.reshape(-1).tolist()
        for s, e in enumerate(flat):
            if seen[e] >= cap:
                keep[s // K, s % K] = False
            else:
                seen[e] += 1
    stats["dropped"] += int((~keep).sum())
    y = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.where((top == e) & keep)
        if tok.numel() == 0:
            continue
        x = h[tok]
        pe = lambda n: p(f"block_sparse_moe.experts.{e}.{n}")  # noqa: E731
        out = (F.silu(x @ pe("w1")) * (x @ pe("w3"))) @ pe("w2")
        y = y.index_add(0, tok, out * w[tok, slot, None])
    return y, aux


def logits_of(w, tokens, cfg, stats=None):
    # the model's logits [B, T, V] and the blocks' summed aux loss; block l is an MoE block when (l + 1) is a
    # multiple of moe_every (cleave's config key; absent, 0 or 1: every block), else Llama's dense MLP
    L, C, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    E, K, cf = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg.get("moe_capacity_factor", 0)
    every = max(cfg.get("moe_every", 1), 1)
    stats = stats if stats is not None else {"dropped": 0}
    B, T = tokens.shape
    cos, sin = rotary(T, C // H, theta, cfg.get("rope_scaling"))
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][tokens]
    aux = 0
    for layer in range(L):
        p = lambda n: w[f"model.layers.{layer}.{n}.weight"]  # noqa: E731
        x, h = attention_half(x, p, cfg, cos, sin, mask)  # llama_torch.py's, Llama's equations
        if (layer + 1) % every:
            x = x + (F.silu(h @ p("mlp.gate_proj")) * (h @ p("mlp.up_proj"))) @ p("mlp.down_proj")
            continue
        y, a = moe(h.reshape(B * T, C), p, E, K, cf, stats)
        x = x + y.view(B, T, C)
        aux = aux + a
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.t(), aux


def forward(w, tokens, targets, cfg, stats):
    logits, aux = logits_of(w, tokens, cfg, stats)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1)), aux


def lm_loss(w, tokens, targets, cfg):
    return forward(w, tokens, targets, cfg, {"dropped": 0})[0]


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--eval-hf":
        return evaluate(sys.argv[2], sys.argv[3], True, lm_loss)
    if len(sys.argv) == 5 and sys.argv[1] == "--generate":
        return generate(sys.argv[2], sys.argv[3], int(sys.argv[4]), lambda w, x, cfg: logits_of(w, x, cfg)[0], "mixtral_torch.py")
    if len(sys.argv) != 3:
        print("usage: mixtral_torch.py IN OUT | --eval-hf DIR TEXT | --generate DIR PROMPT N", file=sys.stderr)
        return 2
    t, meta = read_st(sys.argv[1])
    cfg = json.loads(meta["config"])
    tokens = t.pop("tokens").long()
    targets = t.pop("targets").long()
    w = {n: v.clone().requires_grad_(True) for n, v in t.items()}
    stats = {"dropped": 0}
    loss, aux = forward(w, tokens, targets, cfg, stats)
    (loss + cfg["router_aux_loss_coef"] * aux).backward()
    f64 = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    out = [("loss", "F64", f64(loss.item())), ("aux", "F64", f64(aux.item())), ("dropped", "F64", f64(stats["dropped"]))]
    # an expert no slot reached has no gradient: zero
    out += [("grad." + n, "F32", (v.grad if v.grad is not None else torch.zeros_like(v)).reshape(-1)) for n, v in w.items()]
    write_st(sys.argv[2], out)
    print(f"mixtral_torch.py: loss {loss.item():.9f}, aux {aux.item():.9f}, dropped {stats['dropped']}, {len(w)} gradients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
