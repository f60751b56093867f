#!/usr/bin/env python3
"""Runs microsoft/MMA-Sim (arXiv 2511.10909) as an oracle for qmx-sim's tensor-core GEMM models and
writes the cases in golden/gemm-hopper's style, for a C++ test to replay.

MMA-Sim is pure Python on PyTorch's CPU tensors (its models call .cpu() and loop over outputs in
Python; libm's fma through ctypes): no GPU is needed. It needs Python >= 3.10 (PEP 604 annotations),
a PyTorch whose float8 dtypes include float8_e8m0fnu (2.7 or newer; its import refers to
float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float8_e4m3fnuz and float8_e5m2fnuz), glibc's libm.so.6,
and numpy for this script. PyTorch 1.x has no float8 dtype and cannot import it.

Which MMA-Sim model a case set runs (mmasim/simulator/nv_ptx.py, arithmetic.py):
  bw8_*   tcgen05mma_block_scale("Blackwell", "m128nNk32.block32.f32.A.B.ue8m0"): kind::mxf8f6f4,
          per output arithmetic.nv_fused_dot_add(F = 25, "f32", scale_A[i,0], scale_B[0,j]).
          qmx-sim model: blackwell-mxf8f6f4.
  bw8x_*  MMA-Sim's classes refuse E2M3/E3M2 (a TODO) and fail on E2M1 in kind::mxf8f6f4 (its codes
          are uint8 tensors, which extract_significand_exponent asserts on). These sets call
          arithmetic.nv_fused_dot_add exactly as the class does, with the FP6/FP4 values carried in
          float16 (A) and bfloat16 (B) tensors and arithmetic.dtype_min_exponent set, for the run, to the
          formats' emin (e2m3 0, e3m2 -2, e2m1 0): MMA-Sim's rule extended, not MMA-Sim itself. A check
          on E4M3 x E5M2 data (carried the same way, emin -6 / -14) must equal the class bit for bit.
  bw4_*   tcgen05mma_block_scale("Blackwell", "m128nNk64.blockB.f32.e2m1.e2m1.S"), S ue8m0 (block 32
          or 16) or ue4m3 (block 16): kind::mxf4nvf4, per output
          arithmetic.nv_fused_dot_add_with_block_scale(F = 35). qmx-sim model: blackwell-mxf4nvf4.
  hop_*   wgmma("Hopper", "m64nNk32.f32.A.B") (A, B in e4m3/e5m2): per output
          arithmetic.nv_fused_dot_add(F = 13, "f32_e8m13"). qmx-sim model: hopper-fp8-fast (no
          promotion: MMA-Sim models one instruction; cuBLAS's every-128-K promotion is not in it).
Longer K chains instructions: D of one call is C of the next (what qmx-sim's fused models do).
Rows and columns are padded to the instructions' M (128 or 64) and N (a multiple of 8) with zeros;
each output depends only on its own row, column and C, so the padding changes nothing.

Output, per case NAME (numpy .npy, row-major; golden/gemm-hopper/README.md's layout):
  NAME_a.npy   A, M x K uint8 element codes (E2M1 and FP6: one code per byte, low bits)
  NAME_b.npy   B, K x N uint8 codes
  NAME_sa.npy  A's block scales, M x K/block uint8 codes (UE8M0, or UE4M3 as given, sign bit included)
  NAME_sb.npy  B's block scales, K/block x N uint8 codes          (absent for hop_*)
  NAME_c.npy   C, M x N: FP32 bit patterns
  NAME_d.npy   D = MMA-Sim's output, M x N: FP32 bit patterns
  NAME_ok.npy  only where MMA-Sim raised on some outputs (C = +-Inf reaching kind::mxf4nvf4, e.g. after
               an overflow earlier in the K chain): M x N uint8, 0 = no MMA-Sim output (D holds 0xFFFFFFFF)
C and D are stored as '<f4' by default (the 4 bytes of each bit pattern, NaN payloads kept), because
qmx-sim's ReadNpy reads <f4, <f8, <f2, |u1, <u2 and bf16 but not <u4 (and `qmx-sim gemm --c ... --expect
...` takes float32); --bits-dtype u4 writes uint32 instead.
cases.json lists each case (shape, formats, scale format and block, qmx-sim model, MMA-Sim function and
qualifiers, K per instruction, seed, file SHA-256s, the CLI line that replays it) and the capability
probes; README.md says how to replay. The whole collection (28 sets, 33,922 outputs) takes about 5 s
with --jobs 16 and about a minute in one process; --quick about a third of that.

Usage:
  python3 collect_mmasim.py --mmasim DIR OUTDIR [--quick] [--sets S1,S2|PREFIX*] [--seed N] [--jobs N]
  python3 collect_mmasim.py --mmasim DIR --check          # environment and MMA-Sim probes only
  python3 collect_mmasim.py --list                        # the case sets
DIR is MMA-Sim's checkout (the folder holding mmasim/) or its mmasim/ folder itself.
"""
import argparse
import hashlib
import json
import os
import platform
import sys
import time
import zlib

import numpy as np

DEFAULT_SEED = 25111090  # arXiv 2511.10909

# --- formats (codes -> values), independent of torch ----------------------------------------------

FMT = {  # bits, exponent bits, mantissa bits, bias, specials
    "e4m3": (8, 4, 3, 7, "fn"),       # no Inf; S.1111.111 NaN
    "e5m2": (8, 5, 2, 15, "ieee"),    # exponent 31: Inf (m = 0) or NaN
    "e3m2": (6, 3, 2, 3, "none"),
    "e2m3": (6, 2, 3, 1, "none"),
    "e2m1": (4, 2, 1, 1, "none"),
}
EMIN = {f: 1 - FMT[f][3] for f in FMT}  # e4m3 -6, e5m2 -14, e3m2 -2, e2m3 0, e2m1 0


def decode(fmt, codes):
    """float64 values of element codes (NaN/Inf where the format has them)."""
    bits, eb, mb, bias, spec = FMT[fmt]
    c = np.asarray(codes, dtype=np.int64)
    sign = np.where((c >> (bits - 1)) & 1, -1.0, 1.0)
    e = (c >> mb) & ((1 << eb) - 1)
    m = c & ((1 << mb) - 1)
    mag = np.where(e == 0, m / 2.0 ** mb * 2.0 ** (1 - bias), (1 + m / 2.0 ** mb) * 2.0 ** (e - bias))
    if spec == "fn":
        mag = np.where((e == (1 << eb) - 1) & (m == (1 << mb) - 1), np.nan, mag)
    elif spec == "ieee":
        mag = np.where(e == (1 << eb) - 1, np.where(m == 0, np.inf, np.nan), mag)
    return sign * mag


def decode_scale(sfmt, codes):
    c = np.asarray(codes, dtype=np.int64)
    if sfmt == "ue8m0":
        return np.where(c == 0xFF, np.nan, np.exp2(c.astype(np.float64) - 127))
    return np.abs(decode("e4m3", c))  # ue4m3: the sign bit is dropped (MMA-Sim: abs(); qmx: & 0x7F)


def finite_codes(fmt):
    bits = FMT[fmt][0]
    all_c = np.arange(1 << bits)
    return all_c[np.isfinite(decode(fmt, all_c))]


def sign_bit(fmt):
    return 1 << (FMT[fmt][0] - 1)


def quantize(fmt, x):
    """Nearest finite code (saturating) for each value: input generation only (no rounding claim)."""
    fc = finite_codes(fmt)
    fc = fc[(fc & sign_bit(fmt)) == 0]  # +0 and the positives
    vals = decode(fmt, fc)
    order = np.argsort(vals)
    vals, fc = vals[order], fc[order]
    ax = np.abs(np.asarray(x, dtype=np.float64))
    idx = np.clip(np.searchsorted(vals, ax), 1, len(vals) - 1)
    lo, hi = vals[idx - 1], vals[idx]
    pick = np.where(ax - lo <= hi - ax, idx - 1, idx)
    code = fc[pick]
    neg = (np.asarray(x) < 0) & (code != 0)
    return (code | np.where(neg, sign_bit(fmt), 0)).astype(np.uint8)


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def bits_f32(b):
    return np.asarray(b, dtype=np.uint32).view(np.float32)


# --- random pieces ------------------------------------------------------------------------------

def codes_of(rng, fmt, kind, shape, scale_log2=0.0):
    """uint8 codes of `shape` drawn by `kind`."""
    n = int(np.prod(shape))
    if kind == "zero":
        return np.zeros(shape, np.uint8)
    if kind == "normal":
        return quantize(fmt, rng.standard_normal(n) * 2.0 ** scale_log2).reshape(shape)
    if kind == "bits":  # every finite code uniformly (subnormals, the largest values, -0)
        return rng.choice(finite_codes(fmt), size=n).astype(np.uint8).reshape(shape)
    if kind == "wide":  # log-uniform magnitudes over the whole range, random signs
        fc = finite_codes(fmt)
        v = np.abs(decode(fmt, fc))
        lo, hi = np.log2(v[v > 0].min()), np.log2(v.max())
        x = np.exp2(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)
        return quantize(fmt, x).reshape(shape)
    if kind == "pow2":
        fc = finite_codes(fmt)
        v = np.abs(decode(fmt, fc))
        ex = np.unique(np.log2(v[(v > 0)][np.log2(v[v > 0]) % 1 == 0]).astype(int))
        x = np.exp2(rng.choice(ex, n).astype(float)) * rng.choice([-1.0, 1.0], n)
        return quantize(fmt, x).reshape(shape)
    if kind == "sub":  # subnormal codes (and zeros), random signs
        mb = FMT[fmt][2]
        c = rng.integers(0, 1 << mb, n) | rng.choice([0, sign_bit(fmt)], n)
        return c.astype(np.uint8).reshape(shape)
    if kind == "max":
        fc = finite_codes(fmt)
        v = decode(fmt, fc)
        big = fc[np.abs(v) == np.abs(v).max()]
        return rng.choice(big, n).astype(np.uint8).reshape(shape)
    raise ValueError(kind)


def c_of(rng, kind, n):
    """FP32 bit patterns (uint32) for C drawn by `kind`."""
    if kind == "zero":
        return np.zeros(n, np.uint32)
    if kind == "negzero":
        return np.full(n, 0x80000000, np.uint32)
    if kind == "normal":
        return f32_bits(rng.standard_normal(n) * np.exp2(rng.integers(-10, 11, n).astype(float)))
    if kind == "sub":  # subnormal, random low bits, random sign
        return (rng.integers(1, 1 << 23, n) | rng.choice([0, 1 << 31], n)).astype(np.uint32)
    if kind == "tiny":  # normal, 2^-126 .. 2^-100, every mantissa bit random
        e = rng.integers(1, 28, n)
        return ((e << 23) | rng.integers(0, 1 << 23, n) | rng.choice([0, 1 << 31], n)).astype(np.uint32)
    if kind == "ulp":  # 2^e (1 + small odd multiple of 2^-23): the low bits tell truncation
        e = rng.integers(-20, 21, n) + 127
        return ((e << 23) | rng.integers(1, 16, n) | rng.choice([0, 1 << 31], n)).astype(np.uint32)
    if kind == "huge":
        e = rng.integers(227, 255, n)
        return ((e << 23) | rng.integers(0, 1 << 23, n) | rng.choice([0, 1 << 31], n)).astype(np.uint32)
    if kind == "bits":  # any finite FP32
        b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        bad = (b & 0x7F800000) == 0x7F800000
        b[bad] ^= 0x00800000
        return b
    if kind == "mix":
        kinds = ["zero", "negzero", "normal", "sub", "tiny", "ulp", "huge", "bits"]
        pick = rng.choice(len(kinds), n, p=[.08, .04, .36, .1, .12, .2, .04, .06])
        out = np.empty(n, np.uint32)
        for t, k in enumerate(kinds):
            sel = pick == t
            out[sel] = c_of(rng, k, int(sel.sum()))
        return out
    raise ValueError(kind)


def ue8m0_of(rng, kind, n):
    lohi = {"unit": (124, 131), "mid": (87, 168), "full": (0, 255), "big": (200, 255), "tiny": (0, 40),
            "max": (254, 255), "min": (0, 1)}[kind]
    return rng.integers(lohi[0], lohi[1], n).astype(np.uint8)


def ue4m3_of(rng, kind, n):
    if kind == "normal":
        return rng.integers(0x20, 0x50, n).astype(np.uint8)  # 2^-3 .. 2^2 region
    if kind == "full":
        return rng.integers(0x01, 0x7F, n).astype(np.uint8)
    if kind == "sub":
        return rng.integers(0x01, 0x08, n).astype(np.uint8)
    if kind == "zero":
        return np.zeros(n, np.uint8)
    if kind == "max":
        return np.full(n, 0x7E, np.uint8)
    if kind == "signed":  # sign bit set: both MMA-Sim (abs) and qmx-sim (& 0x7F) drop it
        return (rng.integers(0x01, 0x7F, n) | 0x80).astype(np.uint8)
    raise ValueError(kind)


# --- case builders --------------------------------------------------------------------------------
# A builder returns dict(a, b, sa, sb, c, desc, rows, cols[, probes]). Rows and columns follow
# patterns (row i: ROW[i % len], column j: COL[j % len]), so every output meets one row pattern and one
# column pattern.

def _paired(x, half):
    """B column with x[k + half] == x[k] (a cancelling A row meets equal values)."""
    x = x.copy()
    for s in range(0, len(x), 2 * half):
        x[s + half:s + 2 * half] = x[s:s + half]
    return x


def _cancel(x, fmt, half, rng, tiny_kind="sub"):
    """A row with x[k + half] == -x[k] plus a few small perturbations."""
    x = x.copy()
    for s in range(0, len(x), 2 * half):
        x[s + half:s + 2 * half] = x[s:s + half] ^ sign_bit(fmt)
    pos = rng.integers(0, len(x), 2)
    x[pos] = codes_of(rng, fmt, tiny_kind, (2,))
    return x


def build_mx8(rng, name, fa, fb, m, n, k, style):
    """kind::mxf8f6f4 operands: UE8M0, block 32 along K."""
    a = np.zeros((m, k), np.uint8)
    b = np.zeros((k, n), np.uint8)
    sa = np.zeros((m, k // 32), np.uint8)
    sb = np.zeros((k // 32, n), np.uint8)
    c = np.zeros((m, n), np.uint32)
    if style == "rand":
        a[:] = codes_of(rng, fa, "normal", (m, k))
        b[:] = codes_of(rng, fb, "normal", (k, n))
        sa[:] = ue8m0_of(rng, "unit", sa.size).reshape(sa.shape)
        sb[:] = ue8m0_of(rng, "unit", sb.size).reshape(sb.shape)
        c[:] = c_of(rng, "normal", m * n).reshape(m, n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["normal"], cols=["normal"],
                    desc="normal data, scales 2^-3..2^3, C normal x 2^-10..2^10")
    if style == "wide":
        a[:] = codes_of(rng, fa, "wide", (m, k))
        b[:] = codes_of(rng, fb, "wide", (k, n))
        sa[:] = ue8m0_of(rng, "mid", sa.size).reshape(sa.shape)
        sb[:] = ue8m0_of(rng, "mid", sb.size).reshape(sb.shape)
        c[:] = c_of(rng, "mix", m * n).reshape(m, n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["wide"], cols=["wide"],
                    desc="log-uniform magnitudes, scales 2^-40..2^40, C of every kind")
    if style == "bits":
        a[:] = codes_of(rng, fa, "bits", (m, k))
        b[:] = codes_of(rng, fb, "bits", (k, n))
        sa[:] = ue8m0_of(rng, "full", sa.size).reshape(sa.shape)
        sb[:] = ue8m0_of(rng, "full", sb.size).reshape(sb.shape)
        sa[sa == 0xFF] = 0xFE
        sb[sb == 0xFF] = 0xFE
        c[:] = c_of(rng, "mix", m * n).reshape(m, n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["bits"], cols=["bits"],
                    desc="every finite code uniformly, scales 2^-127..2^127, C of every kind")
    if style == "adv":
        rows = ["zero/scale 2^100..2^127", "zero/unit scale", "cancel", "one big, many tiny",
                "scale 2^-127..2^-100", "subnormal", "bits/full scales", "scale 2^127",
                "equal values", "pow2", "zero/tiny scale", "normal"]
        cols = ["normal", "paired (cancels)", "max values", "zero/scale 2^127", "scale 2^-60..2^-20",
                "subnormal", "pow2", "bits/full scales"]
        h = 16  # pairs inside one 32-step
        for i in range(m):
            t = i % len(rows)
            ks = ue8m0_of(rng, "unit", k // 32)
            x = codes_of(rng, fa, "normal", (k,))
            if t == 0:
                x[:] = 0
                ks = rng.integers(227, 255, k // 32)
            elif t == 1:
                x[:] = 0
            elif t == 2:
                x = _cancel(x, fa, h, rng)
            elif t == 3:
                x = codes_of(rng, fa, "sub", (k,))
                x[rng.integers(0, k)] = codes_of(rng, fa, "max", (1,))[0]
            elif t == 4:
                ks = rng.integers(0, 28, k // 32)
            elif t == 5:
                x = codes_of(rng, fa, "sub", (k,))
            elif t == 6:
                x = codes_of(rng, fa, "bits", (k,))
                ks = rng.integers(0, 255, k // 32)
            elif t == 7:
                ks = np.full(k // 32, 254)
            elif t == 8:
                x[:] = quantize(fa, [1.875 * 2.0 ** rng.integers(-3, 3)])[0]
            elif t == 9:
                x = codes_of(rng, fa, "pow2", (k,))
            elif t == 10:
                x[:] = 0
                ks = rng.integers(0, 40, k // 32)
            a[i], sa[i] = x, ks
        for j in range(n):
            t = j % len(cols)
            ks = ue8m0_of(rng, "unit", k // 32)
            y = codes_of(rng, fb, "normal", (k,))
            if t == 1:
                y = _paired(y, h)
            elif t == 2:
                y = codes_of(rng, fb, "max", (k,))
            elif t == 3:
                y[:] = 0
                ks = np.full(k // 32, 254)
            elif t == 4:
                ks = rng.integers(67, 108, k // 32)
            elif t == 5:
                y = codes_of(rng, fb, "sub", (k,))
            elif t == 6:
                y = codes_of(rng, fb, "pow2", (k,))
            elif t == 7:
                y = codes_of(rng, fb, "bits", (k,))
                ks = rng.integers(0, 255, k // 32)
            b[:, j], sb[:, j] = y, ks
        c[:] = c_of(rng, "mix", m * n).reshape(m, n)
        for i in range(m):  # the zero rows meet tiny, subnormal and low-bit C
            if i % len(rows) in (0, 1, 10):
                c[i] = c_of(rng, ["tiny", "sub", "ulp", "zero"][i % 4], n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=rows, cols=cols,
                    desc="adversarial rows x columns: zero rows with large or tiny scales beside tiny, "
                         "subnormal and low-bit C; cancellation; scales 2^-127..2^127; subnormals")
    if style == "special":
        a[:] = codes_of(rng, fa, "normal", (m, k))
        b[:] = codes_of(rng, fb, "normal", (k, n))
        sa[:] = ue8m0_of(rng, "unit", sa.size).reshape(sa.shape)
        sb[:] = ue8m0_of(rng, "unit", sb.size).reshape(sb.shape)
        c[:] = c_of(rng, "normal", m * n).reshape(m, n)

        def specials(fmt):
            if FMT[fmt][4] == "ieee":
                return [0x7C, 0xFC, 0x7D, 0xFF]  # +Inf, -Inf, NaN, NaN
            if FMT[fmt][4] == "fn":
                return [0x7F, 0xFF]
            return []
        for i in range(m):
            t = i % 8
            sp = specials(fa)
            if t in (0, 1) and sp:
                a[i, rng.integers(0, k, 1 + t)] = rng.choice(sp, 1 + t)
            elif t == 2:
                sa[i, rng.integers(0, k // 32)] = 0xFF  # NaN scale
            elif t == 3:
                c[i] = rng.choice([0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000], n).astype(np.uint32)
            elif t == 4 and sp:  # a special beside a zero column element
                a[i, :] = 0
                a[i, rng.integers(0, k)] = sp[0]
        for j in range(n):
            t = j % 4
            sp = specials(fb)
            if t == 1 and sp:
                b[rng.integers(0, k, 2), j] = rng.choice(sp, 2)
            elif t == 2:
                sb[rng.integers(0, k // 32), j] = 0xFF
            elif t == 3:
                b[:, j] = 0
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["Inf/NaN codes", "two specials", "NaN scale",
                                                      "C NaN/Inf", "one special, zeros", "normal",
                                                      "normal", "normal"],
                    cols=["normal", "specials", "NaN scale", "zero"],
                    desc="NaN and Inf: element codes, UE8M0 0xFF, C NaN/Inf, Inf x 0, Inf - Inf")
    raise ValueError(style)


def build_nvf4(rng, name, sfmt, block, m, n, k, style):
    """kind::mxf4nvf4 operands: E2M1 codes, scales UE8M0 (block 32/16) or UE4M3 (block 16)."""
    a = np.zeros((m, k), np.uint8)
    b = np.zeros((k, n), np.uint8)
    sa = np.zeros((m, k // block), np.uint8)
    sb = np.zeros((k // block, n), np.uint8)
    c = np.zeros((m, n), np.uint32)
    sc = ue8m0_of if sfmt == "ue8m0" else ue4m3_of
    unit = "unit" if sfmt == "ue8m0" else "normal"
    if style == "rand":
        a[:] = codes_of(rng, "e2m1", "bits", (m, k))
        b[:] = codes_of(rng, "e2m1", "bits", (k, n))
        sa[:] = sc(rng, unit, sa.size).reshape(sa.shape)
        sb[:] = sc(rng, unit, sb.size).reshape(sb.shape)
        c[:] = c_of(rng, "normal", m * n).reshape(m, n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["bits"], cols=["bits"],
                    desc=f"random E2M1 codes, {sfmt} scales near 1, C normal")
    if style == "wide":
        a[:] = codes_of(rng, "e2m1", "bits", (m, k))
        b[:] = codes_of(rng, "e2m1", "bits", (k, n))
        sa[:] = sc(rng, "full", sa.size).reshape(sa.shape)
        sb[:] = sc(rng, "full", sb.size).reshape(sb.shape)
        sa[sa == 0xFF] = 0xFE
        sb[sb == 0xFF] = 0xFE
        c[:] = c_of(rng, "mix", m * n).reshape(m, n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["bits"], cols=["bits"],
                    desc=f"random E2M1 codes, {sfmt} scales over the whole range, C of every kind")
    if style == "adv":
        g = 16
        rows = ["zero groups, big scales", "one zero group, big scale", "cancel in group",
                "cancel across groups", "tiny scales", "max values", "zero/tiny scales", "normal"]
        if sfmt == "ue4m3":
            rows += ["zero scale", "subnormal scales", "signed scales"]
        cols = ["bits", "paired in group", "paired across groups", "max values", "ones", "zero"]
        big = (lambda q: rng.integers(200, 255, q)) if sfmt == "ue8m0" else (lambda q: np.full(q, 0x7E))
        tiny = (lambda q: rng.integers(0, 30, q)) if sfmt == "ue8m0" else (lambda q: rng.integers(1, 8, q))
        for i in range(m):
            t = i % len(rows)
            x = codes_of(rng, "e2m1", "bits", (k,))
            ks = sc(rng, unit, k // block)
            if t == 0:
                x[:] = 0
                ks = big(k // block)
            elif t == 1:
                x[: g] = 0
                ks[0] = big(1)[0]
            elif t == 2:
                x = _cancel(x, "e2m1", g // 2, rng)
            elif t == 3:
                x = _cancel(x, "e2m1", g, rng)
            elif t == 4:
                ks = tiny(k // block)
            elif t == 5:
                x = codes_of(rng, "e2m1", "max", (k,))
            elif t == 6:
                x[:] = 0
                ks = tiny(k // block)
            elif t == 8:
                ks = ue4m3_of(rng, "zero", k // block)
            elif t == 9:
                ks = ue4m3_of(rng, "sub", k // block)
            elif t == 10:
                ks = ue4m3_of(rng, "signed", k // block)
            a[i], sa[i] = x, ks
        for j in range(n):
            t = j % len(cols)
            y = codes_of(rng, "e2m1", "bits", (k,))
            ks = sc(rng, unit, k // block)
            if t == 1:
                y = _paired(y, g // 2)
            elif t == 2:
                y = _paired(y, g)
            elif t == 3:
                y = codes_of(rng, "e2m1", "max", (k,))
                ks = big(k // block)
            elif t == 4:
                y[:] = 0x2
            elif t == 5:
                y[:] = 0
            b[:, j], sb[:, j] = y, ks
        c[:] = c_of(rng, "mix", m * n).reshape(m, n)
        for i in range(m):
            if i % len(rows) in (0, 1, 6):
                c[i] = c_of(rng, ["tiny", "sub", "ulp", "normal"][i % 4], n)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=rows, cols=cols,
                    desc=f"adversarial {sfmt} block {block}: all-zero groups with large scales beside "
                         "tiny/subnormal/low-bit C, cancellation inside and across groups of 16, "
                         "extreme scales")
    if style == "special":
        a[:] = codes_of(rng, "e2m1", "bits", (m, k))
        b[:] = codes_of(rng, "e2m1", "bits", (k, n))
        sa[:] = sc(rng, unit, sa.size).reshape(sa.shape)
        sb[:] = sc(rng, unit, sb.size).reshape(sb.shape)
        c[:] = c_of(rng, "normal", m * n).reshape(m, n)
        nan_codes = [0xFF] if sfmt == "ue8m0" else [0x7F, 0xFF]
        for i in range(m):
            t = i % 6
            if t == 0:
                sa[i, rng.integers(0, k // block)] = rng.choice(nan_codes)
            elif t == 1:  # NaN scale on an all-zero row
                a[i] = 0
                sa[i, rng.integers(0, k // block)] = rng.choice(nan_codes)
            elif t == 2:  # C NaN (C = +-Inf makes MMA-Sim raise OverflowError: not generated)
                c[i] = rng.choice([0x7FC00000, 0xFFC00000, 0x7F800001], n).astype(np.uint32)
        for j in range(n):
            if j % 4 == 1:
                sb[rng.integers(0, k // block), j] = rng.choice(nan_codes)
        return dict(a=a, b=b, sa=sa, sb=sb, c=c, rows=["NaN scale", "NaN scale, zero row", "C NaN",
                                                      "normal", "normal", "normal"],
                    cols=["normal", "NaN scale", "normal", "normal"],
                    desc=f"NaN {sfmt} scales and NaN C (no Inf C: MMA-Sim raises on it)")
    raise ValueError(style)


def build_hop(rng, name, fa, fb, m, n, k, style):
    """wgmma FP8 operands, no scales."""
    mx = build_mx8(rng, name, fa, fb, m, n, k, style)
    mx.pop("sa")
    mx.pop("sb")
    mx["desc"] += " (the block scales of the kind::mxf8f6f4 patterns are dropped: wgmma has none)"
    return mx


# --- probes: hand-made rows/columns whose diagonal output (i, i) shows one rule -------------------
# Every output of a probe case is a valid MMA-Sim output; the manifest notes the diagonal.
# "qmx" is what qmx-sim's reference (lib/src/gemm/gemm_ref.cc) gives by reading, not by running it.

def _probe_case(probes, k, nblk, scales=True):
    P = len(probes)
    a = np.zeros((P, k), np.uint8)
    b = np.zeros((k, P), np.uint8)
    sa = np.zeros((P, nblk), np.uint8)
    sb = np.zeros((nblk, P), np.uint8)
    c = np.zeros((P, P), np.uint32)
    notes = []
    for i, p in enumerate(probes):
        a[i] = p["a"]
        b[:, i] = p["b"]
        if scales:
            sa[i] = p["sa"]
            sb[:, i] = p["sb"]
        c[i, :] = p["c"]
        notes.append({"row_col": i, "what": p["what"], "qmx_by_reading": p.get("qmx")})
    d = dict(a=a, b=b, c=c, rows=[p["what"] for p in probes], cols=["(diagonal)"], probes=notes,
             desc="probes: output (i, i) of row i and column i shows one rule; other outputs are ordinary")
    if scales:
        d.update(sa=sa, sb=sb)
    return d


def build_probe_mx8(rng, name, *_):
    E = {"0": 0x00, "1": 0x38, "1.5": 0x3C, "2": 0x40, "448": 0x7E}
    z = [0] * 32
    P = [
        dict(what="zero A row, scales 2^127 x 2^127, B = 1, C = 1: MMA-Sim's zero element gets exponent "
                  "-126 + 0 + 127 + 127 = 128 and C is cut away",
             a=z, b=[E["1"]] * 32, sa=[254], sb=[254], c=0x3F800000, qmx="0x3f800000"),
        dict(what="zero A row, unit scales, B = 448, C = 2^-126 + 2^-149: zero exponent -126 + 8 = -118 "
                  "cuts C at 2^-143",
             a=z, b=[E["448"]] * 32, sa=[127], sb=[127], c=0x00800001, qmx="0x00800001"),
        dict(what="A = B = 2 (32 times), scales 2^-127 x 2^-27, C = 0: products 2^-152; MMA-Sim's zero C "
                  "has exponent -126, so each is cut at 2^-151; qmx-sim's -133 keeps them (sum 2^-147)",
             a=[E["2"]] * 32, b=[E["2"]] * 32, sa=[0], sb=[100], c=0, qmx="0x00000004"),
        dict(what="one product 2^-151 (2 x 2 x 2^-127 x 2^-26) with C = -2^-149: the sum -3 x 2^-151 is "
                  "cut to zero; MMA-Sim gives +0, qmx-sim's RoundFused keeps the sign (-0)",
             a=[E["2"]] + [0] * 31, b=[E["2"]] * 32, sa=[0], sb=[101], c=0x80000001, qmx="0x80000000"),
        dict(what="zero A row, scale 2^22, B = 448, C = 2^-100 (1 + 2^-23): zero exponent -96 cuts C's "
                  "last bit",
             a=z, b=[E["448"]] * 32, sa=[149], sb=[127], c=0x0D800001, qmx="0x0d800001"),
        dict(what="A = 448 (B zero column, unit scales), C = 2^-126 + 2^-149: the zero product takes "
                  "the A element's exponent (-118)",
             a=[E["448"]] * 32, b=z, sa=[127], sb=[127], c=0x00800001, qmx="0x00800001"),
        dict(what="zero x zero with scales 2^127 x 2^127 (exponent -252 + 254 = 2), C = 2^-2 (1 + 2^-23)",
             a=z, b=z, sa=[254], sb=[254], c=0x3E800001, qmx="0x3e800001"),
        dict(what="control: ordinary data (both models agree)",
             a=codes_of(rng, "e4m3", "normal", (32,)), b=codes_of(rng, "e4m3", "normal", (32,)),
             sa=[130], sb=[122], c=f32_bits(0.3)),
    ]
    return _probe_case(P, 32, 1)


def build_probe_nvf4_ue8m0(rng, name, *_):
    six, one5, half, one, four = 0x7, 0x3, 0x1, 0x2, 0x6
    g13 = [six] * 15 + [one5]
    a_q1 = g13 * 3 + [six] * 11 + [six, half, one, 0, 0]
    b_q1 = g13 * 3 + [six] * 11 + [four, one5, one, 0, 0]
    z = [0] * 64
    P = [
        dict(what="A group 0 all zero with scale 2^20 (others 2^0), B = 1, C = 1 + 2^-23: MMA-Sim's zero "
                  "group keeps exponent 20 + 0 and cuts C at 2^-15",
             a=z, b=[one] * 64, sa=[147, 127, 127, 127], sb=[127] * 4, c=0x3F800001, qmx="0x3f800001"),
        dict(what="C = 0, four groups at scale 2^-127 x 2^-33 whose exact sum is 8194 x 2^-162 (each "
                  "group an odd number of 2^-162): MMA-Sim's zero C (exponent -126) cuts each at 2^-161 "
                  "(sum 8190 x 2^-162 -> 0); qmx-sim (-139) keeps them (-> 2^-149)",
             a=a_q1, b=b_q1, sa=[0] * 4, sb=[94] * 4, c=0, qmx="0x00000001"),
        dict(what="one group term 0.25 x 2^-149 = 2^-151 with C = -2^-149: the sum is cut to zero; "
                  "MMA-Sim +0, qmx-sim -0",
             a=[half] + [0] * 63, b=[half] * 64, sa=[0] * 4, sb=[105] * 4, c=0x80000001, qmx="0x80000000"),
        dict(what="all-zero A with scales 2^-100, B = 1, C = 2^-140 + 2^-149: MMA-Sim's zero groups "
                  "(exponent -100) cut C at 2^-135 -> 0",
             a=z, b=[one] * 64, sa=[27] * 4, sb=[127] * 4, c=0x00000201, qmx="0x00000201"),
        dict(what="control: random codes, scales near 1",
             a=codes_of(rng, "e2m1", "bits", (64,)), b=codes_of(rng, "e2m1", "bits", (64,)),
             sa=[127, 128, 126, 127], sb=[127, 125, 129, 127], c=f32_bits(-1.25)),
    ]
    return _probe_case(P, 64, 4)


def build_probe_nvf4_ue4m3(rng, name, *_):
    six, one = 0x7, 0x2
    z = [0] * 64
    P = [
        dict(what="all-zero A with UE4M3 scales 448 x 448 (exponent 16), C = 1 + 2^-23: cut at 2^-19",
             a=z, b=[one] * 64, sa=[0x7E] * 4, sb=[0x7E] * 4, c=0x3F800001, qmx="0x3f800001"),
        dict(what="zero UE4M3 scale (0x00) on A with nonzero elements, C = 2^-126 + 2^-149: MMA-Sim "
                  "exponent -126 + 8, qmx-sim -139; not visible (both keep C)",
             a=[six] * 64, b=[one] * 64, sa=[0x00] * 4, sb=[0x7E] * 4, c=0x00800001, qmx="0x00800001"),
        dict(what="scale with the sign bit (0xB8 = -1.0): both take |s| = 1; 64 products of 1 -> 64",
             a=[one] * 64, b=[one] * 64, sa=[0xB8] * 4, sb=[0x38] * 4, c=0, qmx="0x42800000"),
        dict(what="subnormal UE4M3 scales 2^-9 x 2^-9, A = B = 6: 4 x 576 x 2^-18 (both agree)",
             a=[six] * 64, b=[six] * 64, sa=[0x01] * 4, sb=[0x01] * 4, c=0),
        dict(what="NaN scale 0x7F in group 2 of an all-zero A row: NaN",
             a=z, b=[one] * 64, sa=[0x38, 0x38, 0x7F, 0x38], sb=[0x38] * 4, c=0, qmx="0x7fffffff"),
    ]
    return _probe_case(P, 64, 4)


def build_probe_hop(rng, name, *_):
    z = [0] * 32
    P = [
        dict(what="zero A row, B = 448, C = 2^-126 (1 + 2^-13): zero exponent -118 cuts C at 2^-131",
             a=z, b=[0x7E] * 32, c=0x00800400, qmx="0x00800400"),
        dict(what="zero A row, B = 1 (zero exponent -126 = C's): no cut (control)",
             a=z, b=[0x38] * 32, c=0x00800400, qmx="0x00800400"),
        dict(what="C = 1 + 2^-13 + 2^-14 with zero products: cut to 14 bits (both)",
             a=z, b=z, c=0x3F800600, qmx="0x3f800400"),
        dict(what="control: ordinary data",
             a=codes_of(rng, "e4m3", "normal", (32,)), b=codes_of(rng, "e4m3", "normal", (32,)),
             c=f32_bits(0.3)),
    ]
    return _probe_case(P, 32, 1, scales=False)


# --- case sets ------------------------------------------------------------------------------------
# name: (family, formats/params, M, N, K, K quick, style, qmx model)

SETS = [
    ("bw8_rand_e4m3", "mx8", ("e4m3", "e4m3"), 128, 16, 128, 64, "rand"),
    ("bw8_wide_e5m2_e4m3", "mx8", ("e5m2", "e4m3"), 128, 16, 96, 32, "wide"),
    ("bw8_bits_e4m3_e5m2", "mx8", ("e4m3", "e5m2"), 128, 16, 64, 32, "bits"),
    ("bw8_adv_e4m3", "mx8", ("e4m3", "e4m3"), 128, 16, 128, 64, "adv"),
    ("bw8_adv_e5m2", "mx8", ("e5m2", "e5m2"), 128, 16, 64, 32, "adv"),
    ("bw8_special", "mx8", ("e5m2", "e4m3"), 128, 8, 64, 32, "special"),
    ("bw8_probe", "probe_mx8", ("e4m3", "e4m3"), 0, 0, 32, 32, "probe"),
    ("bw8x_adv_e2m3_e3m2", "mx8x", ("e2m3", "e3m2"), 32, 16, 64, 32, "adv"),
    ("bw8x_bits_e3m2_e2m3", "mx8x", ("e3m2", "e2m3"), 32, 16, 64, 32, "bits"),
    ("bw8x_adv_e2m1_e4m3", "mx8x", ("e2m1", "e4m3"), 32, 16, 64, 32, "adv"),
    ("bw8x_adv_e5m2_e2m1", "mx8x", ("e5m2", "e2m1"), 32, 16, 64, 32, "adv"),
    ("bw8x_bits_e2m1_e2m1", "mx8x", ("e2m1", "e2m1"), 32, 16, 64, 32, "bits"),
    ("bw4_nvfp4_rand", "nvf4", ("ue4m3", 16), 128, 16, 128, 64, "rand"),
    ("bw4_mxfp4_rand", "nvf4", ("ue8m0", 32), 128, 16, 128, 64, "rand"),
    ("bw4_ue8m0_b16_wide", "nvf4", ("ue8m0", 16), 128, 16, 64, 64, "wide"),  # one step: overflow stays Inf
    ("bw4_nvfp4_wide", "nvf4", ("ue4m3", 16), 128, 16, 128, 64, "wide"),
    ("bw4_ue8m0_b16_adv", "nvf4", ("ue8m0", 16), 128, 16, 128, 64, "adv"),
    ("bw4_ue8m0_b32_adv", "nvf4", ("ue8m0", 32), 128, 16, 128, 64, "adv"),
    ("bw4_nvfp4_adv", "nvf4", ("ue4m3", 16), 128, 16, 128, 64, "adv"),
    ("bw4_special_ue8m0", "nvf4", ("ue8m0", 16), 128, 8, 64, 64, "special"),
    ("bw4_special_ue4m3", "nvf4", ("ue4m3", 16), 128, 8, 64, 64, "special"),
    ("bw4_probe_ue8m0", "probe_nvf4_ue8m0", ("ue8m0", 16), 0, 0, 64, 64, "probe"),
    ("bw4_probe_ue4m3", "probe_nvf4_ue4m3", ("ue4m3", 16), 0, 0, 64, 64, "probe"),
    ("hop_rand_e4m3", "hop", ("e4m3", "e4m3"), 64, 16, 128, 64, "rand"),
    ("hop_adv_e5m2_e4m3", "hop", ("e5m2", "e4m3"), 64, 16, 96, 32, "adv"),
    ("hop_bits_e4m3_e5m2", "hop", ("e4m3", "e5m2"), 64, 16, 64, 32, "bits"),
    ("hop_special", "hop", ("e5m2", "e4m3"), 64, 8, 64, 32, "special"),
    ("hop_probe", "probe_hop", ("e4m3", "e4m3"), 0, 0, 32, 32, "probe"),
]

QMX_MODEL = {"mx8": "blackwell-mxf8f6f4", "mx8x": "blackwell-mxf8f6f4", "probe_mx8": "blackwell-mxf8f6f4",
             "nvf4": "blackwell-mxf4nvf4", "probe_nvf4_ue8m0": "blackwell-mxf4nvf4",
             "probe_nvf4_ue4m3": "blackwell-mxf4nvf4", "hop": "hopper-fp8-fast", "probe_hop": "hopper-fp8-fast"}


def set_seed(base, name):
    return [base, zlib.crc32(name.encode())]


def build_case(entry, base_seed, quick):
    name, fam, par, m, n, k, kq, style = entry
    if quick:
        k, n = kq, min(n, 8)
    rng = np.random.default_rng(set_seed(base_seed, name))
    if fam in ("mx8", "mx8x"):
        cs = build_mx8(rng, name, par[0], par[1], m, n, k, style)
        fa, fb, sfmt, blk, step = par[0], par[1], "ue8m0", 32, 32
    elif fam == "nvf4":
        cs = build_nvf4(rng, name, par[0], par[1], m, n, k, style)
        fa, fb, sfmt, blk, step = "e2m1", "e2m1", par[0], par[1], 64
    elif fam == "hop":
        cs = build_hop(rng, name, par[0], par[1], m, n, k, style)
        fa, fb, sfmt, blk, step = par[0], par[1], None, None, 32
    elif fam == "probe_mx8":
        cs = build_probe_mx8(rng, name)
        fa, fb, sfmt, blk, step = "e4m3", "e4m3", "ue8m0", 32, 32
    elif fam.startswith("probe_nvf4"):
        cs = (build_probe_nvf4_ue8m0 if par[0] == "ue8m0" else build_probe_nvf4_ue4m3)(rng, name)
        fa, fb, sfmt, blk, step = "e2m1", "e2m1", par[0], par[1], 64
    elif fam == "probe_hop":
        cs = build_probe_hop(rng, name)
        fa, fb, sfmt, blk, step = "e4m3", "e4m3", None, None, 32
    else:
        raise ValueError(fam)
    cs.update(name=name, family=fam, a_format=fa, b_format=fb, scale_format=sfmt, block=blk, step=step)
    return cs


# --- running MMA-Sim ------------------------------------------------------------------------------

class Sim:
    """MMA-Sim imported from a folder; the torch handles the models need."""

    def __init__(self, path):
        path = os.path.abspath(path)
        root = os.path.dirname(path) if os.path.basename(path.rstrip("/")) == "mmasim" else path
        if not os.path.isfile(os.path.join(root, "mmasim", "simulator", "arithmetic.py")):
            sys.exit(f"collect_mmasim: no mmasim/simulator/arithmetic.py under {root}")
        if sys.version_info < (3, 10):
            sys.exit(f"collect_mmasim: MMA-Sim needs Python >= 3.10 (PEP 604 annotations), this is "
                     f"{platform.python_version()}")
        import torch
        missing = [d for d in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz",
                               "float8_e5m2fnuz") if not hasattr(torch, d)]
        if missing:
            sys.exit(f"collect_mmasim: torch {torch.__version__} lacks {', '.join(missing)}; MMA-Sim needs "
                     "a PyTorch with float8_e8m0fnu (2.7 or newer)")
        sys.path.insert(0, root)
        from mmasim.simulator import arithmetic, nv_ptx  # noqa: E402
        self.torch, self.arith, self.nv = torch, arithmetic, nv_ptx
        self.root = root
        self.sources = {}
        for dp, _, files in os.walk(os.path.join(root, "mmasim")):
            for f in sorted(files):
                if f.endswith(".py"):
                    p = os.path.join(dp, f)
                    with open(p, "rb") as fh:
                        self.sources[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
        self.tdt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "ue8m0": torch.float8_e8m0fnu,
                    "ue4m3": torch.float8_e4m3fn}

    def t_codes(self, codes, fmt):
        return self.torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8)).view(self.tdt[fmt])

    def t_c(self, bits):
        return self.torch.from_numpy(np.ascontiguousarray(bits_f32(bits)).copy())

    # One instruction on a padded tile: codes (mi x kk), (kk x nj), C bits (mi x nj) -> D bits.
    def call(self, cs, a, b, c_bits, sa, sb):
        """One instruction per padded tile. Returns (D bits, ok mask): ok is False where MMA-Sim raised
        (C = +-Inf reaching kind::mxf4nvf4, e.g. after an overflow earlier in the chain); those outputs
        were recomputed one by one, exactly as the class computes each, to find them."""
        torch = self.torch
        fam = cs["family"]
        mi, nj = c_bits.shape
        inst_m = 64 if cs["scale_format"] is None else 128
        Mp = -(-mi // inst_m) * inst_m
        Np = max(8, -(-nj // 8) * 8)
        pad_a = np.zeros((Mp, a.shape[1]), np.uint8)
        pad_a[:mi] = a
        pad_b = np.zeros((b.shape[0], Np), np.uint8)
        pad_b[:, :nj] = b
        pad_c = np.zeros((Mp, Np), np.uint32)
        pad_c[:mi, :nj] = c_bits
        if sa is not None:
            one = 127 if cs["scale_format"] == "ue8m0" else 0x38
            pad_sa = np.full((Mp, sa.shape[1]), one, np.uint8)
            pad_sa[:mi] = sa
            pad_sb = np.full((sb.shape[0], Np), one, np.uint8)
            pad_sb[:, :nj] = sb
        out = np.zeros((Mp, Np), np.uint32)
        ok = np.ones((Mp, Np), bool)
        for r0 in range(0, Mp, inst_m):
            for c0 in range(0, Np, 256):
                c1 = min(Np, c0 + 256)
                C = self.t_c(pad_c[r0:r0 + inst_m, c0:c1])
                if fam in ("hop", "probe_hop"):
                    q = f"m64n{c1 - c0}k32.f32.{cs['a_format']}.{cs['b_format']}"
                    mma = self.nv.wgmma("Hopper", q)
                    args = (self.t_codes(pad_a[r0:r0 + inst_m], cs["a_format"]),
                            self.t_codes(pad_b[:, c0:c1], cs["b_format"]), C)
                elif fam in ("mx8", "probe_mx8"):
                    q = f"m128n{c1 - c0}k32.block32.f32.{cs['a_format']}.{cs['b_format']}.ue8m0"
                    mma = self.nv.tcgen05mma_block_scale("Blackwell", q)
                    args = (self.t_codes(pad_a[r0:r0 + inst_m], cs["a_format"]),
                            self.t_codes(pad_b[:, c0:c1], cs["b_format"]), C,
                            self.t_codes(pad_sa[r0:r0 + inst_m], "ue8m0"), self.t_codes(pad_sb[:, c0:c1], "ue8m0"))
                else:  # mxf4nvf4: two E2M1 codes a byte, element 2l in the low nibble (unpack_fp4_tensor)
                    q = f"m128n{c1 - c0}k64.block{cs['block']}.f32.e2m1.e2m1.{cs['scale_format']}"
                    mma = self.nv.tcgen05mma_block_scale("Blackwell", q)
                    ta = pad_a[r0:r0 + inst_m]
                    tb = pad_b[:, c0:c1]
                    pa = (ta[:, 0::2] | (ta[:, 1::2] << 4)).astype(np.uint8)
                    pb = (tb[0::2, :] | (tb[1::2, :] << 4)).astype(np.uint8)
                    args = (torch.from_numpy(pa), torch.from_numpy(pb), C,
                            self.t_codes(pad_sa[r0:r0 + inst_m], cs["scale_format"]),
                            self.t_codes(pad_sb[:, c0:c1], cs["scale_format"]))
                cs.setdefault("qualifiers", set()).add(q)
                try:
                    D = mma(*args).numpy().view(np.uint32)
                except (OverflowError, ValueError, ZeroDivisionError):
                    D, okt = self.per_output(mma, args)
                    ok[r0:r0 + inst_m, c0:c1] = okt
                out[r0:r0 + inst_m, c0:c1] = D
        return out[:mi, :nj], ok[:mi, :nj]

    def per_output(self, mma, args):
        """The class's loop body (mmasim/simulator/nv_ptx.py, wgmma and tcgen05mma_block_scale
        __call__), one output at a time, for a tile on which the class raised."""
        ar, nv = self.arith, self.nv
        mma.check_input(*args)
        A, B, C = args[0], args[1], args[2]
        m, n = C.shape
        D = np.zeros((m, n), np.uint32)
        ok = np.ones((m, n), bool)
        for i in range(m):
            for j in range(n):
                try:
                    if len(args) == 3:  # wgmma
                        r = ar.nv_fused_dot_add(A[i, :], B[:, j], C[i, j], n_fractional_bits=mma.n_accum_fractional_bits,
                                                output_type=mma.output_type)
                    elif mma.k == 32:  # kind::mxf8f6f4
                        r = ar.nv_fused_dot_add(A[i, :], B[:, j], C[i, j], mma.n_accum_fractional_bits,
                                                mma.output_type, args[3][i, 0], args[4][0, j])
                    else:  # kind::mxf4nvf4
                        r = ar.nv_fused_dot_add_with_block_scale(
                            nv.unpack_fp4_tensor(A[i, :]), nv.unpack_fp4_tensor(B[:, j]), C[i, j],
                            args[3][i, :], args[4][:, j], mma.n_accum_fractional_bits)
                    D[i, j] = int(r.reshape(()).view(self.torch.int32).item()) & 0xFFFFFFFF
                except (OverflowError, ValueError, ZeroDivisionError):
                    ok[i, j] = False
                    D[i, j] = 0xFFFFFFFF
        return D, ok

    # The extension for FP6/FP4 in kind::mxf8f6f4: the class's per-output call, values carried in
    # float16 (A) / bfloat16 (B) with their emin put into arithmetic.dtype_min_exponent for the call.
    def call_ext(self, cs, a, b, c_bits, sa, sb):
        torch, ar = self.torch, self.arith
        mi, nj = c_bits.shape
        A = torch.tensor(decode(cs["a_format"], a), dtype=torch.float16)
        B = torch.tensor(decode(cs["b_format"], b), dtype=torch.bfloat16)
        assert np.array_equal(A.double().numpy(), decode(cs["a_format"], a), equal_nan=True)
        assert np.array_equal(B.double().numpy(), decode(cs["b_format"], b), equal_nan=True)
        C = self.t_c(c_bits)
        SA, SB = self.t_codes(sa, "ue8m0"), self.t_codes(sb, "ue8m0")
        D = torch.zeros((mi, nj), dtype=torch.float32)
        saved = dict(ar.dtype_min_exponent)
        try:
            ar.dtype_min_exponent[torch.float16] = EMIN[cs["a_format"]]
            ar.dtype_min_exponent[torch.bfloat16] = EMIN[cs["b_format"]]
            for i in range(mi):
                for j in range(nj):
                    D[i][j] = ar.nv_fused_dot_add(A[i, :], B[:, j], C[i, j], 25, "f32", SA[i, 0], SB[0, j])
        finally:
            ar.dtype_min_exponent.clear()
            ar.dtype_min_exponent.update(saved)
        return D.numpy().view(np.uint32).copy()

    def run_case(self, cs):
        """D of the whole K: instructions chained, D fed back as C."""
        step, k = cs["step"], cs["a"].shape[1]
        assert k % step == 0
        d = cs["c"].reshape(cs["a"].shape[0], cs["b"].shape[1]).copy()
        ok = np.ones(d.shape, bool)
        for k0 in range(0, k, step):
            a = cs["a"][:, k0:k0 + step]
            b = cs["b"][k0:k0 + step, :]
            sa = sb = None
            if cs["scale_format"] is not None:
                s0, s1 = k0 // cs["block"], (k0 + step) // cs["block"]
                sa, sb = cs["sa"][:, s0:s1], cs["sb"][s0:s1, :]
            if cs["family"] == "mx8x":
                d = self.call_ext(cs, a, b, d, sa, sb)
            else:
                d, ok_step = self.call(cs, a, b, np.where(ok, d, 0).astype(np.uint32), sa, sb)
                ok &= ok_step
        d[~ok] = 0xFFFFFFFF
        return d, ok


def function_of(cs):
    fam = cs["family"]
    if fam in ("mx8", "probe_mx8"):
        return ("mmasim.simulator.nv_ptx.tcgen05mma_block_scale('Blackwell', 'm128nNk32.block32.f32.A.B.ue8m0')"
                " -> arithmetic.nv_fused_dot_add(F=25, 'f32', scale_A[i,0], scale_B[0,j])")
    if fam == "mx8x":
        return ("mmasim.simulator.arithmetic.nv_fused_dot_add(F=25, 'f32', scale_a, scale_b) called as "
                "tcgen05mma_block_scale does, A values in float16 and B in bfloat16 with "
                f"dtype_min_exponent = {EMIN[cs['a_format']]} / {EMIN[cs['b_format']]} "
                "(EXTENSION: MMA-Sim has no E2M3/E3M2 and fails on E2M1 in kind::mxf8f6f4)")
    if fam in ("nvf4", "probe_nvf4_ue8m0", "probe_nvf4_ue4m3"):
        return ("mmasim.simulator.nv_ptx.tcgen05mma_block_scale('Blackwell', 'm128nNk64.blockB.f32.e2m1.e2m1.S')"
                " -> arithmetic.nv_fused_dot_add_with_block_scale(F=35)")
    return ("mmasim.simulator.nv_ptx.wgmma('Hopper', 'm64nNk32.f32.A.B') -> "
            "arithmetic.nv_fused_dot_add(F=13, 'f32_e8m13')")


# --- probes of MMA-Sim itself ---------------------------------------------------------------------

def capability_probes(sim):
    torch, nv = sim.torch, sim.nv
    res = {}

    def attempt(key, fn):
        try:
            r = fn()
            res[key] = "ok" if r is None else r
        except Exception as e:  # noqa: BLE001 - the failure is the finding
            res[key] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"

    def e2m1_in_mxf8f6f4():
        mma = nv.tcgen05mma_block_scale("Blackwell", "m128n8k32.block32.f32.e2m1.e4m3.ue8m0")
        A = torch.full((128, 32), 2, dtype=torch.uint8)
        B = torch.zeros((32, 8), dtype=torch.uint8).view(torch.float8_e4m3fn)
        S = torch.full((128, 1), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        T = torch.full((1, 8), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        mma(A, B, torch.zeros((128, 8)), S, T)
    attempt("tcgen05 kind::mxf8f6f4 with an e2m1 operand", e2m1_in_mxf8f6f4)
    attempt("tcgen05 kind::mxf8f6f4 with an e2m3 operand",
            lambda: nv.tcgen05mma_block_scale("Blackwell", "m128n8k32.block32.f32.e2m3.e4m3.ue8m0") and None)

    def inf_c_nvf4():
        r = sim.arith.nv_fused_dot_add_with_block_scale(
            torch.zeros(64), torch.zeros(64), torch.tensor(float("inf")),
            torch.full((4,), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu),
            torch.full((4,), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu), 35)
        return f"returned {float(r)}"
    attempt("kind::mxf4nvf4 with C = +Inf (nv_fused_dot_add_with_block_scale)", inf_c_nvf4)

    def inf_c_mxf8():
        z = torch.zeros(32, dtype=torch.uint8).view(torch.float8_e4m3fn)
        one = torch.tensor([127], dtype=torch.uint8).view(torch.float8_e8m0fnu)[0]
        r = sim.arith.nv_fused_dot_add(z, z, torch.tensor(float("inf")), 25, "f32", one, one)
        return f"returned {float(r)}"
    attempt("kind::mxf8f6f4 with C = +Inf (nv_fused_dot_add)", inf_c_mxf8)

    def overflow():
        mma = nv.tcgen05mma_block_scale("Blackwell", "m128n8k32.block32.f32.e4m3.e4m3.ue8m0")
        A = torch.full((128, 32), 0x7E, dtype=torch.uint8).view(torch.float8_e4m3fn)
        S = torch.full((128, 1), 254, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        T = torch.full((1, 8), 254, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        D = mma(A, A[:32, :8].contiguous(), torch.zeros((128, 8)), S, T)
        return f"448*448*2^254 x 32 -> {float(D[0, 0])} (bits {hex(int(D[0, 0].view(torch.int32)) & 0xFFFFFFFF)})"
    attempt("kind::mxf8f6f4 overflow", overflow)
    return res


def ext_consistency(sim, base_seed):
    """The FP6/FP4 extension's carrier trick against the class on E4M3 x E5M2 data: must be equal."""
    rng = np.random.default_rng([base_seed, 7])
    cs = build_mx8(rng, "ext_check", "e4m3", "e5m2", 16, 8, 32, "adv")
    cs.update(name="ext_check", family="mx8", a_format="e4m3", b_format="e5m2", scale_format="ue8m0",
              block=32, step=32)
    d_class, _ = sim.call(cs, cs["a"], cs["b"], cs["c"], cs["sa"], cs["sb"])
    d_ext = sim.call_ext(cs, cs["a"], cs["b"], cs["c"], cs["sa"], cs["sb"])
    same = int(np.sum(d_class == d_ext))
    return {"outputs": int(d_class.size), "equal": same}


# --- output ---------------------------------------------------------------------------------------

def save(out, name, key, arr, manifest_files):
    p = os.path.join(out, f"{name}_{key}.npy")
    np.save(p, arr)
    with open(p, "rb") as fh:
        manifest_files[f"{name}_{key}.npy"] = hashlib.sha256(fh.read()).hexdigest()


def write_readme(out, manifest):
    lines = [
        "# MMA-Sim outputs for qmx-sim's tensor-core GEMM models",
        "",
        f"Written by `gpu/scripts/collect_mmasim.py` (seed {manifest['seed']}"
        f"{', quick' if manifest['quick'] else ''}) with microsoft/MMA-Sim (arXiv 2511.10909) from "
        f"`{manifest['mmasim']['path']}` (revision: {manifest['mmasim']['revision']}), "
        f"torch {manifest['torch']}, numpy {manifest['numpy']}, Python {manifest['python']}.",
        "MMA-Sim is an oracle of a model, not of hardware: where qmx-sim and MMA-Sim differ, neither is",
        "thereby right. The known differences are rules for zero terms (the exponent a zero element, a zero",
        "C or an all-zero group of 16 is aligned by) and the sign of a result cut to zero; the probe cases",
        "show each on their diagonal.",
        "",
        "Files per case NAME (numpy `.npy`, row-major):",
        "- `NAME_a.npy`: A, M x K uint8 element codes (E2M1/FP6: one code a byte); `NAME_b.npy`: B, K x N.",
        "- `NAME_sa.npy`: A's block scales, M x K/block uint8 codes; `NAME_sb.npy`: B's, K/block x N",
        "  (UE8M0, or UE4M3 as generated, sign bit included). For qmx-sim: `SetBlockScales(A, fmt, 1, block, raw)`",
        "  and `SetBlockScales(B, fmt, block, 1, raw)`. Hopper cases have no scales.",
        f"- `NAME_c.npy`: C, M x N; `NAME_d.npy`: D from MMA-Sim, M x N; both {manifest['bits_dtype']}.",
        "- `NAME_ok.npy` (some cases only): M x N uint8, 0 where MMA-Sim raised instead of giving D (C = +-Inf",
        "  reaching kind::mxf4nvf4, after an overflow earlier in the chain); skip those outputs.",
        "",
        "`cases.json`: shape, formats, scale format and block, the qmx-sim model that should reproduce D",
        "(`qmx_model`), the MMA-Sim function and qualifiers, K per instruction (instructions are chained,",
        "D fed back as C), patterns of rows and columns, probe notes, SHA-256 of every file, and",
        "`mmasim_probes` (what MMA-Sim does with inputs it does not model).",
        "",
        "Replay a case with the CLI (from this folder; each case's line is `replay` in cases.json; with",
        "--bits-dtype u4 the C and D files are uint32, which the CLI does not read):",
        "",
        "    " + manifest["cases"][0]["replay"] if manifest["cases"] else "",
        "",
        "| case | M x K x N | A, B | scales | qmx-sim model | MMA-Sim |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in manifest["cases"]:
        sc = f"{c['scale_format']} 1x{c['block']}" if c["scale_format"] else "-"
        lines.append(f"| {c['name']} | {c['m']} x {c['k']} x {c['n']} | {c['a_format']}, {c['b_format']} | {sc} | "
                     f"{c['qmx_model']} | {c['mmasim_function'].split(' -> ')[0].split('(')[0].split('.')[-1]}"
                     f"{' (extension)' if c.get('extension') else ''} |")
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def replay_line(cs):
    n = cs["name"]
    line = (f"qmx-sim gemm --a {n}_a.npy --b {n}_b.npy --a-format {cs['a_format']} --b-format {cs['b_format']} ")
    if cs["scale_format"]:
        sf = "ue8m0" if cs["scale_format"] == "ue8m0" else "e4m3"
        line += f"--a-scales {n}_sa.npy --b-scales {n}_sb.npy --scale-format {sf} --block {cs['block']} "
    return line + f"--c {n}_c.npy --model {QMX_MODEL[cs['family']]} --expect {n}_d.npy"


def run_one(args_tuple):
    entry, base_seed, quick, mmasim_path, out, bits_dtype = args_tuple
    sim = Sim(mmasim_path)
    sim.torch.set_num_threads(1)
    t0 = time.time()
    cs = build_case(entry, base_seed, quick)
    d, ok = sim.run_case(cs)
    files = {}
    name = cs["name"]
    m, k = cs["a"].shape
    n = cs["b"].shape[1]
    bits = (lambda x: np.asarray(x, np.uint32)) if bits_dtype == "u4" else (lambda x: bits_f32(x))
    save(out, name, "a", cs["a"], files)
    save(out, name, "b", cs["b"], files)
    if cs["scale_format"] is not None:
        save(out, name, "sa", cs["sa"], files)
        save(out, name, "sb", cs["sb"], files)
    save(out, name, "c", bits(cs["c"]), files)
    save(out, name, "d", bits(d), files)
    if not ok.all():  # outputs MMA-Sim could not compute (it raised): D is 0xFFFFFFFF there
        save(out, name, "ok", ok.astype(np.uint8), files)
    back = np.load(os.path.join(out, f"{name}_d.npy"))
    assert np.array_equal(back.view(np.uint32), d), "D bits changed on the way to disk"
    rec = {"name": name, "m": int(m), "k": int(k), "n": int(n), "a_format": cs["a_format"],
           "b_format": cs["b_format"], "scale_format": cs["scale_format"], "block": cs["block"],
           "a_block": f"1x{cs['block']}" if cs["block"] else None,
           "b_block": f"{cs['block']}x1" if cs["block"] else None,
           "k_per_instruction": cs["step"], "instructions_chained": k // cs["step"],
           "qmx_model": QMX_MODEL[cs["family"]], "mmasim_function": function_of(cs),
           "mmasim_qualifiers": sorted(cs.get("qualifiers", [])),
           "extension": cs["family"] == "mx8x", "seed": set_seed(base_seed, name),
           "description": cs["desc"], "row_patterns": cs["rows"], "col_patterns": cs["cols"],
           "nan_outputs": int(np.sum((d[ok] & 0x7FFFFFFF) > 0x7F800000)),
           "inf_outputs": int(np.sum((d[ok] & 0x7FFFFFFF) == 0x7F800000)),
           "zero_outputs": int(np.sum((d[ok] & 0x7FFFFFFF) == 0)),
           "mmasim_raised": int((~ok).sum()),
           "replay": replay_line(cs),
           "files": files, "seconds": round(time.time() - t0, 2)}
    if "probes" in cs:
        for p in cs["probes"]:
            i = p["row_col"]
            p["mmasim"] = f"0x{int(d[i, i]):08x}"
            p["c"] = f"0x{int(cs['c'][i, i]):08x}"
        rec["probes"] = cs["probes"]
    return rec


def main():
    ap = argparse.ArgumentParser(
        description="Run microsoft/MMA-Sim's Blackwell tcgen05 block-scale and Hopper wgmma FP8 models on "
                    "random and adversarial cases and write them for qmx-sim's C++ replay "
                    "(golden/gemm-hopper style). CPU only; needs Python >= 3.10 and torch >= 2.7.",
        epilog="Case sets: " + ", ".join(s[0] for s in SETS), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", help="output folder (created)")
    ap.add_argument("--mmasim", help="MMA-Sim checkout (the folder holding mmasim/), or its mmasim/ folder")
    ap.add_argument("--mmasim-rev", default="unknown", help="MMA-Sim's git commit, recorded in cases.json")
    ap.add_argument("--quick", action="store_true", help="small K and N (seconds)")
    ap.add_argument("--sets", default="", help="comma-separated set names or prefixes ending in * (default: all)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"base seed (default {DEFAULT_SEED}); "
                    "each set draws from numpy's PCG64 seeded with [seed, crc32(name)]")
    ap.add_argument("--jobs", type=int, default=1, help="processes, one case set each (default 1)")
    ap.add_argument("--bits-dtype", choices=["f4", "u4"], default="f4",
                    help="dtype of C and D files: f4 (default; qmx-sim's ReadNpy reads it) or u4 (uint32)")
    ap.add_argument("--check", action="store_true", help="import MMA-Sim, run its probes, and exit")
    ap.add_argument("--list", action="store_true", help="list the case sets and exit")
    args = ap.parse_args()

    if args.list:
        for s in SETS:
            print(f"{s[0]:24s} {QMX_MODEL[s[1]]:20s} formats {s[2]}  K {s[5]} (quick {s[6]})  style {s[7]}")
        return 0
    if not args.mmasim:
        ap.error("--mmasim DIR is required")
    sim = Sim(args.mmasim)
    env = {"python": platform.python_version(), "torch": sim.torch.__version__, "numpy": np.__version__}
    print(json.dumps(env))
    probes = capability_probes(sim)
    for k2, v in probes.items():
        print(f"probe: {k2}: {v}")
    consistency = ext_consistency(sim, args.seed)
    print(f"extension check (E4M3 x E5M2 through the FP6/FP4 path vs the class): "
          f"{consistency['equal']}/{consistency['outputs']} equal")
    if consistency["equal"] != consistency["outputs"]:
        print("collect_mmasim: the extension path differs from MMA-Sim's class; bw8x_* sets are not trustworthy")
    if args.check:
        return 0
    if not args.outdir:
        ap.error("OUTDIR is required")
    want = [w for w in args.sets.split(",") if w]

    def chosen(name):
        return not want or any(name == w or (w.endswith("*") and name.startswith(w[:-1])) for w in want)
    entries = [s for s in SETS if chosen(s[0])]
    if not entries:
        ap.error("no case set matches --sets")
    if consistency["equal"] != consistency["outputs"]:
        entries = [s for s in entries if s[1] != "mx8x"]
    os.makedirs(args.outdir, exist_ok=True)
    t0 = time.time()
    jobs = [(e, args.seed, args.quick, sim.root, args.outdir, args.bits_dtype) for e in entries]
    recs = []
    if args.jobs > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(args.jobs) as pool:
            for r in pool.imap(run_one, jobs):
                print(f"{r['name']}: {r['m']}x{r['k']}x{r['n']} in {r['seconds']} s", flush=True)
                recs.append(r)
    else:
        for j in jobs:
            r = run_one(j)
            print(f"{r['name']}: {r['m']}x{r['k']}x{r['n']} in {r['seconds']} s", flush=True)
            recs.append(r)
    manifest = {
        "generator": "gpu/scripts/collect_mmasim.py",
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "seed": args.seed, "quick": args.quick, "bits_dtype": "<f4 (FP32 bit patterns)" if args.bits_dtype == "f4"
        else "<u4 (uint32 bit patterns)",
        "mmasim": {"repository": "github.com/microsoft/MMA-Sim", "paper": "arXiv 2511.10909",
                   "path": sim.root, "revision": args.mmasim_rev, "sources_sha256": sim.sources},
        "python": env["python"], "torch": env["torch"], "numpy": env["numpy"],
        "mmasim_probes": probes, "extension_check": consistency,
        "cases": recs, "outputs": int(sum(r["m"] * r["n"] for r in recs)), "seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(args.outdir, "cases.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    write_readme(args.outdir, manifest)
    print(f"{manifest['outputs']} outputs in {len(recs)} cases, {manifest['seconds']} s -> {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
