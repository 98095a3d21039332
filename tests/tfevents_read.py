#!/usr/bin/env python3
"""A TensorBoard event file reader written from the format's description,
standard library only (no TensorFlow, no protobuf), to check what
`cleave train --tensorboard DIR` writes.

The format: a sequence of TFRecords, each
    u64 length (little-endian)
    u32 masked CRC32C of those 8 length bytes
    length bytes of data
    u32 masked CRC32C of the data
with CRC32C the Castagnoli CRC (reflected polynomial 0x82F63B78, initial
and final XOR 0xFFFFFFFF) and mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
(mod 2^32). Each record's data is a protobuf tensorflow.Event:
wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
summary = 5 (Summary); Summary.value = 1 (repeated Value);
Value.tag = 1 (string), Value.simple_value = 2 (float). The first record
of a file holds file_version "brain.Event:2".

The CRC here is computed bit by bit, not from a table, so it is a second
implementation beside the C writer's.

Usage:
  tfevents_read.py dump FILE            every scalar as "step tag value"
  tfevents_read.py check FILE --log LOG.jsonl [--memory PRED.jsonl] [--ranks N]
                                        [--allow-truncated-tail]
      parses every record and checks both CRCs of each; checks the events
      against the JSON-lines log of the same run (cleave train --log-file):
      the same steps, loss, lr and grad norm equal to float32 precision,
      tokens per second and step time to the log's printed digits, rank 0's
      peak and activation bytes, validation losses, the pipeline bubble
      (and that the per-rank bubbles average to the mean and peak at the
      worst rank); with --memory (cleave memory --json of the same run)
      every rank's peaks by category equal the prediction; --ranks N: the
      per-rank series of N ranks are there. Prints each problem, exits 1 if
      there is one, else prints a summary line and exits 0.
      --allow-truncated-tail (a run that was killed): the file may end in a
      record cut short, the log in a line cut short, and the events may
      hold one step more than the log (each step's event is written first).
  tfevents_read.py selftest             the CRC's check value
"""
import json
import math
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def mask(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def records(blob, allow_truncated_tail=False):
    """Yields (offset, data) for every record; raises Bad naming the offset
    of a record whose framing or CRC is wrong."""
    off = 0
    while off < len(blob):
        if len(blob) - off < 12:
            if allow_truncated_tail:
                return
            raise Bad("offset %d: %d bytes left, too few for a record header" % (off, len(blob) - off))
        head = blob[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", blob[off + 8:off + 12])
        if hcrc != mask(crc32c(head)):
            raise Bad("offset %d: length crc mismatch (stored %08x, computed %08x)" % (off, hcrc, mask(crc32c(head))))
        if off + 12 + n + 4 > len(blob):
            if allow_truncated_tail:
                return
            raise Bad("offset %d: a record of %d bytes runs past the end of the file" % (off, n))
        data = blob[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack("<I", blob[off + 12 + n:off + 16 + n])
        if dcrc != mask(crc32c(data)):
            raise Bad("offset %d: data crc mismatch (stored %08x, computed %08x)" % (off, dcrc, mask(crc32c(data))))
        yield off, data
        off += 16 + n


def varint(b, i):
    v, shift = 0, 0
    while True:
        if i >= len(b):
            raise Bad("varint runs past the end of a message")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i
        if shift > 63:
            raise Bad("varint longer than 10 bytes")


def fields(b):
    """Yields (field number, wire type, value) of a protobuf message:
    ints for varints, bytes for the rest."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise Bad("wire type %d" % wire)
        if i > len(b):
            raise Bad("field %d runs past the end of its message" % num)
        yield num, wire, v


def event(data):
    ev = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for num, wire, v in fields(data):
        if num == 1 and wire == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wire == 0:
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wire == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wire == 2:
            for vn, vw, value in fields(v):
                if vn != 1 or vw != 2:
                    raise Bad("Summary field %d (wire %d)" % (vn, vw))
                tag, simple = None, None
                for fn, fw, x in fields(value):
                    if fn == 1 and fw == 2:
                        tag = x.decode()
                    elif fn == 2 and fw == 5:
                        simple = struct.unpack("<f", x)[0]
                if tag is None or simple is None:
                    raise Bad("a Summary.Value without a tag or a simple_value")
                ev["values"].append((tag, simple))
        else:
            raise Bad("unexpected Event field %d (wire %d)" % (num, wire))
    return ev


def read(path, allow_truncated_tail=False):
    blob = open(path, "rb").read()
    evs = []
    for off, data in records(blob, allow_truncated_tail):
        try:
            evs.append(event(data))
        except Bad as e:
            raise Bad("offset %d: %s" % (off, e))
    if not evs or evs[0]["file_version"] != "brain.Event:2":
        raise Bad("the first record is not file_version brain.Event:2: %r" % (evs[0] if evs else None))
    return evs


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(path, log, memory, ranks, allow_tail):
    problems = []
    evs = read(path, allow_tail)
    last_wall = 0
    for e in evs:
        if e["wall_time"] is None or e["wall_time"] < 1e9 or e["wall_time"] + 1 < last_wall:
            problems.append("step %d: wall_time %r (previous %r)" % (e["step"], e["wall_time"], last_wall))
        last_wall = max(last_wall, e["wall_time"] or 0)
    steps = {}  # step -> {tag: value} of the step's training event
    vals = {}
    for e in evs[1:]:
        d = dict(e["values"])
        if "loss/train" in d:
            if e["step"] in steps:
                problems.append("step %d: two training events" % e["step"])
            steps[e["step"]] = d
        elif set(d) == {"loss/validation"}:
            vals[e["step"]] = d["loss/validation"]
        else:
            problems.append("step %d: an event of tags %s" % (e["step"], sorted(d)))
    text = [l for l in open(log) if l.strip()]
    if allow_tail and text and not text[-1].endswith("\n"):
        text.pop()  # a run killed while writing its last line
    lines = [json.loads(l) for l in text]
    logged = [l for l in lines if "loss" in l]
    want = [l["step"] for l in logged]
    # killed: the event of a step is written before its log line, so the events may hold one step more
    if sorted(steps) != want and not (allow_tail and sorted(steps)[:-1] == want and len(steps) == len(want) + 1):
        problems.append("steps %s in the events, %s in the log" % (sorted(steps), want))

    def near(a, b, tol):
        return abs(a - b) <= tol

    for l in logged:
        d = steps.get(l["step"])
        if d is None:
            continue
        s = l["step"]
        for tag, key in (("loss/train", "loss"), ("optimizer/lr", "lr"), ("optimizer/grad_norm", "grad_norm")):
            if d.get(tag) != f32(l[key]):
                problems.append("step %d: %s %r, the log's %s %r (as float32 %r)" % (s, tag, d.get(tag), key, l[key], f32(l[key])))
        thr = d.get("throughput/tokens_per_s", d.get("throughput/samples_per_s"))
        if thr is None or not near(thr, l["tokens_per_s"], 0.05 + 1e-6 * abs(thr)):
            problems.append("step %d: throughput %r, the log's %r" % (s, thr, l["tokens_per_s"]))
        if not near(d.get("throughput/step_ms", -1), l["ms"], 0.0005 + 1e-6 * l["ms"]):
            problems.append("step %d: step_ms %r, the log's ms %r" % (s, d.get("throughput/step_ms"), l["ms"]))
        if d.get("memory/rank0/total") != f32(l["peak_bytes"]):
            problems.append("step %d: memory/rank0/total %r, the log's peak_bytes %r" % (s, d.get("memory/rank0/total"), l["peak_bytes"]))
        if d.get("memory/rank0/activations") != f32(l["act_bytes"]):
            problems.append("step %d: memory/rank0/activations %r, the log's act_bytes %r" % (s, d.get("memory/rank0/activations"), l["act_bytes"]))
        if "bubble" in l:
            for tag, key in (("bubble/mean", "bubble"), ("bubble/worst_rank", "bubble_max"), ("bubble/simulated", "bubble_sim")):
                if tag not in d or not near(d[tag], l[key], 6e-7):
                    problems.append("step %d: %s %r, the log's %s %r" % (s, tag, d.get(tag), key, l[key]))
            per = [v for t, v in d.items() if t.startswith("bubble/rank")]
            if not per or not near(sum(per) / len(per), l["bubble"], 1e-5) or not near(max(per), l["bubble_max"], 1e-5):
                problems.append("step %d: per-rank bubbles %r: mean or worst is not the log's %r, %r" % (s, per, l["bubble"], l["bubble_max"]))
        elif any(t.startswith("bubble/") for t in d):
            problems.append("step %d: bubble series without a pipeline in the log" % s)
        if ranks:
            have = {int(t.split("/")[1][4:]) for t in d if t.startswith("memory/rank")}
            if have != set(range(ranks)):
                problems.append("step %d: memory series of ranks %s, expected 0..%d" % (s, sorted(have), ranks - 1))
    logged_vals = {l["step"]: l["val_loss"] for l in lines if "val_loss" in l}
    if sorted(vals) != sorted(logged_vals):
        problems.append("validation at steps %s in the events, %s in the log" % (sorted(vals), sorted(logged_vals)))
    for s, v in logged_vals.items():
        if s in vals and vals[s] != f32(v):
            problems.append("step %d: loss/validation %r, the log's %r" % (s, vals[s], v))
    if memory and steps:
        last = steps[max(steps)]
        for row in (json.loads(l) for l in open(memory) if l.strip()):
            r = row["rank"]
            for cat, b in row["predicted"].items():
                if cat in ("host", "disk"):
                    continue
                got = last.get("memory/rank%d/%s" % (r, cat))
                if got != f32(b):
                    problems.append("memory/rank%d/%s %r, predicted %r" % (r, cat, got, b))
    for p in problems:
        print(p)
    if not problems:
        tags = set()
        for d in steps.values():
            tags |= set(d)
        print("%s: %d records, %d steps, %d validations, %d tags: all CRCs and values agree with %s" % (
            path, len(evs), len(steps), len(vals), len(tags), log))
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "selftest":
        got = crc32c(b"123456789")
        ok = got == 0xE3069283 and crc32c(bytes(32)) == 0x8A9136AA
        print("crc32c check value %08x: %s" % (got, "ok" if ok else "WRONG"))
        return 0 if ok else 1
    if len(argv) >= 3 and argv[1] == "dump":
        for e in read(argv[2]):
            for tag, v in e["values"]:
                print(e["step"], tag, repr(v))
        return 0
    if len(argv) >= 3 and argv[1] == "check":
        opts = {"--log": None, "--memory": None, "--ranks": None}
        allow = "--allow-truncated-tail" in argv
        args = [a for a in argv[3:] if a != "--allow-truncated-tail"]
        for k, v in zip(args[::2], args[1::2]):
            if k not in opts:
                print("unknown option", k)
                return 2
            opts[k] = v
        if not opts["--log"]:
            print("check needs --log LOG.jsonl")
            return 2
        return check(argv[2], opts["--log"], opts["--memory"], int(opts["--ranks"] or 0), allow)
    print(__doc__)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Bad as e:
        print("%s: %s" % (sys.argv[2] if len(sys.argv) > 2 else "?", e))
        sys.exit(1)
