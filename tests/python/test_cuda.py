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
                                     ("nvfp4", {"rule": "nvfp4-torchao"}), ("nvfp4", {"rule": "nvfp4-torchao-cuda"}),
                                     ("mxfp6_e3m2", {"nan_policy": "ignore"})])
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
        if not got.spec.get("row_scaled"):  # the engine's dequantization, on the device
            d = got.dequantize()
            assert d.is_cuda and d.dtype == torch.float32 and tuple(d.shape) == tuple(x.shape)
            np.testing.assert_array_equal(d.cpu().numpy().view(np.uint32), want.dequantize().view(np.uint32))


@needs_gpu
@pytest.mark.parametrize("spec,kw", [("nvfp4", {}), ("nvfp4", {"rule": "nvfp4-torchao-cuda"}), ("mxfp8", {}),
                                     ("mxfp4", {}), ("fp8-block1x128", {})])
def test_cuda_dequantize_takes_every_order_and_flushes_as_the_cpu(spec, kw):
    """Each NVFP4 order and flush-to-zero on the device, bit for bit as the CPU's dequantize; the inputs sit
    near FP32's bottom, where the decode scales and results are subnormal, so ftz changes them."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(64, 256, generator=g) * 2.0 ** -130  # subnormal inputs: scales and results below 2^-126
    x[0, :4] = torch.tensor([0.0, -0.0, float("nan"), 2.0 ** -149])
    orders = ["rule", "te", "global-div", "global-recip"] if spec == "nvfp4" else ["rule"]
    want_q = qmx.quantize(x, spec, **kw)
    got_q = qmx.quantize(x.cuda(), spec, **kw)
    for order in orders:
        for ftz in (False, True):
            want = qmx.dequantize(want_q, order=order, ftz=ftz)
            got = qmx.dequantize(got_q, order=order, ftz=ftz)
            assert got.is_cuda
            np.testing.assert_array_equal(got.cpu().numpy().view(np.uint32), want.view(np.uint32),
                                          err_msg=f"{spec} {kw} order={order} ftz={ftz}")
        flushed = int((want_q.dequantize(order=order).view(np.uint32) !=
                       want_q.dequantize(order=order, ftz=True).view(np.uint32)).sum())
        assert flushed > 0, f"{order}: no element changed under ftz: the test does not reach the flush"
    if spec != "nvfp4":
        with pytest.raises(ValueError, match="order"):
            got_q.dequantize(order="te")


@needs_gpu
def test_cuda_quantize_refuses_what_the_engine_does_not_run():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(ValueError, match="delayed scaling"):
        qmx.quantize(x, "fp8-delayed", state=qmx.DelayedScaling("e4m3", history_len=16))
    with pytest.raises(ValueError, match="engine: delayed"):
        qmx.quantize(x, "fp8-delayed")
    with pytest.raises(ValueError, match="4over6"):
        qmx.quantize(x, "nvfp4", rule="nvfp4-4over6")
    with pytest.raises(ValueError, match="amax order 'tree-gt' runs on the CPU"):
        qmx.quantize(x, "mxfp8", nan_policy="te", amax_order="tree-gt")
    with pytest.raises(TypeError, match="contiguous"):
        qmx.quantize(x.t(), "mxfp8")
    with pytest.raises(ValueError, match="row-scaled"):
        qmx.quantize(x, "nvfp4", row_scaled=True).dequantize()
    assert "cuda" in repr(qmx.quantize(x, "mxfp8"))


def _layer_pair(recipe, seed=5, bias=True, **options):
    """The same Linear on the CPU and on the GPU (equal weights and bias, fresh states)."""
    import qmx.torch as qt
    torch.manual_seed(seed)
    cpu = qt.Linear(256, 160, bias=bias, recipe=recipe, seed=3, **options)
    gpu = qt.Linear(256, 160, bias=bias, recipe=recipe, seed=3, **options).cuda()
    with torch.no_grad():
        gpu.weight.copy_(cpu.weight)
        if bias:
            gpu.bias.copy_(cpu.bias)
    return cpu, gpu


def _bits_equal(a, b):
    a32, b32 = a.detach().float().cpu().contiguous(), b.detach().float().cpu().contiguous()
    np.testing.assert_array_equal(a32.numpy().view(np.uint32), b32.numpy().view(np.uint32))


@needs_gpu
@pytest.mark.parametrize("recipe", ["bf16", "fp8-delayed", "fp8-current", "fp8-blockwise", "mxfp8", "mxfp8-ocp",
                                    "mxfp8-e5m2-grads", "nvfp4", "quartet"])
def test_cuda_linear_equals_the_cpu_layer_forward_and_backward(recipe):
    cpu, gpu = _layer_pair(recipe)
    g = torch.Generator().manual_seed(9)
    for step in range(2):  # the state (SR streams, RHT signs) advances alike
        x = (torch.randn(2, 48, 256, generator=g) * 3).requires_grad_()
        xg = x.detach().cuda().requires_grad_()
        dy = torch.randn(2, 48, 160, generator=g) * 1e-2
        y, yg = cpu(x), gpu(xg)
        assert yg.is_cuda and yg.shape == y.shape
        _bits_equal(y, yg)
        y.backward(dy)
        yg.backward(dy.cuda())
        _bits_equal(x.grad, xg.grad)
        _bits_equal(cpu.weight.grad, gpu.weight.grad)
        _bits_equal(cpu.bias.grad, gpu.bias.grad)
        cpu.zero_grad()
        gpu.zero_grad()
        assert cpu.step == gpu.step == step + 1


@needs_gpu
def test_cuda_linear_bf16_inputs_and_refusals():
    import qmx.torch as qt
    cpu, gpu = _layer_pair("mxfp8", bias=False)
    x = torch.randn(64, 256).to(torch.bfloat16)
    _bits_equal(cpu(x), gpu(x.cuda()))
    assert gpu(x.cuda()).dtype == torch.bfloat16
    e = qt.Linear(256, 64, recipe="mxfp8", accum="fused:step=32,F=13,bits=11,acc=fp16,scale=products").cuda()
    with pytest.raises(NotImplementedError, match="runs on the CPU"):
        e(torch.randn(32, 256, device="cuda"))
    q = qt.Linear(256, 64, recipe="quartet").cuda()
    with pytest.raises(ValueError, match="not a multiple of 32"):
        q(torch.randn(40, 256, device="cuda")).sum().backward()
    with pytest.raises(ValueError, match="weight"):
        qt.linear(torch.randn(32, 256, device="cuda"), torch.randn(64, 256), recipe="mxfp8")
    bad = torch.randn(32, 256, device="cuda")
    bad[3, 4] = float("inf")
    with pytest.raises(ValueError, match="X holds Inf at element 772"):
        gpu(bad)


@needs_gpu
@pytest.mark.parametrize("spec,model", [("mxfp8", "blackwell-mxf8f6f4"), ("nvfp4", "blackwell-mxf4nvf4"),
                                        ("mxfp4", "blackwell-mxf4nvf4"), ("fp8-tensor-current", "hopper-fp8"),
                                        ("fp8-block1x128", "hopper-fp8-vec"), ("mxfp8", "fp32-seq")])
def test_cuda_gemm_of_quantized_cuda_tensors_equals_the_cpu(spec, model):
    g = torch.Generator().manual_seed(4)
    a = torch.randn(70, 512, generator=g) * torch.exp2(torch.randint(-8, 8, (70, 1), generator=g).float())
    b = torch.randn(512, 90, generator=g)
    qa, qb = qmx.quantize(a.cuda(), spec), qmx.quantize(b.cuda(), spec, axis="col")
    d, stats = qmx.gemm_stats(qa, qb, model)
    assert d.is_cuda and d.dtype == torch.float32 and tuple(d.shape) == (70, 90)
    assert stats["kernel"] in ("fp4", "dmma", "dgemm", "seq", "generic") and stats["steps"] > 0
    want = qmx.gemm(qmx.quantize(a.numpy(), spec), qmx.quantize(b.numpy(), spec, axis="col"), model)
    np.testing.assert_array_equal(d.cpu().numpy().view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(qmx.gemm(qa, qb, model).cpu().numpy().view(np.uint32), want.view(np.uint32))


@needs_gpu
def test_cuda_gemm_refusals():
    x = torch.randn(32, 64, device="cuda")
    qa, qb = qmx.quantize(x, "mxfp8"), qmx.quantize(x.t().contiguous(), "mxfp8", axis="col")
    with pytest.raises(TypeError, match="both"):
        qmx.gemm(qa, qmx.quantize(x.t().contiguous().cpu().numpy(), "mxfp8", axis="col"), "blackwell-mxf8f6f4")
    with pytest.raises(ValueError, match="runs on the CPU"):
        qmx.gemm(qa, qb, "fused:step=32,F=13,bits=11,acc=fp16,scale=products")
    with pytest.raises(ValueError, match="exact steps of 128 K across scale blocks"):
        qmx.gemm(qa, qb, "cdna4-mx")
    with pytest.raises(ValueError, match="reference"):
        qmx.gemm(qa, qb, "fp32-seq", reference=True)
    with pytest.raises(ValueError, match=r"\(K\) differ"):
        qmx.gemm(qa, qa, "blackwell-mxf8f6f4")


@needs_gpu
def test_cuda_error_stats_hadamard_and_fake_quantize_equal_the_cpu():
    g = torch.Generator().manual_seed(9)
    n = 3 * 65536 + 77
    ref = torch.randn(n, generator=g) * torch.exp2(torch.randint(-20, 20, (n,), generator=g).float())
    out = ref * (1 + 0.01 * torch.randn(n, generator=g))
    ref[5], out[6], ref[7] = float("nan"), float("inf"), 0.0
    got, want = qmx.error_stats(ref.cuda(), out.cuda()), qmx.error_stats(ref, out)
    assert got.keys() == want.keys() and want["nonfinite"] == 2
    for key in want:
        assert np.float64(got[key]).view(np.uint64) == np.float64(want[key]).view(np.uint64), key
    x = torch.randn(24, 256, generator=g) * 3
    for block in (16, 32, 64, 256):
        for inverse in (False, True):
            d = qmx.hadamard(x.cuda(), block, inverse=inverse)
            assert d.is_cuda and d.dtype == torch.float32
            _bits_equal(d, torch.from_numpy(qmx.hadamard(x.numpy(), block, inverse=inverse)))
    _bits_equal(qmx.rht(x.cuda(), 32, seed=5), torch.from_numpy(qmx.rht(x.numpy(), 32, seed=5)))
    for spec, kw in (("mxfp8", {}), ("nvfp4", {}), ("mxfp4", {"rule": "floor"}), ("fp8-block128x128", {})):
        d = qmx.fake_quantize(x.cuda(), spec, **kw)
        assert d.is_cuda
        _bits_equal(d, torch.from_numpy(qmx.fake_quantize(x.numpy(), spec, **kw)))
    with pytest.raises(TypeError, match="never copied to the host"):
        qmx.error_stats(ref.cuda(), out)
    with pytest.raises(ValueError, match="differ in shape"):
        qmx.error_stats(ref.cuda(), out[:-1].cuda())
    with pytest.raises(TypeError, match="float32"):
        qmx.hadamard(x.cuda().half(), 32)


@needs_gpu
@pytest.mark.parametrize("case", ["tensorwise", "split", "rowwise-bf16-bias", "rowwise-fp16", "block128x128",
                                  "block128x1", "e5m2", "k0-bf16-bias"])
def test_cuda_scaled_mm_equals_the_cpu(case):
    g = torch.Generator().manual_seed(len(case))
    m, k, n = {"block128x128": (130, 300, 200), "k0-bf16-bias": (5, 0, 6)}.get(case, (64, 640, 48))
    a = (torch.randn(m, k, generator=g) * 8).to(torch.float8_e4m3fn)
    bt = (torch.randn(n, k, generator=g) * 8).to(torch.float8_e5m2 if case == "e5m2" else torch.float8_e4m3fn)
    b = bt.t()  # column-major K x N, as torch._scaled_mm takes it
    kw = {}
    sa, sb = torch.tensor(0.75), torch.tensor(1.5)
    if case == "split":
        kw["split_k"] = 3
    if case.startswith("k0"):
        kw["out_dtype"] = torch.bfloat16
        kw["bias"] = torch.randn(n, generator=g).to(torch.bfloat16)
    if case.startswith("rowwise"):
        sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) * 40 + 0.5
        kw["out_dtype"] = torch.bfloat16 if "bf16" in case else torch.float16
        if "bias" in case:
            kw["bias"] = torch.randn(n, generator=g).to(torch.bfloat16)
    if case.startswith("block"):
        kb = (k + 127) // 128
        sa = torch.rand(m, kb, generator=g) + 0.5
        sb = torch.rand(kb, (n + 127) // 128 if case == "block128x128" else n, generator=g) + 0.5
    dev = {key: (v.cuda() if isinstance(v, torch.Tensor) else v) for key, v in kw.items()}
    d, info = qmx.scaled_mm(a.cuda(), b.cuda(), sa.cuda(), sb.cuda(), return_info=True, **dev)
    want, want_info = qmx.scaled_mm(a, b, sa, sb, return_info=True, **kw)
    assert d.is_cuda and info == want_info
    got = d.cpu()
    if got.dtype == torch.bfloat16:
        np.testing.assert_array_equal(got.view(torch.int16).numpy(), want.view(torch.int16).numpy())
    else:
        np.testing.assert_array_equal(got.numpy().view(np.uint16 if got.dtype == torch.float16 else np.uint32),
                                      np.asarray(want).view(np.uint16 if got.dtype == torch.float16 else np.uint32))


@needs_gpu
def test_cuda_scaled_mm_refusals():
    a = torch.ones(16, 32, dtype=torch.float8_e4m3fn, device="cuda")
    one = torch.tensor(1.0, device="cuda")
    with pytest.raises(TypeError, match="never copied to the host"):
        qmx.scaled_mm(a, a.t(), one, torch.tensor(1.0))
    with pytest.raises(TypeError, match="float8_e4m3fnuz"):
        qmx.scaled_mm(a.view(torch.uint8).view(torch.float8_e4m3fnuz), a.t(), one, one)
    with pytest.raises(ValueError, match="bias needs a bfloat16"):
        qmx.scaled_mm(a, a.t(), one, one, bias=torch.zeros(16, dtype=torch.bfloat16, device="cuda"))
