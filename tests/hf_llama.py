#!/usr/bin/python3
"""Hugging Face Llama checkpoints as transformers writes them, for tests/cli_hf_llama.sh
(no transformers or safetensors package: the safetensors files by hand, torch's tensors).

    hf_llama.py make DIR [--layers 2] [--hidden 64] [--heads 4] [--kv 2] [--ffn 96] [--vocab 256]
                         [--ctx 64] [--tied] [--dtype f32|bf16|f16] [--shards N] [--seed 1]
                         [--drop NAME] [--set KEY=JSON] [--retype NAME=F64] [--inv-freq]
                         [--experts E --topk K]
        a LlamaForCausalLM directory: config.json with its keys, the tensors under HF's names
        ([out, in] linear weights, torch.randn) in one model.safetensors or N shards named by
        model.safetensors.index.json; tied: no lm_head.weight (as save_pretrained drops it);
        --inv-freq adds the rotary buffers older versions saved; --drop, --set (DELETE removes
        the key), --retype damage it. With --experts a MixtralForCausalLM directory: MixtralConfig's
        keys (num_local_experts, num_experts_per_tok, router_aux_loss_coef, sliding_window null) and,
        instead of each layer's mlp, block_sparse_moe.gate.weight [E, C] and
        block_sparse_moe.experts.M.w1 [F, C], w2 [C, F], w3 [F, C]
    hf_llama.py same A B
        B holds A's tensors: the same names and shapes, and values equal bit for bit (where the
        dtypes differ, both widened to float32 and compared exactly); B's config.json has
        A's architectures and model_type and its model keys with A's values, its torch_dtype B's
        tensors' dtype; exit 1 naming the first difference
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_make  # noqa: E402  (its safetensors writer and --set)

DT = {"f32": (torch.float32, "F32", "float32"), "bf16": (torch.bfloat16, "BF16", "bfloat16"),
      "f16": (torch.float16, "F16", "float16")}
BY_ST = {v[1]: v[0] for v in DT.values()}
BY_ST["F64"] = torch.float64


def raw(t):
    """The tensor's little-endian bytes."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_st(path, tensors, dtypes):
    """tensors: name -> torch tensor; dtypes: name -> safetensors dtype string."""
    hf_make.write_safetensors(path, [(n, dtypes[n], t.shape, raw(t)) for n, t in tensors.items()], {"format": "pt"})


def read_st(path):
    """name -> (safetensors dtype, torch tensor)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for name, e in h.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        data = bytearray(b[8 + n + lo:8 + n + hi])
        dt = BY_ST[e["dtype"]]
        if dt == torch.bfloat16:
            t = torch.frombuffer(data, dtype=torch.int16).view(torch.bfloat16) if data else torch.zeros(0, dtype=dt)
        else:
            t = torch.frombuffer(data, dtype=dt) if data else torch.zeros(0, dtype=dt)
        out[name] = (e["dtype"], t.reshape(e["shape"]))
    return out


def read_dir(d):
    """All tensors of an HF directory (one file or the index's shards)."""
    ix = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(ix):
        return read_st(os.path.join(d, "model.safetensors"))
    wm = json.load(open(ix))["weight_map"]
    out = {}
    for f in sorted(set(wm.values())):
        part = read_st(os.path.join(d, f))
        for name, v in part.items():
            if wm.get(name) != f:
                sys.exit(f"{ix}: tensor {name} is in {f}, the weight_map says {wm.get(name)}")
            out[name] = v
    if set(out) != set(wm):
        sys.exit(f"{ix}: weight_map names {sorted(set(wm) - set(out))[:3]} that no file holds")
    return out


def make(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    for k, v in (("layers", 2), ("hidden", 64), ("heads", 4), ("kv", 2), ("ffn", 96), ("vocab", 256), ("ctx", 64),
                 ("shards", 1), ("seed", 1), ("experts", 0), ("topk", 2)):
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--inv-freq", action="store_true")
    p.add_argument("--dtype", default="f32", choices=list(DT))
    p.add_argument("--drop", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--retype", action="append", default=[])
    a = p.parse_args(argv)
    g = torch.Generator().manual_seed(a.seed)
    C, F, V, hd = a.hidden, a.ffn, a.vocab, a.hidden // a.heads
    K = a.kv * hd
    dt, st, name = DT[a.dtype]
    shapes = [("model.embed_tokens.weight", (V, C))]
    for l in range(a.layers):
        pre = f"model.layers.{l}."
        shapes += [(pre + "self_attn.q_proj.weight", (C, C)), (pre + "self_attn.k_proj.weight", (K, C)),
                   (pre + "self_attn.v_proj.weight", (K, C)), (pre + "self_attn.o_proj.weight", (C, C))]
        if a.experts:  # MixtralSparseMoeBlock: the router, then each expert's nn.Linear weights
            shapes.append((pre + "block_sparse_moe.gate.weight", (a.experts, C)))
            for e in range(a.experts):
                x = f"{pre}block_sparse_moe.experts.{e}."
                shapes += [(x + "w1.weight", (F, C)), (x + "w2.weight", (C, F)), (x + "w3.weight", (F, C))]
        else:
            shapes += [(pre + "mlp.gate_proj.weight", (F, C)), (pre + "mlp.up_proj.weight", (F, C)),
                       (pre + "mlp.down_proj.weight", (C, F))]
        shapes += [(pre + "input_layernorm.weight", (C,)), (pre + "post_attention_layernorm.weight", (C,))]
        if a.inv_freq:
            shapes.append((pre + "self_attn.rotary_emb.inv_freq", (hd // 2,)))
    shapes.append(("model.norm.weight", (C,)))
    if not a.tied:
        shapes.append(("lm_head.weight", (V, C)))
    tensors, dtypes = {}, {}
    for n, s in shapes:
        if n in a.drop:
            continue
        t = torch.randn(*s, generator=g) * (0.02 if len(s) == 2 else 1.0) + (1.0 if len(s) == 1 else 0.0)
        tensors[n], dtypes[n] = t.to(dt), st
    for r in a.retype:
        n, ty = r.split("=")
        tensors[n], dtypes[n] = tensors[n].to(BY_ST[ty]), ty
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
           "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv, "vocab_size": V,
           "max_position_embeddings": a.ctx, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": a.tied,
           "torch_dtype": name, "rope_scaling": None, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
           "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "pretraining_tp": 1,
           "transformers_version": "4.44.0", "use_cache": True}
    if a.experts:  # MixtralConfig's keys (it has no bias settings)
        for k in ("attention_bias", "mlp_bias", "pretraining_tp"):
            del cfg[k]
        cfg.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": a.experts,
                    "num_experts_per_tok": a.topk, "router_aux_loss_coef": 0.02, "output_router_logits": False,
                    "sliding_window": None, "router_jitter_noise": 0.0})
    hf_make.apply_sets(cfg, a.set)
    os.makedirs(a.dir, exist_ok=True)
    json.dump(cfg, open(os.path.join(a.dir, "config.json"), "w"), indent=2)
    if a.shards == 1:
        write_st(os.path.join(a.dir, "model.safetensors"), tensors, dtypes)
        return
    names = list(tensors)
    per = -(-len(names) // a.shards)
    wm, total = {}, 0
    for k in range(a.shards):
        f = f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k * per:(k + 1) * per]}
        write_st(os.path.join(a.dir, f), part, dtypes)
        for n, t in part.items():
            wm[n] = f
            total += len(raw(t))
    json.dump({"metadata": {"total_size": total}, "weight_map": wm},
              open(os.path.join(a.dir, "model.safetensors.index.json"), "w"), indent=2)


def same(a, b):
    ta, tb = read_dir(a), read_dir(b)
    ta = {n: v for n, v in ta.items() if not n.endswith(".rotary_emb.inv_freq")}  # buffers, not parameters
    if set(ta) != set(tb):
        sys.exit(f"{b}: tensors {sorted(set(ta) ^ set(tb))[:4]} are in one directory only")
    dts = set()
    for n, (da, x) in ta.items():
        db, y = tb[n]
        dts.add(db)
        if tuple(x.shape) != tuple(y.shape):
            sys.exit(f"{b}: {n} is {list(y.shape)}, {a} has {list(x.shape)}")
        if da == db:
            ok = raw(x) == raw(y)
        else:
            ok = bool(torch.equal(x.float(), y.float()))
        if not ok:
            sys.exit(f"{b}: {n} ({db}) differs from {a}'s ({da})")
    ca, cb = json.load(open(os.path.join(a, "config.json"))), json.load(open(os.path.join(b, "config.json")))
    if cb.get("architectures") != ca["architectures"] or cb.get("model_type") != ca["model_type"]:
        sys.exit(f"{b}/config.json: architectures {cb.get('architectures')}, model_type {cb.get('model_type')}, "
                 f"not {a}'s {ca['architectures']}, {ca['model_type']}")
    keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "rope_scaling"]
    if ca["model_type"] == "mixtral":
        keys += ["num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "sliding_window"]
    for k in keys:
        if k not in cb or cb[k] != ca.get(k, cb[k]):
            sys.exit(f"{b}/config.json: {k} is {cb.get(k, '(absent)')}, {a} has {ca.get(k)}")
    want = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dts.pop()] if len(dts) == 1 else None
    if cb.get("torch_dtype") != want:
        sys.exit(f"{b}/config.json: torch_dtype {cb.get('torch_dtype')}, its tensors are {want}")
    print(f"same: {len(ta)} tensors of {a} in {b}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "make":
        make(sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "same":
        same(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
