#!/usr/bin/python3
"""Hugging Face GPT-2 checkpoint directories, written the way transformers'
save_pretrained writes them (config.json with GPT-2's keys and no cleave
ones, model.safetensors, no marker), for tests/cli_convert_hf.sh. No
transformers package: the safetensors file is written by hand.

    hf_make.py from-cleave SRC DST [options]   SRC's model.safetensors and shape
    hf_make.py random DST --layers L --heads H --embd C --positions P --vocab V [--seed S] [options]
                                              torch-initialised weights (GPT-2's init: normal std 0.02,
                                              zero biases, unit layernorms)
options:
    --prefix        names under "transformer." (GPT2LMHeadModel) instead of bare (GPT2Model)
    --lm-head       also store lm_head.weight (= wte)
    --masks         also store h.N.attn.bias (the causal mask buffer) and h.N.attn.masked_bias
    --bf16          store BF16 (round to nearest even) instead of F32
    --f16           store F16 (which cleave refuses)
    --want FILE     also write the F32 values the directory holds, under cleave's names, to FILE
    --drop NAME     leave tensor NAME (cleave's name) out
    --set KEY=JSON  set (or with JSON 'DELETE' remove) a config.json key
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch_reference as ref  # noqa: E402


def gpt2_names(L):
    out = ["wte.weight", "wpe.weight"]
    for i in range(L):
        p = f"h.{i}."
        out += [p + n for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                                "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                                "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return out + ["ln_f.weight", "ln_f.bias"]


def random_gpt2(L, H, C, P, V, seed):
    torch = ref.setup_torch()
    g = torch.Generator().manual_seed(seed)
    t = {}
    for n in gpt2_names(L):
        base = n.split(".", 2)[-1] if n.startswith("h.") else n
        shape = {"wte.weight": (V, C), "wpe.weight": (P, C), "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
                 "attn.c_proj.weight": (C, C), "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
                 "mlp.c_proj.weight": (4 * C, C)}.get(base, (C,))
        if n.endswith("weight") and len(shape) == 2:
            x = torch.randn(*shape, generator=g) * 0.02
        elif "ln" in n and n.endswith("weight"):
            x = 1 + 0.1 * torch.randn(*shape, generator=g)  # not exactly 1, so a swapped tensor shows
        else:
            x = 0.01 * torch.randn(*shape, generator=g)
        t[n] = x.numpy().astype(np.float32)
    return t


def to_bf16(a):
    """float32 -> bfloat16 bits (round to nearest even) and their float32 value."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r, (r.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, items, meta=None):
    header, blobs, at = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in items:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def apply_sets(cfg, sets):
    """cfg with each KEY=JSON of sets applied (DELETE removes the key)."""
    for kv in sets:
        k, v = kv.split("=", 1)
        if v == "DELETE":
            cfg.pop(k, None)
        else:
            cfg[k] = json.loads(v)
    return cfg


def hf_config(L, H, C, P, V):
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": V - 1,
            "embd_pdrop": 0.1, "eos_token_id": V - 1, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2", "n_ctx": P, "n_embd": C, "n_head": H, "n_inner": None, "n_layer": L, "n_positions": P,
            "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
            "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
            "torch_dtype": "float32", "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["from-cleave", "random"])
    ap.add_argument("paths", nargs="+")
    for k in ("layers", "heads", "embd", "positions", "vocab"):
        ap.add_argument("--" + k, type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix", action="store_true")
    ap.add_argument("--lm-head", action="store_true")
    ap.add_argument("--masks", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--f16", action="store_true")
    ap.add_argument("--want")
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    if a.mode == "from-cleave":
        src, dst = a.paths
        cfg = json.load(open(os.path.join(src, "config.json")))
        L, H, C, P, V = (cfg[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"))
        tensors, _ = ref.read_safetensors(os.path.join(src, "model.safetensors"))
        tensors = {n: np.asarray(tensors[n], dtype=np.float32) for n in gpt2_names(L)}
    else:
        (dst,) = a.paths
        L, H, C, P, V = a.layers, a.heads, a.embd, a.positions, a.vocab
        tensors = random_gpt2(L, H, C, P, V, a.seed)
    os.makedirs(dst, exist_ok=True)
    pre = "transformer." if a.prefix else ""
    items, want = [], []
    for n, x in tensors.items():
        if n in a.drop:
            continue
        if a.bf16:
            bits, x = to_bf16(x)
            items.append((pre + n, "BF16", x.shape, bits.astype("<u2").tobytes()))
        elif a.f16:
            items.append((pre + n, "F16", x.shape, x.astype("<f2").tobytes()))
        else:
            items.append((pre + n, "F32", x.shape, x.astype("<f4").tobytes()))
        want.append((n, "F32", x.shape, x.astype("<f4").tobytes()))
        if a.masks and n.endswith("attn.c_attn.bias"):
            blk = n[: -len("c_attn.bias")]
            mask = np.tril(np.ones((P, P), dtype=np.float32)).reshape(1, 1, P, P)
            items.append((pre + blk + "bias", "F32", mask.shape, mask.astype("<f4").tobytes()))
            items.append((pre + blk + "masked_bias", "F32", (), np.float32(-1e4).astype("<f4").tobytes()))
    if a.lm_head:
        x = [it for it in items if it[0] == pre + "wte.weight"][0]
        items.append(("lm_head.weight",) + x[1:])
    write_safetensors(os.path.join(dst, "model.safetensors"), items, {"format": "pt"})
    if a.want:
        write_safetensors(a.want, want, {"format": "pt"})
    cfg = apply_sets(hf_config(L, H, C, P, V), a.set)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
