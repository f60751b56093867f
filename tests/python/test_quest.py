# qmx.quest against a NumPy reimplementation of QuEST's forward quantizer (one group at a time, the
# formula of lib/README.md "Studies"), and QuantizedTensor.cublas_scales against the cuBLAS 128x4 tile
# formula written out in Python.
import numpy as np
import pytest

import qmx
from conftest import assert_bits_equal


def quest_numpy(x, alpha=2.92247856, group=32):
    rows, cols = x.shape
    codes = np.zeros(x.shape, np.uint8)
    scales = np.zeros(rows * cols // group, np.float32)
    for r in range(rows):
        for g0 in range(0, cols, group):
            xg = x[r, g0:g0 + group].astype(np.float64)
            std = np.sqrt(np.mean((xg - xg.mean()) ** 2))
            s = np.float32(std * (alpha / 6.0) + 1e-8)
            s = np.float32(2.0 ** np.floor(np.log2(s))) if s > 0 else s  # floored to a power of two
            scales[(r * cols + g0) // group] = s
    v = (x.reshape(-1, group) / scales[:, None]).astype(np.float32).reshape(x.shape)
    codes = qmx.convert(v, "e2m1")
    mask = (np.abs(v) < 6).astype(np.uint8)
    dequant = (qmx.decode(codes, "e2m1").reshape(-1, group) * scales[:, None]).astype(np.float32).reshape(x.shape)
    return codes, mask, scales, dequant


def test_quest_matches_numpy():
    x = np.random.default_rng(4).standard_normal((8, 256)).astype(np.float32)
    x[3, 5] = 40.0  # an outlier: clipped, outside the trust mask
    r = qmx.quest(x, block=None)
    codes, mask, scales, dequant = quest_numpy(x)
    assert_bits_equal(r["scales"], scales, "scales")
    assert_bits_equal(r["codes"], codes, "codes")
    assert_bits_equal(r["mask"], mask, "mask")
    assert_bits_equal(r["dequant"], dequant, "dequant")
    assert r["clipped"] == int((mask == 0).sum()) and r["clipped"] >= 1


def test_quest_with_hadamard():
    x = np.random.default_rng(5).standard_normal((4, 128)).astype(np.float32)
    r = qmx.quest(x, block=32)
    want = qmx.quest(qmx.hadamard(x, 32), block=None)
    assert_bits_equal(r["dequant"], want["dequant"])
    with pytest.raises(ValueError, match="row-wise"):
        qmx.quest(x, "nvfp4-2d", block=None)


def test_cublas_tiled_scales():
    x = np.random.default_rng(6).standard_normal((130, 256)).astype(np.float32)
    q = qmx.quantize(x, "mxfp8")
    s = q.scales  # 130 x 8
    tiled = q.cublas_scales()
    rows_p, cols_p = 256, 8  # padded to 128 rows and 4 columns
    assert tiled.shape == (rows_p * cols_p,)
    want = np.zeros(rows_p * cols_p, np.uint8)
    for r in range(s.shape[0]):
        for c in range(s.shape[1]):
            off = ((r // 128) * (cols_p // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
            want[off] = s[r, c]
    assert_bits_equal(tiled, want)
    blk = qmx.quantize(x[:128], "fp8-block1x128").cublas_scales()
    assert blk.dtype == np.float32
