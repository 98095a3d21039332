#!/usr/bin/python3
"""PyTorch reference for cleave's correctness tests (tests/test_torch.c).

    torch_reference.py IN.safetensors OUT.safetensors

IN is written by `test_torch --write-input DIR`: initial weights (Hugging Face
GPT-2 names and layouts, or the CNN's conv/fc1/fc2/fc3), one batch, and the
metadata "model" ("gpt" | "cnn"), "config" and "adamw" (JSON strings). OUT
holds what cleave must reproduce, computed by an independent model built from
stock torch.nn modules (it shares no code or kernel with cleave):

    logits          F32 GPT [B,T,V], CNN [B,classes]   at the initial weights
    loss            F64 [1]    mean cross-entropy      at the initial weights
    grad.<name>     F32 one per parameter, same name, shape and layout as in IN
                    (the tied wte carries embedding + LM-head gradient)
    losses          F64 [steps] loss of each AdamW step on the same batch,
                    taken before that step's update

Invariants: float32 on CPU, one thread, deterministic algorithms, seed 0; the
result depends only on IN. cleave stores linear weights as [in, out] (GPT-2's
Conv1D layout and the CNN's fc*), nn.Linear as [out, in]: weights are
transposed on the way in and their gradients on the way out. AdamW uses two
parameter groups, weight decay on tensors with dim >= 2 and none on the rest.

The safetensors reader/writer here is self-contained (no safetensors package):
8-byte little-endian header length, JSON header with "__metadata__" (string
to string) and per-tensor dtype/shape/data_offsets relative to the buffer,
header padded with spaces to 8-byte alignment. scripts/compare_safetensors.py
imports read_safetensors from this file.
"""

import json
import math
import os
import struct
import sys

import numpy as np

# safetensors dtype name -> numpy little-endian dtype (BF16 handled apart)
_NP_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}
_DTYPE_SIZE = {"BF16": 2, **{k: np.dtype(v).itemsize for k, v in _NP_DTYPES.items()}}
_NAME_OF_NP = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32",
               np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}


class FormatError(Exception):
    pass


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key '{k}'")
        d[k] = v
    return d


def read_safetensors(path):
    """Returns (tensors, metadata): an ordered dict name -> numpy array (in
    file order) and the __metadata__ dict. Raises FormatError naming the
    file and the broken rule."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise FormatError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise FormatError(f"{path}: header length {n} exceeds the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{path}: header is not valid JSON: {e}")
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise FormatError(f"{path}: __metadata__ must map strings to strings")
    buf = memoryview(blob)[8 + n:]
    spans = []
    tensors = {}
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{path}: tensor '{name}' needs exactly dtype, shape and data_offsets")
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in _DTYPE_SIZE:
            raise FormatError(f"{path}: tensor '{name}' has unknown dtype {dt!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise FormatError(f"{path}: tensor '{name}' shape must be a list of non-negative integers")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) for o in offs)
                or not 0 <= offs[0] <= offs[1] <= len(buf)):
            raise FormatError(f"{path}: tensor '{name}' data_offsets {offs} outside the {len(buf)}-byte buffer")
        numel = math.prod(shape)
        if numel * _DTYPE_SIZE[dt] != offs[1] - offs[0]:
            raise FormatError(f"{path}: tensor '{name}' {dt}{shape} needs {numel * _DTYPE_SIZE[dt]} bytes, "
                              f"data_offsets give {offs[1] - offs[0]}")
        raw = buf[offs[0]:offs[1]]
        if dt == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_NP_DTYPES[dt]).astype(np.dtype(_NP_DTYPES[dt]).newbyteorder("="))
        tensors[name] = arr.reshape(shape).copy()
        spans.append((offs[0], offs[1], name))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise FormatError(f"{path}: tensor '{name}' starts at {b}, expected {pos} (gap or overlap)")
        pos = e
    if pos != len(buf):
        raise FormatError(f"{path}: tensors cover {pos} of the {len(buf)}-byte buffer")
    # keep file (buffer) order
    ordered = {name: tensors[name] for _, _, name in spans}
    return ordered, meta


def write_safetensors(path, items, metadata=None):
    """items: list of (name, numpy array) written in that order; metadata:
    dict of str -> str. Written to PATH.tmp then renamed onto PATH."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, off = [], 0
    for name, arr in items:
        arr = np.ascontiguousarray(arr)
        dt = _NAME_OF_NP.get(arr.dtype)
        if dt is None:
            raise ValueError(f"tensor '{name}': unsupported dtype {arr.dtype}")
        data = arr.astype(np.dtype(_NP_DTYPES[dt])).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-(8 + len(h)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _need(cond, msg):
    if not cond:
        raise FormatError(msg)


# ---------------------------------------------------------------------------
# Models (defined after importing torch, which main() does)

def build_models(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.n_head = H
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.gelu = nn.GELU(approximate="tanh")
            self.mlp_proj = nn.Linear(4 * C, C)

        def attn(self, x):
            B, T, C = x.shape
            H = self.n_head
            hs = C // H
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, T, H, hs).transpose(1, 2)  # [B,H,T,hs]
            k = k.view(B, T, H, hs).transpose(1, 2)
            v = v.view(B, T, H, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf"))
            att = torch.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))
            return x

    class GPT(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            C = cfg["n_embd"]
            self.wte = nn.Embedding(cfg["vocab_size"], C)
            self.wpe = nn.Embedding(cfg["n_positions"], C)
            self.h = nn.ModuleList([Block(C, cfg["n_head"]) for _ in range(cfg["n_layer"])])
            self.ln_f = nn.LayerNorm(C, eps=1e-5)

        def forward(self, tokens):
            B, T = tokens.shape
            pos = torch.arange(T, dtype=torch.long)
            x = self.wte(tokens) + self.wpe(pos)[None]
            for blk in self.h:
                x = blk(x)
            # tied head: the very same Parameter as the embedding
            return F.linear(self.ln_f(x), self.wte.weight)

        def loss(self, logits, targets):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        def file_params(self):
            """(file name, parameter, transposed?) in checkpoint naming."""
            out = [("wte.weight", self.wte.weight, False), ("wpe.weight", self.wpe.weight, False)]
            for i, b in enumerate(self.h):
                p = f"h.{i}."
                out += [(p + "ln_1.weight", b.ln_1.weight, False), (p + "ln_1.bias", b.ln_1.bias, False),
                        (p + "attn.c_attn.weight", b.c_attn.weight, True), (p + "attn.c_attn.bias", b.c_attn.bias, False),
                        (p + "attn.c_proj.weight", b.c_proj.weight, True), (p + "attn.c_proj.bias", b.c_proj.bias, False),
                        (p + "ln_2.weight", b.ln_2.weight, False), (p + "ln_2.bias", b.ln_2.bias, False),
                        (p + "mlp.c_fc.weight", b.c_fc.weight, True), (p + "mlp.c_fc.bias", b.c_fc.bias, False),
                        (p + "mlp.c_proj.weight", b.mlp_proj.weight, True), (p + "mlp.c_proj.bias", b.mlp_proj.bias, False)]
            out += [("ln_f.weight", self.ln_f.weight, False), ("ln_f.bias", self.ln_f.bias, False)]
            return out

    class CNN(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.conv = nn.Conv2d(cfg["in_channels"], cfg["conv_channels"], cfg["conv_kernel"],
                                  stride=cfg["conv_stride"], padding=cfg["conv_pad"])
            self.relu1 = nn.ReLU()
            self.pool = nn.MaxPool2d(cfg["pool"], stride=cfg["pool"])
            self.flatten = nn.Flatten()
            with torch.no_grad():
                n = self.flatten(self.pool(self.conv(torch.zeros(1, cfg["in_channels"], cfg["height"],
                                                                 cfg["width"])))).shape[1]
            self.fc1 = nn.Linear(n, cfg["hidden"])
            self.fc2 = nn.Linear(cfg["hidden"], cfg["hidden2"])
            self.relu2 = nn.ReLU()
            self.fc3 = nn.Linear(cfg["hidden2"], cfg["classes"])

        def forward(self, x):
            x = self.fc1(self.flatten(self.pool(self.relu1(self.conv(x)))))  # part 1
            return self.fc3(self.relu2(self.fc2(x)))                           # part 2

        def loss(self, logits, labels):
            return F.cross_entropy(logits, labels)

        def file_params(self):
            return [("conv.weight", self.conv.weight, False), ("conv.bias", self.conv.bias, False),
                    ("fc1.weight", self.fc1.weight, True), ("fc1.bias", self.fc1.bias, False),
                    ("fc2.weight", self.fc2.weight, True), ("fc2.bias", self.fc2.bias, False),
                    ("fc3.weight", self.fc3.weight, True), ("fc3.bias", self.fc3.bias, False)]

    return GPT, CNN


GPT_KEYS = ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")
CNN_KEYS = ("in_channels", "height", "width", "conv_channels", "conv_kernel", "conv_stride", "conv_pad",
            "pool", "hidden", "hidden2", "classes")
ADAMW_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "steps")


def _json_meta(meta, key, keys, path):
    _need(key in meta, f"{path}: metadata '{key}' missing")
    try:
        v = json.loads(meta[key])
    except ValueError as e:
        raise FormatError(f"{path}: metadata '{key}' is not JSON: {e}")
    _need(isinstance(v, dict), f"{path}: metadata '{key}' is not a JSON object")
    for k in keys:
        _need(k in v and isinstance(v[k], (int, float)) and not isinstance(v[k], bool),
              f"{path}: metadata '{key}' lacks number '{k}'")
    return v


def load_model(torch, tensors, meta, path):
    """Builds the nn model from IN, returns (model, inputs, targets)."""
    GPT, CNN = build_models(torch)
    kind = meta.get("model")
    _need(kind in ("gpt", "cnn"), f"{path}: metadata 'model' must be 'gpt' or 'cnn' (got {kind!r})")
    cfg = _json_meta(meta, "config", GPT_KEYS if kind == "gpt" else CNN_KEYS, path)
    for k in cfg:
        _need(isinstance(cfg[k], int), f"{path}: config '{k}' must be an integer")
    if kind == "gpt":
        _need(cfg["n_embd"] % cfg["n_head"] == 0, f"{path}: n_head must divide n_embd")
        model = GPT(cfg)
        inp_name, tgt_name = "tokens", "targets"
    else:
        model = CNN(cfg)
        inp_name, tgt_name = "x", "labels"
    expected = {name for name, _, _ in model.file_params()} | {inp_name, tgt_name}
    extra = sorted(set(tensors) - expected)
    _need(not extra, f"{path}: unexpected tensors {extra}")
    with torch.no_grad():
        for name, p, transposed in model.file_params():
            _need(name in tensors, f"{path}: tensor '{name}' missing")
            a = tensors[name]
            want = tuple(p.shape[::-1]) if transposed else tuple(p.shape)
            _need(a.dtype == np.float32 and a.shape == want,
                  f"{path}: tensor '{name}' must be F32{list(want)} (got {a.dtype}{list(a.shape)})")
            t = torch.from_numpy(a)
            p.copy_(t.t() if transposed else t)
    for n in (inp_name, tgt_name):
        _need(n in tensors, f"{path}: tensor '{n}' missing")
    inp, tgt = tensors[inp_name], tensors[tgt_name]
    _need(tgt.dtype == np.int32, f"{path}: '{tgt_name}' must be I32")
    if kind == "gpt":
        _need(inp.dtype == np.int32 and inp.ndim == 2 and tgt.shape == inp.shape,
              f"{path}: tokens and targets must be I32 [B,T] of the same shape")
        _need(1 <= inp.shape[1] <= cfg["n_positions"], f"{path}: T={inp.shape[1]} exceeds n_positions")
        V = cfg["vocab_size"]
        _need(inp.min() >= 0 and inp.max() < V and tgt.min() >= 0 and tgt.max() < V,
              f"{path}: token ids outside [0, {V})")
        inp = torch.from_numpy(inp.astype(np.int64))
    else:
        want = (inp.shape[0], cfg["in_channels"], cfg["height"], cfg["width"])
        _need(inp.dtype == np.float32 and inp.shape == want and tgt.shape == (want[0],),
              f"{path}: x must be F32 [B,{want[1]},{want[2]},{want[3]}] and labels I32 [B]")
        _need(tgt.min() >= 0 and tgt.max() < cfg["classes"], f"{path}: labels outside [0, {cfg['classes']})")
        inp = torch.from_numpy(inp)
    return model, inp, torch.from_numpy(tgt.astype(np.int64))


def run_reference(torch, model, inp, tgt, adamw):
    """Returns the list of (name, numpy array) for OUT."""
    params = [p for _, p, _ in model.file_params()]
    assert len({id(p) for p in params}) == len(params) == len(list(model.parameters()))
    # initial forward/backward
    model.zero_grad(set_to_none=True)
    logits = model(inp)
    loss = model.loss(logits, tgt)
    loss.backward()
    out = [("logits", logits.detach().numpy().astype(np.float32)),
           ("loss", np.array([loss.item()], dtype=np.float64))]
    for name, p, transposed in model.file_params():
        g = p.grad.detach()
        out.append(("grad." + name, np.ascontiguousarray((g.t() if transposed else g).numpy(), dtype=np.float32)))
    # AdamW steps on the same batch
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(adamw["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(adamw["lr"]), betas=(float(adamw["beta1"]), float(adamw["beta2"])),
                            eps=float(adamw["eps"]), foreach=False)
    losses = []
    for _ in range(int(adamw["steps"])):
        opt.zero_grad(set_to_none=True)
        loss = model.loss(model(inp), tgt)
        loss.backward()
        losses.append(loss.item())
        if adamw["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, float(adamw["grad_clip"]))
        opt.step()
    out.append(("losses", np.array(losses, dtype=np.float64)))
    return out


def setup_torch():
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def main(argv):
    if len(argv) != 3:
        print("usage: torch_reference.py IN.safetensors OUT.safetensors", file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    torch = setup_torch()
    try:
        tensors, meta = read_safetensors(src)
        adamw = _json_meta(meta, "adamw", ADAMW_KEYS, src)
        _need(isinstance(adamw["steps"], int) and adamw["steps"] >= 0, f"{src}: adamw steps must be an integer >= 0")
        model, inp, tgt = load_model(torch, tensors, meta, src)
    except (OSError, FormatError) as e:
        print(f"torch_reference: {e}", file=sys.stderr)
        return 1
    out = run_reference(torch, model, inp, tgt, adamw)
    write_safetensors(dst, out, {"torch_version": torch.__version__,
                                 "command": " ".join(["scripts/torch_reference.py"] + argv[1:]),
                                 "model": meta["model"]})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
