#!/usr/bin/env python3
"""Compares two checkpoints written after one AdamW step with --grad-clip 0
(a tp = 1 reference and a tensor-parallel run): after one step exp_avg =
(1 - beta1) * grad, so grad = exp_avg / (1 - beta1). Every exp_avg tensor's
gradient must be within TOL max abs of the reference's, both checkpoints
holding the same names and shapes, and model.safetensors the same names,
shapes and dtypes (a tp run saves the file a tp = 1 run writes).
usage: tp_grads.py REF_DIR OTHER_DIR [TOL [BETA1]]; prints the worst
difference and the tensor it is in; exit 1 on a failure."""
import json
import struct
import sys

import numpy as np


def read(path):
    """{name: (dtype, shape, array)} of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        arr = None
        if t["dtype"] == "F32":
            arr = np.frombuffer(data[lo:hi], dtype="<f4").reshape(t["shape"])
        out[name] = (t["dtype"], tuple(t["shape"]), arr)
    return out


def main():
    ref_dir, other_dir = sys.argv[1], sys.argv[2]
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6
    beta1 = float(sys.argv[4]) if len(sys.argv) > 4 else 0.9
    bad = []
    for f in ("model.safetensors", "optimizer.safetensors"):
        a, b = read(ref_dir + "/" + f), read(other_dir + "/" + f)
        if sorted(a) != sorted(b):
            bad.append("%s: names differ: only in ref %s, only in other %s"
                       % (f, sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5]))
        for k in sorted(set(a) & set(b)):
            if a[k][:2] != b[k][:2]:
                bad.append("%s: %s is %s %s, ref %s %s" % (f, k, b[k][0], b[k][1], a[k][0], a[k][1]))
    a, b = read(ref_dir + "/optimizer.safetensors"), read(other_dir + "/optimizer.safetensors")
    names = [k for k in sorted(a) if k.startswith("exp_avg.") and k in b and a[k][1] == b[k][1]]
    if not names:
        bad.append("no exp_avg tensors")
    worst, where, gmax = 0.0, "", 0.0
    for k in names:
        ga = a[k][2].astype(np.float64) / (1 - beta1)
        gb = b[k][2].astype(np.float64) / (1 - beta1)
        if not np.all(np.isfinite(gb)):
            bad.append("%s: non-finite gradient" % k)
            continue
        d = float(np.max(np.abs(ga - gb))) if ga.size else 0.0
        gmax = max(gmax, float(np.max(np.abs(ga))) if ga.size else 0.0)
        if d >= worst:
            worst, where = d, k
    print("%d tensors, max abs grad diff %.3g (%s), largest |grad| %.3g" % (len(names), worst, where, gmax))
    if worst > tol:
        bad.append("max abs gradient difference %.3g in %s > %g" % (worst, where, tol))
    for m in bad:
        print("FAILED: " + m)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
