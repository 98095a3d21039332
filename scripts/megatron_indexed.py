#!/usr/bin/env python3
"""Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx), written as
Megatron's tools/preprocess_data.py --append-eod (no sentence splitting)
writes them through IndexedDatasetBuilder, and read back. Written from the
format's description (megatron/core/datasets/indexed_dataset.py's layout and
preprocess_data.py's steps), standard library only, so cleave's tests can
check `cleave tokenize` and cleave's reader against it byte for byte.

  write PREFIX --vocab V --eod ID [DOCS.json]
      DOCS.json (default stdin): a JSON list, one list of token ids per
      document, as the tokenizer gave them. Per document, as
      preprocess_data.py: when it has tokens, the end-of-document id is
      appended and it is one sequence; an empty document adds no sequence,
      only its document index entry. dtype: uint16 when V < 65500, else
      int32 (DType.optimal_dtype).
  read PREFIX
      prints {"dtype": code, "documents": [[ids of each document]]}, the
      end-of-document ids included, after checking the layout.

The .idx layout (little-endian): b"MMIDIDX\\x00\\x00", u64 version 1, u8 dtype
code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
8 uint16), u64 sequence count N, u64 document index length D, int32 lengths
[N], int64 byte pointers [N], int64 document index [D] (0, then the sequence
count after each document). The .bin: the sequences' tokens back to back.
"""
import json
import struct
import sys

HEADER = b"MMIDIDX\x00\x00"
SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}
FORMATS = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}


def optimal_dtype(vocab):
    return 8 if vocab < 65500 else 4


def write(prefix, docs, vocab, eod):
    code = optimal_dtype(vocab)
    fmt, size = FORMATS[code], SIZES[code]
    lengths, doc_index = [], [0]
    with open(prefix + ".bin", "wb") as b:
        for ids in docs:
            ids = list(ids)
            lens = []
            if ids:  # preprocess_data.py: a sentence with tokens, then --append-eod on the last
                ids.append(eod)
                lens.append(len(ids))
            b.write(struct.pack("<%d%s" % (len(ids), fmt), *ids))
            lengths.extend(lens)  # IndexedDatasetBuilder.add_document
            doc_index.append(len(lengths))
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += n * size
    with open(prefix + ".idx", "wb") as f:
        f.write(HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_index), *doc_index))


def read(prefix):
    idx = open(prefix + ".idx", "rb").read()
    data = open(prefix + ".bin", "rb").read()
    assert idx[:9] == HEADER, "bad header"
    version, code, n, d = struct.unpack("<QBQQ", idx[9:34])
    assert version == 1, "bad version"
    assert code in SIZES, "bad dtype code"
    assert len(idx) == 34 + 12 * n + 8 * d, "index size does not match its counts"
    lengths = struct.unpack("<%di" % n, idx[34:34 + 4 * n])
    pointers = struct.unpack("<%dq" % n, idx[34 + 4 * n:34 + 12 * n])
    doc_index = struct.unpack("<%dq" % d, idx[34 + 12 * n:])
    size, fmt = SIZES[code], FORMATS[code]
    seqs, at = [], 0
    for ln, p in zip(lengths, pointers):
        assert p == at, "pointer out of order"
        seqs.append(list(struct.unpack("<%d%s" % (ln, fmt), data[p:p + ln * size])))
        at += ln * size
    assert at == len(data), ".bin size does not match the index"
    assert doc_index[0] == 0 and doc_index[-1] == n, "bad document index"
    docs = []
    for a, b in zip(doc_index, doc_index[1:]):
        docs.append([t for s in seqs[a:b] for t in s])
    return {"dtype": code, "documents": docs}


def main(argv):
    if len(argv) >= 2 and argv[0] == "read":
        json.dump(read(argv[1]), sys.stdout)
        sys.stdout.write("\n")
        return 0
    if len(argv) >= 2 and argv[0] == "write":
        prefix, rest = argv[1], argv[2:]
        vocab = eod = None
        src = None
        i = 0
        while i < len(rest):
            if rest[i] == "--vocab":
                vocab = int(rest[i + 1]); i += 2
            elif rest[i] == "--eod":
                eod = int(rest[i + 1]); i += 2
            else:
                src = rest[i]; i += 1
        if vocab is None or eod is None:
            sys.exit("write needs --vocab V and --eod ID")
        docs = json.load(open(src) if src else sys.stdin)
        write(prefix, docs, vocab, eod)
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
