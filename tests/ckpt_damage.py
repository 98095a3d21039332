#!/usr/bin/env python3
"""Damages one file of a cleave checkpoint directory in one way, for the
bad-input table (tests/cli_bad_input.sh). Standard library only.

usage: ckpt_damage.py DIR HOW ARGS...
  rm FILE                      remove FILE
  text FILE TEXT               replace FILE's content with TEXT
  json FILE KEY VALUE          set KEY of FILE's top-level object to VALUE (JSON text, kept verbatim)
  truncate FILE N              keep FILE's first N bytes
  byte FILE OFFSET VALUE       set one byte
  value FILE TENSOR INDEX X    set element INDEX of an F32 tensor to X (nan, inf, -1, ...)
  dtype FILE TENSOR DTYPE      relabel a tensor's dtype in the safetensors header
  rename FILE TENSOR NEW       rename a tensor in the safetensors header
  flip FILE TENSOR INDEX       flip the lowest bit of element INDEX of an F32 tensor (TENSOR: a name, or
                               #N for the N-th in data order), in place; prints the tensor's name
(bad_input's rows; tests/cli_ckpt_integrity.sh)
"""
import json
import os
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main(argv):
    d, how, args = argv[1], argv[2], argv[3:]
    path = os.path.join(d, args[0])
    if how == "rm":
        os.remove(path)
    elif how == "text":
        with open(path, "w") as f:
            f.write(args[1])
    elif how == "json":
        # the value is spliced in as written, so out-of-range numbers stay exact
        with open(path) as f:
            obj = json.load(f)
        obj[args[1]] = "@@VALUE@@"
        with open(path, "w") as f:
            f.write(json.dumps(obj, indent=2).replace('"@@VALUE@@"', args[2]))
    elif how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(int(args[1]))
    elif how == "byte":
        with open(path, "r+b") as f:
            f.seek(int(args[1]))
            f.write(bytes([int(args[2])]))
    elif how == "flip":
        header, data = read_st(path)
        with open(path, "rb") as f:
            base = 8 + struct.unpack("<Q", f.read(8))[0]
        name = args[1]
        if name.startswith("#"):
            order = sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")
            name = order[int(name[1:])][1]
        off = base + header[name]["data_offsets"][0] + 4 * int(args[2])
        with open(path, "r+b") as f:
            f.seek(off)
            b = f.read(1)[0]
            f.seek(off)
            f.write(bytes([b ^ 1]))
        print(name)
    elif how in ("value", "dtype", "rename"):
        header, data = read_st(path)
        t = header[args[1]]
        if how == "value":
            off = t["data_offsets"][0] + 4 * int(args[2])
            data = data[:off] + struct.pack("<f", float(args[3])) + data[off + 4:]
        elif how == "dtype":
            t["dtype"] = args[2]
        else:
            header[args[2]] = header.pop(args[1])
        write_st(path, header, data)
    else:
        sys.exit("ckpt_damage.py: unknown way '%s'" % how)


if __name__ == "__main__":
    main(sys.argv)
