# qmx on CUDA tensors: the emulation engine (gpu/) converts a CUDA tensor on its GPU, bit for bit as the
# CPU does, on torch's current stream. Without a GPU (or a build without the CUDA backend) only the
# reason the engine gives is checked.
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import qmx  # noqa: E402

WHY = qmx.cuda_engine()
needs_gpu = pytest.mark.skipif(bool(WHY) or not torch.cuda.is_available(),
                               reason="GPU test skipped: " + (WHY or "torch sees no CUDA device"))


def test_engine_reports_why_it_is_missing():
    assert isinstance(WHY, str)
    if WHY:
        assert "CUDA" in WHY or "device" in WHY


def _inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-30, 30, (n,), generator=g).float())
    x[:8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0, 2.0 ** -140])
    return x


@needs_gpu
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1", "e3m2", "e2m3", "ue8m0", "int8"])
@pytest.mark.parametrize("rounding", ["rne", "rz", "ru", "sr", "sr-c"])
def test_cuda_tensor_codes_equal_the_cpu(fmt, rounding):
    x = _inputs(100003, 7)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        xd = x.to(dtype)
        want = qmx.convert(xd, fmt, rounding, seed=11, first_index=5, nan_sign="positive",
                           subnormals="flush" if dtype == torch.float16 else "keep")
        got = qmx.convert(xd.cuda(), fmt, rounding, seed=11, first_index=5, nan_sign="positive",
                          subnormals="flush" if dtype == torch.float16 else "keep")
        assert got.device.type == "cuda" and got.dtype == torch.uint8 and got.shape == xd.shape
        np.testing.assert_array_equal(got.cpu().numpy(), want, err_msg=f"{fmt} {rounding} {dtype}")
    # float64 (the CPU's fast paths read float32): values exact in float32 give float32's codes.
    got = qmx.convert(x.double().cuda(), fmt, rounding, seed=11)
    np.testing.assert_array_equal(got.cpu().numpy(), qmx.convert(x.numpy(), fmt, rounding, seed=11))


@needs_gpu
def test_cuda_random_bits_out_stream_and_errors():
    x = _inputs(4097, 3).reshape(17, 241)
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, x.shape, dtype=torch.int32)
    want = qmx.convert(x, "e2m1", "sr", random_bits=bits.numpy().view(np.uint32))
    out = torch.empty(x.shape, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        r = qmx.convert(x.cuda(), "e2m1", "sr", random_bits=bits.cuda(), out=out)
    s.synchronize()
    assert r is out
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    xc = x.cuda()
    with pytest.raises(ValueError, match="contiguous"):
        qmx.convert(xc.t(), "e4m3")
    with pytest.raises(TypeError, match="float32, float64, float16 or bfloat16"):
        qmx.convert(xc.to(torch.int32), "e4m3")
    with pytest.raises(TypeError, match="random_bits"):
        qmx.convert(xc, "e4m3", "sr", random_bits=bits)  # on the CPU
    with pytest.raises(ValueError, match="out must have x's shape"):
        qmx.convert(xc, "e4m3", out=torch.empty(3, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="shares memory"):
        raw = torch.zeros(64, dtype=torch.float32, device="cuda")
        qmx.convert(raw, "e4m3", out=raw.view(torch.uint8)[:64])
    with pytest.raises(ValueError, match="nosat"):
        qmx.convert(xc, "e2m1", saturation="nosat")
    with pytest.raises(ValueError, match="reference"):
        qmx.convert(xc, "e4m3", reference=True)


@needs_gpu
@pytest.mark.parametrize("spec,kw", [("mxfp8", {}), ("mxfp4", {"rounding": "sr", "seed": 3}), ("nvfp4", {}),
                                     ("nvfp4", {"axis": "col"}), ("nvfp4-row", {}), ("nvfp4-2d", {}),
                                     ("fp8-tensor-current", {}), ("fp8-block128x128", {}),
                                     ("nvfp4", {"rule": "nvfp4-torchao"}), ("mxfp6_e3m2", {"nan_policy": "ignore"})])
def test_cuda_tensor_quantizes_as_the_cpu(spec, kw):
    x = _inputs(96 * 200, 5).reshape(96, 200)
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        want = qmx.quantize(xd, spec, **kw)
        got = qmx.quantize(xd.cuda(), spec, **kw)
        assert isinstance(got, qmx.CudaQuantizedTensor) and got.codes.device.type == "cuda"
        assert got.scales.device == got.codes.device and got.shape == tuple(xd.shape)
        np.testing.assert_array_equal(got.codes.cpu().numpy(), want.codes, err_msg=f"{spec} {kw} {dtype} codes")
        np.testing.assert_array_equal(got.scales.cpu().numpy().view(np.uint8), want.scales.view(np.uint8),
                                      err_msg=f"{spec} {kw} {dtype} scales")
        assert np.float32(got.tensor_amax).tobytes() == np.float32(want.tensor_amax).tobytes()
        assert np.float32(got.tensor_decode).tobytes() == np.float32(want.tensor_decode).tobytes()
        assert got.spec == want.spec
        back = got.cpu()
        np.testing.assert_array_equal(back.codes, want.codes)
        np.testing.assert_array_equal(back.dequantize().view(np.uint32), want.dequantize().view(np.uint32))


@needs_gpu
def test_cuda_quantize_refuses_what_the_engine_does_not_run():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(ValueError, match="delayed scaling"):
        qmx.quantize(x, "fp8-delayed", state=qmx.DelayedScaling("e4m3", history_len=16))
    with pytest.raises(ValueError, match="engine: delayed"):
        qmx.quantize(x, "fp8-delayed")
    with pytest.raises(ValueError, match="4over6"):
        qmx.quantize(x, "nvfp4", rule="nvfp4-4over6")
    with pytest.raises(TypeError, match="contiguous"):
        qmx.quantize(x.t(), "mxfp8")
    with pytest.raises(NotImplementedError, match="cpu"):
        qmx.quantize(x, "mxfp8").dequantize()
    assert "cuda" in repr(qmx.quantize(x, "mxfp8"))
