#!/usr/bin/python3
"""PyTorch's number-format conversions, for tests/cli_format.sh.

    format_ref.py          the table build/tests/test_format --ref FILE compares with
    format_ref.py st FILE  a safetensors file of torch's conversions, for
                           build/tests/test_safetensors --torch FILE: "x" F32, "x.bf16" and
                           "x.f16" its values as torch rounds them, "w" BF16 and "w.f32"
                           torch's widening of it (the header by hand: no safetensors package)

The table, on stdout:

    n F32 BF16 F16    an F32 value (bits) and torch's .to(bfloat16), .to(float16) of it
    w H F32BF F32H    a 16-bit pattern H widened by torch as BF16 and as F16

hexadecimal bits. The F32 values: specials, every boundary the rounding has
(ties, overflow, subnormals) and 200000 random bit patterns."""
import json
import struct
import sys

import torch


def f32_values(g):
    """Specials, ties and their neighbours at every exponent, random bit patterns (int64 bits, F32 view)."""
    fixed = [0x00000000, 0x80000000, 0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x3F801000,
             0x3F803000, 0x7F7FFFFF, 0x7F7F7FFF, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x47800000, 0x38800000,
             0x387FC000, 0x33800000, 0x33000000, 0x33000001, 0x33C00000, 0x00000001, 0x00018000, 0x7F800000,
             0xFF800000, 0x3DCCCCCD, 0x3EAAAAAB]
    # ties and their neighbours at every exponent, for both formats
    for e in range(0, 255):
        for low in (0x8000, 0x7FFF, 0x8001, 0x18000, 0x1000, 0x0FFF, 0x1001, 0x3000):
            fixed.append((e << 23) | low)
            fixed.append(0x80000000 | (e << 23) | low)
    rnd = torch.randint(0, 2**32, (200000,), generator=g, dtype=torch.int64)
    vals = torch.tensor(fixed, dtype=torch.int64)
    bits = torch.cat([vals, rnd])
    # to int32 bit patterns (two's complement), then view as float32
    return bits, ((bits + 2**31) % 2**32 - 2**31).to(torch.int32).view(torch.float32)


def write_st(path, tensors):
    """tensors: (name, dtype string, 1-D tensor) in order; little-endian bytes as stored in memory."""
    head, data, at = {}, b"", 0
    for name, dt, t in tensors:
        raw = t.contiguous().view(torch.uint8).numpy().tobytes()
        head[name] = {"dtype": dt, "shape": [t.numel()], "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    h = json.dumps(head).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as fp:
        fp.write(struct.pack("<Q", len(h)) + h + data)


def main():
    g = torch.Generator().manual_seed(28)
    bits, f = f32_values(g)
    if len(sys.argv) == 3 and sys.argv[1] == "st":
        w = torch.randint(-2**15, 2**15, (65536 + 1000,), generator=g, dtype=torch.int64)
        w[:65536] = torch.arange(-2**15, 2**15)  # every pattern, then some again
        w = w.to(torch.int16).view(torch.bfloat16)
        write_st(sys.argv[2], [("x", "F32", f), ("x.bf16", "BF16", f.to(torch.bfloat16)),
                               ("x.f16", "F16", f.to(torch.float16)), ("w", "BF16", w), ("w.f32", "F32", w.to(torch.float32))])
        return
    bf = f.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
    h = f.to(torch.float16).view(torch.int16).to(torch.int64) & 0xFFFF
    out = sys.stdout
    for a, b, c in zip(bits.tolist(), bf.tolist(), h.tolist()):
        out.write(f"n {a:08x} {b:04x} {c:04x}\n")
    pat = torch.arange(65536, dtype=torch.int64)
    as16 = ((pat + 2**15) % 2**16 - 2**15).to(torch.int16)
    wb = as16.view(torch.bfloat16).to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    wh = as16.view(torch.float16).to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    for a, b, c in zip(pat.tolist(), wb.tolist(), wh.tolist()):
        out.write(f"w {a:04x} {b:08x} {c:08x}\n")


if __name__ == "__main__":
    main()
