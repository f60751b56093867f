#!/usr/bin/env python3
"""MMA-Sim's outputs of AMD CDNA3's FP8 MFMA (golden/gemm-mmasim/cdna3, README there), for qmx-sim's cdna3-fp8.

    python3 gpu/scripts/collect_mmasim_cdna3.py OUT --mmasim PATH   (PATH: a checkout of microsoft/MMA-Sim)

Runs mmasim.simulator.amd.mfma("CDNA3", "f32_16x16x32_*" / "f32_32x32x16_*") on every FP8/BF8 pair. With a
torch that has the float8 FNUZ dtypes the operands are those dtypes. With one that lacks them (Debian 12's
torch 1.13) E4M3FNUZ values travel as float16 tensors and E5M2FNUZ values as bfloat16 (both hold every value
exactly), the aliases giving MMA-Sim's dtype_min_exponent the FNUZ entries (-7 and -15), the other missing
dtypes become placeholders this model never reads, and the instance is set to MMA-Sim's FP8 branch (groups of
16), which the float16 alias would not select. Writes NAME_{a,b,c,d}.npy and cases.json.
"""
import argparse
import json
import math
import os
import random
import sys

import numpy as np
import torch

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("out")
ap.add_argument("--mmasim", required=True, help="a checkout of microsoft/MMA-Sim (its mmasim package)")
args = ap.parse_args()
NATIVE = hasattr(torch, "float8_e4m3fnuz")


class _Placeholder:
    def __init__(self, n):
        self.n = n

    def __repr__(self):
        return "placeholder:" + self.n


if not NATIVE:
    for name in ("float8_e8m0fnu", "float8_e5m2", "float8_e4m3fn", "float4_e2m1fn_x2", "uint16", "uint32"):
        if not hasattr(torch, name):
            setattr(torch, name, _Placeholder(name))
    torch.float8_e4m3fnuz = torch.float16
    torch.float8_e5m2fnuz = torch.bfloat16
sys.path.insert(0, args.mmasim)
from mmasim.simulator.amd import mfma  # noqa: E402
from mmasim.simulator import arithmetic  # noqa: E402
assert arithmetic.dtype_min_exponent[torch.float8_e4m3fnuz] == -7
assert arithmetic.dtype_min_exponent[torch.float8_e5m2fnuz] == -15
TORCH = {"fp8": torch.float8_e4m3fnuz, "bf8": torch.float8_e5m2fnuz}


def make(qual):
    sim = mfma("CDNA3", qual)
    if not NATIVE:  # MMA-Sim's FP8 branch, which float16 operands would not select
        sim.operation_type, sim.group_size, sim.is_two_stage = "fused_dot_rd_add", 16, True
    assert sim.group_size == 16
    return sim


def tensor(fmt, codes2d):
    t = torch.tensor([[decode(fmt, int(c)) for c in row] for row in codes2d], dtype=torch.float32)
    return t.to(TORCH[fmt])


FMT = {"fp8": (4, 3, 8), "bf8": (5, 2, 16)}  # exponent bits, mantissa bits, bias (FNUZ: 0x80 NaN, no Inf, no -0)

def decode(fmt, code):
    eb, mb, bias = FMT[fmt]
    if code == 0x80: return float("nan")
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> mb) & ((1 << eb) - 1)
    m = code & ((1 << mb) - 1)
    if e == 0: return s * m * 2.0 ** (1 - bias - mb)
    return s * (1 + m / 2 ** mb) * 2.0 ** (e - bias)

def codes(rng, n, style, fmt):
    out = []
    for _ in range(n):
        if style == "rand": c = rng.randrange(256)
        elif style == "small":  # small magnitudes: exponent field 0..3 (subnormals and the lowest binades)
            eb, mb, _ = FMT[fmt]
            c = (rng.randrange(2) << 7) | (rng.randrange(4) << mb) | rng.randrange(1 << mb)
        elif style == "zeros": c = 0 if rng.random() < 0.6 else rng.randrange(256)
        else: raise ValueError(style)
        if c == 0x80: c = 0  # keep NaN out of the non-special sets
        out.append(c)
    return out

def c_value(rng, style):
    if style == "tiny": return math.ldexp(rng.uniform(-1, 1), rng.randrange(-149, -100))
    if style == "huge": return math.ldexp(rng.uniform(-1, 1), rng.randrange(20, 60))
    if style == "zero": return 0.0
    return math.ldexp(rng.uniform(-1, 1), rng.randrange(-30, 20))

def run(name, qual, fa, fb, m, n, k, astyle, cstyle, seed, nan=False, zero_rows=False):
    rng = random.Random(seed)
    A = np.array(codes(rng, m * k, astyle, fa), dtype=np.uint8).reshape(m, k)
    B = np.array(codes(rng, k * n, astyle, fb), dtype=np.uint8).reshape(k, n)
    if zero_rows:
        A[0, :] = 0; B[:, 1] = 0
    if nan:
        A[1, 3] = 0x80
    C = np.array([c_value(rng, cstyle) for _ in range(m * n)], dtype=np.float32).reshape(m, n)
    if cstyle == "mixed":
        C[0, 0] = np.inf; C[2, 2] = -np.inf; C[3, 3] = np.nan
    D = make(qual)(tensor(fa, A), tensor(fb, B), torch.from_numpy(C.copy())).numpy().astype(np.float32)
    for t, arr in (("a", A), ("b", B), ("c", C), ("d", D)):
        np.save(os.path.join(OUT, "%s_%s.npy" % (name, t)), arr)
    return {"name": name, "qualifier": qual, "a_format": {"fp8": "e4m3fnuz", "bf8": "e5m2fnuz"}[fa],
            "b_format": {"fp8": "e4m3fnuz", "bf8": "e5m2fnuz"}[fb], "m": m, "n": n, "k": k, "elements": astyle,
            "c": cstyle, "seed": seed, "nan_code": bool(nan), "zero_rows": bool(zero_rows)}

OUT = args.out
os.makedirs(OUT, exist_ok=True)
cases = []
seed = 2511109
for fa in ("fp8", "bf8"):
    for fb in ("fp8", "bf8"):
        q16 = "f32_16x16x32_%s_%s" % (fa, fb)
        q32 = "f32_32x32x16_%s_%s" % (fa, fb)
        for astyle, cstyle in (("rand", "normal"), ("small", "tiny"), ("zeros", "zero"), ("rand", "huge"), ("small", "normal")):
            seed += 1
            cases.append(run("cdna3_%s_%s_%s_%s" % (fa, fb, astyle, cstyle), q16, fa, fb, 16, 16, 32, astyle, cstyle, seed,
                             zero_rows=astyle == "zeros"))
        seed += 1
        cases.append(run("cdna3_%s_%s_k16_rand" % (fa, fb), q32, fa, fb, 32, 32, 16, "rand", "normal", seed))
        seed += 1
        cases.append(run("cdna3_%s_%s_special" % (fa, fb), q16, fa, fb, 16, 16, 32, "rand", "mixed", seed, nan=True))
# The rules' probe (bf8 x bf8, 16 x 16 x 32, the rest zero): the two columns' products 2^26 at k = 0 and a small
# product at k = 2 (the same half) or k = 1 (the other half), with C negative and tiny, or at the drop boundary.
def enc(fmt, v):
    return next(c for c in range(256) if c != 0x80 and decode(fmt, c) == v)
A = np.zeros((16, 32), np.uint8); B = np.zeros((32, 16), np.uint8); C = np.zeros((16, 16), np.float32)
for r in range(6): A[r, 0] = enc("bf8", 8192.0)
B[0, 0] = B[0, 1] = enc("bf8", 8192.0)
A[0, 2] = A[1, 2] = enc("bf8", 2.0); B[2, 0] = enc("bf8", 4.0)  # column 0: 2^26 + 8
C[0, 0] = -2.0 ** -10  # more than 25 binades below 2^26: dropped -> 2^26 + 8
C[1, 0] = -2.0         # exactly 25 below: floored to -4 -> 2^26 + 4 -> RNE 2^26
A[2, 1] = enc("bf8", -1.0); B[1, 1] = enc("bf8", 1.0)  # column 1, other half: floor(-1/4) = -4 -> 2^26 - 4
A[3, 3] = enc("bf8", -1.0); B[3, 1] = enc("bf8", 1.0)  # column 1, k = 3: the same half as k = 1
A[4, 2] = enc("bf8", -1.0); B[2, 1] = enc("bf8", 1.0)  # column 1, k = 2: the same half as k = 0: cut to 0
D = make("f32_16x16x32_bf8_bf8")(tensor("bf8", A), tensor("bf8", B), torch.from_numpy(C.copy())).numpy().astype(np.float32)
for t, arr in (("a", A), ("b", B), ("c", C), ("d", D)):
    np.save(os.path.join(OUT, "cdna3_probe_%s.npy" % t), arr)
print("probe", D[0, 0] - 2**26, D[1, 0] - 2**26, D[2, 1] - 2**26, D[3, 1] - 2**26, D[4, 1] - 2**26)
cases.append({"name": "cdna3_probe", "qualifier": "f32_16x16x32_bf8_bf8", "a_format": "e5m2fnuz", "b_format": "e5m2fnuz",
              "m": 16, "n": 16, "k": 32, "elements": "probe", "c": "probe", "seed": 0, "nan_code": False, "zero_rows": False})
json.dump({"mmasim": "microsoft/MMA-Sim", "torch": torch.__version__, "float8_dtypes": "native" if NATIVE else "aliased",
           "cases": cases}, open(os.path.join(OUT, "cdna3_cases.json"), "w"), indent=1)
print(len(cases), "cases")
