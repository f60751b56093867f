# qmx.quantize / dequantize / fake_quantize against `qmx-sim quantize`, the scalar reference quantizer and
# each other.
import json

import numpy as np
import pytest

import qmx
from conftest import assert_bits_equal

SPECS = ["mxfp8", "mxfp8-ocp", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8", "nvfp4", "nvfp4-2d",
         "fp8-tensor-current", "fp8-rowwise", "fp8-block1x128", "fp8-block128x128", "bfp8_b", "bfp4_b", "bfp2_b"]
# (spec, overrides as the CLI spells them, the same for Python)
VARIANTS = [
    ("mxfp8", ["--profile", "torchao-rceil"], {"profile": "torchao-rceil"}),
    ("mxfp8", ["--profile", "microxcaling"], {"profile": "microxcaling"}),
    ("mxfp4", ["--rule", "ocp-floor", "--round", "sr", "--seed", "11"], {"rule": "ocp-floor", "rounding": "sr", "seed": 11}),
    ("nvfp4", ["--round", "sr", "--seed", "3", "--sr-bits", "16"], {"rounding": "sr", "seed": 3, "sr_bits": 16}),
    ("nvfp4", ["--scale-rule", "nvfp4-div", "--axis", "col"], {"rule": "nvfp4-div", "axis": "col"}),
    ("fp8-block1x128", ["--elem", "e5m2", "--margin", "1"], {"elem": "e5m2", "margin": 1}),
    ("mxfp8", ["--block", "32x32", "--nan-policy", "scale-nan"], {"block": "32x32", "nan_policy": "scale-nan"}),
    ("bfp4_b", ["--round", "rz", "--axis", "col"], {"rounding": "rz", "axis": "col"}),
]


def _bfp_oracle(x, w, truncate=False):
    """tt-metal's vectorised BFP packer on rows of 16 (NumPy): the largest exponent field, the truncating
    shift, "add half minus one plus the kept bit" for ties to even, the clamp, no sign on a zero."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).reshape(-1, 16).astype(np.int64)
    exp = (b >> 23) & 0xFF
    shared = exp.max(axis=1, keepdims=True)
    sig = (b & 0x7FFFFF) | 0x800000
    diff = shared - exp
    m = np.where(diff >= 32, 0, sig >> np.minimum(diff, 31))
    s = 24 - w
    m = (m >> s) if truncate else (m + (1 << (s - 1)) - 1 + ((m >> s) & 1)) >> s
    m = np.where(exp != 0, np.minimum(m, (1 << w) - 1), 0)
    return np.where(m != 0, m | ((b >> 31) << w), 0).astype(np.uint8).reshape(x.shape), shared.reshape(-1)


@pytest.mark.parametrize("spec,w", [("bfp8_b", 7), ("bfp4_b", 3), ("bfp2_b", 1)])
def test_bfp_equals_tt_metal_packer(spec, w):
    rng = np.random.default_rng(w)
    x = (rng.standard_normal((512, 64)) * np.exp2(rng.integers(-20, 20, (512, 64)))).astype(np.float32)
    x[::7] = rng.integers(0, 2 ** 32, (x[::7].size,), dtype=np.uint64).astype(np.uint32).view(np.float32).reshape(x[::7].shape)
    for truncate in (False, True):
        q = qmx.quantize(x, spec, rounding="rz" if truncate else "rne")
        codes, shared = _bfp_oracle(x, w, truncate)
        np.testing.assert_array_equal(q.codes, codes)
        np.testing.assert_array_equal(q.scales.reshape(-1), shared.astype(np.uint8))
    # Dequantized: m * 2^(E - 127 - (w - 1)) where that is an FP32 normal or zero (blocks without Inf or NaN).
    x = (rng.standard_normal((512, 64)) * np.exp2(rng.integers(-120, 120, (512, 1)))).astype(np.float32)
    q = qmx.quantize(x, spec)
    d = q.dequantize()
    m = (q.codes & ((1 << w) - 1)).astype(np.float64)
    sign = np.where(q.codes >> w, -1.0, 1.0)
    e = np.repeat(q.scales.reshape(-1).astype(np.int64), 16).reshape(x.shape)
    want = sign * m * np.exp2(e - 127 - (w - 1))
    ok = (e < 255) & ((np.abs(want) >= 2.0 ** -126) | (m == 0))
    assert ok.sum() > x.size // 2
    np.testing.assert_array_equal(d[ok], want[ok].astype(np.float32))
    with pytest.raises(ValueError, match="rne .its default. or rz"):
        qmx.quantize(x, spec, rounding="sr")


def tensor(rows=256, cols=512, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * np.exp2(rng.integers(-8, 8, (rows, 1))).astype(np.float32)
    x[3, 5] = 300.0  # an outlier: saturation and large scales
    x[7, :40] = 0.0  # an all-zero block
    x[9, 100] = 1e-30  # FP32 values far below the element formats
    return x


def run_cli(cli, tmp_path, x, spec, args):
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    cli("quantize", "--spec", spec, *args, "--in", tmp_path / "x.npy", "--out", str(out) + "/", "--quiet")
    return (np.load(out / "x.codes.npy"), np.load(out / "x.scales.npy"), np.load(out / "x.dequant.npy"),
            json.loads((out / "spec.json").read_text()))


@pytest.mark.parametrize("spec,cli_args,kw", [(s, [], {}) for s in SPECS] + VARIANTS)
def test_against_cli(cli, tmp_path, spec, cli_args, kw):
    x = tensor()
    codes, scales, deq, spec_json = run_cli(cli, tmp_path, x, spec, cli_args)
    q = qmx.quantize(x, spec, **kw)
    assert_bits_equal(q.codes, codes, spec + " codes")
    assert_bits_equal(q.scales, scales, spec + " scales")
    assert_bits_equal(q.dequantize(), deq, spec + " dequantized")
    assert q.spec == spec_json
    assert_bits_equal(qmx.fake_quantize(x, spec, **kw), deq, spec + " fake_quantize")


@pytest.mark.parametrize("spec,kw", [(s, {}) for s in SPECS] + [(v[0], v[2]) for v in VARIANTS])
def test_fast_equals_reference(spec, kw):
    x = tensor(130, 300, seed=1)  # partial blocks at both edges
    q, r = qmx.quantize(x, spec, **kw), qmx.quantize(x, spec, reference=True, **kw)
    assert_bits_equal(q.codes, r.codes, spec + " codes")
    assert_bits_equal(q.scales, r.scales, spec + " scales")
    assert_bits_equal(q.dequantize(), r.dequantize(reference=True), spec + " dequantized")


def test_stored_parts_round_trip():
    x = tensor()
    for spec in ["mxfp4", "nvfp4", "fp8-block128x128"]:
        q = qmx.quantize(x, spec)
        back = qmx.dequantize(q.codes.copy(), q.scales.copy(), q.spec, tensor_amax=q.tensor_amax)
        assert_bits_equal(back, q.dequantize(), spec)
        assert_bits_equal(qmx.dequantize(q.codes, q.scales, json.dumps(q.spec), tensor_amax=q.tensor_amax),
                          q.dequantize(), spec + " json")
    q = qmx.quantize(x, "mxfp8")
    with pytest.raises(ValueError, match="scale bytes"):
        qmx.dequantize(q.codes, q.scales[:, :3].copy(), q.spec)


def test_pack_fp4_low_nibble_first():
    x = np.array([[0.5, 6.0, -1.0] + [0.0] * 29], np.float32)
    q = qmx.quantize(x, "mxfp4", rule="ocp-floor")
    p = q.pack()
    assert p.dtype == np.uint8 and p.size == 16
    c = q.codes.ravel()
    assert p[0] == c[0] | (c[1] << 4) and p[1] == c[2] | (c[3] << 4)


def test_shapes_and_axes():
    x = tensor(64, 256)
    q3 = qmx.quantize(x.reshape(4, 16, 256), "mxfp8")
    assert q3.shape == (4, 16, 256) and q3.codes.shape == (4, 16, 256) and q3.scale_grid == (64, 8)
    qc = qmx.quantize(x, "mxfp8", axis="col")
    assert qc.scales.shape == (2, 256)
    assert_bits_equal(qc.codes, qmx.quantize(np.ascontiguousarray(x.T), "mxfp8").codes.T.copy(), "col = row of x.T")


def test_delayed_scaling_against_cli(cli, tmp_path):
    x = tensor(64, 128)
    hist = [3.0, 200.0, 17.5]
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "out").mkdir()
    args = ["--amax-history"] + [str(h) for h in hist]
    cli("quantize", "--spec", "fp8-delayed", *args, "--history-len", 16, "--in", tmp_path / "x.npy",
        "--out", str(tmp_path / "out") + "/", "--quiet")
    state = qmx.DelayedScaling("e4m3", history_len=16)
    for h in hist:
        state.push(h)
    q = qmx.quantize(x, "fp8-delayed", state=state)
    assert_bits_equal(q.codes, np.load(tmp_path / "out" / "x.codes.npy"), "delayed codes")
    assert_bits_equal(q.scales, np.load(tmp_path / "out" / "x.scales.npy"), "delayed scales")
    assert state.history[0] == np.abs(x).max()
    with pytest.raises(ValueError, match="DelayedScaling"):
        qmx.quantize(x, "fp8-delayed")


def test_errors():
    x = tensor(16, 128)
    with pytest.raises(ValueError, match="nope"):
        qmx.quantize(x, "nope")
    with pytest.raises(TypeError, match="unknown spec option"):
        qmx.quantize(x, "mxfp8", colour="blue")
    with pytest.raises(ValueError):
        qmx.quantize(x, "mxfp4", saturation="nosat")  # e2m1 has neither Inf nor NaN
    with pytest.raises(ValueError):
        qmx.quantize(x, "mxfp8", block="1xbanana")
    with pytest.raises(TypeError, match="C-contiguous"):
        qmx.quantize(x.T, "mxfp8")


def test_row_scaled_nvfp4_is_each_row_quantized_alone():
    # Rows 2^-20 .. 2^20 apart: a per-tensor scale would flush the small rows; row-scaled keeps each.
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((8, 64)) * np.exp2(np.arange(8) * 6 - 20)[:, None]).astype(np.float32)
    q = qmx.quantize(x, "nvfp4", row_scaled=True)
    assert q.spec["row_scaled"] is True and qmx.make_spec("nvfp4", row_scaled=True)["row_scaled"] is True
    assert q.line_amax.dtype == np.float32 and q.line_amax.shape == (8,)
    assert qmx.quantize(x, "nvfp4").line_amax is None
    dq = q.dequantize()
    for r in range(8):
        one = qmx.quantize(x[r:r + 1], "nvfp4")
        assert_bits_equal(q.codes[r], one.codes[0], "codes of row %d" % r)
        assert_bits_equal(q.scales[r], one.scales[0], "scales of row %d" % r)
        assert_bits_equal(q.line_amax[r:r + 1], np.array([one.tensor_amax], np.float32), "amax of row %d" % r)
        assert_bits_equal(dq[r], one.dequantize()[0], "values of row %d" % r)
    # The same through stored parts, and the spec's checks.
    assert_bits_equal(qmx.dequantize(q.codes, q.scales, q.spec, q.tensor_amax, q.line_amax), dq, "assembled")
    with pytest.raises(ValueError, match="one amax per row"):
        qmx.dequantize(q.codes, q.scales, q.spec, q.tensor_amax, [1.0])
    with pytest.raises(ValueError, match="NVFP4 rule"):
        qmx.quantize(x, "mxfp4", row_scaled=True)


def test_tensor_amax_policies_and_quantize():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(3 * (1 << 18) + 48) * 3).astype(np.float32)
    x[7] = np.inf
    x[1 << 18] = np.nan
    x[-1] = -np.inf
    finite = np.max(np.abs(x[np.isfinite(x)]))
    for policy, want in [("block-nan", finite), ("ignore", finite), ("te", np.inf), ("ignore-nan", np.inf),
                         ("scale-nan", np.inf)]:
        assert qmx.tensor_amax(x, policy) == want
        assert qmx.tensor_amax(x, policy, reference=True) == want
    clean = x.copy()
    clean[~np.isfinite(clean)] = 0.5
    q = qmx.quantize(clean.reshape(-1, 16), "nvfp4")
    assert q.tensor_amax == qmx.tensor_amax(clean) == np.max(np.abs(clean))
    assert qmx.tensor_amax(np.zeros(0, np.float32)) == 0.0
    with pytest.raises(ValueError, match="NaN policy"):
        qmx.tensor_amax(x, "nope")


def test_spec_overrides_come_from_the_library_table(cli):
    # One table (SpecOverrideFields) names the text overrides: the keywords make_spec takes, the options
    # `qmx-sim quantize` lists, and the names make_spec's docstring documents.
    names = qmx._qmx.spec_override_names()
    assert len(names) == 14 and {"rule", "rounding", "nan_policy", "element_scaling", "error_order", "amax_order",
                                 "scale_format"} <= set(names)
    help_text = cli("quantize", "--help")
    for flag in ("--profile", "--elem", "--rule", "--block", "--axis", "--round", "--sat", "--nan-policy",
                 "--element-scaling", "--subnormals", "--nan-fallback", "--error-order"):
        assert flag in help_text
    for name in names:
        assert name in qmx.make_spec.__doc__
    s = qmx.make_spec("mxfp8", rounding="rz", element_scaling="fp32", rule="ceil", axis=None)
    t = qmx.make_spec("mxfp8", rounding="rz", element_scaling="fp32", rule="ceil")
    assert s == t and s != qmx.make_spec("mxfp8")
    with pytest.raises(TypeError, match="unknown spec option"):
        qmx.make_spec("mxfp8", scale_rule="ceil")


def _cli_round_trip(cli, tmp_path, x, q, spec, scale_format):
    """qmx-sim quantize writes x under spec with scale_format; the file reads back as q, bit for bit."""
    np.save(tmp_path / "w.npy", x)
    out = tmp_path / "q.safetensors"
    cli("quantize", "--spec", spec, "--scale-format", scale_format, "--in", tmp_path / "w.npy", "--out", out, "--quiet")
    back = qmx.io.load_quantized(out)["w"]
    assert back.spec == q.spec
    assert_bits_equal(back.codes, q.codes, "file codes")
    assert_bits_equal(back.scales, q.scales, "file scales")
    assert_bits_equal(back.dequantize(), q.dequantize(), "file dequantized")


def test_nvfp4_block_scales_in_another_format(cli, tmp_path):
    # NVFP4's rules with UE5M3 block scales (AMD gfx1250's): the fast path (the reference) equals the reference,
    # the spec names the format, the CLI writes the same tensor and reads it back, and other rules refuse it.
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((32, 128)) * np.exp2(rng.integers(-30, 30, (32, 1)))).astype(np.float32)
    q = qmx.quantize(x, "nvfp4", scale_format="ue5m3")
    r = qmx.quantize(x, "nvfp4", scale_format="ue5m3", reference=True)
    assert_bits_equal(q.codes, r.codes, "codes")
    assert_bits_equal(q.scales, r.scales, "scales")
    assert "e5m3:unsigned:special=fn scales" in repr(q)
    e4m3 = qmx.quantize(x, "nvfp4")
    assert not np.array_equal(np.asarray(q.scales), np.asarray(e4m3.scales))  # another format's codes
    assert_bits_equal(qmx.quantize(x, "nvfp4", scale_format="ue4m3").scales, e4m3.scales, "ue4m3 is e4m3")
    _cli_round_trip(cli, tmp_path, x, q, "nvfp4", "ue5m3")
    with pytest.raises(ValueError, match="applies to the NVFP4 rules"):
        qmx.quantize(x, "fp8-block1x128", scale_format="ue5m3")
    with pytest.raises(ValueError, match="cannot hold NVFP4's block scales"):
        qmx.quantize(x, "nvfp4", scale_format="ue8m0")


def test_mx_scales_in_another_format(cli, tmp_path):
    # MXFP8 with its power-of-two scales stored as E4M3 codes (as an NVFP4 tensor core reads them): each scale
    # decodes to the UE8M0 recipe's power of two where E4M3 holds it (2^-9 ... 2^8) and to the nearest end of that
    # range otherwise; the elements are divided by it; the CLI writes the tensor and reads it back.
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((32, 128)) * np.exp2(rng.integers(-30, 30, (32, 1)))).astype(np.float32)
    q = qmx.quantize(x, "mxfp8", scale_format="e4m3")
    u = qmx.quantize(x, "mxfp8")
    assert "e4m3 scales" in repr(q)
    su = np.exp2(np.asarray(u.scales, dtype=np.float64) - 127)
    want = np.clip(su, 2.0 ** -9, 2.0 ** 8)
    got = qmx.decode(np.asarray(q.scales), "e4m3")
    np.testing.assert_array_equal(got, want)
    inside = (su >= 2.0 ** -9) & (su <= 2.0 ** 8)
    rows = np.repeat(inside, 32, axis=1)
    assert rows.any() and (~rows).any()
    deq = qmx.decode(np.asarray(q.codes), "e4m3") * np.repeat(want, 32, axis=1)
    np.testing.assert_array_equal(np.asarray(q.dequantize()), deq.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(q.codes)[rows], np.asarray(u.codes)[rows])
    _cli_round_trip(cli, tmp_path, x, q, "mxfp8", "e4m3")
    with pytest.raises(ValueError, match="cannot hold MX scales"):
        qmx.quantize(x, "mxfp8", scale_format="int8")
