# qmx.testing: assert_bitwise's report, and identify against small independent NumPy quantizers whose
# scale rule is known (OCP MX's floor rule and the round-up rule of the MXFP8 recipes), written here from
# the definitions (docs/numerics.md "UE8M0 scale rules"), not from the library.
import os

import numpy as np
import pytest

import qmx
import qmx.testing as qt
from conftest import assert_bits_equal

E4M3_MAX, E4M3_EMAX = 448.0, 8


def _e4m3_rne(v):
    """Codes of the float64 values v in E4M3 under RNE with saturation to 448, from the grid of positive
    values (code i is the i-th nonnegative value; a tie goes to the even code)."""
    grid = np.array([x for x in qmx.format_values("e4m3") if not np.signbit(x)])  # +0 up to 448
    a = np.minimum(np.abs(v), E4M3_MAX)
    hi = np.clip(np.searchsorted(grid, a), 1, len(grid) - 1)
    lo = hi - 1
    dlo, dhi = a - grid[lo], grid[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a == grid[hi], hi, code)
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def _mx_by_hand(x, rule):
    """MXFP8 (E4M3, 1x32 UE8M0 blocks along rows) of finite x with a nonzero amax in every block."""
    blocks = x.reshape(x.shape[0], -1, 32).astype(np.float64)
    amax = np.abs(blocks).max(axis=2)
    if rule == "ocp-floor":  # OCP MX v1.0 6.3: X = 2^(floor(log2 amax) - emax_elem)
        k = np.floor(np.log2(amax)).astype(int) - E4M3_EMAX
    else:  # round-up: X = fl32(amax / 448) rounded up to a power of two
        ratio = (amax.astype(np.float32) / np.float32(E4M3_MAX)).astype(np.float64)
        k = np.ceil(np.log2(ratio)).astype(int)
    codes = _e4m3_rne(blocks / np.exp2(k)[:, :, None]).reshape(x.shape)
    return codes, (k + 127).astype(np.uint8)


def _adversarial(seed):
    """Blocks whose amax lies in (448, 512) times a power of two: there the two rules pick different
    scales (floor keeps the binade and saturates, round-up moves up one)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 128)).astype(np.float32)
    for r in range(6):
        for b in range(4):
            s = slice(32 * b, 32 * b + 32)
            x[r, s] *= np.float32(rng.uniform(460, 511) / np.abs(x[r, s]).max() * 2.0 ** rng.integers(-6, 6))
    return x


@pytest.mark.parametrize("rule", ["ocp-floor", "round-up"])
def test_identify_names_the_rule_of_an_independent_quantizer(rule):
    x = _adversarial(1)
    codes, scales = _mx_by_hand(x, rule)
    found = qt.identify("quantizer", x, (codes, scales), elem="e4m3", block=32)
    assert "mx:rule=%s,nan=block-nan,scaling=exact" % rule in found.matches
    other = "round-up" if rule == "ocp-floor" else "ocp-floor"
    assert not any(m.startswith("mx:rule=" + other + ",") for m in found.matches)
    assert all(m.startswith("mx:") for m in found.matches)  # no NVFP4 variant writes these bytes


def _four_over_six_by_hand(x, order):
    """TE's 4over6 (MAE) of float32 rows of 1x16 blocks, written from its formulas (docs/numerics.md), the
    block's 16 error terms summed in element order ("seq") or by a 16-lane xor butterfly ("xor16"); E4M3 and
    E2M1 roundings through qmx.convert."""
    f32 = np.float32
    t_amax = np.abs(x).max()
    s_enc = min(f32(1536) / t_amax, f32(np.finfo(np.float32).max))
    s_dec = f32(1) / s_enc
    b = x.reshape(-1, 16)
    base = (np.abs(b).max(axis=1) / f32(6)) * s_enc
    best = None
    for scale_in in (base * f32(1.5), base):  # map-to-4, map-to-6
        byte = qmx.convert(scale_in.astype(np.float32), "e4m3")
        s = qmx.decode(byte, "e4m3").astype(np.float32)
        mult = np.minimum(f32(1) / (s * s_dec), f32(np.finfo(np.float32).max)).astype(np.float32)
        codes = qmx.convert((b * mult[:, None]).astype(np.float32), "e2m1")
        q = qmx.decode(codes, "e2m1").astype(np.float32)
        t = np.abs((((q * s[:, None]) * t_amax) / f32(1536)).astype(np.float32) - b).astype(np.float32)
        if order == "seq":
            err = np.zeros(len(b), np.float32)
            for i in range(16):
                err = (err + t[:, i]).astype(np.float32)
        else:
            v = t.copy()
            for o in (8, 4, 2, 1):
                v = (v + v[:, np.arange(16) ^ o]).astype(np.float32)
            err = v[:, 0]
        if best is None:
            best = (err, codes, byte)
        else:  # map-to-4 (best) when its error is smaller; a tie keeps map-to-6
            keep = best[0] < err
            best = (None, np.where(keep[:, None], best[1], codes), np.where(keep, best[2], byte))
    return best[1].reshape(x.shape), best[2].reshape(x.shape[0], -1)


@pytest.mark.parametrize("order", ["seq", "xor16"])
def test_identify_names_the_error_order_of_a_4over6_kernel(order):
    # Blocks of few distinct magnitudes, whose two candidates' errors often tie exactly in real arithmetic,
    # so that the FP32 order of the sums decides some blocks.
    rng = np.random.default_rng(5)
    mags = np.array([0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 5, 7, 0.1, 0.3, 2.5, 3.5], np.float32)
    x = (rng.choice(mags, (4000, 160)) * rng.choice([-1, 1], (4000, 160))).astype(np.float32)
    x *= (1 + rng.integers(0, 64, (4000, 1)) / 64).astype(np.float32)
    x += ((rng.random((4000, 160)) < 0.3) * rng.standard_normal((4000, 160)) * 0.01).astype(np.float32)
    codes, scales = _four_over_six_by_hand(x, order)
    other = qmx.quantize(x, "nvfp4", rule="nvfp4-4over6", error_order="xor16" if order == "seq" else "seq")
    assert (np.asarray(other.scales) != scales).any()  # the data separate the two orders
    found = qt.identify("quantizer", x, (codes, scales), elem="e2m1", block=16)
    assert found.matches
    assert all(m.startswith("nvfp4:rule=nvfp4-4over6,") for m in found.matches)
    if order == "seq":
        assert "nvfp4:rule=nvfp4-4over6,nan=block-nan" in found.matches
        assert not any("order=xor16" in m for m in found.matches)
    else:
        assert all(m.endswith(",order=xor16") for m in found.matches)


def test_identify_finds_nothing_for_one_flipped_bit_and_reports_the_closest():
    x = _adversarial(2)
    codes, scales = _mx_by_hand(x, "round-up")
    codes[3, 17] ^= 0x01
    found = qt.identify("quantizer", x, (codes, scales), elem="e4m3", block=32)
    assert not found and found.matches == []
    name, count, first = found.closest[0]
    assert name.startswith("mx:rule=round-up,") and count == 1 and first == 3 * 128 + 17


def test_identify_quantizer_nvfp4_and_scales_flipped():
    x = qmx.distribution("laplace", (4, 64), seed=5)
    q = qmx.quantize(x, "nvfp4", rule="nvfp4-torchao")
    found = qt.identify("quantizer", x, q, elem="e2m1", block=16)
    assert "nvfp4:rule=nvfp4-torchao,nan=block-nan" in found.matches
    scales = q.scales.copy()
    scales[0, 0] ^= 0x01
    assert not qt.identify("quantizer", x, (q.codes, scales), elem="e2m1", block=16)


def test_identify_gemm_model():
    rng = np.random.default_rng(7)
    a = qmx.quantize(rng.standard_normal((8, 256)).astype(np.float32) * 30, "fp8-tensor-current")
    b = qmx.quantize(rng.standard_normal((256, 8)).astype(np.float32) / 30, "fp8-tensor-current", axis="col")
    d = qmx.gemm(a, b, "hopper-fp8")
    found = qt.identify("gemm", (a, b), d)
    assert "gemm:hopper-fp8,alpha=decode" in found.matches
    exact = qmx.gemm(a, b, "exact")
    if not np.array_equal(exact.view(np.uint32), d.view(np.uint32)):
        assert "gemm:exact,alpha=decode" not in found.matches
    d2 = d.copy()
    d2.view(np.uint32)[0, 0] ^= 1
    assert not qt.identify("gemm", (a, b), d2)


def test_variants_are_stable_names():
    q = qt.variants("quantizer")
    # MX, MX under 4 amax orders (4 rules, 3 NaN policies), NVFP4, 4over6 under three more error orders, and
    # NVFP4 under 4 amax orders (4 rules, block-nan)
    assert len(q) == len(set(q)) == 5 * 5 * 3 + 4 * 3 * 3 * 4 + 6 * 3 + 2 * 3 * 3 + 4 * 4
    assert "mx:rule=even,nan=scale-nan,scaling=te-rcp,amax=fold-first" in q
    assert "nvfp4:rule=nvfp4-torchao,nan=block-nan,amax=tree-lt" in q
    assert "mx:rule=round-up,nan=te,scaling=te-rcp" in q and "nvfp4:rule=nvfp4-4over6,nan=ignore" in q
    assert "nvfp4:rule=nvfp4-4over6-mse,nan=block-nan,order=seq-fma" in q
    g = qt.variants("gemm")
    assert "gemm:blackwell-mxf4nvf4,alpha=te" in g and len(g) == 3 * len(qmx.gemm_models())
    d = qt.variants("dequantizer")
    assert len(d) == len(set(d)) == 4 * 3 * 2 and "dequantizer:order=global-recip,out=bfloat16" in d
    assert "dequantizer:order=te,out=float16,ftz=on" in d
    with pytest.raises(ValueError, match="kind must be"):
        qt.variants("compressor")


def test_assert_bitwise_reports_bits_values_and_inputs():
    x = np.array([[1.0, -2.5], [0.0, 3.0]], np.float32)
    qt.assert_bitwise(x, x.copy(), what="values")
    y = x.copy()
    y[1, 0] = -0.0  # equal as floats, not as bits
    with pytest.raises(AssertionError) as e:
        qt.assert_bitwise(y, x, what="values", inputs=np.arange(4, dtype=np.float32).reshape(2, 2))
    msg = str(e.value)
    assert "values: 1 of 4 elements differ" in msg and "at (1, 0)" in msg
    assert "0x80000000 (-0.0)" in msg and "0x00000000 (0.0)" in msg and "input 2.0" in msg
    codes = np.array([0x38, 0x7E], np.uint8)
    with pytest.raises(AssertionError, match=r"actual 0x7F \(nan\), expected 0x7E \(448.0\)"):
        qt.assert_bitwise(np.array([0x38, 0x7F], np.uint8), codes, fmt="e4m3")
    with pytest.raises(AssertionError, match="shapes differ"):
        qt.assert_bitwise(codes, codes[:1])
    with pytest.raises(AssertionError, match="element widths differ"):
        qt.assert_bitwise(x, x.astype(np.float64))


# ------------------------------------------------------------------ qmx.testing.cases and strategy

def _checked_in_inputs(repo, suite, key, value, src=None, width=1):
    """The distinct input fields of the repository's golden/level1 files of a suite (read as text here,
    not through qmx), for one format."""
    import glob
    seen, out = set(), []
    for path in sorted(glob.glob(str(repo / "golden" / "level1" / suite / "*.txt"))):
        with open(path) as f:
            head = next(line for line in f if line.startswith("# op="))
            fields = dict(t.split("=", 1) for t in head[1:].split() if "=" in t)
            if fields.get(key) != value or (src and fields.get("src") != src):
                continue
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                ins = tuple(line.split()[:width])
                if ins not in seen:
                    seen.add(ins)
                    out.append(ins)
    return out


def test_cases_are_the_golden_generators_inputs(repo):
    x = qt.cases("convert", "e4m3")
    assert x.dtype == np.float32 and x.ndim == 1
    want = _checked_in_inputs(repo, "conversions", "dst", "e4m3", src="f32")
    assert [("%08x" % b,) for b in x.view(np.uint32)] == want
    bits = set(x.view(np.uint32).tolist())
    # What a kernel test needs: both zeros, Inf, NaN, FP32 subnormals, values past E4M3's largest (448), and
    # inputs that round to the largest code and to the smallest subnormal code.
    for b in (0x00000000, 0x80000000, 0x7F800000):
        assert b in bits, hex(b)
    finite = x[np.isfinite(x)]
    assert np.isnan(x).any() and (np.abs(finite) < 2.0 ** -126).any() and (np.abs(finite) > 448).any()
    codes = qmx.convert(x, "e4m3")
    assert (codes == 0x7E).any() and (codes == 0x01).any()
    assert len(bits) == len(x)
    h = qt.cases("convert", "e5m2", src="bf16")
    assert h.dtype == np.uint16 and len(h) > 100
    blocks = qt.cases("mx-block", "e2m1")
    assert blocks.dtype == np.float32 and blocks.shape[1] == 32
    assert [tuple("%08x" % b for b in row) for row in blocks.view(np.uint32)] == _checked_in_inputs(
        repo, "mx-block", "elem", "e2m1", width=32)
    assert (np.abs(blocks) == 0).all(axis=1).any()  # an all-zero block
    nv = qt.cases("nvfp4-block", "e2m1")
    assert nv["blocks"].shape == (len(nv["tensor_amax"]), 16)
    assert qt.cases("ue8m0", "e4m3").ndim == 1
    sr = qt.cases("sr", "e2m1")
    assert sr["x"].shape == (len(sr["rbits"]), 4) and sr["rbits"].dtype == np.uint32
    # Fed to the library, the conversion cases give the checked-in expected codes (their source files agree).
    np.testing.assert_array_equal(qmx.convert(x, "e4m3"), qmx.convert(x, "e4m3", reference=True))


def test_cases_hit_every_class_of_the_golden_coverage_model(repo, tmp_path):
    # Each kind's cases, written as a golden file under a level-1 file's header, reach every class of the
    # coverage model for that header (qmx-sim golden coverage).
    import qmx.golden as qg

    def hex32(a):
        return ["%08x" % v for v in np.asarray(a, dtype=np.float32).reshape(-1).view(np.uint32)]

    def rows(kind, spec):
        c = qt.cases(kind, spec)
        if kind == "convert" or kind == "ue8m0":
            return [[h] for h in hex32(c)]
        if kind == "mx-block":
            return [hex32(b) for b in c]
        if kind == "nvfp4-block":
            return [hex32([t]) + hex32(b) for t, b in zip(c["tensor_amax"], c["blocks"])]
        return [hex32(x) + ["%08x" % r] for x, r in zip(c["x"], c["rbits"])]

    picks = [("convert", "e4m3", "conversions/f32_e4m3_rne_satfinite.txt"),
             ("ue8m0", "e4m3", "ue8m0/e4m3_even.txt"),
             ("mx-block", "e2m1", "mx-block/e2m1_ocp-floor_block-nan.txt"),
             ("nvfp4-block", "e2m1", "nvfp4-block/e2m1_nvfp4.txt"),
             ("sr", "e4m3", "sr/e4m3_sr-a.txt")]
    for kind, spec, like in picks:
        path = os.path.join(repo, "golden", "level1", like)
        header = next(line for line in open(path) if line.startswith("# op="))
        f = tmp_path / (kind + ".txt")
        f.write_text("# qmx-golden v1\n" + header + "".join(" ".join(r) + "\n" for r in rows(kind, spec)))
        rep = qg.coverage(str(f))[0]
        assert rep["modelled"] and rep["classes"], kind
        assert rep["missed"] == [], (kind, rep["missed"])


def test_cases_refuse_unknown_kinds_specs_and_levels():
    with pytest.raises(ValueError, match="unknown kind"):
        qt.cases("matmul", "e4m3")
    with pytest.raises(ValueError, match="no case"):
        qt.cases("mx-block", "e4m3fnuz")
    with pytest.raises(ValueError, match="level is 1 or 2"):
        qt.cases("convert", "e4m3", level=3)
    assert "convert" in qt.case_kinds()


def test_strategy_draws_tensors_of_cases():
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import given, settings

    pool = set(qt.cases("convert", "e2m1").view(np.uint32).tolist())

    @settings(max_examples=25, deadline=None)
    @given(qt.strategy("convert", "e2m1"))
    def check_convert(x):
        assert x.dtype == np.float32 and 1 <= len(x) <= 256
        assert set(x.view(np.uint32).tolist()) <= pool
        np.testing.assert_array_equal(qmx.convert(x, "e2m1"), qmx.convert(x, "e2m1", reference=True))

    @settings(max_examples=15, deadline=None)
    @given(qt.strategy("mx-block", "e4m3"))
    def check_blocks(t):
        assert t.ndim == 2 and t.shape[1] % 32 == 0
        q = qmx.quantize(t, "mxfp8")
        np.testing.assert_array_equal(q.codes, qmx.quantize(t, "mxfp8", reference=True).codes)

    check_convert()
    check_blocks()
    with pytest.raises(ValueError, match="kinds convert and mx-block"):
        qt.strategy("ue8m0", "e4m3")
    assert hypothesis is not None


def test_identify_names_the_dequantizer_order_and_output_type():
    """A dequantizer's outputs name its NVFP4 scale order and its output rounding; MX tensors have one order."""
    rng = np.random.default_rng(48)
    x = (rng.standard_normal((16, 64)) * np.exp2(rng.integers(-9, 9, (16, 1)))).astype(np.float32)
    q = qmx.quantize(x, "nvfp4")
    assert len(qmx.testing.variants("dequantizer")) == 24
    for order in ("te", "global-div", "global-recip"):
        got = q.dequantize(order=order)
        assert_bits_equal(got, qmx.dequantize(q, order=order), order)
        found = qmx.testing.identify("dequantizer", q, got)
        assert "dequantizer:order=%s,out=float32" % order in found.matches, found
        assert "dequantizer:order=%s,out=float32,ftz=on" % order in found.matches  # nothing here is subnormal
        # What a kernel's float16 output would be: the float32 value rounded to nearest even.
        assert "dequantizer:order=%s,out=float16" % order in qmx.testing.identify("dequantizer", q, got.astype(np.float16)).matches
    try:  # a bfloat16 output as torch rounds it (RNE), read back as its bits
        import torch
        bf = torch.from_numpy(q.dequantize(order="global-recip")).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert "dequantizer:order=global-recip,out=bfloat16" in qmx.testing.identify("dequantizer", q, bf).matches
    except ImportError:
        pass
    te, div = q.dequantize(order="te"), q.dequantize(order="global-div")
    assert (te.view(np.uint32) != div.view(np.uint32)).any()  # the orders differ on ordinary data
    assert "dequantizer:order=global-div,out=float32" not in qmx.testing.identify("dequantizer", q, te).matches
    mx = qmx.quantize(x, "mxfp8")
    found = qmx.testing.identify("dequantizer", mx, mx.dequantize())
    # Ordinary MXFP8 data meets no subnormal scale or result: the flush-to-zero twin gives the same bits.
    assert found.matches == ["dequantizer:order=rule,out=float32", "dequantizer:order=rule,out=float32,ftz=on"]
    assert any("how NVFP4's block and tensor scales meet" in m for m in found.refused.values())
    with pytest.raises(ValueError, match="rule, te, global-div or global-recip"):
        q.dequantize(order="torchao")


def test_cli_dequantize_order_equals_python(cli, tmp_path):
    rng = np.random.default_rng(49)
    x = (rng.standard_normal((8, 64)) * 37).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cli("quantize", "--in", tmp_path / "x.npy", "--spec", "nvfp4", "--out", tmp_path / "q.safetensors", "--quiet")
    q = qmx.quantize(x, "nvfp4")
    for order in ("rule", "global-recip"):
        cli("dequantize", "--in", tmp_path / "q.safetensors", "--out", tmp_path / ("d-%s.npy" % order), "--order", order)
        assert_bits_equal(np.load(tmp_path / ("d-%s.npy" % order)).reshape(x.shape), q.dequantize(order=order), order)
    with pytest.raises(AssertionError, match="rule, te, global-div or global-recip"):
        cli("dequantize", "--in", tmp_path / "q.safetensors", "--out", tmp_path / "bad.npy", "--order", "fast")
    # --ftz on a tensor near the bottom of FP32: the same bits as qmx.dequantize(ftz=True), which differ from
    # the exact decode.
    tiny = (rng.standard_normal((8, 64)) * 2.0 ** -120).astype(np.float32)
    np.save(tmp_path / "t.npy", tiny)
    cli("quantize", "--in", tmp_path / "t.npy", "--spec", "mxfp8", "--out", tmp_path / "t.safetensors", "--quiet")
    qt8 = qmx.quantize(tiny, "mxfp8")
    cli("dequantize", "--in", tmp_path / "t.safetensors", "--out", tmp_path / "t-ftz.npy", "--ftz")
    got = np.load(tmp_path / "t-ftz.npy").reshape(tiny.shape)
    assert_bits_equal(got, qt8.dequantize(ftz=True), "--ftz")
    assert (got.view(np.uint32) != qt8.dequantize().view(np.uint32)).any()


def _e4m3_by_fields(codes):
    """E4M3 (OCP) values from their fields, in float32 (NaN for 0x7F and 0xFF)."""
    c = codes.astype(np.int64)
    e, m = (c >> 3) & 15, c & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (8 + m) * np.exp2(e - 10.0))
    v = np.where(c & 0x80, -mag, mag)
    return np.where((c & 0x7F) == 0x7F, np.nan, v).astype(np.float32)


def test_identify_names_a_flush_to_zero_dequantizer():
    """A NumPy MXFP8 dequantizer that flushes a subnormal scale and a subnormal result to signed zeros, as a
    kernel built with -ftz=true does, is named ftz=on; the exact one is not, and vice versa."""
    rng = np.random.default_rng(50)
    x = (rng.standard_normal((4, 64)) * 30).astype(np.float32)
    q = qmx.quantize(x, "mxfp8")
    codes = np.array(q.codes)
    scales = np.resize(np.array([0, 1, 2, 10], np.uint8), np.array(q.scales).shape)  # 2^-127, 2^-126, 2^-125, 2^-117
    t = qmx._qmx.assemble(codes, scales, "mxfp8", 0.0, None)
    s = np.repeat(np.exp2(scales.astype(np.float64) - 127).astype(np.float32), 32, axis=1)
    v = _e4m3_by_fields(codes)
    tiny = np.float32(2.0 ** -126)
    flush = lambda a: np.where(np.abs(a) < tiny, np.copysign(np.float32(0), a), a).astype(np.float32)
    plain = (v * s).astype(np.float32)
    ftz = flush(v * flush(s))
    assert (plain.view(np.uint32) != ftz.view(np.uint32)).sum() > 64
    assert_bits_equal(qmx.dequantize(t, ftz=True), ftz, "qmx.dequantize(ftz=True)")
    assert_bits_equal(qmx.dequantize(t), plain, "qmx.dequantize")
    assert qmx.testing.identify("dequantizer", t, ftz).matches == ["dequantizer:order=rule,out=float32,ftz=on"]
    assert qmx.testing.identify("dequantizer", t, plain).matches == ["dequantizer:order=rule,out=float32"]
    flipped = ftz.copy()
    flipped.view(np.uint32)[0, 40] ^= 1
    found = qmx.testing.identify("dequantizer", t, flipped)
    assert found.matches == [] and found.closest[0][1] == 1


def test_identify_names_torchao_nvfp4_on_each_device(repo):
    # torchao's own NVFP4 outputs (golden/nvfp4-torchao from CPU tensors, golden/nvfp4-torchao-cuda from an
    # H200): identify names the rule of the device that wrote them, and on the cases built to split the two
    # orders, only that one.
    def load(d, name):
        g = repo / "golden" / d
        return (np.load(g / (name + "_x.npy")), np.load(g / (name + "_codes.npy")), np.load(g / (name + "_scales.npy")))
    cpu, cuda = "nvfp4:rule=nvfp4-torchao,nan=block-nan", "nvfp4:rule=nvfp4-torchao-cuda,nan=block-nan"
    for name in ("normal", "logmag", "heavy"):
        x, codes, scales = load("nvfp4-torchao", name)
        assert cpu in qt.identify("quantizer", x, (codes, scales), elem="e2m1", block=16).matches, name
        x, codes, scales = load("nvfp4-torchao-cuda", name)
        assert cuda in qt.identify("quantizer", x, (codes, scales), elem="e2m1", block=16).matches, name
    for name in ("cuda_scales", "cuda_codes"):
        x, codes, scales = load("nvfp4-torchao-cuda", name)
        found = qt.identify("quantizer", x, (codes, scales), elem="e2m1", block=16)
        assert cuda in found.matches and cpu not in found.matches, (name, found.matches)


def _tie_heavy_nvfp4(rows, seed):
    """NVFP4 inputs whose 4over6 candidates' errors often tie in real arithmetic (few distinct magnitudes), so
    that the FP32 order of the error sums decides some blocks."""
    rng = np.random.default_rng(seed)
    mags = np.array([0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 5, 7, 0.1, 0.3, 2.5, 3.5], np.float32)
    x = (rng.choice(mags, (rows, 160)) * rng.choice([-1, 1], (rows, 160))).astype(np.float32)
    x *= (1 + rng.integers(0, 64, (rows, 1)) / 64).astype(np.float32)
    x += ((rng.random((rows, 160)) < 0.3) * rng.standard_normal((rows, 160)) * 0.01).astype(np.float32)
    return x


def _four_over_six_edges(blocks, mse, seed):
    """Random N(0,1) 1x16 blocks, each with one element (not its largest) moved to where 4over6's two
    candidates' exact errors (in double) are equal, when that keeps every code of both candidates: there the
    FP32 order of the error sums picks the block's scale. The candidates from TE's formulas (docs/numerics.md)."""
    f32, big = np.float32, np.float32(np.finfo(np.float32).max)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((blocks, 16)).astype(f32)
    t_amax = np.abs(x).max()
    s_dec = f32(1) / min(f32(1536) / t_amax, big)

    def candidate(xb, scale_in):
        s = qmx.decode(qmx.convert(np.array([scale_in], f32), "e4m3"), "e4m3").astype(f32)[0]
        codes = qmx.convert((xb * min(f32(1) / (s * s_dec), big)).astype(f32), "e2m1")
        q = qmx.decode(codes, "e2m1").astype(f32)
        return codes, ((q * s).astype(f32) * t_amax / f32(1536)).astype(f32).astype(np.float64)

    for xb in x:
        top = int(np.argmax(np.abs(xb)))
        j = (top + 1 + int(rng.integers(15))) % 16
        base = (np.abs(xb[top]) / f32(6)) * (f32(1) / s_dec)
        (k4, c4), (k6, c6) = candidate(xb, base * f32(1.5)), candidate(xb, base)
        a, c = c4 - xb, c6 - xb
        rest = (a * a - c * c if mse else np.abs(a) - np.abs(c)).sum() - (a[j] ** 2 - c[j] ** 2 if mse else abs(a[j]) - abs(c[j]))
        if c4[j] == c6[j]:
            continue
        if mse:  # rest + (c4 - x)^2 - (c6 - x)^2 = 0 is linear in x
            target = (rest + c4[j] ** 2 - c6[j] ** 2) / (2 * (c4[j] - c6[j]))
        else:  # rest + |c4 - x| - |c6 - x| = 0, x between c4 and c6
            target = (c4[j] + c6[j] - rest) / 2 if c4[j] < c6[j] else (c4[j] + c6[j] + rest) / 2
        if not np.isfinite(target) or abs(target) >= abs(xb[top]):
            continue
        old = xb[j]
        xb[j] = f32(target)
        if candidate(xb, base * f32(1.5))[0][j] != k4[j] or candidate(xb, base)[0][j] != k6[j]:
            xb[j] = old
    return x


# Variants that are one function wherever identify runs them (rounding RNE), and why: exact and FP32 element
# scaling part only where x * 2^-k leaves FP32's normal range, and there every element format here rounds
# to zero either way (they part under directed rounding: checked below); max-finite is P3109's name for the
# floor rule on the finite elements, which ocp-floor under the ignore policy computes; the seq-fma error
# order contracts the MSE terms only, so under 4over6's MAE rule it is seq.
def _canonical(name):
    name = name.replace("scaling=fp32", "scaling=exact")
    if name.startswith("nvfp4:rule=nvfp4-4over6,"):
        name = name.replace(",order=seq-fma", "")
    return name.replace("rule=max-finite,nan=ignore", "rule=ocp-floor,nan=ignore")


def test_identify_tells_every_pair_of_variants_apart(repo):
    # Each quantizer variant's outputs on the golden generator's adversarial blocks (MX: e4m3 and e2m1
    # elements; NVFP4: every finite nonzero tensor amax of the nvfp4-block cases), plus the inputs built to
    # split two choices that those blocks do not reach: tie-heavy and edge blocks for the 4over6 error orders, and the
    # H200 inputs that split torchao's CPU and CUDA tensor-scale orders. Two variants may give the same bits
    # on all of them only when _canonical names them alike.
    mx_blocks = {e: qt.cases("mx-block", e) for e in ("e4m3", "e2m1")}
    nv = qt.cases("nvfp4-block", "e2m1")
    amaxes = [a for a in np.unique(nv["tensor_amax"]) if np.isfinite(a) and a > 0]
    torchao = [np.load(repo / "golden" / "nvfp4-torchao-cuda" / (n + "_x.npy")) for n in ("cuda_scales", "cuda_codes")]
    ties = [_tie_heavy_nvfp4(4000, 5), _four_over_six_edges(1000, False, 7), _four_over_six_edges(1000, True, 11)]
    outputs, refused = {}, []
    for name in qt.variants("quantizer"):
        got = []
        if name.startswith("mx:rule=max-finite,") and ",nan=ignore," not in name:
            with pytest.raises(ValueError, match="needs the NaN policy 'ignore'"):
                qt.run_variant("quantizer", name, mx_blocks["e4m3"])
            refused.append(name)
            continue
        if name.startswith("mx:"):
            for e, x in mx_blocks.items():
                got += qt.run_variant("quantizer", name, x, elem=e, block=32)
        else:
            for a in amaxes:
                got += qt.run_variant("quantizer", name, nv["blocks"][nv["tensor_amax"] == a], tensor_amax=float(a))
            for x in torchao + ties:
                got += qt.run_variant("quantizer", name, x)
        outputs[name] = b"".join(np.ascontiguousarray(g).tobytes() + b"|" for g in got)
    names = sorted(outputs)
    same = [(a, b) for i, a in enumerate(names) for b in names[i + 1:] if outputs[a] == outputs[b]]
    unexplained = [(a, b) for a, b in same if _canonical(a) != _canonical(b)]
    assert not unexplained, unexplained[:10]
    assert len(names) + len(refused) == len(qt.variants("quantizer")) and len(refused) == 4 * 3
    # The equivalences hold only where claimed: under round-up, a block with an element far below its scale
    # tells exact from FP32 element scaling (exact rounds the tiny quotient up to the smallest subnormal,
    # FP32 first flushes it to zero).
    x = np.full((1, 32), 1e-38, np.float32)
    x[0, 0] = 3e38
    e, f = (qmx.quantize(x, "mxfp8", rounding="ru", element_scaling=s).codes for s in ("exact", "fp32"))
    assert not np.array_equal(e, f)


def test_identify_names_the_amax_order_of_a_comparison_kernel():
    # A NumPy MXFP8 quantizer (OCP floor rule, Transformer Engine's NaN scale) whose block amax is a 32-lane
    # warp butterfly of `a > b ? a : b`, written here: identify names tree-gt under te, and nothing order-free.
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    x[rng.integers(0, 64, 40), rng.integers(0, 64, 40)] = np.nan
    blocks = np.abs(x.reshape(-1, 32)).astype(np.float32)
    v = blocks.copy()
    for off in (16, 8, 4, 2, 1):
        other = v[:, np.arange(32) ^ off]
        with np.errstate(invalid="ignore"):
            v = np.where(v > other, v, other)  # a NaN on either side makes v > other false: other is taken
    amax = v[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - E4M3_EMAX, -127)
    scales = np.where(np.isnan(amax), 255, np.clip(k, -127, 127) + 127).astype(np.uint8)
    vals = x.reshape(-1, 32).astype(np.float64) / np.exp2(scales.astype(np.float64) - 127)[:, None]
    codes = np.where(np.isnan(vals), 0x7F, _e4m3_rne(np.nan_to_num(vals)))
    codes = np.where((scales == 255)[:, None], 0x7F, codes).astype(np.uint8).reshape(x.shape)
    assert (np.isnan(amax) != np.isnan(blocks).any(axis=1)).any()  # some NaN blocks reduce to a finite amax
    found = qt.identify("quantizer", x, (codes, scales.reshape(64, 2)), elem="e4m3", block=32)
    assert "mx:rule=ocp-floor,nan=te,scaling=exact,amax=tree-gt" in found.matches
    assert all(m.endswith(",amax=tree-gt") for m in found.matches), found.matches


def _stored_casts(repo, name):
    """golden/casts/NAME.txt: the qmx-casts-v1 inputs (every top half t of an FP32 pattern with low halves
    0000 0001 7fff 8000 8001 ffff) and the codes the library wrote, expanded from its runs."""
    lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    x = ((np.arange(0x10000, dtype=np.uint32)[:, None] << 16) | lows[None, :]).reshape(-1).view(np.float32)
    codes = np.zeros(x.size, np.uint8)
    for line in (repo / "golden" / "casts" / (name + ".txt")).read_text().splitlines():
        if line.startswith("#"):
            continue
        first, count, code = line.split()
        codes[int(first):int(first) + int(count)] = int(code, 16)
    return x, codes


def test_identify_names_the_library_of_a_stored_cast(repo):
    # ml_dtypes' and PyTorch's own casts of every FP32 pattern class (golden/casts, collected on the GPU
    # machine): identify names each library's profile; for e5m2 the two differ (NaN 0x7E against 0x7F), so
    # each names only its own; one flipped code matches nothing.
    for name, fmt, want in (("ml-dtypes-e4m3", "e4m3", "ml-dtypes"), ("ml-dtypes-e5m2", "e5m2", "ml-dtypes"),
                            ("pytorch-cpu-e5m2", "e5m2", "pytorch"), ("ml-dtypes-e2m1", "e2m1", "ml-dtypes")):
        x, codes = _stored_casts(repo, name)
        found = qt.identify("converter", x, codes, elem=fmt)
        assert "converter:profile=" + want in found.matches, (name, found)
        if fmt == "e5m2":
            other = "pytorch" if want == "ml-dtypes" else "ml-dtypes"
            assert "converter:profile=" + other not in found.matches, (name, found.matches)
        # Every match is a cast that reproduces the file: the matches agree with the library on every input.
        for m in found.matches:
            assert np.array_equal(qt.run_variant("converter", m, x, elem=fmt)[0], codes)
    x, codes = _stored_casts(repo, "ml-dtypes-e4m3")
    codes[12345] ^= 1
    found = qt.identify("converter", x, codes, elem="e4m3")
    assert not found and found.closest[0][1] == 1 and found.closest[0][2] == 12345
    assert len(qt.variants("converter")) == len(qmx.cast_profile_names()) + 6 * 3


def test_identify_names_transformer_engines_stored_nvfp4_outputs(repo):
    # Transformer Engine's reference NVFP4 quantizer (golden/nvfp4-te, collected on the GPU machine) in its
    # three per-tensor modes: identify names the rule of each mode, and on the cases crafted there to split
    # TE's op order from its plausible others, no other rule.
    g = repo / "golden" / "nvfp4-te"
    for mode, rule in (("default", "nvfp4"), ("4over6-mae", "nvfp4-4over6"), ("4over6-mse", "nvfp4-4over6-mse")):
        crafted = "orders-default" if mode == "default" else "orders-4over6"
        for case in ("normal", "logmag", "heavy", crafted):
            x = np.load(g / (case + "_x.npy"))
            codes, scales = np.load(g / ("%s_%s_codes.npy" % (case, mode))), np.load(g / ("%s_%s_scales.npy" % (case, mode)))
            found = qt.identify("quantizer", x, (codes, scales), elem="e2m1", block=16)
            assert "nvfp4:rule=%s,nan=block-nan" % rule in found.matches, (mode, case, found)
            if case == crafted:
                assert all(m.startswith("nvfp4:rule=%s," % rule) for m in found.matches), (mode, case, found.matches)
