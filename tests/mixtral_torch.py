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
    mixtral_torch.py --autocast IN CLEAVE_BF16
    mixtral_torch.py --eval-hf DIR TEXT
    mixtral_torch.py --generate DIR PROMPT N

--generate continues PROMPT (bytes) by N greedy tokens with a checkpoint
cleave saved, as llama_torch.py --generate does (its loop, this file's
model: the whole window recomputed for each new token), for
tests/cli_generate_kv.sh.

IN: written by build/tests/moe_torch_driver --write-input. OUT: "loss" (F64,
the mean cross-entropy), "aux" (F64, the sum over blocks), "dropped" (F64),
"grad.<name>" (F32) of loss + router_aux_loss_coef * aux, autograd in F32.

--autocast compares cleave's --dtype bf16 (CLEAVE_BF16: build/tests/moe_torch_driver
--grads-bf16) with this model under torch.autocast and with cleave's product
emulated, as tests/llama_torch.py --autocast does (its bounds), the router's
logits rounded to bfloat16 (autocast's linear output), and checks that the
routing is the same (tests/cli_bf16_moe.sh).

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
from llama_torch import (LoMatmul, attention_half, autocast_check, evaluate, generate, mm_autocast, rms_norm, rotary,  # noqa: E402
                         torch_bf16_sums_f32)


def hf_load_balancing(probs, top, E, K):
    # transformers' load_balancing_loss_func for one layer without an attention mask
    expert_mask = F.one_hot(top, E)  # [N, K, E]
    tokens_per_expert = expert_mask.float().mean(0)  # [K, E]
    router_prob_per_expert = probs.mean(0)  # [E]
    return (tokens_per_expert * router_prob_per_expert[None, :]).sum() * E


def moe(h, p, E, K, cf, stats, mm=torch.matmul, router=torch.matmul):
    N, C = h.shape
    logits = router(h, p("block_sparse_moe.gate"))
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices
    top = order[:, :K]  # [N, K]
    stats.setdefault("top", []).append(top)
    # the routing's margin: the K-th probability over the (K+1)-th, the smallest over the tokens
    if K < E:
        srt = probs.detach().gather(1, order)
        gap = srt[:, K - 1] - srt[:, K]
        stats["margin"] = min(stats.get("margin", math.inf), float(gap.min()))
        stats["ties"] = stats.get("ties", 0) + int((gap == 0).sum())  # exact ties: the lower expert's, as cleave's
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
    stats.setdefault("kept", []).append(top[keep])  # the slots run (cleave's "slots" counts these)
    y = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.where((top == e) & keep)
        if tok.numel() == 0:
            continue
        x = h[tok]
        pe = lambda n: p(f"block_sparse_moe.experts.{e}.{n}")  # noqa: E731
        out = mm(F.silu(mm(x, pe("w1"))) * mm(x, pe("w3")), pe("w2"))
        y = y.index_add(0, tok, out * w[tok, slot, None])
    return y, aux


def logits_of(w, tokens, cfg, stats=None, mm=torch.matmul, router=torch.matmul):
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
        x, h = attention_half(x, p, cfg, cos, sin, mask, mm)  # llama_torch.py's, Llama's equations
        if (layer + 1) % every:
            x = x + mm(F.silu(mm(h, p("mlp.gate_proj"))) * mm(h, p("mlp.up_proj")), p("mlp.down_proj"))
            continue
        y, a = moe(h.reshape(B * T, C), p, E, K, cf, stats, mm, router)
        x = x + y.view(B, T, C)
        aux = aux + a
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return mm(x, head.t()), aux


def forward(w, tokens, targets, cfg, stats, mm=torch.matmul, router=torch.matmul):
    logits, aux = logits_of(w, tokens, cfg, stats, mm, router)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1)), aux


def lm_loss(w, tokens, targets, cfg):
    return forward(w, tokens, targets, cfg, {"dropped": 0})[0]


def emulated_router(a, b):
    # cleave's router product (LoMatmul: BF16 operands, F32 sums), its output rounded to bfloat16 as autocast's
    # linear returns it (the backward rounds the gradient, as LoMatmul's does anyway)
    return LoMatmul.apply(a, b).bfloat16().float()


def autocast_main(inp, ours_path):
    """--autocast: this Mixtral under torch.autocast and with cleave's product emulated against cleave's --dtype
    bf16 (llama_torch.py's autocast_check and bounds); the router's logits in bfloat16 as autocast's linear
    returns them, then softmax, top-k and the renormalization in float32 (HF's softmax(..., dtype=float)). The
    routing must be the same in both runs and in cleave's (its token-slots per expert, "slots"): printed with
    the smallest top-k margin; aux within 1e-4 relative of both."""
    runs = {}

    def model(w, tokens, targets, cfg, mm, name):
        stats = {"dropped": 0}
        loss, aux = forward(w, tokens, targets, cfg, stats, mm, mm_autocast if name == "autocast" else emulated_router)
        runs[name] = (stats, aux.item())
        return loss, loss + cfg["router_aux_loss_coef"] * aux

    bad, ours = autocast_check(inp, ours_path, model)
    slots = [int(v) for v in ours["slots"].tolist()]
    E = len(slots)
    for name, (stats, aux) in runs.items():
        counts = torch.bincount(torch.cat([t.reshape(-1) for t in stats["kept"]]), minlength=E).tolist()
        ca = float(ours["aux"][0])
        rel = abs(ca - aux) / abs(aux)
        print(f"bf16 {name}: routed slots per expert torch {counts}, cleave {slots}; smallest top-k margin "
              f"{stats.get('margin', math.inf):.3g} ({stats.get('ties', 0)} exact ties at the K-th, to the lower expert); aux cleave {ca:.9f}, torch {aux:.9f} (rel {rel:.3g})")
        if counts != slots or stats["dropped"] != int(ours["dropped"][0]):
            if name == "autocast" and not torch_bf16_sums_f32():  # see below: autocast's logits are not cleave's here
                print(f"bf16 {name}: the routing differs from cleave's (torch sums bf16 products in bfloat16 here)")
            else:
                bad += 1
                print(f"FAILED: {name}: the routing differs from cleave's")
        if not rel <= 1e-4:
            bad += 1
            print(f"FAILED: {name}: aux rel {rel:.3g}")
    ta, te = runs["autocast"][0]["top"], runs["emulated"][0]["top"]
    same = all(torch.equal(a, b) for a, b in zip(ta, te))
    if not same and not torch_bf16_sums_f32():
        # torch's bf16 matmul sums in bfloat16 here (AVX2): its router logits are not the emulated ones, so a token
        # near a tie may pick another expert; cleave's routing is still checked against both runs' slot counts above
        n = sum(int((a != b).any(dim=1).sum()) for a, b in zip(ta, te))
        print(f"bf16: {n} tokens route otherwise under autocast than emulated (torch sums bf16 products in bfloat16 here)")
    elif not same:
        bad += 1
        print("FAILED: autocast's and the emulated routing differ")
    else:
        print(f"bf16: the same top-{ta[0].shape[1]} experts for every token of {len(ta)} blocks in both runs")
    return 1 if bad else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--autocast":
        return autocast_main(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 4 and sys.argv[1] == "--eval-hf":
        return evaluate(sys.argv[2], sys.argv[3], True, lm_loss)
    if len(sys.argv) == 5 and sys.argv[1] == "--generate":
        return generate(sys.argv[2], sys.argv[3], int(sys.argv[4]), lambda w, x, cfg: logits_of(w, x, cfg)[0], "mixtral_torch.py")
    if len(sys.argv) != 3:
        print("usage: mixtral_torch.py IN OUT | --autocast IN CLEAVE_BF16 | --eval-hf DIR TEXT | --generate DIR PROMPT N", file=sys.stderr)
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
