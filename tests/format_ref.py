#!/usr/bin/python3
"""PyTorch's number-format conversions, for tests/cli_format.sh (compared by
build/tests/test_format --ref FILE). Writes to stdout:

    n F32 BF16 F16    an F32 value (bits) and torch's .to(bfloat16), .to(float16) of it
    w H F32BF F32H    a 16-bit pattern H widened by torch as BF16 and as F16

hexadecimal bits. The F32 values: specials, every boundary the rounding has
(ties, overflow, subnormals) and 200000 random bit patterns."""
import sys

import torch


def main():
    g = torch.Generator().manual_seed(28)
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
    f = ((bits + 2**31) % 2**32 - 2**31).to(torch.int32).view(torch.float32)
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
