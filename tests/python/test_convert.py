# qmx.convert / decode / fake_cast against the qmx-sim CLI, the scalar reference and the OCP tables.
import numpy as np
import pytest

import qmx
from conftest import assert_bits_equal, probe_inputs

FORMATS = ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"]
ROUNDINGS = ["rne", "rna", "rz", "ru", "rd", "ro", "sr-a", "sr-b", "sr-c"]


def test_ocp_table_values():
    # OCP OFP8 rev 1.0 table 1 and OCP MX v1.0 table 5: maxima, one, the smallest subnormals, saturation.
    x = np.array([448, 1, 2.0 ** -9, -2, 1000, 57344, 6, 0.5, 7], dtype=np.float32)
    assert qmx.convert(x[:5], "e4m3").tolist() == [0x7E, 0x38, 0x01, 0xC0, 0x7E]
    assert qmx.convert(x[5:6], "e5m2").tolist() == [0x7B]
    assert qmx.convert(x[6:], "e2m1").tolist() == [0x7, 0x1, 0x7]
    assert qmx.convert(np.array([1000], np.float32), "e4m3", saturation="nosat").tolist() == [0x7F]


def test_fnuz_formats():
    # AMD's FNUZ FP8 as ml_dtypes and PyTorch convert: 0x80 the only NaN; Inf, NaN and overflow to it when not
    # saturating; -0 and negatives rounding to zero to +0; 240 (e4m3fnuz) and 57344 (e5m2fnuz) the maxima.
    x = np.array([1, 240, 248, np.inf, np.nan, -0.0, -1e-30, 2.0 ** -10], dtype=np.float32)
    assert qmx.convert(x, "float8_e4m3fnuz", saturation="nosat").tolist() == [0x40, 0x7F, 0x80, 0x80, 0x80, 0, 0, 1]
    assert qmx.convert(x, "e4m3fnuz").tolist() == [0x40, 0x7F, 0x7F, 0x7F, 0x80, 0, 0, 1]
    assert qmx.convert(np.array([57344, 61440], np.float32), "e5m2fnuz", saturation="nosat").tolist() == [0x7F, 0x80]
    assert qmx.convert(np.array([1, 30], np.float32), "float8_e4m3b11fnuz").tolist() == [0x58, 0x7F]
    v = qmx.decode(np.arange(256, dtype=np.uint8), "e4m3fnuz")
    assert np.isnan(v).sum() == 1 and np.isnan(v[0x80]) and not np.isinf(v).any()
    assert qmx.format_info("e4m3fnuz")["max"] == 240


@pytest.mark.parametrize("fmt", FORMATS + ["e4m3fnuz", "e5m2fnuz"])
def test_against_cli(cli, tmp_path, fmt):
    x = probe_inputs(2048)
    np.save(tmp_path / "x.npy", x)
    for rounding in ["rne", "rz", "ru", "sr"]:
        for sat in ["satfinite"] + (["nosat"] if fmt in ("e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz") else []):
            out = tmp_path / ("c_%s_%s.npy" % (rounding, sat))
            cli("convert", "--to", fmt, "--round", rounding, "--sat", sat, "--seed", 7, "--in", tmp_path / "x.npy",
                "--out", out)
            got = qmx.convert(x, fmt, rounding, sat, seed=7)
            assert_bits_equal(got, np.load(out), "%s %s %s" % (fmt, rounding, sat))


@pytest.mark.parametrize("fmt", FORMATS + ["int8", "ue8m0", "e3m4", "binary8p3se"])
def test_fast_equals_reference(fmt):
    x = probe_inputs(1024)
    for rounding in ROUNDINGS:
        for sat in ["satfinite", "nosat", "satpropagate"]:
            for kw in ({}, {"subnormals": "flush"}, {"nan_sign": "positive", "sr_bits": 13, "seed": 5}):
                try:
                    ref = qmx.convert(x, fmt, rounding, sat, reference=True, **kw)
                except ValueError:  # an option set the format cannot honour (nosat into e2m1, ...)
                    with pytest.raises(ValueError):
                        qmx.convert(x, fmt, rounding, sat, **kw)
                    continue
                assert_bits_equal(qmx.convert(x, fmt, rounding, sat, **kw), ref, "%s %s %s %s" % (fmt, rounding, sat, kw))


def test_explicit_random_bits_and_first_index():
    x = probe_inputs(0)[:50000]
    bits = np.random.default_rng(3).integers(0, 2 ** 32, x.size, dtype=np.uint32)
    assert_bits_equal(qmx.convert(x, "e2m1", "sr", random_bits=bits),
                      qmx.convert(x, "e2m1", "sr", random_bits=bits, reference=True), "random_bits")
    # A tensor split into calls with the matching first_index gives the bits of one call.
    whole = qmx.convert(x, "e4m3", "sr", seed=9)
    parts = np.concatenate([qmx.convert(x[:12345], "e4m3", "sr", seed=9),
                            qmx.convert(x[12345:], "e4m3", "sr", seed=9, first_index=12345)])
    assert_bits_equal(parts, whole, "first_index")
    with pytest.raises(ValueError, match="random_bits"):
        qmx.convert(x, "e2m1", "sr", random_bits=bits[:10])


def test_bf16_and_fp16_sources():
    x = probe_inputs(0)[:65536]  # exactly the bfloat16 values
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    assert_bits_equal(qmx.convert(bits, "e4m3", src="bf16"), qmx.convert(x, "e4m3"), "bf16 bits")
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    assert_bits_equal(qmx.convert(h, "e5m2", "rz"), qmx.convert(h.astype(np.float32), "e5m2", "rz"), "fp16")
    with pytest.raises(TypeError, match="src='bf16'"):
        qmx.convert(bits, "e4m3")


def test_decode_every_code():
    for fmt in FORMATS + ["ue8m0", "int8", "e3m4"]:
        info = qmx.format_info(fmt)
        codes = np.arange(1 << info["bits"], dtype=np.uint8)
        want = np.array(qmx.format_values(fmt), dtype=np.float64).astype(np.float32)
        got = qmx.decode(codes, fmt)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        assert same.all(), fmt
        assert int(np.isfinite(got).sum()) == info["finite_codes"], fmt
    e4m3 = qmx.format_info("e4m3")
    assert (e4m3["max"], e4m3["min_normal"], e4m3["min_subnormal"], e4m3["bias"]) == (448.0, 2.0 ** -6, 2.0 ** -9, 7)
    assert qmx.format_info("e2m1")["max"] == 6.0
    assert qmx.fake_cast(np.array([3.3, -7], np.float32), "e2m1").tolist() == [3.0, -6.0]


def test_errors():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="C-contiguous"):
        qmx.convert(x[:, ::2], "e4m3")
    with pytest.raises(TypeError, match="float64"):
        qmx.convert(x.astype(np.float64), "e4m3")
    with pytest.raises(ValueError, match="unknown format 'e9m9x'"):
        qmx.convert(x, "e9m9x")
    with pytest.raises(ValueError, match="sr_bits"):
        qmx.convert(x, "e4m3", "sr", sr_bits=33)
    with pytest.raises(ValueError):
        qmx.convert(x, "e2m1", saturation="nosat")  # e2m1 has neither Inf nor NaN
    with pytest.raises(TypeError, match="uint8"):
        qmx.decode(x, "e4m3")


def test_torch_tensors_in_place():
    torch = pytest.importorskip("torch")
    t = torch.randn(64, 128)
    assert_bits_equal(qmx.convert(t, "e4m3"), qmx.convert(t.numpy(), "e4m3"), "torch float32")
    b = t.to(torch.bfloat16)
    want = qmx.convert(b.float().numpy(), "e2m1", "sr", seed=1)
    assert_bits_equal(qmx.convert(b, "e2m1", "sr", seed=1), want, "torch bfloat16")


def test_out_argument():
    x = probe_inputs(0)[:4096].reshape(64, 64)
    buf = np.zeros((64, 64), np.uint8)
    r = qmx.convert(x, "e5m2", "rz", out=buf)
    assert r is buf or np.shares_memory(r, buf)
    assert_bits_equal(buf, qmx.convert(x, "e5m2", "rz"), "out")
    with pytest.raises(ValueError, match="shape"):
        qmx.convert(x, "e5m2", out=np.zeros((64, 63), np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        qmx.convert(x, "e5m2", out=np.zeros((64, 64), np.float32))
