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
The instructions of GPUs not at hand (MMA-Sim's parameters; the qmx-sim models take MMA-Sim's zero rule
and must reproduce every output):
  ada_*     mma("Ada Lovelace", "m16n8k32.f32.A.B.f32") (A, B in e4m3/e5m2): two halves of K (is_split_k),
            each arithmetic.nv_fused_dot_add(F = 13, "f32_e8m13"). qmx-sim model: ada-mma-fp8. ada_k16_*:
            "m16n8k16.f32.A.B.f32", one such step; model ada-mma-fp8-k16.
  adaf16_*  mma("Ada Lovelace", "m16n8k32.f16.A.B.f16") and adaf16_k16_* "m16n8k16.f16.A.B.f16": the same
            with nv_fused_dot_add(F = 13, "f16") (FP16 C and D, RNE). qmx-sim model: ada-mma-fp8-f16.
  hopf16_*  wgmma("Hopper", "m64nNk32.f16.A.B"): nv_fused_dot_add(F = 13, "f16"). Model: hopper-wgmma-fp8-f16.
  rtx_*     mma("RTX Blackwell", "m16n8k32.f32.A.B.f32") (A, B in e4m3/e5m2/e2m1): nv_fused_dot_add(F = 25,
            "f32"), no split. Model: rtx-blackwell-f8f6f4. rtxf16_*: "m16n8k32.f16.A.B.f16", F = 25, "f16";
            model rtx-blackwell-f8f6f4-f16.
  rtxbs_mx8_*  mma_block_scale("RTX Blackwell", "m16n8k32.block32.f32.A.B.f32.ue8m0"): as bw8_* (scale_A
            M x 1, scale_B 1 x N per instruction). Model: rtx-blackwell-mxf8f6f4.
  rtxbs_mx4_*  mma_block_scale("RTX Blackwell", "m16n8k64.blockB.f32.e2m1.e2m1.f32.S"), S ue8m0 or ue4m3,
            block 16 or 32 (ue4m3 block 32 too, unlike tcgen05): as bw4_* (A, B packed two codes a byte,
            scale_A M x 64/B, scale_B 64/B x N). Model: rtx-blackwell-mxf4nvf4.
  E2M1 in rtx_*, rtxf16_* and rtxbs_mx8_* (cases marked extension): the classes take E2M1 as uint8 codes
  there (nv_torch_dtype) and fail on them (extract_significand_exponent asserts; see the probes). Those
  sets run the class's loop body one output at a time with the class instance's own F and output type,
  the E2M1 operand's values carried in float64 tensors with arithmetic.dtype_min_exponent[float64] set to
  0 (E2M1's emin) for the run. A check carrying E4M3 (emin -6) and then E5M2 (emin -14) the same way must
  equal the classes bit for bit, or those sets are left out.
Longer K chains instructions: D of one call is C of the next (what qmx-sim's fused models do).
Rows and columns are padded to the instructions' M (128, 64 or 16) and N (a multiple of 8) with zeros;
each output depends only on its own row, column and C, so the padding changes nothing.

Output, per case NAME (numpy .npy, row-major; golden/gemm-hopper/README.md's layout):
  NAME_a.npy   A, M x K uint8 element codes (E2M1 and FP6: one code per byte, low bits)
  NAME_b.npy   B, K x N uint8 codes
  NAME_sa.npy  A's block scales, M x K/block uint8 codes (UE8M0, or UE4M3 as given, sign bit included)
  NAME_sb.npy  B's block scales, K/block x N uint8 codes          (absent for hop_*)
  NAME_c.npy   C, M x N: FP32 bit patterns (FP16 ones for adaf16_*, hopf16_*, rtxf16_*)
  NAME_d.npy   D = MMA-Sim's output, M x N: FP32 (or FP16) bit patterns; MMA-Sim's NaN is 0x7FFFFFFF / 0x7FFF
  NAME_ok.npy  only where MMA-Sim raised on some outputs (C = +-Inf reaching kind::mxf4nvf4, e.g. after
               an overflow earlier in the K chain): M x N uint8, 0 = no MMA-Sim output (D holds all ones)
C and D are stored as '<f4' ('<f2' for FP16) by default (the bytes of each bit pattern, NaN payloads kept),
because qmx-sim's ReadNpy reads <f4, <f8, <f2, |u1, <u2 and bf16 but not <u4 (and `qmx-sim gemm --c ...
--expect ...` takes float32, or float16 for the FP16-accumulating models); --bits-dtype u4 writes uint32
(uint16) instead. Each case's c_dtype (f32 / f16) and cd_npy_dtype in cases.json say which.
cases.json lists each case (shape, formats, scale format and block, qmx-sim model, C/D type, MMA-Sim
function, architecture and qualifiers, K per instruction, seed, file SHA-256s, the CLI line that replays
it), the capability probes and the runs that wrote them; README.md says how to replay. The first 28 sets
(33,922 outputs) take about 5 s with --jobs 16 and about a minute in one process; the 71 added ones
(38,780 outputs) about 4 s with --jobs 16 (torch 2.11, 16 cores); --quick about a third of that.
--merge keeps the cases of an earlier cases.json in OUTDIR that this run does not write, e.g. to add the
new sets to golden/gemm-mmasim:
  collect_mmasim.py --mmasim DIR --jobs 16 --merge --sets 'ada_*,adaf16_*,hopf16_*,rtx_*,rtxf16_*,rtxbs_*' OUT

Usage:
  python3 collect_mmasim.py --mmasim DIR OUTDIR [--quick] [--sets S1,S2|PREFIX*] [--seed N] [--jobs N] [--merge]
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


def f16_bits(x):
    """FP16 bit patterns (uint16) of values (numpy's float16 conversion: input generation only)."""
    return np.asarray(x, dtype=np.float64).astype(np.float16).view(np.uint16)


def c16_of(rng, kind, n):
    """FP16 bit patterns (uint16) for an FP16 C drawn by `kind` (the FP16-accumulating instructions)."""
    sgn = lambda: rng.choice([0, 0x8000], n)  # noqa: E731
    if kind == "zero":
        return np.zeros(n, np.uint16)
    if kind == "negzero":
        return np.full(n, 0x8000, np.uint16)
    if kind == "normal":
        return f16_bits(rng.standard_normal(n) * np.exp2(rng.integers(-6, 7, n).astype(float)))
    if kind == "sub":  # FP16 subnormal, random low bits, random sign
        return (rng.integers(1, 1 << 10, n) | sgn()).astype(np.uint16)
    if kind == "tiny":  # the smallest normal binades, 2^-14 .. 2^-12, every mantissa bit random
        return ((rng.integers(1, 4, n) << 10) | rng.integers(0, 1 << 10, n) | sgn()).astype(np.uint16)
    if kind == "ulp":  # 2^e (1 + small odd multiple of 2^-10): the low bits tell truncation
        return (((rng.integers(-6, 7, n) + 15) << 10) | rng.integers(1, 8, n) | sgn()).astype(np.uint16)
    if kind == "int":  # integers 1024 .. 4095 (ulp 1 or 2): a product of 1 or 0.5 makes a tie
        return f16_bits(rng.integers(1024, 4096, n) * rng.choice([-1.0, 1.0], n))
    if kind == "huge":  # 2^12 .. 65504
        return ((rng.integers(27, 31, n) << 10) | rng.integers(0, 1 << 10, n) | sgn()).astype(np.uint16)
    if kind == "max":
        return (0x7BFF | sgn()).astype(np.uint16)
    if kind == "bits":  # any finite FP16
        b = rng.integers(0, 1 << 16, n).astype(np.uint16)
        bad = (b & 0x7C00) == 0x7C00
        b[bad] ^= 0x0400
        return b
    if kind == "mix":
        kinds = ["zero", "negzero", "normal", "sub", "tiny", "ulp", "int", "huge", "bits"]
        pick = rng.choice(len(kinds), n, p=[.08, .04, .34, .1, .1, .16, .08, .04, .06])
        out = np.empty(n, np.uint16)
        for t, k in enumerate(kinds):
            sel = pick == t
            out[sel] = c16_of(rng, k, int(sel.sum()))
        return out
    raise ValueError(kind)


def codes_between(rng, fmt, lo_log2, hi_log2, shape):
    """Codes of log-uniform magnitudes 2^lo .. 2^hi, random signs (input generation: nearest code)."""
    n = int(np.prod(shape))
    x = np.exp2(rng.uniform(lo_log2, hi_log2, n)) * rng.choice([-1.0, 1.0], n)
    return quantize(fmt, x).reshape(shape)


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


def build_plain32(rng, name, fa, fb, m, n, k, style):
    """mma FP8/FP4 operands without scales, FP32 C (Ada's and RTX Blackwell's mma): the Hopper patterns."""
    mx = build_hop(rng, name, fa, fb, m, n, k, style)
    mx["desc"] = mx["desc"].replace("wgmma has none", "mma without block_scale has none")
    return mx


def _specials(fmt):
    if FMT[fmt][4] == "ieee":
        return [0x7C, 0xFC, 0x7D, 0xFF]  # +Inf, -Inf, NaN, NaN
    if FMT[fmt][4] == "fn":
        return [0x7F, 0xFF]
    return []


def build_f16(rng, name, fa, fb, m, n, k, style):
    """FP8 (or E2M1) operands without scales, FP16 C (uint16 bit patterns): magnitudes chosen so that most
    sums stay inside FP16's range, with rows and columns that reach its edges (overflow to Inf at 65520,
    subnormal results, ties of the final RNE, truncation of small terms at F bits)."""
    a = np.zeros((m, k), np.uint8)
    b = np.zeros((k, n), np.uint8)
    c = np.zeros((m, n), np.uint16)
    top = {"e4m3": 2.5, "e5m2": 2.5, "e2m1": 2.58}  # |x| <= ~6: |sum of 32 products| <~ 2^10
    if style == "rand":
        a[:] = codes_of(rng, fa, "normal", (m, k))
        b[:] = codes_of(rng, fb, "normal", (k, n))
        c[:] = c16_of(rng, "normal", m * n).reshape(m, n)
        return dict(a=a, b=b, c=c, rows=["normal"], cols=["normal"],
                    desc="normal data, C FP16 normal x 2^-6..2^6")
    if style == "wide":
        lo = {"e4m3": -9, "e5m2": -16, "e2m1": -1}
        a[:] = codes_between(rng, fa, lo[fa], top[fa] + 2, (m, k))
        b[:] = codes_between(rng, fb, lo[fb], top[fb] + 2, (k, n))
        c[:] = c16_of(rng, "mix", m * n).reshape(m, n)
        return dict(a=a, b=b, c=c, rows=["wide"], cols=["wide"],
                    desc="log-uniform magnitudes from the smallest subnormal to ~2^4.5 (sums up to ~2^14), "
                         "C FP16 of every kind")
    if style == "bits":
        cols = ["normal", "normal 2^-4", "bits (overflows)", "normal"]
        a[:] = codes_of(rng, fa, "bits", (m, k))
        for j in range(n):
            t = j % len(cols)
            if t == 2:
                b[:, j] = codes_of(rng, fb, "bits", (k,))
            else:
                b[:, j] = codes_of(rng, fb, "normal", (k,), -4.0 if t == 1 else 0.0)
        c[:] = c16_of(rng, "mix", m * n).reshape(m, n)
        return dict(a=a, b=b, c=c, rows=["bits"], cols=cols,
                    desc="every finite A code uniformly against small B (and every B code: Inf from overflow), "
                         "C FP16 of every kind")
    if style == "adv":
        rows = ["zero", "cancel", "one big, many tiny", "subnormal", "max values", "pow2", "equal values",
                "bits", "one 1.0 (ties against C)", "normal", "small (2^-6..2^-3)", "zero"]
        cols = ["normal", "paired (cancels)", "max values", "subnormal", "pow2", "zero", "ones",
                "halves", "bits", "small"]
        h = 8  # pairs inside one 16-step (Ada's halves) and one 32-step
        one_a = quantize(fa, [1.0])[0]
        for i in range(m):
            t = i % len(rows)
            x = codes_of(rng, fa, "normal", (k,))
            if t in (0, 11):
                x[:] = 0
            elif t == 1:
                x = _cancel(x, fa, h, rng)
            elif t == 2:
                x = codes_of(rng, fa, "sub", (k,))
                x[rng.integers(0, k)] = quantize(fa, [rng.choice([6.0, 16.0, 48.0])])[0]
            elif t == 3:
                x = codes_of(rng, fa, "sub", (k,))
            elif t == 4:
                x = codes_of(rng, fa, "max", (k,))
            elif t == 5:
                x = codes_of(rng, fa, "pow2", (k,))
            elif t == 6:
                x[:] = quantize(fa, [1.75 * 2.0 ** rng.integers(-3, 3)])[0]
            elif t == 7:
                x = codes_of(rng, fa, "bits", (k,))
            elif t == 8:
                x[:] = 0
                x[rng.integers(0, k)] = one_a
            elif t == 10:
                x = codes_between(rng, fa, -6, -3, (k,))
            a[i] = x
        one_b, half_b = quantize(fb, [1.0])[0], quantize(fb, [0.5])[0]
        for j in range(n):
            t = j % len(cols)
            y = codes_of(rng, fb, "normal", (k,))
            if t == 1:
                y = _paired(y, h)
            elif t == 2:
                y = codes_of(rng, fb, "max", (k,))
            elif t == 3:
                y = codes_of(rng, fb, "sub", (k,))
            elif t == 4:
                y = codes_of(rng, fb, "pow2", (k,))
            elif t == 5:
                y[:] = 0
            elif t == 6:
                y[:] = one_b
            elif t == 7:
                y[:] = half_b
            elif t == 8:
                y = codes_of(rng, fb, "bits", (k,))
            elif t == 9:
                y = codes_between(rng, fb, -6, -3, (k,))
            b[:, j] = y
        c[:] = c16_of(rng, "mix", m * n).reshape(m, n)
        for i in range(m):
            t = i % len(rows)
            if t in (0, 3, 11):  # zero or tiny products beside tiny, subnormal, zero and -0 C
                c[i] = c16_of(rng, ["sub", "tiny", "zero", "negzero"][(i // len(rows)) % 4], n)
            elif t == 8:
                c[i] = c16_of(rng, "int", n)
            elif t == 4:
                c[i] = c16_of(rng, ["huge", "max"][(i // len(rows)) % 2], n)
            elif t == 2:
                c[i] = c16_of(rng, "ulp", n)
        return dict(a=a, b=b, c=c, rows=rows, cols=cols,
                    desc="adversarial rows x columns for FP16 accumulation: zero and subnormal products beside "
                         "subnormal, zero and -0 C; cancellation; one product of 1 or 0.5 against integer C "
                         "(RNE ties); max values against 65504 (Inf at 65520); small terms cut at F bits")
    if style == "special":
        a[:] = codes_of(rng, fa, "normal", (m, k))
        b[:] = codes_of(rng, fb, "normal", (k, n))
        c[:] = c16_of(rng, "normal", m * n).reshape(m, n)
        for i in range(m):
            t = i % 8
            sp = _specials(fa)
            if t in (0, 1) and sp:
                a[i, rng.integers(0, k, 1 + t)] = rng.choice(sp, 1 + t)
            elif t == 3:  # FP16 NaN (quiet, payload, signaling) and Inf C
                c[i] = rng.choice([0x7E00, 0xFE01, 0x7C01, 0x7C00, 0xFC00], n).astype(np.uint16)
            elif t == 4 and sp:  # a special beside a zero column element
                a[i, :] = 0
                a[i, rng.integers(0, k)] = sp[0]
            elif t == 5:  # finite, but overflows FP16
                a[i, :] = codes_of(rng, fa, "max", (k,))
        for j in range(n):
            t = j % 4
            sp = _specials(fb)
            if t == 1 and sp:
                b[rng.integers(0, k, 2), j] = rng.choice(sp, 2)
            elif t == 3:
                b[:, j] = 0
        return dict(a=a, b=b, c=c, rows=["Inf/NaN codes", "two specials", "normal", "C NaN/Inf (FP16)",
                                         "one special, zeros", "max values (overflow)", "normal", "normal"],
                    cols=["normal", "specials", "normal", "zero"],
                    desc="NaN and Inf: element codes, FP16 C NaN (quiet, payload, signaling) and Inf, Inf x 0, "
                         "Inf - Inf, finite sums past 65504")
    raise ValueError(style)


# --- probes: hand-made rows/columns whose diagonal output (i, i) shows one rule -------------------
# Every output of a probe case is a valid MMA-Sim output; the manifest notes the diagonal.
# "qmx" is what qmx-sim's reference (lib/src/gemm/gemm_ref.cc) gives by reading, not by running it.

def _probe_case(probes, k, nblk, scales=True, cdtype=np.uint32):
    P = len(probes)
    a = np.zeros((P, k), np.uint8)
    b = np.zeros((k, P), np.uint8)
    sa = np.zeros((P, nblk), np.uint8)
    sb = np.zeros((nblk, P), np.uint8)
    c = np.zeros((P, P), cdtype)
    notes = []
    for i, p in enumerate(probes):
        a[i] = p["a"]
        b[:, i] = p["b"]
        if scales:
            sa[i] = p["sa"]
            sb[:, i] = p["sb"]
        c[i, :] = p["c"]
        notes.append({"row_col": i, "what": p["what"], "qmx_by_reading": p.get("qmx")})
        if "mms" in p:
            notes[-1]["mmasim_by_reading"] = p["mms"]
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


# Probes of the mma / wgmma instructions added for Ada, Hopper FP16 and RTX Blackwell. "mms" is what MMA-Sim
# gives by reading its code (arithmetic.py); the collector records whether the run agreed
# (probes[].mmasim_agrees_with_reading). They hold no claim about qmx-sim beyond "reproduce MMA-Sim".

def build_probe_ada(rng, name, *_):
    """Ada's FP8 mma with FP32 output (F = 13, output cut to 13 fraction bits, K = 32 as two steps of 16)."""
    one, two, tiny, e448 = 0x38, 0x40, 0x04, 0x7E  # e4m3 1, 2, 2^-7 (subnormal), 448
    z = [0] * 32
    P = [
        dict(what="zero A row, B = 448, C = 2^-126 (1 + 2^-13): the zero elements' exponent -118 cuts C at "
                  "2^-131 -> 2^-126",
             a=z, b=[e448] * 32, c=0x00800400, mms=0x00800000),
        dict(what="zero A row, B = 1 (zero exponent -126 = C's): no cut",
             a=z, b=[one] * 32, c=0x00800400, mms=0x00800400),
        dict(what="C = 1 + 2^-13 + 2^-14, zero products: cut to 13 fraction bits (RZ)",
             a=z, b=z, c=0x3F800600, mms=0x3F800400),
        dict(what="C = -(1 + 2^-13 + 2^-14): cut toward zero", a=z, b=z, c=0xBF800600, mms=0xBF800400),
        dict(what="16 products 2^-14 in the first half, one product 4 in the second, C = 0: the first step "
                  "keeps 2^-10, the second adds 4 -> 4 + 2^-10 (one step of 32 would cut the 2^-14 at 2^-11)",
             a=[tiny] * 16 + [two] + [0] * 15, b=[tiny] * 16 + [two] + [0] * 15, c=0, mms=0x40800800),
        dict(what="C = 1, one product -1: exact cancellation gives +0",
             a=[one] + [0] * 31, b=[one | 0x80] + [0] * 31, c=0x3F800000, mms=0x00000000),
        dict(what="control: ordinary data",
             a=codes_of(rng, "e4m3", "normal", (32,)), b=codes_of(rng, "e4m3", "normal", (32,)),
             c=f32_bits(0.3)),
    ]
    return _probe_case(P, 32, 1, scales=False)


def build_probe_rtx(rng, name, *_):
    """RTX Blackwell's mma kind::f8f6f4 with FP32 output (F = 25, output cut to 23 fraction bits)."""
    one, small, e448 = 0x38, 0x01, 0x7E  # e4m3 1, 2^-9, 448
    z = [0] * 32
    P = [
        dict(what="zero A row, B = 448, C = 2^-126 + 2^-149: the zero elements' exponent -118 cuts C at 2^-143",
             a=z, b=[e448] * 32, c=0x00800001, mms=0x00800000),
        dict(what="zero A row, B = 1, C = 2^-126 + 2^-149: no cut", a=z, b=[one] * 32, c=0x00800001,
             mms=0x00800001),
        dict(what="C = 1, one product 2^-18 (2^-9 x 2^-9): F = 25 keeps it", a=[small] + [0] * 31,
             b=[small] * 32, c=0x3F800000, mms=0x3F800020),
        dict(what="C = 128, three products 2^-18 (0.75 of an ulp): RZ -> 128",
             a=[small] * 3 + [0] * 29, b=[small] * 32, c=0x43000000, mms=0x43000000),
        dict(what="C = 1, one product -1: exact cancellation gives +0",
             a=[one] + [0] * 31, b=[one | 0x80] + [0] * 31, c=0x3F800000, mms=0x00000000),
        dict(what="control: ordinary data",
             a=codes_of(rng, "e4m3", "normal", (32,)), b=codes_of(rng, "e4m3", "normal", (32,)),
             c=f32_bits(-0.7)),
    ]
    return _probe_case(P, 32, 1, scales=False)


def build_probe_f16(rng, name, fam):
    """FP16 accumulation (E5M2 x E5M2, K = 32, FP16 C and D): RNE ties, Inf at 65520, FP16 subnormals, the
    sign of zero, F-bit truncation of small terms, and Ada's two steps of 16."""
    one, two, four, quarter, s16, s9, inf = 0x3C, 0x40, 0x44, 0x34, 0x01, 0x18, 0x7C  # e5m2 codes
    f13 = fam in ("adaf16", "hopf16")
    halves = fam == "adaf16"
    z = [0] * 32

    def at(*pairs):
        x = [0] * 32
        for kk, v in pairs:
            x[kk] = v
        return x
    P = [
        dict(what="C = 2048, one product 1: 2049 is a tie -> 2048 (even)", a=at((0, one)), b=[one] * 32,
             c=0x6800, mms=0x6800),
        dict(what="C = 2050, one product 1: 2051 is a tie -> 2052 (even)", a=at((0, one)), b=[one] * 32,
             c=0x6801, mms=0x6802),
        dict(what="C = 65504, one product 16: 65520 rounds to 65536 -> +Inf", a=at((0, four)), b=[four] * 32,
             c=0x7BFF, mms=0x7C00),
        dict(what="C = 65504, one product 8: 65512 rounds to 65504", a=at((0, four)), b=[two] * 32,
             c=0x7BFF, mms=0x7BFF),
        dict(what="C = -65504, one product -16: -Inf", a=at((0, four | 0x80)), b=[four] * 32,
             c=0xFBFF, mms=0xFC00),
        dict(what="C = 0, three products 2^-16 x 2^-9 = 2^-25: 1.5 x 2^-24 -> RNE on FP16's subnormal grid "
                  "-> 2^-23", a=at((0, s16), (1, s16), (2, s16)), b=[s9] * 32, c=0x0000, mms=0x0002),
        dict(what="C = 0, one product 2^-25: a tie between 0 and 2^-24 -> +0", a=at((0, s16)), b=[s9] * 32,
             c=0x0000, mms=0x0000),
        dict(what="C = -2^-24, one product -2^-25: -1.5 x 2^-24 -> -2^-23", a=at((0, s16 | 0x80)), b=[s9] * 32,
             c=0x8001, mms=0x8002),
        dict(what="C = -0, zero products: MMA-Sim's fused sum starts from +0 -> +0", a=z, b=[one] * 32,
             c=0x8000, mms=0x0000),
        dict(what="C = 2^-24 (FP16's smallest subnormal), zero products: kept", a=z, b=[one] * 32,
             c=0x0001, mms=0x0001),
        dict(what="C = 1024, 16 products 2^-4 (exact sum 1025): F = 13 cuts each at 2^-3 (-> 1024), "
                  "F = 25 keeps them (-> 1025)", a=[quarter] * 16 + [0] * 16, b=[quarter] * 32,
             c=0x6400, mms=0x6400 if f13 else 0x6401),
        dict(what="C = 2048, one product 1 in each half of K: Ada's two steps each round 2049 to 2048; one "
                  "step of 32 gives 2050", a=at((0, one), (16, one)), b=[one] * 32,
             c=0x6800, mms=0x6800 if halves else 0x6801),
        dict(what="one Inf element times 1: +Inf", a=at((0, inf)), b=[one] * 32, c=0x3C00, mms=0x7C00),
        dict(what="one Inf element times 0: NaN (MMA-Sim's FP16 NaN 0x7FFF)", a=at((0, inf)), b=[0] + [one] * 31,
             c=0x3C00, mms=0x7FFF),
        dict(what="control: ordinary data",
             a=codes_of(rng, "e5m2", "normal", (32,)), b=codes_of(rng, "e5m2", "normal", (32,)), c=0x3A66),
    ]
    return _probe_case(P, 32, 1, scales=False, cdtype=np.uint16)


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
    # Ada's FP8 mma (sm_89), FP32 output: m16n8k32 (two steps of 16) and m16n8k16. params: A, B, K per instruction
    ("ada_rand_e4m3", "ada", ("e4m3", "e4m3", 32), 32, 16, 128, 64, "rand"),
    ("ada_wide_e5m2_e4m3", "ada", ("e5m2", "e4m3", 32), 32, 16, 96, 32, "wide"),
    ("ada_bits_e4m3_e5m2", "ada", ("e4m3", "e5m2", 32), 32, 16, 64, 32, "bits"),
    ("ada_adv_e4m3", "ada", ("e4m3", "e4m3", 32), 48, 16, 128, 64, "adv"),
    ("ada_adv_e5m2", "ada", ("e5m2", "e5m2", 32), 48, 16, 64, 32, "adv"),
    ("ada_special", "ada", ("e5m2", "e4m3", 32), 32, 8, 64, 32, "special"),
    ("ada_probe", "ada", ("e4m3", "e4m3", 32), 0, 0, 32, 32, "probe"),
    ("ada_k16_rand_e5m2_e4m3", "ada", ("e5m2", "e4m3", 16), 32, 16, 64, 32, "rand"),
    ("ada_k16_adv_e4m3", "ada", ("e4m3", "e4m3", 16), 48, 16, 96, 32, "adv"),
    ("ada_k16_bits_e5m2", "ada", ("e5m2", "e5m2", 16), 32, 16, 64, 32, "bits"),
    ("ada_k16_special", "ada", ("e4m3", "e5m2", 16), 32, 8, 64, 32, "special"),
    ("ada_k16_probe", "ada", ("e4m3", "e4m3", 16), 0, 0, 32, 32, "probe"),
    # Ada's FP8 mma with FP16 C and D
    ("adaf16_rand_e4m3", "adaf16", ("e4m3", "e4m3", 32), 32, 16, 128, 64, "rand"),
    ("adaf16_wide_e5m2_e4m3", "adaf16", ("e5m2", "e4m3", 32), 32, 16, 96, 32, "wide"),
    ("adaf16_bits_e4m3_e5m2", "adaf16", ("e4m3", "e5m2", 32), 32, 16, 64, 32, "bits"),
    ("adaf16_adv_e4m3", "adaf16", ("e4m3", "e4m3", 32), 48, 20, 128, 64, "adv"),
    ("adaf16_adv_e5m2", "adaf16", ("e5m2", "e5m2", 32), 48, 20, 64, 32, "adv"),
    ("adaf16_special", "adaf16", ("e5m2", "e4m3", 32), 32, 8, 64, 32, "special"),
    ("adaf16_probe", "adaf16", ("e5m2", "e5m2", 32), 0, 0, 32, 32, "probe"),
    ("adaf16_k16_rand_e5m2_e4m3", "adaf16", ("e5m2", "e4m3", 16), 32, 16, 64, 32, "rand"),
    ("adaf16_k16_adv_e4m3_e5m2", "adaf16", ("e4m3", "e5m2", 16), 48, 20, 96, 32, "adv"),
    ("adaf16_k16_probe", "adaf16", ("e5m2", "e5m2", 16), 0, 0, 32, 32, "probe"),
    # Hopper's FP8 wgmma with FP16 C and D
    ("hopf16_rand_e4m3", "hopf16", ("e4m3", "e4m3", 32), 64, 16, 128, 64, "rand"),
    ("hopf16_wide_e5m2_e4m3", "hopf16", ("e5m2", "e4m3", 32), 64, 16, 96, 32, "wide"),
    ("hopf16_bits_e4m3_e5m2", "hopf16", ("e4m3", "e5m2", 32), 64, 16, 64, 32, "bits"),
    ("hopf16_adv_e4m3", "hopf16", ("e4m3", "e4m3", 32), 64, 20, 128, 64, "adv"),
    ("hopf16_adv_e5m2_e4m3", "hopf16", ("e5m2", "e4m3", 32), 64, 20, 64, 32, "adv"),
    ("hopf16_special", "hopf16", ("e5m2", "e4m3", 32), 64, 8, 64, 32, "special"),
    ("hopf16_probe", "hopf16", ("e5m2", "e5m2", 32), 0, 0, 32, 32, "probe"),
    # RTX Blackwell's mma kind::f8f6f4 (sm_120a), FP32 output; E2M1 operands through the extension
    ("rtx_rand_e4m3", "rtx", ("e4m3", "e4m3", 32), 32, 16, 128, 64, "rand"),
    ("rtx_wide_e5m2_e4m3", "rtx", ("e5m2", "e4m3", 32), 32, 16, 96, 32, "wide"),
    ("rtx_bits_e4m3_e5m2", "rtx", ("e4m3", "e5m2", 32), 32, 16, 64, 32, "bits"),
    ("rtx_adv_e4m3", "rtx", ("e4m3", "e4m3", 32), 48, 16, 128, 64, "adv"),
    ("rtx_adv_e5m2", "rtx", ("e5m2", "e5m2", 32), 48, 16, 64, 32, "adv"),
    ("rtx_special", "rtx", ("e5m2", "e4m3", 32), 32, 8, 64, 32, "special"),
    ("rtx_probe", "rtx", ("e4m3", "e4m3", 32), 0, 0, 32, 32, "probe"),
    ("rtx_adv_e2m1_e4m3", "rtx", ("e2m1", "e4m3", 32), 48, 16, 64, 32, "adv"),
    ("rtx_adv_e5m2_e2m1", "rtx", ("e5m2", "e2m1", 32), 48, 16, 64, 32, "adv"),
    ("rtx_bits_e2m1_e2m1", "rtx", ("e2m1", "e2m1", 32), 32, 16, 64, 32, "bits"),
    ("rtx_special_e2m1_e5m2", "rtx", ("e2m1", "e5m2", 32), 32, 8, 64, 32, "special"),
    # RTX Blackwell's mma kind::f8f6f4 with FP16 C and D
    ("rtxf16_rand_e4m3", "rtxf16", ("e4m3", "e4m3", 32), 32, 16, 128, 64, "rand"),
    ("rtxf16_wide_e5m2_e4m3", "rtxf16", ("e5m2", "e4m3", 32), 32, 16, 96, 32, "wide"),
    ("rtxf16_bits_e4m3_e5m2", "rtxf16", ("e4m3", "e5m2", 32), 32, 16, 64, 32, "bits"),
    ("rtxf16_adv_e4m3", "rtxf16", ("e4m3", "e4m3", 32), 48, 20, 128, 64, "adv"),
    ("rtxf16_adv_e5m2", "rtxf16", ("e5m2", "e5m2", 32), 48, 20, 64, 32, "adv"),
    ("rtxf16_special", "rtxf16", ("e5m2", "e4m3", 32), 32, 8, 64, 32, "special"),
    ("rtxf16_probe", "rtxf16", ("e5m2", "e5m2", 32), 0, 0, 32, 32, "probe"),
    ("rtxf16_adv_e2m1_e4m3", "rtxf16", ("e2m1", "e4m3", 32), 48, 20, 64, 32, "adv"),
    ("rtxf16_wide_e5m2_e2m1", "rtxf16", ("e5m2", "e2m1", 32), 32, 16, 64, 32, "wide"),
    ("rtxf16_bits_e2m1_e2m1", "rtxf16", ("e2m1", "e2m1", 32), 32, 16, 64, 32, "bits"),
    # RTX Blackwell's mma.block_scale: kind::mxf8f6f4 (A, B, 32) and kind::mxf4nvf4 (scale format, block)
    ("rtxbs_mx8_rand_e4m3", "rtxbs8", ("e4m3", "e4m3", 32), 32, 16, 128, 64, "rand"),
    ("rtxbs_mx8_wide_e5m2_e4m3", "rtxbs8", ("e5m2", "e4m3", 32), 32, 16, 96, 32, "wide"),
    ("rtxbs_mx8_bits_e4m3_e5m2", "rtxbs8", ("e4m3", "e5m2", 32), 32, 16, 64, 32, "bits"),
    ("rtxbs_mx8_adv_e4m3", "rtxbs8", ("e4m3", "e4m3", 32), 48, 16, 128, 64, "adv"),
    ("rtxbs_mx8_adv_e5m2", "rtxbs8", ("e5m2", "e5m2", 32), 48, 16, 64, 32, "adv"),
    ("rtxbs_mx8_special", "rtxbs8", ("e5m2", "e4m3", 32), 32, 8, 64, 32, "special"),
    ("rtxbs_mx8_probe", "rtxbs8", ("e4m3", "e4m3", 32), 0, 0, 32, 32, "probe"),
    ("rtxbs_mx8_adv_e2m1_e4m3", "rtxbs8", ("e2m1", "e4m3", 32), 48, 16, 64, 32, "adv"),
    ("rtxbs_mx8_bits_e2m1_e2m1", "rtxbs8", ("e2m1", "e2m1", 32), 32, 16, 64, 32, "bits"),
    ("rtxbs_mx4_nvfp4_rand", "rtxbs4", ("ue4m3", 16), 32, 16, 128, 64, "rand"),
    ("rtxbs_mx4_mxfp4_rand", "rtxbs4", ("ue8m0", 32), 32, 16, 128, 64, "rand"),
    ("rtxbs_mx4_ue8m0_b16_wide", "rtxbs4", ("ue8m0", 16), 32, 16, 64, 64, "wide"),
    ("rtxbs_mx4_ue4m3_b32_wide", "rtxbs4", ("ue4m3", 32), 32, 16, 128, 64, "wide"),
    ("rtxbs_mx4_ue8m0_b16_adv", "rtxbs4", ("ue8m0", 16), 32, 16, 128, 64, "adv"),
    ("rtxbs_mx4_ue8m0_b32_adv", "rtxbs4", ("ue8m0", 32), 32, 16, 128, 64, "adv"),
    ("rtxbs_mx4_nvfp4_adv", "rtxbs4", ("ue4m3", 16), 44, 16, 128, 64, "adv"),
    ("rtxbs_mx4_ue4m3_b32_adv", "rtxbs4", ("ue4m3", 32), 44, 16, 128, 64, "adv"),
    ("rtxbs_mx4_special_ue8m0", "rtxbs4", ("ue8m0", 16), 32, 8, 64, 64, "special"),
    ("rtxbs_mx4_special_ue4m3", "rtxbs4", ("ue4m3", 16), 32, 8, 64, 64, "special"),
    ("rtxbs_mx4_probe_ue8m0", "rtxbs4", ("ue8m0", 16), 0, 0, 64, 64, "probe"),
    ("rtxbs_mx4_probe_ue4m3", "rtxbs4", ("ue4m3", 16), 0, 0, 64, 64, "probe"),
]

QMX_MODEL = {"mx8": "blackwell-mxf8f6f4", "mx8x": "blackwell-mxf8f6f4", "probe_mx8": "blackwell-mxf8f6f4",
             "nvf4": "blackwell-mxf4nvf4", "probe_nvf4_ue8m0": "blackwell-mxf4nvf4",
             "probe_nvf4_ue4m3": "blackwell-mxf4nvf4", "hop": "hopper-fp8-fast", "probe_hop": "hopper-fp8-fast",
             "adaf16": "ada-mma-fp8-f16", "hopf16": "hopper-wgmma-fp8-f16", "rtx": "rtx-blackwell-f8f6f4",
             "rtxf16": "rtx-blackwell-f8f6f4-f16", "rtxbs8": "rtx-blackwell-mxf8f6f4",
             "rtxbs4": "rtx-blackwell-mxf4nvf4"}

# The instruction families added for Ada, Hopper FP16 and RTX Blackwell (mma, wgmma with FP16 D, mma.block_scale).
NEW_FAMILIES = ("ada", "adaf16", "hopf16", "rtx", "rtxf16", "rtxbs8", "rtxbs4")
F16_FAMILIES = ("adaf16", "hopf16", "rtxf16")
ARCH = {"ada": "Ada Lovelace", "adaf16": "Ada Lovelace", "hopf16": "Hopper", "rtx": "RTX Blackwell",
        "rtxf16": "RTX Blackwell", "rtxbs8": "RTX Blackwell", "rtxbs4": "RTX Blackwell", "mx8": "Blackwell",
        "mx8x": "Blackwell", "probe_mx8": "Blackwell", "nvf4": "Blackwell", "probe_nvf4_ue8m0": "Blackwell",
        "probe_nvf4_ue4m3": "Blackwell", "hop": "Hopper", "probe_hop": "Hopper"}


def qmx_model_of(fam, par):
    if fam == "ada":
        return "ada-mma-fp8" if par[2] == 32 else "ada-mma-fp8-k16"
    return QMX_MODEL[fam]


def set_seed(base, name):
    return [base, zlib.crc32(name.encode())]


def build_new(rng, name, fam, par, m, n, k, style):
    """Operands of the added families; returns (case, A format, B format, scale format, block, K per step)."""
    if fam == "rtxbs4":
        sfmt, blk = par
        if style == "probe":
            cs = (build_probe_nvf4_ue8m0 if sfmt == "ue8m0" else build_probe_nvf4_ue4m3)(rng, name)
        else:
            cs = build_nvf4(rng, name, sfmt, blk, m, n, k, style)
        return cs, "e2m1", "e2m1", sfmt, blk, 64
    fa, fb, step = par
    if fam == "rtxbs8":
        cs = build_probe_mx8(rng, name) if style == "probe" else build_mx8(rng, name, fa, fb, m, n, k, style)
        return cs, fa, fb, "ue8m0", 32, 32
    if style == "probe":
        if fam == "ada":
            cs = build_probe_ada(rng, name)
        elif fam == "rtx":
            cs = build_probe_rtx(rng, name)
        else:
            cs = build_probe_f16(rng, name, fam)
    elif fam in F16_FAMILIES:
        cs = build_f16(rng, name, fa, fb, m, n, k, style)
    else:
        cs = build_plain32(rng, name, fa, fb, m, n, k, style)
    return cs, fa, fb, None, None, step


def build_case(entry, base_seed, quick):
    name, fam, par, m, n, k, kq, style = entry
    if quick:
        k, n = kq, min(n, 8)
    rng = np.random.default_rng(set_seed(base_seed, name))
    if fam in NEW_FAMILIES:
        cs, fa, fb, sfmt, blk, step = build_new(rng, name, fam, par, m, n, k, style)
        if style == "probe":
            for p in cs["probes"]:  # the reused Blackwell notes are about qmx-sim's default models, not these
                p.pop("qmx_by_reading", None)
    elif fam in ("mx8", "mx8x"):
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
    cs.update(name=name, family=fam, a_format=fa, b_format=fb, scale_format=sfmt, block=blk, step=step,
              cfmt="f16" if fam in F16_FAMILIES else "f32", qmx_model=qmx_model_of(fam, par),
              # MMA-Sim's classes take E2M1 only packed in kind::mxf4nvf4: elsewhere the extension runs it
              ext=fam == "mx8x" or (fam in ("rtx", "rtxf16", "rtxbs8") and "e2m1" in (fa, fb)))
    assert cs["a"].shape[1] % step == 0, name
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

    def t_c16(self, bits):
        return self.torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint16).view(np.float16).copy())

    # --- the families added for Ada, Hopper FP16 and RTX Blackwell ---------------------------------

    def instr_new(self, cs, nn):
        """The MMA-Sim instruction object of an added family, N = nn (wgmma) and its qualifier."""
        fam, fa, fb = cs["family"], cs["a_format"], cs["b_format"]
        if fam in ("ada", "adaf16", "rtx", "rtxf16"):
            d = cs["cfmt"]
            q = f"m16n8k{cs['step']}.{d}.{fa}.{fb}.{d}"
            return self.nv.mma(ARCH[fam], q), q
        if fam == "hopf16":
            q = f"m64n{nn}k32.f16.{fa}.{fb}"
            return self.nv.wgmma("Hopper", q), q
        if fam == "rtxbs8":
            q = f"m16n8k32.block32.f32.{fa}.{fb}.f32.ue8m0"
        else:
            q = f"m16n8k64.block{cs['block']}.f32.e2m1.e2m1.f32.{cs['scale_format']}"
        return self.nv.mma_block_scale("RTX Blackwell", q), q

    def bits_of(self, r, cfmt):
        """Bit pattern of one MMA-Sim result (a 0-d or 1-element tensor of the output type)."""
        torch = self.torch
        if cfmt == "f16":
            return int(r.reshape(()).to(torch.float16).view(torch.int16).item()) & 0xFFFF
        return int(r.reshape(()).to(torch.float32).view(torch.int32).item()) & 0xFFFFFFFF

    def dot_mma(self, mma, a, b, c):
        """One output of mma / wgmma: the classes' loop body (nv_ptx.py), Ada's split into two halves of K
        included (mma.is_split_k)."""
        ar = self.arith
        s = c.to(dtype=mma.d_type)
        if getattr(mma, "is_split_k", False):
            h = mma.k // 2
            s = ar.nv_fused_dot_add(a[:h], b[:h], s, n_fractional_bits=mma.n_accum_fractional_bits,
                                    output_type=mma.output_type)
            return ar.nv_fused_dot_add(a[h:], b[h:], s, n_fractional_bits=mma.n_accum_fractional_bits,
                                       output_type=mma.output_type)
        return ar.nv_fused_dot_add(a, b, s, n_fractional_bits=mma.n_accum_fractional_bits,
                                   output_type=mma.output_type)

    def dot_block_scale(self, mma, a, b, c, sa_row, sb_col):
        """One output of mma_block_scale (nv_ptx.py's loop body): sa_row = scale_A[i, :], sb_col = scale_B[:, j]."""
        ar = self.arith
        if mma.k == 32:  # kind::mxf8f6f4
            return ar.nv_fused_dot_add(a, b, c, mma.n_accum_fractional_bits, mma.output_type, sa_row[0], sb_col[0])
        return ar.nv_fused_dot_add_with_block_scale(self.nv.unpack_fp4_tensor(a), self.nv.unpack_fp4_tensor(b), c,
                                                    sa_row, sb_col, mma.n_accum_fractional_bits)

    def per_output_new(self, mma, args, cfmt):
        """The class's loop body one output at a time, for a tile on which the class raised (C = +-Inf
        reaching kind::mxf4nvf4): (D bits, ok mask)."""
        mma.check_input(*args)
        A, B, C = args[0], args[1], args[2]
        m, n = C.shape
        dt = np.uint16 if cfmt == "f16" else np.uint32
        D = np.zeros((m, n), dt)
        ok = np.ones((m, n), bool)
        for i in range(m):
            for j in range(n):
                try:
                    if len(args) == 5:
                        r = self.dot_block_scale(mma, A[i, :], B[:, j], C[i, j], args[3][i, :], args[4][:, j])
                    else:
                        r = self.dot_mma(mma, A[i, :], B[:, j], C[i, j])
                    D[i, j] = self.bits_of(r, cfmt)
                except (OverflowError, ValueError, ZeroDivisionError):
                    ok[i, j] = False
                    D[i, j] = np.iinfo(dt).max
        return D, ok

    def call_new(self, cs, a, b, c_bits, sa, sb):
        """One instruction of an added family over padded tiles (mma: 16 x 8; wgmma: 64 x N <= 256).
        Returns (D bits, ok mask), as call."""
        torch = self.torch
        fam, cfmt = cs["family"], cs["cfmt"]
        mi, nj = c_bits.shape
        inst_m, inst_n = (64, 256) if fam == "hopf16" else (16, 8)
        Mp = -(-mi // inst_m) * inst_m
        Np = -(-nj // 8) * 8 if fam == "hopf16" else -(-nj // inst_n) * inst_n
        Np = max(Np, 8)
        dt = c_bits.dtype
        pad_a = np.zeros((Mp, a.shape[1]), np.uint8)
        pad_a[:mi] = a
        pad_b = np.zeros((b.shape[0], Np), np.uint8)
        pad_b[:, :nj] = b
        pad_c = np.zeros((Mp, Np), dt)
        pad_c[:mi, :nj] = c_bits
        if sa is not None:
            one = 127 if cs["scale_format"] == "ue8m0" else 0x38
            pad_sa = np.full((Mp, sa.shape[1]), one, np.uint8)
            pad_sa[:mi] = sa
            pad_sb = np.full((sb.shape[0], Np), one, np.uint8)
            pad_sb[:, :nj] = sb
        out = np.zeros((Mp, Np), dt)
        ok = np.ones((Mp, Np), bool)
        for r0 in range(0, Mp, inst_m):
            for c0 in range(0, Np, inst_n):
                c1 = min(Np, c0 + inst_n)
                mma, q = self.instr_new(cs, c1 - c0)
                cs.setdefault("qualifiers", set()).add(q)
                tc = pad_c[r0:r0 + inst_m, c0:c1]
                C = self.t_c16(tc) if cfmt == "f16" else self.t_c(tc)
                ta, tb = pad_a[r0:r0 + inst_m], pad_b[:, c0:c1]
                if fam == "rtxbs4":  # two E2M1 codes a byte, element 2l in the low nibble (unpack_fp4_tensor)
                    A = torch.from_numpy((ta[:, 0::2] | (ta[:, 1::2] << 4)).astype(np.uint8))
                    B = torch.from_numpy((tb[0::2, :] | (tb[1::2, :] << 4)).astype(np.uint8))
                else:
                    A, B = self.t_codes(ta, cs["a_format"]), self.t_codes(tb, cs["b_format"])
                args = (A, B, C)
                if sa is not None:
                    args += (self.t_codes(pad_sa[r0:r0 + inst_m], cs["scale_format"]),
                             self.t_codes(pad_sb[:, c0:c1], cs["scale_format"]))
                try:
                    D = mma(*args).numpy().view(np.uint16 if cfmt == "f16" else np.uint32)
                except (OverflowError, ValueError, ZeroDivisionError):
                    D, okt = self.per_output_new(mma, args, cfmt)
                    ok[r0:r0 + inst_m, c0:c1] = okt
                out[r0:r0 + inst_m, c0:c1] = D
        return out[:mi, :nj], ok[:mi, :nj]

    def call_ext_new(self, cs, a, b, c_bits, sa, sb, carry=None):
        """The extension for E2M1 in RTX Blackwell's mma kind::f8f6f4 and mma.block_scale kind::mxf8f6f4:
        MMA-Sim's classes take E2M1 as uint8 codes there (nv_torch_dtype) and fail on them
        (extract_significand_exponent asserts). The class's loop body runs one output at a time, with the
        parameters of the class's own instance (F, output type), each E2M1 operand's values carried in a
        float64 tensor with arithmetic.dtype_min_exponent[float64] set, for the run, to E2M1's emin (0); the
        other operand stays in its torch float8 dtype. carry: the sides to carry (default: the E2M1 ones);
        ext_consistency_new carries E4M3 / E5M2 this way to check the path against the class."""
        torch, ar = self.torch, self.arith
        fam, cfmt = cs["family"], cs["cfmt"]
        fmts = {"a": cs["a_format"], "b": cs["b_format"]}
        carry = set(carry) if carry is not None else {s for s, f in fmts.items() if f == "e2m1"}
        emins = {EMIN[fmts[s]] for s in carry}
        assert len(emins) == 1, "both carried operands need one emin"
        mma, q = self.instr_new(cs, 8)
        cs.setdefault("qualifiers", set()).add(q)

        def operand(codes, side):
            if side in carry:
                v = decode(fmts[side], codes)
                return torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))
            return self.t_codes(codes, fmts[side])
        A, B = operand(a, "a"), operand(b, "b")
        C = self.t_c16(c_bits) if cfmt == "f16" else self.t_c(c_bits)
        if sa is not None:
            SA, SB = self.t_codes(sa, "ue8m0"), self.t_codes(sb, "ue8m0")
        mi, nj = c_bits.shape
        dt = c_bits.dtype
        D = np.zeros((mi, nj), dt)
        ok = np.ones((mi, nj), bool)
        saved = dict(ar.dtype_min_exponent)
        try:
            ar.dtype_min_exponent[torch.float64] = emins.pop()
            for i in range(mi):
                for j in range(nj):
                    try:
                        if fam == "rtxbs8":
                            r = self.dot_block_scale(mma, A[i, :], B[:, j], C[i, j], SA[i, :], SB[:, j])
                        else:
                            r = self.dot_mma(mma, A[i, :], B[:, j], C[i, j])
                        D[i, j] = self.bits_of(r, cfmt)
                    except (OverflowError, ValueError, ZeroDivisionError):
                        ok[i, j] = False
                        D[i, j] = np.iinfo(dt).max
        finally:
            ar.dtype_min_exponent.clear()
            ar.dtype_min_exponent.update(saved)
        return D, ok

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
        dt = np.uint16 if cs["cfmt"] == "f16" else np.uint32
        assert d.dtype == dt
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
            elif cs["family"] in NEW_FAMILIES:
                fn = self.call_ext_new if cs["ext"] else self.call_new
                d, ok_step = fn(cs, a, b, np.where(ok, d, 0).astype(dt), sa, sb)
                ok &= ok_step
            else:
                d, ok_step = self.call(cs, a, b, np.where(ok, d, 0).astype(np.uint32), sa, sb)
                ok &= ok_step
        d[~ok] = np.iinfo(dt).max
        return d, ok


def function_of(cs):
    fam = cs["family"]
    if fam in NEW_FAMILIES:
        return function_of_new(cs)
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


def function_of_new(cs):
    fam = cs["family"]
    a, b = cs["a_format"], cs["b_format"]
    if fam in ("ada", "adaf16"):
        d = cs["cfmt"]
        body = (f"arithmetic.nv_fused_dot_add(F=13, '{'f16' if d == 'f16' else 'f32_e8m13'}')"
                + (" on each half of K (is_split_k)" if cs["step"] == 32 else ""))
        fn = f"mmasim.simulator.nv_ptx.mma('Ada Lovelace', 'm16n8k{cs['step']}.{d}.A.B.{d}') -> {body}"
    elif fam == "hopf16":
        fn = "mmasim.simulator.nv_ptx.wgmma('Hopper', 'm64nNk32.f16.A.B') -> arithmetic.nv_fused_dot_add(F=13, 'f16')"
    elif fam in ("rtx", "rtxf16"):
        d = cs["cfmt"]
        fn = (f"mmasim.simulator.nv_ptx.mma('RTX Blackwell', 'm16n8k32.{d}.A.B.{d}') -> "
              f"arithmetic.nv_fused_dot_add(F=25, '{d}')")
    elif fam == "rtxbs8":
        fn = ("mmasim.simulator.nv_ptx.mma_block_scale('RTX Blackwell', 'm16n8k32.block32.f32.A.B.f32.ue8m0') -> "
              "arithmetic.nv_fused_dot_add(F=25, 'f32', scale_A[i,0], scale_B[0,j])")
    else:
        fn = ("mmasim.simulator.nv_ptx.mma_block_scale('RTX Blackwell', 'm16n8k64.blockB.f32.e2m1.e2m1.f32.S') -> "
              "arithmetic.nv_fused_dot_add_with_block_scale(F=35)")
    if cs["ext"]:
        fn += (" called as the class does, one output at a time, the E2M1 operand's values in float64 with "
               "dtype_min_exponent[float64] = 0 (EXTENSION: the class takes E2M1 as uint8 codes there and fails)")
    return fn


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

    # The instructions added for Ada, Hopper FP16 and RTX Blackwell.
    def rtx_e2m1(block_scale, d):
        def go():
            A = torch.full((16, 32), 2, dtype=torch.uint8)  # E2M1 1.0 as a uint8 code (nv_torch_dtype["e2m1"])
            B = torch.full((32, 8), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)
            dt = torch.float16 if d == "f16" else torch.float32
            if block_scale:
                mma = nv.mma_block_scale("RTX Blackwell", "m16n8k32.block32.f32.e2m1.e4m3.f32.ue8m0")
                S = torch.full((16, 1), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
                T = torch.full((1, 8), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
                D = mma(A, B, torch.zeros((16, 8)), S, T)
            else:
                mma = nv.mma("RTX Blackwell", f"m16n8k32.{d}.e2m1.e4m3.{d}")
                D = mma(A, B, torch.zeros((16, 8), dtype=dt))
            return f"returned {float(D[0, 0])} (32 x 1.0 x 1.0 would be 32)"
        return go
    attempt("RTX Blackwell mma kind::f8f6f4 (f32) with an e2m1 operand (uint8 codes)", rtx_e2m1(False, "f32"))
    attempt("RTX Blackwell mma kind::f8f6f4 (f16) with an e2m1 operand (uint8 codes)", rtx_e2m1(False, "f16"))
    attempt("RTX Blackwell mma.block_scale kind::mxf8f6f4 with an e2m1 operand (uint8 codes)", rtx_e2m1(True, "f32"))
    attempt("RTX Blackwell mma kind::f8f6f4 with an e3m2 operand",
            lambda: nv.mma("RTX Blackwell", "m16n8k32.f32.e3m2.e4m3.f32") and None)
    attempt("Ada mma m16n8k32 FP8 split into halves of K (is_split_k), F",
            lambda: str((nv.mma("Ada Lovelace", "m16n8k32.f32.e4m3.e4m3.f32").is_split_k,
                         nv.mma("Ada Lovelace", "m16n8k32.f32.e4m3.e4m3.f32").n_accum_fractional_bits)))
    attempt("RTX Blackwell mma m16n8k32 FP8 split into halves of K (is_split_k), F",
            lambda: str((nv.mma("RTX Blackwell", "m16n8k32.f32.e4m3.e4m3.f32").is_split_k,
                         nv.mma("RTX Blackwell", "m16n8k32.f32.e4m3.e4m3.f32").n_accum_fractional_bits)))

    def f16_nan():
        mma = nv.mma("Ada Lovelace", "m16n8k32.f16.e5m2.e5m2.f16")
        A = torch.zeros((16, 32), dtype=torch.uint8)
        A[:, 0] = 0x7C  # +Inf; B is zero: Inf x 0
        D = mma(A.view(torch.float8_e5m2), torch.zeros((32, 8), dtype=torch.uint8).view(torch.float8_e5m2),
                torch.zeros((16, 8), dtype=torch.float16))
        return f"Inf x 0 -> bits {hex(int(D[0, 0].view(torch.int16)) & 0xFFFF)}"
    attempt("Ada mma f16 output NaN", f16_nan)

    def wgmma_f16_overflow():
        mma = nv.wgmma("Hopper", "m64n8k32.f16.e4m3.e4m3")
        A = torch.full((64, 32), 0x7E, dtype=torch.uint8).view(torch.float8_e4m3fn)
        D = mma(A, A[:32, :8].contiguous(), torch.zeros((64, 8), dtype=torch.float16))
        return f"448*448 x 32 -> bits {hex(int(D[0, 0].view(torch.int16)) & 0xFFFF)}"
    attempt("Hopper wgmma f16 overflow", wgmma_f16_overflow)

    def rtx_inf_c_nvf4():
        mma = nv.mma_block_scale("RTX Blackwell", "m16n8k64.block16.f32.e2m1.e2m1.f32.ue8m0")
        S = torch.full((16, 4), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        T = torch.full((4, 8), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        D = mma(torch.zeros((16, 32), dtype=torch.uint8), torch.zeros((32, 8), dtype=torch.uint8),
                torch.full((16, 8), float("inf")), S, T)
        return f"returned {float(D[0, 0])}"
    attempt("RTX Blackwell mma.block_scale kind::mxf4nvf4 with C = +Inf", rtx_inf_c_nvf4)
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


def ext_consistency_new(sim, base_seed):
    """The E2M1 extension's path (call_ext_new) against MMA-Sim's classes on E4M3 x E5M2 data, carrying A
    (emin -6) and then B (emin -14) in float64: per family, must be equal."""
    out = {}
    for fam, style in (("rtx", "adv"), ("rtx", "special"), ("rtxf16", "adv"), ("rtxf16", "special"),
                       ("rtxbs8", "adv"), ("rtxbs8", "special")):
        rng = np.random.default_rng([base_seed, 8, zlib.crc32((fam + style).encode())])
        entry = (f"ext_check_{fam}_{style}", fam, ("e4m3", "e5m2", 32), 32, 16, 32, 32, style)
        cs = build_new(rng, entry[0], fam, entry[2], 32, 16, 32, style)[0]
        cs.update(name=entry[0], family=fam, a_format="e4m3", b_format="e5m2", step=32,
                  scale_format="ue8m0" if fam == "rtxbs8" else None, block=32 if fam == "rtxbs8" else None,
                  cfmt="f16" if fam in F16_FAMILIES else "f32", ext=False)
        sa, sb = cs.get("sa"), cs.get("sb")
        d_class, ok_class = sim.call_new(cs, cs["a"], cs["b"], cs["c"], sa, sb)
        rec = out.setdefault(fam, {"outputs": 0, "equal": 0})
        for side in ("a", "b"):
            d_ext, ok_ext = sim.call_ext_new(cs, cs["a"], cs["b"], cs["c"], sa, sb, carry={side})
            rec["outputs"] += int(d_class.size)
            rec["equal"] += int(np.sum((d_class == d_ext) & (ok_class == ok_ext)))
    return out


# --- output ---------------------------------------------------------------------------------------

def save(out, name, key, arr, manifest_files):
    p = os.path.join(out, f"{name}_{key}.npy")
    np.save(p, arr)
    with open(p, "rb") as fh:
        manifest_files[f"{name}_{key}.npy"] = hashlib.sha256(fh.read()).hexdigest()


def write_readme(out, manifest):
    runs = manifest.get("runs", [])
    lines = [
        "# MMA-Sim outputs for qmx-sim's tensor-core GEMM models",
        "",
        f"Written by `gpu/scripts/collect_mmasim.py` (seed {manifest['seed']}"
        f"{', quick' if manifest['quick'] else ''}) with microsoft/MMA-Sim (arXiv 2511.10909) from "
        f"`{manifest['mmasim']['path']}` (revision: {manifest['mmasim']['revision']}), "
        f"torch {manifest['torch']}, numpy {manifest['numpy']}, Python {manifest['python']}"
        + (f"; merged with {len(runs) - 1} earlier run(s), listed in cases.json's `runs`." if len(runs) > 1 else "."),
        "MMA-Sim is an oracle of a model, not of hardware: where qmx-sim and MMA-Sim differ, neither is",
        "thereby right. The known differences are rules for zero terms (the exponent a zero element, a zero",
        "C or an all-zero group of 16 is aligned by) and the sign of a result cut to zero; the probe cases",
        "show each on their diagonal. The Ada, Hopper FP16 and RTX Blackwell models (ada-*, hopper-wgmma-*,",
        "rtx-blackwell-*) take MMA-Sim's zero rule and reproduce every output.",
        "",
        "Files per case NAME (numpy `.npy`, row-major):",
        "- `NAME_a.npy`: A, M x K uint8 element codes (E2M1/FP6: one code a byte); `NAME_b.npy`: B, K x N.",
        "- `NAME_sa.npy`: A's block scales, M x K/block uint8 codes; `NAME_sb.npy`: B's, K/block x N",
        "  (UE8M0, or UE4M3 as generated, sign bit included). For qmx-sim: `SetBlockScales(A, fmt, 1, block, raw)`",
        "  and `SetBlockScales(B, fmt, block, 1, raw)`. Cases without block_scale (wgmma, mma) have no scales.",
        f"- `NAME_c.npy`: C, M x N; `NAME_d.npy`: D from MMA-Sim, M x N; both {manifest['bits_dtype']} where",
        "  the case's `c_dtype` is f32; where it is f16 (the FP16-accumulating instructions), both are FP16 bit",
        "  patterns stored as " + ("'<f2'" if manifest.get("bits_dtype", "").startswith("<f") else "'<u2'")
        + " (`cd_npy_dtype`), MMA-Sim's FP16 NaN being 0x7FFF.",
        "- `NAME_ok.npy` (some cases only): M x N uint8, 0 where MMA-Sim raised instead of giving D (C = +-Inf",
        "  reaching kind::mxf4nvf4, after an overflow earlier in the chain); skip those outputs.",
        "",
        "`cases.json`: shape, formats, scale format and block, the qmx-sim model that should reproduce D",
        "(`qmx_model`), C and D's type (`c_dtype`, `cd_npy_dtype`), the MMA-Sim function, architecture and",
        "qualifiers, K per instruction (instructions are chained, D fed back as C), patterns of rows and",
        "columns, probe notes, SHA-256 of every file, and `mmasim_probes` (what MMA-Sim does with inputs it does",
        "not model). Cases marked extension run MMA-Sim's arithmetic as its class would, on formats the class",
        "refuses or fails on (FP6 in tcgen05 kind::mxf8f6f4; E2M1 there and in RTX Blackwell's mma).",
        "",
        "Replay a case with the CLI (from this folder; each case's line is `replay` in cases.json; with",
        "--bits-dtype u4 the C and D files are uint32 / uint16, which the CLI does not read):",
        "",
        "    " + manifest["cases"][0]["replay"] if manifest["cases"] else "",
        "",
        "| case | M x K x N | A, B | scales | C, D | qmx-sim model | MMA-Sim |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in manifest["cases"]:
        sc = f"{c['scale_format']} 1x{c['block']}" if c["scale_format"] else "-"
        fn = c["mmasim_function"].split(" -> ")[0]
        arch = c.get("mmasim_arch") or (fn.split("'")[1] if fn.count("'") >= 2 and not c.get("extension") else "")
        lines.append(f"| {c['name']} | {c['m']} x {c['k']} x {c['n']} | {c['a_format']}, {c['b_format']} | {sc} | "
                     f"{c.get('c_dtype', 'f32')} | {c['qmx_model']} | "
                     f"{fn.split('(')[0].split('.')[-1]}"
                     f"{' ' + arch if arch else ''}{' (extension)' if c.get('extension') else ''} |")
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def replay_line(cs):
    n = cs["name"]
    line = (f"qmx-sim gemm --a {n}_a.npy --b {n}_b.npy --a-format {cs['a_format']} --b-format {cs['b_format']} ")
    if cs["scale_format"]:
        sf = "ue8m0" if cs["scale_format"] == "ue8m0" else "e4m3"
        line += f"--a-scales {n}_sa.npy --b-scales {n}_sb.npy --scale-format {sf} --block {cs['block']} "
    return line + f"--c {n}_c.npy --model {cs['qmx_model']} --expect {n}_d.npy"


def cd_storage(cfmt, bits_dtype):
    """(numpy dtype the C and D bit patterns are written as, its .npy descr)."""
    if cfmt == "f16":
        return (np.float16, "<f2") if bits_dtype == "f4" else (np.uint16, "<u2")
    return (np.float32, "<f4") if bits_dtype == "f4" else (np.uint32, "<u4")


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
    f16 = cs["cfmt"] == "f16"
    ut = np.uint16 if f16 else np.uint32
    store, descr = cd_storage(cs["cfmt"], bits_dtype)

    def bits(x):
        return np.asarray(x, ut).view(store)  # a view: NaN payloads and signs kept
    save(out, name, "a", cs["a"], files)
    save(out, name, "b", cs["b"], files)
    if cs["scale_format"] is not None:
        save(out, name, "sa", cs["sa"], files)
        save(out, name, "sb", cs["sb"], files)
    save(out, name, "c", bits(cs["c"]), files)
    save(out, name, "d", bits(d), files)
    if not ok.all():  # outputs MMA-Sim could not compute (it raised): D is all ones there
        save(out, name, "ok", ok.astype(np.uint8), files)
    back = np.load(os.path.join(out, f"{name}_d.npy"))
    assert back.dtype.str == descr and np.array_equal(back.view(ut), d), "D bits changed on the way to disk"
    mag, inf_bits = (0x7FFF, 0x7C00) if f16 else (0x7FFFFFFF, 0x7F800000)
    fam = cs["family"]
    rec = {"name": name, "m": int(m), "k": int(k), "n": int(n), "a_format": cs["a_format"],
           "b_format": cs["b_format"], "scale_format": cs["scale_format"], "block": cs["block"],
           "a_block": f"1x{cs['block']}" if cs["block"] else None,
           "b_block": f"{cs['block']}x1" if cs["block"] else None,
           "c_dtype": cs["cfmt"], "cd_npy_dtype": descr,
           "k_per_instruction": cs["step"], "instructions_chained": k // cs["step"],
           "qmx_model": cs["qmx_model"], "family": fam, "mmasim_arch": ARCH.get(fam),
           "mmasim_function": function_of(cs),
           "mmasim_qualifiers": sorted(cs.get("qualifiers", [])),
           "extension": bool(cs["ext"]), "seed": set_seed(base_seed, name), "quick": bool(quick),
           "description": cs["desc"], "row_patterns": cs["rows"], "col_patterns": cs["cols"],
           "nan_outputs": int(np.sum((d[ok] & mag) > inf_bits)),
           "inf_outputs": int(np.sum((d[ok] & mag) == inf_bits)),
           "zero_outputs": int(np.sum((d[ok] & mag) == 0)),
           "mmasim_raised": int((~ok).sum()),
           "replay": replay_line(cs),
           "files": files, "seconds": round(time.time() - t0, 2)}
    if "probes" in cs:
        w = 4 if f16 else 8
        for p in cs["probes"]:
            i = p["row_col"]
            p["mmasim"] = f"0x{int(d[i, i]):0{w}x}"
            p["c"] = f"0x{int(cs['c'][i, i]):0{w}x}"
            if "mmasim_by_reading" in p:
                p["mmasim_agrees_with_reading"] = int(d[i, i]) == p["mmasim_by_reading"]
                p["mmasim_by_reading"] = f"0x{p['mmasim_by_reading']:0{w}x}"
        rec["probes"] = cs["probes"]
        rec["probes_disagreeing_with_reading"] = sum(1 for p in cs["probes"]
                                                     if p.get("mmasim_agrees_with_reading") is False)
    return rec


def main():
    ap = argparse.ArgumentParser(
        description="Run microsoft/MMA-Sim's Blackwell tcgen05 block-scale, Hopper wgmma FP8 (FP32 and FP16 D), "
                    "Ada FP8 mma and RTX Blackwell mma / mma.block_scale models on random and adversarial cases "
                    "and write them for qmx-sim's C++ replay (golden/gemm-hopper style). CPU only; needs "
                    "Python >= 3.10 and torch >= 2.7.",
        epilog="Case sets: " + ", ".join(s[0] for s in SETS), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", help="output folder (created)")
    ap.add_argument("--mmasim", help="MMA-Sim checkout (the folder holding mmasim/), or its mmasim/ folder")
    ap.add_argument("--mmasim-rev", default="unknown", help="MMA-Sim's git commit, recorded in cases.json")
    ap.add_argument("--quick", action="store_true", help="small K and N (seconds)")
    ap.add_argument("--sets", default="", help="comma-separated set names or prefixes ending in * (default: all)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the cases of OUTDIR/cases.json that this run does not write (their files stay), "
                         "so that a run of some sets adds to an earlier collection instead of replacing its list")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"base seed (default {DEFAULT_SEED}); "
                    "each set draws from numpy's PCG64 seeded with [seed, crc32(name)]")
    ap.add_argument("--jobs", type=int, default=1, help="processes, one case set each (default 1)")
    ap.add_argument("--bits-dtype", choices=["f4", "u4"], default="f4",
                    help="dtype of C and D files: f4 (default; FP32 as '<f4', FP16 as '<f2': qmx-sim's ReadNpy "
                         "reads both) or u4 (uint32 / uint16)")
    ap.add_argument("--check", action="store_true", help="import MMA-Sim, run its probes, and exit")
    ap.add_argument("--list", action="store_true", help="list the case sets and exit")
    args = ap.parse_args()

    if args.list:
        for s in SETS:
            cf = "f16" if s[1] in F16_FAMILIES else "f32"
            print(f"{s[0]:28s} {qmx_model_of(s[1], s[2]):26s} C/D {cf}  params {s[2]}  K {s[5]} (quick {s[6]})"
                  f"  style {s[7]}")
        return 0
    if not args.mmasim:
        ap.error("--mmasim DIR is required")
    want = [w for w in args.sets.split(",") if w]

    def chosen(name):
        return not want or any(name == w or (w.endswith("*") and name.startswith(w[:-1])) for w in want)
    entries = [s for s in SETS if chosen(s[0])]
    if not args.check and not entries:
        ap.error("no case set matches --sets")
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
    consistency_new = ext_consistency_new(sim, args.seed)
    bad_new = [f for f, r in consistency_new.items() if r["equal"] != r["outputs"]]
    for f, r in consistency_new.items():
        print(f"extension check, {f} (E4M3 / E5M2 carried in float64 vs the class): {r['equal']}/{r['outputs']} equal")
    if bad_new:
        print(f"collect_mmasim: the E2M1 extension path differs from MMA-Sim's class for {', '.join(bad_new)}; "
              "those families' E2M1 sets are left out")
    if args.check:
        return 0
    if not args.outdir:
        ap.error("OUTDIR is required")
    if consistency["equal"] != consistency["outputs"]:
        entries = [s for s in entries if s[1] != "mx8x"]
    entries = [s for s in entries if not (s[1] in bad_new and "e2m1" in s[2][:2])]
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
    for r in recs:
        if r.get("probes_disagreeing_with_reading"):
            print(f"collect_mmasim: {r['name']}: {r['probes_disagreeing_with_reading']} probe(s) differ from what "
                  "reading MMA-Sim's code predicts (cases.json: probes[].mmasim_agrees_with_reading)")
    run = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "seed": args.seed,
           "quick": args.quick, "python": env["python"], "torch": env["torch"], "numpy": env["numpy"],
           "mmasim_revision": args.mmasim_rev, "cases": [r["name"] for r in recs]}
    runs = [run]
    mpath = os.path.join(args.outdir, "cases.json")
    if args.merge and os.path.isfile(mpath):
        with open(mpath) as fh:
            old = json.load(fh)
        written = {r["name"] for r in recs}
        kept = [c for c in old.get("cases", []) if c["name"] not in written]
        order = {s[0]: i for i, s in enumerate(SETS)}
        recs = sorted(kept + recs, key=lambda c: order.get(c["name"], -1))
        old_runs = old.get("runs") or [{"command": old.get("command"), "seed": old.get("seed"),
                                        "quick": old.get("quick"), "python": old.get("python"),
                                        "torch": old.get("torch"), "numpy": old.get("numpy"),
                                        "mmasim_revision": old.get("mmasim", {}).get("revision"),
                                        "cases": [c["name"] for c in old.get("cases", [])]}]
        for r0 in old_runs:  # a case lives in the last run that wrote it
            r0["cases"] = [c for c in r0.get("cases", []) if c not in written]
        runs = [r0 for r0 in old_runs if r0["cases"]] + [run]
        probes = {**old.get("mmasim_probes", {}), **probes}
    manifest = {
        "generator": "gpu/scripts/collect_mmasim.py",
        "command": run["command"],
        "seed": args.seed, "quick": args.quick, "bits_dtype": "<f4 (FP32 bit patterns)" if args.bits_dtype == "f4"
        else "<u4 (uint32 bit patterns)",
        "mmasim": {"repository": "github.com/microsoft/MMA-Sim", "paper": "arXiv 2511.10909",
                   "path": sim.root, "revision": args.mmasim_rev, "sources_sha256": sim.sources},
        "python": env["python"], "torch": env["torch"], "numpy": env["numpy"],
        "mmasim_probes": probes, "extension_check": consistency, "extension_check_e2m1": consistency_new,
        "runs": runs,
        "cases": recs, "outputs": int(sum(r["m"] * r["n"] for r in recs)), "seconds": round(time.time() - t0, 1),
    }
    with open(mpath, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    write_readme(args.outdir, manifest)
    print(f"{manifest['outputs']} outputs in {len(recs)} cases, {manifest['seconds']} s -> {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
