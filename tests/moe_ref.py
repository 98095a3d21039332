#!/usr/bin/python3
"""The mixture-of-experts kernels' reference, from the Mixtral equations
(Hugging Face's MixtralSparseMoeBlock and load_balancing_loss_func, written
here with torch's own ops in float32, not imported from transformers), for
tests/cli_moe_kernels.sh:

    moe_ref.py IN REF

IN is what `build/tests/test_moe --write-input IN` wrote: x [T, C], the
router weight wg [C, E] (router logits = x wg, no bias), the experts' HF
weights w1, w3 [E, F, C] and w2 [E, C, F] (MixtralBlockSparseTop2MLP:
w2(silu(w1 x) * w3 x)), dy [T, C] and, in the metadata, the shapes
"T C E K TT F" and daux. REF gets, as F32:

    probs [T, E]     softmax(x wg) in float32
    idx [T, K]       the top-k experts, largest first, ties to the lower index
                     (torch.sort stable; torch.topk states no tie order)
    wts [T, K]       the top-k probabilities renormalized to sum 1 (Mixtral)
    y [T, C]         sum over the k choices of wts * expert(x), by index_add_
                     per expert as MixtralSparseMoeBlock does
    aux_hf           load_balancing_loss_func: E * sum(tokens_per_expert [K, E]
                     * router_prob_per_expert [E])
    aux              the Switch form E * sum_e f_e P_e with f_e the fraction of
                     the T K token-slots: aux_hf / K
    dx dwg dw1 dw3 dw2 dye   autograd of J = sum(y * dy) + daux * aux; dye [T, E, C] the
                     gradient of every expert's output for every token (0 where
                     not routed)
    tie.probs tie.idx tie.wts   the router on the logits tie.logits [TT, E],
                     whose rows hold equal values
"""
import sys

import torch
import torch.nn.functional as F

from format_ref import write_st  # tests/format_ref.py: the safetensors header by hand
from llama_ref import read_st  # tests/llama_ref.py: F32 tensors and the metadata of IN


def route(logits, k):
    """Mixtral's router: softmax in float32, top-k, renormalized."""
    probs = F.softmax(logits, dim=1, dtype=torch.float)
    _, order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True)
    idx = order[:, :k]
    wts = torch.gather(probs, 1, idx)
    wts = wts / wts.sum(dim=-1, keepdim=True)
    return probs, idx, wts


def load_balancing_loss(probs, idx, num_experts):
    """HF's load_balancing_loss_func on one layer's routing."""
    expert_mask = F.one_hot(idx, num_experts)               # [T, K, E]
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)  # [K, E]
    router_prob_per_expert = torch.mean(probs, dim=0)       # [E]
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


def main():
    torch.set_num_threads(1)
    t, meta = read_st(sys.argv[1])
    T, C, E, K, TT, FF = (int(v) for v in meta["shapes"].split())
    daux = float(meta["daux"])
    x = t["x"].reshape(T, C).clone().requires_grad_(True)
    wg = t["wg"].reshape(C, E).clone().requires_grad_(True)
    w1 = t["w1"].reshape(E, FF, C).clone().requires_grad_(True)
    w3 = t["w3"].reshape(E, FF, C).clone().requires_grad_(True)
    w2 = t["w2"].reshape(E, C, FF).clone().requires_grad_(True)
    dy = t["dy"].reshape(T, C)

    logits = x @ wg
    probs, idx, wts = route(logits, K)
    # with no ties torch.topk (what HF calls) chooses the same experts
    assert torch.equal(torch.topk(probs.detach(), K, dim=-1).indices, idx), "topk and the stable sort disagree"
    # every expert's output for every token: w2(silu(w1 x) * w3 x)
    ye = torch.stack([F.linear(F.silu(F.linear(x, w1[e])) * F.linear(x, w3[e]), w2[e]) for e in range(E)], dim=1)
    ye.retain_grad()
    y = torch.zeros(T, C)
    expert_mask = F.one_hot(idx, num_classes=E).permute(2, 1, 0)  # [E, K, T]
    for e in range(E):
        which, top_x = torch.where(expert_mask[e])
        y = y.index_add(0, top_x, ye[top_x, e] * wts[top_x, which, None])
    aux_hf = load_balancing_loss(probs, idx, E)
    aux = aux_hf / K
    J = (y * dy).sum() + daux * aux
    J.backward()
    res = [("probs", probs), ("idx", idx.float()), ("wts", wts), ("y", y), ("aux", aux.reshape(1)),
           ("aux_hf", aux_hf.reshape(1)), ("dx", x.grad), ("dwg", wg.grad), ("dye", ye.grad),
            ("dw1", w1.grad), ("dw3", w3.grad), ("dw2", w2.grad)]

    tp, ti, tw = route(t["tie.logits"].reshape(TT, E), K)
    res += [("tie.probs", tp), ("tie.idx", ti.float()), ("tie.wts", tw)]
    write_st(sys.argv[2], [(name, "F32", v.detach().reshape(-1).contiguous()) for name, v in res])


if __name__ == "__main__":
    main()
