"""cleave's bf16 mixed precision against PyTorch autocast, for tests/cli_bf16.sh.

    bf16_torch.py IN CLEAVE_FP32 CLEAVE_BF16

IN: gpt2-tiny's weights and one batch as build/tests/bf16_torch_driver
--write-input wrote them (Hugging Face GPT-2 names, linear weights [in, out]
as cleave stores them and GPT-2's Conv1D does, so x @ W + b; tokens and
targets as floats; the shape in the metadata "config"). CLEAVE_FP32 and
CLEAVE_BF16: cleave's "loss" (F64) and "grad.<name>" (F32) at --dtype fp32
and bf16 (bf16_torch_driver --grads).

A GPT-2 written here from its equations (learned positions, pre-LN blocks,
causal attention, tanh GELU, the tied head, the mean next-token
cross-entropy) runs one forward and backward twice: in float32, which must
equal cleave's fp32 (loss within 1e-5 relative, every gradient's
max |a - b| / max |torch| <= 1e-4: the reference is the same model), and
under torch.autocast("cpu", dtype=torch.bfloat16) with float32 parameters,
the layernorms, softmax, GELU and cross-entropy in float32 (autocast's
matmuls in bf16, everything that cleave keeps F32 cast back), which
cleave's bf16 must match: loss within 1e-2 relative and every gradient's
cosine similarity above 0.99. Prints each figure; exits 1 on a failure."""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = raw[8 + n:]
    dts = {"F32": torch.float32, "F64": torch.float64}
    out = {}
    for name, e in head.items():
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=dts[e["dtype"]]).reshape(e["shape"]).clone()
    return out, meta


def gpt2_loss(p, cfg, tokens, targets, low):
    """The mean next-token cross-entropy; low: matmuls in bf16 under autocast, the rest in float32."""
    L, C, NH = cfg["layers"], cfg["channels"], cfg["heads"]
    B, T = tokens.shape
    hd = C // NH

    def f32(x):
        return x.float()

    def ln(x, pre):
        return F.layer_norm(f32(x), (C,), p[pre + ".weight"], p[pre + ".bias"], 1e-5)

    def lin(x, pre):
        return x @ p[pre + ".weight"] + p[pre + ".bias"]

    x = p["wte.weight"][tokens] + p["wpe.weight"][:T][None]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        h = "h.%d." % i
        qkv = lin(ln(x, h + "ln_1"), h + "attn.c_attn")
        q, k, v = qkv.split(C, dim=-1)
        q = q.reshape(B, T, NH, hd).transpose(1, 2)
        k = k.reshape(B, T, NH, hd).transpose(1, 2)
        v = v.reshape(B, T, NH, hd).transpose(1, 2)
        att = f32(q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = f32(x) + f32(lin(y, h + "attn.c_proj"))
        m = F.gelu(f32(lin(ln(x, h + "ln_2"), h + "mlp.c_fc")), approximate="tanh")
        x = x + f32(lin(m, h + "mlp.c_proj"))
    logits = ln(x, "ln_f") @ p["wte.weight"].t()
    return F.cross_entropy(f32(logits).reshape(B * T, -1), targets.reshape(-1))


def run(weights, cfg, tokens, targets, low):
    p = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    if low:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = gpt2_loss(p, cfg, tokens, targets, True)
    else:
        loss = gpt2_loss(p, cfg, tokens, targets, False)
    loss.backward()
    return float(loss), {k: v.grad for k, v in p.items()}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: bf16_torch.py IN CLEAVE_FP32 CLEAVE_BF16")
    inp, meta = read_st(sys.argv[1])
    cfg = json.loads(meta["config"])
    tokens = inp.pop("tokens").long()
    targets = inp.pop("targets").long()
    torch.manual_seed(0)
    bad = []
    for name, path, low in (("fp32", sys.argv[2], False), ("bf16", sys.argv[3], True)):
        ours, _ = read_st(path)
        tl, tg = run(inp, cfg, tokens, targets, low)
        cl = float(ours["loss"][0])
        rel = abs(cl - tl) / abs(tl)
        print("%s: loss cleave %.9f, torch%s %.9f (rel %.3g)" % (name, cl, " autocast" if low else "", tl, rel))
        if rel > (1e-2 if low else 1e-5):
            bad.append("%s loss rel %.3g" % (name, rel))
        worst_err, worst_cos, wn = 0.0, 1.0, ""
        for k, g in tg.items():
            a = ours["grad." + k].reshape(g.shape).double()
            b = g.double()
            err = float((a - b).abs().max() / b.abs().max())
            cos = float(torch.dot(a.flatten(), b.flatten()) / (a.norm() * b.norm()))
            worst_err = max(worst_err, err)
            if cos < worst_cos:
                worst_cos, wn = cos, k
            if (low and not cos > 0.99) or (not low and not err <= 1e-4):
                bad.append("%s grad.%s: cos %.6f, max rel err %.3g" % (name, k, cos, err))
        print("%s: %d gradients, lowest cosine %.6f (%s), max rel err %.3g" % (name, len(tg), worst_cos, wn, worst_err))
    if bad:
        print("FAILED: " + "; ".join(bad))
        sys.exit(1)


main()
