"""A kernel team's bitwise test of its NVFP4 quantizer with qmx.testing: copy this file beside your kernel's
tests and put your kernel where `my_nvfp4_quantize` is (lib/python/README.md "Testing your own kernels").

The kernel here is a stand-in: NumPy FP32 arithmetic in the order of Transformer Engine's NVFP4 kernels
(docs/numerics.md "FP32 and NVFP4 scales"), with `order="div"` for TE's older reference order, which rounds
its scale differently in a few blocks. Its E4M3 and E2M1 casts are qmx.convert's, so what the tests check is
the scale arithmetic and its order. Run it with `python3 -m pytest docs/examples` (qmx importable).
"""
import numpy as np
import pytest

import qmx
import qmx.testing as qt

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max


def my_nvfp4_quantize(x, order="te"):
    """x (rows, cols) float32, cols a multiple of 16 -> (E2M1 codes, E4M3 block-scale bytes, tensor amax)."""
    x = np.ascontiguousarray(x, dtype=F32)
    amax = F32(np.abs(x).max())
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s_enc = F32(1) if amax == 0 or not np.isfinite(amax) else min(F32(F32(2688) / amax), F32(FLT_MAX))
        blocks = x.reshape(x.shape[0], -1, 16)
        block_amax = np.abs(blocks).max(axis=2)
        if order == "te":  # s8 = e4m3(block_amax * fl32(S_enc * fl32(1/6)))
            scale = (block_amax * F32(s_enc * F32(F32(1) / F32(6)))).astype(F32)
        else:  # "div": s8 = e4m3(fl32(block_amax / 6) * S_enc)
            scale = ((block_amax / F32(6)).astype(F32) * s_enc).astype(F32)
        s8 = qmx.convert(scale, "e4m3")
        s8_value = qmx.decode(s8, "e4m3")
        if order == "te":  # multiplier = min(1 / fl32(s8 * fl32(1 / S_enc)), FLT_MAX)
            decode = (s8_value * F32(F32(1) / s_enc)).astype(F32)
            mult = np.minimum((F32(1) / decode).astype(F32), F32(FLT_MAX))
        else:  # multiplier = fl32(S_enc / s8)
            mult = (s_enc / s8_value).astype(F32)
        y = (blocks * mult[:, :, None]).astype(F32)
    codes = qmx.convert(np.nan_to_num(y.reshape(x.shape), nan=0.0), "e2m1")
    return codes, s8, amax


def separating_amaxes(s_enc, below):
    """Block amaxes under `below` whose scale the two orders round to different E4M3 bytes: within 64 ulps of
    each point where the scale meets a midpoint of two E4M3 values."""
    e4m3 = np.array(sorted(v for v in qmx.format_values("e4m3") if 2.0 ** -6 <= v <= 448), dtype=np.float64)
    centre = ((e4m3[1:] + e4m3[:-1]) / 2 * 6 / float(s_enc)).astype(F32)
    grid = (centre.view(np.uint32)[:, None] + np.arange(-64, 65)[None, :]).astype(np.uint32).view(F32).reshape(-1)
    grid = np.unique(grid[(grid > 0) & (grid < below)])
    te = qmx.convert((grid * F32(s_enc * F32(F32(1) / F32(6)))).astype(F32), "e4m3")
    div = qmx.convert(((grid / F32(6)).astype(F32) * s_enc).astype(F32), "e4m3")
    return grid[te != div]


def inputs(seed):
    """Data that separates the orders, as a test must feed: Laplace rows over 2^-4 .. 2^4, an all-zero row,
    and 16 blocks whose amax the two orders' scales round apart, under a tensor amax that has such blocks."""
    rng = np.random.default_rng(seed)
    x = qmx.distribution("laplace", (96, 256), seed=seed) * np.exp2(rng.integers(-4, 5, (96, 1))).astype(F32)
    x[5] = 0
    top = F32(np.abs(x).max())
    for step in range(200):  # the tensor amax (element [0, 0]) moved up until 16 blocks can be set apart
        x[0, 0] = top * F32(1 + 0.01 * step)
        apart = separating_amaxes(F32(F32(2688) / x[0, 0]), top)
        if apart.size >= 16:
            break
    assert apart.size >= 16, "no tensor amax tried gives 16 separating block amaxes"
    for i, b in enumerate(apart[:: apart.size // 16][:16]):
        blk = slice(16 * i, 16 * i + 16)
        x[10, blk] *= F32(0.9) * b / np.abs(x[10, blk]).max()
        x[10, blk.start] = b
    return x


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_codes_and_scales_are_transformer_engines_bit_for_bit(seed):
    x = inputs(seed)
    codes, scales, amax = my_nvfp4_quantize(x)
    want = qmx.quantize(x, "nvfp4", rule="nvfp4")
    # On a mismatch: the count, the first indices, both values in hex and decoded, and the input there.
    qt.assert_bitwise(codes, want.codes, fmt="e2m1", inputs=x)
    qt.assert_bitwise(scales, want.scales, fmt="e4m3")
    assert np.float32(amax).tobytes() == np.float32(want.tensor_amax).tobytes()


def test_identify_names_the_order_the_kernel_uses():
    x = np.concatenate([inputs(s) for s in (1, 2, 3)])
    found = qt.identify("quantizer", x, my_nvfp4_quantize(x)[:2], elem="e2m1", block=16)
    assert "nvfp4:rule=nvfp4,nan=block-nan" in found.matches, found
    older = qt.identify("quantizer", x, my_nvfp4_quantize(x, order="div")[:2], elem="e2m1", block=16)
    assert "nvfp4:rule=nvfp4-div,nan=block-nan" in older.matches, older
    assert not any(m.startswith("nvfp4:rule=nvfp4,") for m in older.matches), older
