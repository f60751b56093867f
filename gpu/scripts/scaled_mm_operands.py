"""The operands of gpu/scripts/probe_scaled_mm_modes.py: FP8 codes, scales and biases from an integer hash of
their indices, so that the GPU probe and the CPU replay (tests/python/test_scaled_mm.py) make the same bits
without shipping them. NumPy only (no torch)."""
import numpy as np


def mix64(x):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def hash_codes(seed, rows, cols, fmt, spread):
    """rows x cols uint8 codes of fmt ('e4m3' or 'e5m2'), from a hash of (seed, row, col): random sign and
    mantissa, the exponent field uniform in [centre - spread/2, centre + spread/2) clamped to the normal
    range (spread 0: every finite code, subnormals included), never NaN or Inf."""
    i = np.arange(rows, dtype=np.uint64)[:, None]
    k = np.arange(cols, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        h = mix64(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) ^ mix64(i * np.uint64(0x100000001B3) + k))
    man_bits, exp_bits = (3, 4) if fmt == "e4m3" else (2, 5)
    sign = (h & np.uint64(1)).astype(np.uint32)
    mant = ((h >> np.uint64(1)) & np.uint64((1 << man_bits) - 1)).astype(np.uint32)
    top = (1 << exp_bits) - 1
    if spread == 0:
        field = ((h >> np.uint64(8)) % np.uint64(top + 1)).astype(np.int64)
    else:
        centre = (1 << (exp_bits - 1)) - 1  # the field of 1.0
        field = centre - spread // 2 + ((h >> np.uint64(8)) % np.uint64(spread)).astype(np.int64)
        field = np.clip(field, 1, top)
    code = (sign << (exp_bits + man_bits)) | (field.astype(np.uint32) << man_bits) | mant
    if fmt == "e4m3":
        nan = (code & 0x7F) == 0x7F
        code[nan] ^= 1
    else:
        special = ((code >> 2) & 0x1F) == 0x1F
        code[special] &= ~np.uint32(0x04)
    return code.astype(np.uint8)


def hash_floats(seed, n, lo, hi):
    """n float32 values, log-uniform in [2^lo, 2^hi) with 24 random significand bits, from a hash of
    (seed, index): the scales and biases, reproducible on the CPU."""
    with np.errstate(over="ignore"):
        h = mix64(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) ^ np.arange(n, dtype=np.uint64))
    e = lo + (h % np.uint64(hi - lo)).astype(np.int64)
    sig = 1.0 + ((h >> np.uint64(32)) & np.uint64(0x7FFFFF)).astype(np.float64) / 2.0**23
    sign = np.where((h >> np.uint64(60)) & np.uint64(1), -1.0, 1.0)
    return (sign * sig * np.exp2(e)).astype(np.float32)


def bf16_bits(x):
    """float32 values rounded to BF16 (RNE), as uint16 bit patterns (finite inputs)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def case_operands(c, rows=None, cols=None):
    """A (rows x K codes), B (K x cols codes), scale_a, scale_b (torch's shapes) and the bias bits (or None) of a
    probe case, cut to its first rows of A and columns of B."""
    m, n = c["m"], c["n"]
    rows = m if rows is None else min(rows, m)
    cols = n if cols is None else min(cols, n)
    # Element (i, k) depends on (i, k) alone, so the first rows of A and of B^T are made without the rest.
    a = hash_codes(c["seed"], rows, c["k"], c["fa"], c["spread"])
    b = np.ascontiguousarray(hash_codes(c["seed"] + 1, cols, c["k"], c["fb"], c["spread"]).T)
    if c["scales"] == "tensor":
        sa, sb = np.float32(c["sa"]), np.float32(c["sb"])
    else:
        sa = hash_floats(c["seed"] + 2, m, c["sa_lo"], c["sa_hi"]).reshape(m, 1)[:rows]
        sb = hash_floats(c["seed"] + 3, n, c["sb_lo"], c["sb_hi"]).reshape(1, n)[:, :cols]
    bias = None
    if c.get("bias"):
        v = hash_floats(c["seed"] + 4, n, c["bias_lo"], c["bias_hi"])[:cols]
        bias = bf16_bits(v) if c["bias"] == "bfloat16" else v.astype(np.float16).view(np.uint16)
    return a, b, sa, sb, bias
