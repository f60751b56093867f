# qmx.scaled_mm: torch._scaled_mm's conventions, replaying the H200's outputs in golden/gemm-hopper and
# agreeing with the hopper-fp8 models through qmx.gemm.
import json
import sys

import numpy as np
import pytest

import qmx
from conftest import REPO, assert_bits_equal

HOPPER = REPO / "golden" / "gemm-hopper"
CASES = json.loads((HOPPER / "cases.json").read_text())["cases"]
# torch._scaled_mm's modes on the H200 (gpu/scripts/probe_scaled_mm_modes.py): operands from a hash of their
# indices (gpu/scripts/scaled_mm_operands.py), outputs cut to their first rows and columns.
MODES = HOPPER / "scaled-mm"
MODE_CASES = json.loads((MODES / "cases.json").read_text())["cases"]
sys.path.insert(0, str(REPO / "gpu" / "scripts"))
from scaled_mm_operands import case_operands  # noqa: E402


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


def _cut(case):
    """Rows and columns replayed: the stored cut, or 4 x 64 of it past K = 8192 (the default suite's time)."""
    return (case["rows"], case["cols"]) if case["k"] <= 8192 else (min(4, case["rows"]), min(64, case["cols"]))


def _mode_case_call(case, split_k, cut=None):
    rows, cols = cut or _cut(case)
    a, b, sa, sb, bias = case_operands(case, rows, cols)
    return qmx.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=case["out"], use_fast_accum=case["fast"],
                         a_format=case["fa"], b_format=case["fb"], split_k=split_k, return_info=True)


_MODE_FILES = {}


def _measured(case):
    g = case["group"]
    if g not in _MODE_FILES:
        _MODE_FILES[g] = np.load(MODES / (g + ".npz"))
    return _MODE_FILES[g][case["name"]]


@pytest.mark.parametrize("case", [c for c in MODE_CASES if c["status"] == "ok"],
                         ids=[c["name"] for c in MODE_CASES if c["status"] == "ok"])
def test_replays_the_h200_modes(case):
    """Every measured mode bit for bit: per-tensor and row-wise scales, FP32/BF16/FP16 output, a bias,
    fast accumulation on and off, e4m3 and e5m2 x e4m3, K up to 131072 with cuBLASLt's split-K (the count
    cuBLASLt logged; where the library's table has the whole shape it must give the same). The outputs are
    cut to their first rows and columns, so the replay passes the split count the whole shape ran with."""
    known = qmx.scaled_mm_split_k(case["m"], case["n"], case["k"], case["out"])
    if case["scales"] == "tensor" and case["fa"] == "e4m3" and case["fb"] == "e4m3" and known is not None:
        assert known == case["splits"], "the library's measured choice for the whole shape is the one the GPU ran"
    d, info = _mode_case_call(case, case["splits"] if case["scales"] == "tensor" else None)
    assert info["split_k"] == case["splits"]
    rows, cols = _cut(case)
    want = _measured(case)[:rows, :cols]
    got = np.asarray(d).view(want.dtype)
    assert_bits_equal(got, want, case["name"])
    assert info["scaling"] == ("tensorwise" if case["scales"] == "tensor" else "rowwise")


def test_split_k_changes_bits_and_the_model_names_why():
    """Split-K is a different sum: a large-K case replayed unsplit differs, and an unmeasured large-K shape
    is refused with the way to find the count."""
    case = next(c for c in MODE_CASES if c["name"] == "largekw_28")  # 16 x 1024 x 65536, 8 splits, every code
    d1, _ = _mode_case_call(case, 1, (case["rows"], case["cols"]))
    assert np.count_nonzero(np.asarray(d1).view(np.uint32) != _measured(case)) > 0
    a = np.zeros((3, 8192), np.uint8)
    b = np.zeros((8192, 5), np.uint8)
    with pytest.raises(ValueError, match="numSplitsK"):
        qmx.scaled_mm(a, b, 1.0, 1.0)
    d, info = qmx.scaled_mm(a, b, 1.0, 1.0, split_k=4, return_info=True)
    assert info["split_k"] == 4 and not d.any()


def test_the_split_k_table_is_the_measured_grid():
    """The library's table (lib/src/gemm/cublaslt_splitk_h200.inc) answers every shape of the measured grid
    (golden/gemm-hopper/scaled-mm/splitk_grid_h200.csv) as cuBLASLt chose; scaled_mm uses it."""
    rows = np.loadtxt(MODES / "splitk_grid_h200.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert len(rows) == 1344
    for m, n, k, s32, s16 in rows:
        assert qmx.scaled_mm_split_k(m, n, k) == s32, (m, n, k)
        assert qmx.scaled_mm_split_k(m, n, k, "bfloat16") == s16, (m, n, k)
    assert qmx.scaled_mm_split_k(48, 2048, 24576) is None  # off the grid
    assert qmx.scaled_mm_split_k(3, 5, 4096, "float16") == 1
    a, b = np.zeros((16, 8192), np.uint8), np.zeros((8192, 256), np.uint8)
    _, info = qmx.scaled_mm(a, b, 1.0, 1.0, return_info=True)
    assert info["split_k"] == 3


def test_epilogue_orders_that_the_h200_chose():
    """Per tensor: D = acc * fl32(sa * sb), then + bias in FP32, then one rounding to the output; row-wise:
    (acc * sb[j]) * sa[i]. Values where the other orders give other bits."""
    a = np.array([[0x44]], np.uint8)  # 3.0 in e4m3
    b = np.array([[0x3A]], np.uint8)  # 1.25: acc = 3.75
    sa = np.array([0x3FDCE979], np.uint32).view(np.float32)[0]  # scales where the three orders all differ
    sb = np.array([0x3F94903F], np.uint32).view(np.float32)[0]
    acc = np.float32(3.75)
    orders = [np.float32(acc * np.float32(sa * sb)), np.float32(np.float32(acc * sa) * sb),
              np.float32(np.float32(acc * sb) * sa)]
    assert len({o.view(np.uint32).item() for o in orders}) == 3
    assert qmx.scaled_mm(a, b, sa, sb)[0, 0].view(np.uint32) == orders[0].view(np.uint32)
    ra, rb = np.full((2, 1), sa, np.float32), np.full((1, 2), sb, np.float32)  # row-wise needs M x 1 and 1 x N
    d = qmx.scaled_mm(np.repeat(a, 2, axis=0), np.repeat(b, 2, axis=1), ra, rb)
    assert np.all(d.view(np.uint32) == orders[2].view(np.uint32))
    a = np.array([[0x38]], np.uint8)  # 1.0
    b = np.array([[0x38]], np.uint8)
    # bias: the FP32 sum rounds once more to BF16 (2^-9 below half an ulp of 1 in BF16, added in FP32 first)
    big = np.float32(1.0 + 2.0 ** -8)  # a BF16 tie between 1 and 1 + 2^-7 after the bias
    d = qmx.scaled_mm(a, b, big, np.float32(1.0), bias=np.array([2.0 ** -9], np.float32), out_dtype="bfloat16")
    assert d.dtype == np.uint16 and d[0, 0] == 0x3F81  # 1 + 2^-8 + 2^-9 rounds up to 1 + 2^-7


def test_out_dtypes_and_torch_rules():
    a = np.full((2, 64), 0x38, np.uint8)
    b = np.full((64, 3), 0x38, np.uint8)
    d16 = qmx.scaled_mm(a, b, 1e3, 1e3, out_dtype="float16")  # 64e6 overflows FP16: Inf, as the GPU's cvt.rn
    assert d16.dtype == np.float16 and np.all(np.isinf(d16))
    with pytest.raises(ValueError, match="float32"):
        qmx.scaled_mm(a, b, 1.0, 1.0, bias=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="bfloat16 values"):
        qmx.scaled_mm(a, b, 1.0, 1.0, bias=np.full(3, 1.0 + 2.0 ** -10, np.float32), out_dtype="bfloat16")
    with pytest.raises(ValueError, match="out_dtype"):
        qmx.scaled_mm(a, b, 1.0, 1.0, out_dtype="int8")


def test_refuses_what_was_not_measured():
    a = np.zeros((4, 256), np.uint8)
    b = np.zeros((256, 4), np.uint8)
    with pytest.raises(ValueError, match="split-K with row-wise"):
        qmx.scaled_mm(a, b, np.ones((4, 1), np.float32), np.ones((1, 4), np.float32), split_k=2)
    with pytest.raises(ValueError, match="scale_result"):
        qmx.scaled_mm(a, b, 1.0, 1.0, scale_result=1.0)
    with pytest.raises(ValueError, match="blockwise"):
        qmx.scaled_mm(a, b, np.ones((4, 2), np.float32), np.ones((2, 1), np.float32), out_dtype="bfloat16")
    with pytest.raises(ValueError, match="fast_accum"):
        qmx.scaled_mm(a, b, np.ones((4, 2), np.float32), np.ones((2, 1), np.float32), use_fast_accum=True)
    with pytest.raises(ValueError, match="none of per-tensor"):
        qmx.scaled_mm(a, b, np.ones((4, 3), np.float32), np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="FP8"):
        qmx.scaled_mm(a, b, 1.0, 1.0, a_format="e2m1")
    with pytest.raises(ValueError, match="e5m2 x e5m2"):
        qmx.scaled_mm(a, b, 1.0, 1.0, a_format="e5m2", b_format="e5m2")


def test_cli_replays_a_rowwise_bf16_case(cli, tmp_path):
    case = next(c for c in MODE_CASES if c["status"] == "ok" and c["scales"] == "rowwise" and c.get("bias") == "bfloat16")
    a, b, sa, sb, bias = case_operands(case, case["rows"], case["cols"])
    for name, arr in (("a", a), ("b", b), ("sa", sa), ("sb", sb), ("bias", bias), ("want", _measured(case))):
        np.save(tmp_path / (name + ".npy"), arr)
    out = cli("scaled-mm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--a-format", case["fa"],
              "--b-format", case["fb"], "--scale-a", tmp_path / "sa.npy", "--scale-b", tmp_path / "sb.npy",
              "--bias", tmp_path / "bias.npy", "--out-dtype", "bfloat16", *(["--fast-accum"] if case["fast"] else []),
              "--expect", tmp_path / "want.npy", "--out", tmp_path / "d.npy")
    assert "0 of" in out and "rowwise" in out
    assert_bits_equal(np.load(tmp_path / "d.npy").view(np.uint16), _measured(case), "cli")


def test_cli_split_k_case(cli, tmp_path):
    case = next(c for c in MODE_CASES if c["name"] == "largekw_30")  # 16 x 64 x 131072: 51 splits, 49 used
    a, b, sa, sb, _ = case_operands(case, case["rows"], case["cols"])
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "want.npy", _measured(case).view(np.float32))
    out = cli("scaled-mm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--split-k", case["splits"],
              "--expect", tmp_path / "want.npy")
    assert "0 of" in out and "split-K 51" in out
