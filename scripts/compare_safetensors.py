#!/usr/bin/python3
"""Compares two safetensors files tensor by tensor (used by check_fixtures.sh).

    compare_safetensors.py LABEL GOT.safetensors WANT.safetensors [TOL]

Both files must hold the same tensor names with the same dtype and shape; for
each tensor the error is max|got - want| / max|want| (max|got - want| when
want is all zeros), and NaN or Inf anywhere is a mismatch. Prints one line
for the worst tensor of the file (and one per tensor over TOL, default 1e-6),
exits 1 on any mismatch or unreadable file. Metadata is not compared (it
records the command line and torch version).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import FormatError, read_safetensors  # noqa: E402


def rel_err(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    if a.size == 0:
        return 0.0
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    diff = np.abs(a - b).max()
    scale = np.abs(b).max()
    return float(diff / scale) if scale > 0 else float(diff)


def main(argv):
    if len(argv) not in (4, 5):
        print("usage: compare_safetensors.py LABEL GOT WANT [TOL]", file=sys.stderr)
        return 2
    label, got_path, want_path = argv[1:4]
    tol = float(argv[4]) if len(argv) == 5 else 1e-6
    try:
        got, _ = read_safetensors(got_path)
        want, _ = read_safetensors(want_path)
    except (OSError, FormatError) as e:
        print(f"FAIL {label}: {e}")
        return 1
    bad = 0
    for name in sorted(set(want) - set(got)):
        print(f"FAIL {label}: tensor {name} missing from {got_path}")
        bad += 1
    for name in sorted(set(got) - set(want)):
        print(f"FAIL {label}: tensor {name} not in {want_path}")
        bad += 1
    worst, worst_name = -1.0, ""
    for name in want:
        if name not in got:
            continue
        a, b = got[name], want[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            print(f"FAIL {label}: {name} is {a.dtype}{list(a.shape)}, reference {b.dtype}{list(b.shape)}")
            bad += 1
            continue
        e = rel_err(a, b)
        if e > worst:
            worst, worst_name = e, name
        if not e <= tol:
            print(f"FAIL {label}: {name} max rel err {e:.3g} > {tol:g}")
            bad += 1
    status = "ok  " if bad == 0 else "FAIL"
    print(f"{status} {label}: {len(want)} tensors, worst {worst_name} max rel err {max(worst, 0.0):.3g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
