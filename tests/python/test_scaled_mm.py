# qmx.scaled_mm: torch._scaled_mm's conventions, replaying the H200's outputs in golden/gemm-hopper and
# agreeing with the hopper-fp8 models through qmx.gemm.
import json

import numpy as np
import pytest

import qmx
from conftest import REPO, assert_bits_equal

HOPPER = REPO / "golden" / "gemm-hopper"
CASES = json.loads((HOPPER / "cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_replays_the_h200(case):
    name = case["name"]
    a, b = np.load(HOPPER / (name + "_a.npy")), np.load(HOPPER / (name + "_b.npy"))
    if "a_block" in case:
        sa, sb = np.load(HOPPER / (name + "_sa.npy")), np.load(HOPPER / (name + "_sb.npy"))
    else:
        sa, sb = case.get("a_tensor_scale", 1.0), case.get("b_tensor_scale", 1.0)
    fmt = dict(a_format=case["a_format"], b_format=case["b_format"])
    checked = 0
    for fast, suffix in ((False, "_d_slow.npy"), (True, "_d_fast.npy")):
        path = HOPPER / (name + suffix)
        if not path.exists():
            continue
        d, model = qmx.scaled_mm(a, b, sa, sb, use_fast_accum=fast, return_model=True, **fmt)
        want_model = case.get("models", {}).get(suffix[1:-4])
        if want_model:
            assert model == want_model
        assert_bits_equal(d, np.load(path), name + suffix)
        checked += 1
    assert checked


def test_agrees_with_gemm_and_takes_column_major_b():
    rng = np.random.default_rng(0)
    a = qmx.convert(rng.standard_normal((40, 384)).astype(np.float32) * 8, "e4m3")
    bt = qmx.convert(rng.standard_normal((24, 384)).astype(np.float32) * 8, "e5m2")  # N x K, as torch holds B
    b = bt.T  # K x N, column-major
    d = qmx.scaled_mm(a, b, 0.5, np.float32(3.0), b_format="e5m2")
    plain = qmx.gemm(a, np.ascontiguousarray(b), "hopper-fp8", a_format="e4m3", b_format="e5m2")
    # Per-tensor scales multiply after accumulation: 1.5 x the unscaled model's output, in FP32.
    assert_bits_equal(d, (plain * np.float32(1.5)).astype(np.float32), "tensorwise")
    d_fast = qmx.scaled_mm(a, b, 1.0, 1.0, use_fast_accum=True, b_format="e5m2")
    assert_bits_equal(d_fast, qmx.gemm(a, np.ascontiguousarray(b), "hopper-fp8-fast", a_format="e4m3", b_format="e5m2"),
                      "fast")


def test_refuses_what_was_not_measured():
    a = np.zeros((4, 256), np.uint8)
    b = np.zeros((256, 4), np.uint8)
    with pytest.raises(ValueError, match="row-wise"):
        qmx.scaled_mm(a, b, np.ones((4, 1), np.float32), np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="bias"):
        qmx.scaled_mm(a, b, 1.0, 1.0, bias=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="out_dtype"):
        qmx.scaled_mm(a, b, 1.0, 1.0, out_dtype="bfloat16")
    with pytest.raises(ValueError, match="fast_accum"):
        qmx.scaled_mm(a, b, np.ones((4, 2), np.float32), np.ones((2, 1), np.float32), use_fast_accum=True)
    with pytest.raises(ValueError, match="FP8"):
        qmx.scaled_mm(a, b, 1.0, 1.0, a_format="e2m1")
