# qmx.gemm against `qmx-sim gemm` and the scalar reference GEMM, under every accumulation model.
import numpy as np
import pytest

import qmx
from conftest import assert_bits_equal

# (recipe for both operands, model)
CASES = [("mxfp8", "exact"), ("mxfp8", "fp32-seq"), ("mxfp8", "block-exact"), ("mxfp8", "blackwell-mxf8f6f4"),
         ("mxfp4", "blackwell-mxf4nvf4"), ("nvfp4", "blackwell-mxf4nvf4"), ("fp8-tensor-current", "hopper-fp8"),
         ("fp8-tensor-current", "hopper-fp8-fast"), ("fp8-tensor-current", "ada-fp8"),
         ("mxfp6_e2m3", "blackwell-mxf8f6f4"), ("mxfp8", "fused:step=16,F=20,term=rne,out=rne,promote=32,scale=promotion"),
         ("mxfp4", "cdna4-mx"), ("mxfp8", "cdna4-mx-32x32")]


def operands(m=48, k=256, n=40, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-3, 3, (m, 1)))).astype(np.float32)
    b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-3, 3, (1, n)))).astype(np.float32)
    return a, b


@pytest.mark.parametrize("spec,model", CASES)
def test_against_cli(cli, tmp_path, spec, model):
    a, b = operands()
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    cli("gemm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--quantize", spec, "--model", model,
        "--out", tmp_path / "d.npy", "--quiet")
    d = qmx.gemm(qmx.quantize(a, spec), qmx.quantize(b, spec, axis="col"), model)
    assert_bits_equal(d, np.load(tmp_path / "d.npy"), "%s %s" % (spec, model))


@pytest.mark.parametrize("spec,model", CASES)
def test_fast_equals_reference(spec, model):
    a, b = operands(33, 512, 17, seed=2)
    qa, qb = qmx.quantize(a, spec), qmx.quantize(b, spec, axis="col")
    c = np.random.default_rng(5).standard_normal((33, 17)).astype(np.float32)
    # A C operand cannot meet per-tensor scales (FP8 per-tensor, NVFP4's second level): not modelled.
    cs = [None] if spec.startswith("fp8-tensor") or spec == "nvfp4" else [None, c]
    for cc in cs:
        assert_bits_equal(qmx.gemm(qa, qb, model, cc), qmx.gemm(qa, qb, model, cc, reference=True),
                          "%s %s c=%s" % (spec, model, cc is not None))


def test_codes_operands_and_exact_products():
    # E4M3 codes without scales: the exact model's result is the exactly rounded dot product, here exact.
    a = np.array([[1, 2, 3, 4]], np.float32)
    b = np.array([[1], [1], [1], [0.5]], np.float32)
    ca, cb = qmx.convert(a, "e4m3"), qmx.convert(b, "e4m3")
    assert qmx.gemm(ca, cb, "exact", a_format="e4m3", b_format="e4m3").tolist() == [[8.0]]
    # fp32-seq sums in K order in FP32: 2^24 + 1 + 1 loses both ones; exact keeps them.
    a = np.array([[2.0 ** 12, 1, 1]], np.float32)
    b = np.array([[2.0 ** 12], [1], [1]], np.float32)
    ca, cb = qmx.convert(a, "e5m2"), qmx.convert(b, "e5m2")
    assert qmx.gemm(ca, cb, "fp32-seq", a_format="e5m2", b_format="e5m2")[0, 0] == 2.0 ** 24
    assert qmx.gemm(ca, cb, "exact", a_format="e5m2", b_format="e5m2")[0, 0] == 2.0 ** 24 + 2


def test_errors():
    a, b = operands()
    qa = qmx.quantize(a, "mxfp8")
    with pytest.raises(ValueError):
        qmx.gemm(qa, qmx.quantize(b[:128].copy(), "mxfp8", axis="col"), "exact")  # K differs
    with pytest.raises(ValueError, match="N x K.*transpose"):  # a weight held as nn.Linear holds it
        qmx.gemm(qa, qmx.quantize(b.T.copy(), "mxfp8"), "exact")
    with pytest.raises(ValueError, match="nope"):
        qmx.gemm(qa, qmx.quantize(b, "mxfp8", axis="col"), "nope")
    with pytest.raises(TypeError):
        qmx.gemm(qa, b, "exact")  # float32 B is neither codes nor a QuantizedTensor
    assert "hopper-fp8" in qmx.gemm_models()



@pytest.mark.parametrize("case", ["normal", "logmag", "rowmag"])
def test_te_alpha_reproduces_te_reference_gemm(repo, case):
    # golden/nvfp4-te gemm_*: Transformer Engine's reference NVFP4 GEMM (NVFP4QuantizerRef.qgemm, run on the
    # GPU host): exact 16-element block sums, FP32 accumulation (block-exact), then its alpha
    # fl(fl(amax_x amax_w) / (36 bound_x bound_w)) (te-ref), per row of X when row-scaled.
    g = repo / "golden" / "nvfp4-te"
    x, w = np.load(g / ("gemm_%s_x.npy" % case)), np.load(g / ("gemm_%s_w.npy" % case))
    modes = {"default": ("nvfp4", "nvfp4", "nvfp4"), "4over6-mae": ("nvfp4", "nvfp4-4over6", "nvfp4-4over6"),
             "mixed": ("nvfp4", "nvfp4", "nvfp4-4over6"), "row-default": ("nvfp4-row", "nvfp4", "nvfp4"),
             "row-4over6-mae": ("nvfp4-row", "nvfp4-4over6", "nvfp4-4over6")}
    decode_differs = []
    for mode, (xspec, xrule, wrule) in modes.items():
        y = np.load(g / ("gemm_%s_%s_y.npy" % (case, mode)))
        qx = qmx.quantize(x, xspec, rule=xrule)
        qw = qmx.quantize(np.ascontiguousarray(w.T), "nvfp4", rule=wrule, axis="col")
        assert_bits_equal(qmx.gemm(qx, qw, "block-exact", alpha="te-ref"), y, "%s %s" % (case, mode))
        decode_differs.append(not np.array_equal(qmx.gemm(qx, qw, "block-exact"), y))
    assert any(decode_differs)  # the decode rule misses TE's bits


@pytest.mark.parametrize("alpha", ["te", "te-ref"])
def test_te_alpha_against_cli(cli, tmp_path, alpha):
    a, b = operands(seed=3)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    cli("gemm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--quantize", "nvfp4", "--model",
        "blackwell-mxf4nvf4", "--alpha", alpha, "--out", tmp_path / "d.npy", "--quiet")
    qa, qb = qmx.quantize(a, "nvfp4"), qmx.quantize(b, "nvfp4", axis="col")
    d = qmx.gemm(qa, qb, "blackwell-mxf4nvf4", alpha=alpha)
    assert_bits_equal(d, np.load(tmp_path / "d.npy"), "alpha=" + alpha)
    assert not np.array_equal(d, qmx.gemm(qa, qb, "blackwell-mxf4nvf4"))
    with pytest.raises(ValueError, match="unknown alpha rule"):
        qmx.gemm(qa, qb, alpha="cuda")
    with pytest.raises(ValueError, match="has none"):
        qmx.gemm(qmx.quantize(a, "mxfp4"), qmx.quantize(b, "mxfp4", axis="col"), alpha=alpha)


@pytest.mark.parametrize("model", ["ada-mma-fp8-f16", "hopper-wgmma-fp8-f16", "rtx-blackwell-f8f6f4-f16"])
def test_fp16_accumulating_models_take_and_return_float16(cli, tmp_path, model):
    """The FP16-output instructions: C in, D out as float16, the CLI's float16 .npy equal to qmx.gemm's array."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (6, 64), dtype=np.uint8)
    b = rng.integers(0, 256, (64, 5), dtype=np.uint8)
    a[(a & 0x7F) == 0x7F] = 0x30  # no E4M3 NaN
    b[(b & 0x7F) == 0x7F] = 0x30
    c = (rng.standard_normal((6, 5)) * 8).astype(np.float16)
    d = qmx.gemm(a, b, model, c, a_format="e4m3", b_format="e4m3")
    assert d.dtype == np.float16 and d.shape == (6, 5)
    # float32 C holding the same FP16 values gives the same bits; one that is not an FP16 value is refused.
    assert_bits_equal(d, qmx.gemm(a, b, model, c.astype(np.float32), a_format="e4m3", b_format="e4m3"), model)
    bad = c.astype(np.float32)
    bad[1, 2] += np.float32(2.0 ** -20)
    with pytest.raises(Exception, match=r"accumulates in FP16: C must hold FP16 values, and C\[1, 2\]"):
        qmx.gemm(a, b, model, bad, a_format="e4m3", b_format="e4m3")
    for name, x in (("a", a), ("b", b), ("c", c)):
        np.save(tmp_path / (name + ".npy"), x)
    cli("gemm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--a-format", "e4m3", "--b-format", "e4m3",
        "--c", tmp_path / "c.npy", "--model", model, "--out", tmp_path / "d.npy", "--quiet")
    out = np.load(tmp_path / "d.npy")
    assert out.dtype == np.float16
    assert_bits_equal(out, d, model + " (CLI)")
    stdout = cli("gemm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--a-format", "e4m3", "--b-format",
                 "e4m3", "--c", tmp_path / "c.npy", "--model", model, "--expect", tmp_path / "d.npy")
    assert "0 of 30 outputs differ" in stdout
    # A float16 C for a model that accumulates in FP32 is refused with the reason.
    with pytest.raises(AssertionError, match="accumulates in FP32 and takes float32 C"):
        cli("gemm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--a-format", "e4m3", "--b-format", "e4m3",
            "--c", tmp_path / "c.npy", "--model", "ada-mma-fp8")


def test_cdna4_is_the_exact_instruction_chained_over_k():
    # cdna4-mx: one instruction (128 K) is the exact sum with C; 512 K are four of them, each one's result the
    # next one's C (tests/gemm/test_gemm_cdna4.cc holds every format pair and NaN scales).
    a, b = operands(16, 512, 12, seed=9)
    qa, qb = qmx.quantize(a, "mxfp8"), qmx.quantize(b, "mxfp8", axis="col")
    d = qmx.gemm(qa, qb, "cdna4-mx")
    chain = np.zeros((16, 12), np.float32)
    for k0 in range(0, 512, 128):
        sa = qmx.quantize(np.ascontiguousarray(a[:, k0:k0 + 128]), "mxfp8")
        sb = qmx.quantize(b[k0:k0 + 128], "mxfp8", axis="col")
        chain = qmx.gemm(sa, sb, "exact", chain)
    assert_bits_equal(d, chain, "cdna4-mx")
    assert not np.array_equal(d.view(np.uint32), qmx.gemm(qa, qb, "block-exact").view(np.uint32))
    assert "exact over each 128 K" in qmx.describe_model("cdna4-mx")


@pytest.mark.parametrize("model", ["ada-mma-fp8", "exact", "hopper-fp8", "ada-mma-fp8-f16"])
def test_out_takes_d_into_a_given_array(model):
    # out= writes gemm's bits into the caller's array (qmx::GemmInto), C itself included (D = A B + C in place).
    rng = np.random.default_rng(11)
    ca = rng.integers(0, 0x7E, (20, 96), dtype=np.uint8)
    cb = rng.integers(0, 0x7E, (96, 24), dtype=np.uint8)
    fp16 = model.endswith("-f16")
    dtype = np.float16 if fp16 else np.float32
    c = (rng.standard_normal((20, 24)) * 8).astype(dtype)
    want = qmx.gemm(ca, cb, model, c, a_format="e4m3", b_format="e4m3")
    out = np.full((20, 24), np.nan, dtype)
    got = qmx.gemm(ca, cb, model, c, a_format="e4m3", b_format="e4m3", out=out)
    assert got is out
    assert_bits_equal(out, want, model + " out=")
    inplace = c.copy()
    qmx.gemm(ca, cb, model, inplace, a_format="e4m3", b_format="e4m3", out=inplace)
    assert_bits_equal(inplace, want, model + " out=c")
    ref = np.empty((20, 24), dtype)
    qmx.gemm(ca, cb, model, c, a_format="e4m3", b_format="e4m3", reference=True, out=ref)
    assert_bits_equal(ref, want, model + " reference out=")


def test_out_refusals():
    ca = np.zeros((4, 32), np.uint8)
    cb = np.zeros((32, 5), np.uint8)
    with pytest.raises(ValueError, match="out must be float32 4 x 5"):
        qmx.gemm(ca, cb, "exact", a_format="e4m3", b_format="e4m3", out=np.zeros((5, 4), np.float32))
    with pytest.raises(TypeError, match="out must be float32"):
        qmx.gemm(ca, cb, "exact", a_format="e4m3", b_format="e4m3", out=np.zeros((4, 5), np.float64))
    with pytest.raises(TypeError, match="C-contiguous"):
        qmx.gemm(ca, cb, "exact", a_format="e4m3", b_format="e4m3", out=np.zeros((5, 4), np.float32).T)
    ro = np.zeros((4, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        qmx.gemm(ca, cb, "exact", a_format="e4m3", b_format="e4m3", out=ro)
    with pytest.raises(TypeError, match="float16"):
        qmx.gemm(ca, cb, "ada-mma-fp8-f16", a_format="e4m3", b_format="e4m3", out=np.zeros((4, 5), np.float32))
