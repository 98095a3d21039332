#!/usr/bin/python3
"""The Llama kernels' reference, computed with PyTorch's own ops in float32,
for tests/cli_llama_kernels.sh:

    llama_ref.py IN REF

IN is what `build/tests/test_llama_kernels --write-input IN` wrote (inputs as
F32 tensors, the shapes in the metadata); REF gets, as F32 tensors, what
`test_llama_kernels --torch IN REF` compares with its kernels:

    rms.out rms.dx rms.dw           LlamaRMSNorm's equations (x.pow(2).mean, rsqrt, w * (x * rstd))
    swi.out swi.dgate swi.dup       F.silu(gate) * up
    att.qkv_rot att.out att.dqkv    rotate-half RoPE at positions pos0.. on q and k, causal
    att1.*                          softmax attention with repeat_interleave for the KV heads
                                    (KV heads AKV, then 1: multi-query), gradients by autograd
    rope.freq rope.cos rope.sin     HF's LlamaRotaryEmbedding inv_freq and tables (theta 1e4), positions [0, TP)
    rope3.freq rope3.cos rope3.sin  the same with rope_scaling type llama3 (HF's
                                    _compute_llama3_parameters), theta 5e5
    rope31.freq                     inv_freq of Llama 3.1's own rope_scaling (hd 128)

written from Hugging Face's equations, not imported from transformers (the
files' headers by hand: no safetensors package)."""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

from format_ref import write_st  # tests/format_ref.py: the safetensors header by hand


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    dts = {"F32": torch.float32, "F64": torch.float64}
    for name, e in head.items():
        assert e["dtype"] in dts, name
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=dts[e["dtype"]]).reshape(e["shape"])
    return out, meta


def inv_freq_default(theta, dim):
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def inv_freq_llama3(theta, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    inv_freq = inv_freq_default(theta, dim)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def cos_sin(inv_freq, positions):
    """LlamaRotaryEmbedding.forward in float32: [P, dim] each (attention_scaling 1)."""
    pos = positions[None, :].float()
    freqs = (inv_freq[None, :, None].float() @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[0], emb.sin()[0]


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def attention(qkv_in, dout, B, T, H, KV, hd, pos0):
    """rope on q and k, causal softmax attention with KV heads; returns rotated qkv, out, dqkv."""
    qkv = qkv_in.reshape(B, T, (H + 2 * KV) * hd).clone().requires_grad_(True)
    q = qkv[:, :, : H * hd].reshape(B, T, H, hd).transpose(1, 2)
    k = qkv[:, :, H * hd:(H + KV) * hd].reshape(B, T, KV, hd).transpose(1, 2)
    v = qkv[:, :, (H + KV) * hd:].reshape(B, T, KV, hd).transpose(1, 2)
    cos, sin = cos_sin(inv_freq_default(10000.0, hd), torch.arange(pos0, pos0 + T))
    cos, sin = cos[None, None], sin[None, None]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rot = torch.cat([q.transpose(1, 2).reshape(B, T, H * hd), k.transpose(1, 2).reshape(B, T, KV * hd),
                     v.transpose(1, 2).reshape(B, T, KV * hd)], dim=-1)
    kr = k.repeat_interleave(H // KV, dim=1)
    vr = v.repeat_interleave(H // KV, dim=1)
    scores = torch.matmul(q, kr.transpose(2, 3)) * hd ** -0.5
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    att = torch.softmax(scores, dim=-1, dtype=torch.float32)
    out = torch.matmul(att, vr).transpose(1, 2).reshape(B, T, H * hd)
    out.backward(dout.reshape(B, T, H * hd))
    return rot, out, qkv.grad


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: llama_ref.py IN REF")
    torch.set_num_threads(1)
    t, meta = read_st(sys.argv[1])
    RN, RC, SN, SF, AB, AT, AH, AKV, AHD, APOS0, TP = (int(v) for v in meta["shapes"].split())
    eps = float(meta["rms_eps"])
    l3 = meta["llama3"].split()
    L3HD, L3P = int(l3[0]), int(l3[1])
    l3theta, factor, low, high = (float(v) for v in l3[2:6])
    old, THD = int(l3[6]), int(l3[7])
    res = []

    x = t["rms.x"].reshape(RN, RC).clone().requires_grad_(True)
    w = t["rms.w"].clone().requires_grad_(True)
    variance = x.pow(2).mean(-1, keepdim=True)
    y = w * (x * torch.rsqrt(variance + eps))
    y.backward(t["rms.dout"].reshape(RN, RC))
    res += [("rms.out", y), ("rms.dx", x.grad), ("rms.dw", w.grad)]

    g = t["swi.gate"].clone().requires_grad_(True)
    u = t["swi.up"].clone().requires_grad_(True)
    so = F.silu(g) * u
    so.backward(t["swi.dout"])
    res += [("swi.out", so), ("swi.dgate", g.grad), ("swi.dup", u.grad)]

    for pre, kv in (("att", AKV), ("att1", 1)):
        rot, out, dqkv = attention(t[pre + ".qkv"], t[pre + ".dout"], AB, AT, AH, kv, AHD, APOS0)
        res += [(pre + ".qkv_rot", rot), (pre + ".out", out), (pre + ".dqkv", dqkv)]

    f = inv_freq_default(10000.0, THD)
    cos, sin = cos_sin(f, torch.arange(TP))
    res += [("rope.freq", f), ("rope.cos", cos[:, : THD // 2]), ("rope.sin", sin[:, : THD // 2])]
    f = inv_freq_llama3(l3theta, L3HD, factor, low, high, old)
    cos, sin = cos_sin(f, torch.arange(L3P))
    res += [("rope3.freq", f), ("rope3.cos", cos[:, : L3HD // 2]), ("rope3.sin", sin[:, : L3HD // 2])]
    # Llama 3.1's own rope_scaling (config.json): head width 128, theta 5e5, factor 8, 1, 4, 8192
    res += [("rope31.freq", inv_freq_llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192))]
    write_st(sys.argv[2], [(name, "F32", v.detach().reshape(-1).contiguous()) for name, v in res])


if __name__ == "__main__":
    main()
