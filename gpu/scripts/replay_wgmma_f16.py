#!/usr/bin/env python3
"""Compares the lines of gpu/probes/wgmma_f16_acc.cu (Hopper's FP8 wgmma with an FP16 accumulator, uniform
A, B and C: 'f16 <a> <b> <c> -> <d>') with qmx-sim's models: each line is D = C + A B for a 1 x 32 A of
code a, a 32 x 1 B of code b and C = c, through qmx.gemm. Prints, per model, how many lines agree and the
first that do not. Usage: python3 replay_wgmma_f16.py PROBE_OUTPUT [MODEL ...] (default: hopper-wgmma-fp8-f16
and the same step under qmx-sim's Hopper zero exponent, -133)."""
import sys

import numpy as np

import qmx


def cases(path):
    for line in open(path):
        f = line.split()
        if len(f) >= 6 and f[0] == "f16" and f[4] == "->":
            yield int(f[1], 16), int(f[2], 16), int(f[3], 16), int(f[5], 16), "differ" in line


def model_d(a, b, c, model):
    ca = np.full((1, 32), a, dtype=np.uint8)
    cb = np.full((32, 1), b, dtype=np.uint8)
    cc = np.array([[c]], dtype=np.uint16).view(np.float16)
    d = qmx.gemm(ca, cb, model, cc, a_format="e4m3", b_format="e4m3")
    return int(d.view(np.uint16)[0, 0])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    models = sys.argv[2:] or ["hopper-wgmma-fp8-f16", "fused:step=32,F=13,bits=11,out=rne,acc=fp16,zero-exp=-133"]
    rows = list(cases(sys.argv[1]))
    if not rows:
        sys.exit("no 'f16 a b c -> d' lines in " + sys.argv[1])
    uneven = sum(r[4] for r in rows)
    print("%d probe lines%s" % (len(rows), ", %d with outputs that differ within the tile" % uneven if uneven else ""))
    rc = 0
    for model in models:
        bad = []
        for a, b, c, d, _ in rows:
            m = model_d(a, b, c, model)
            nan_m, nan_d = (m & 0x7C00) == 0x7C00 and m & 0x3FF, (d & 0x7C00) == 0x7C00 and d & 0x3FF
            if m != d and not (nan_m and nan_d):
                bad.append((a, b, c, d, m))
        print("%s: %d of %d agree" % (model, len(rows) - len(bad), len(rows)))
        for a, b, c, d, m in bad[:12]:
            print("  a %02x b %02x c %04x: hardware %04x, model %04x" % (a, b, c, d, m))
        rc |= bool(bad) and model == models[0]
    return rc


if __name__ == "__main__":
    sys.exit(main())
