# qmx.torch under torch.compile: the layer and fake_quantize are torch.library custom ops (torch 2.4 and
# later), so a model with emulated layers compiles as one graph (fullgraph=True) and its outputs and
# gradients equal eager mode's bit for bit, on the CPU and on CUDA tensors. Debian's torch 1.13 has neither
# custom_op nor torch.compile: there the layer is an autograd.Function and these tests skip, saying so.
import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import qmx  # noqa: E402
import qmx.torch as qt  # noqa: E402

needs_ops = pytest.mark.skipif(not qt._CUSTOM_OPS or not hasattr(torch, "compile"),
                               reason="torch.compile test skipped: torch %s has no torch.library.custom_op "
                                      "(2.4 and later)" % torch.__version__)
WHY = qmx.cuda_engine()
needs_gpu = pytest.mark.skipif(bool(WHY) or not torch.cuda.is_available(),
                               reason="GPU test skipped: " + (WHY or "torch sees no CUDA device"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles afresh: the models of earlier tests would otherwise count toward Dynamo's recompile
    limit for the shared forward code."""
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    yield


def _bits_equal(a, b, what):
    a32, b32 = a.detach().float().cpu().contiguous(), b.detach().float().cpu().contiguous()
    assert a32.shape == b32.shape, what
    np.testing.assert_array_equal(a32.numpy().view(np.uint32), b32.numpy().view(np.uint32), err_msg=what)


class _Mlp(torch.nn.Module):
    def __init__(self, recipe, width=256, hidden=512):
        super().__init__()
        self.fc1 = qt.Linear(width, hidden, recipe=recipe, seed=1)
        self.fc2 = qt.Linear(hidden, width, recipe=recipe, seed=2)

    def forward(self, x):
        # ReLU and the residual add are exact, so Inductor's fused kernels give eager mode's bits around the
        # layers (its GELU backward differs from ATen's in the last bits, which the bias gradient would show).
        return self.fc2(torch.relu(self.fc1(x))) + x


def _pair(recipe, device):
    torch.manual_seed(11)
    eager = _Mlp(recipe).to(device)
    other = _Mlp(recipe).to(device)
    other.load_state_dict(eager.state_dict())
    return eager, other


def _steps_equal(eager, compiled, model, device, steps=3):
    """Runs both over the same inputs for a few steps (the recipe's state advancing alike) and compares the
    outputs, the input gradient and every parameter's gradient bit for bit."""
    g = torch.Generator().manual_seed(3)
    for step in range(steps):
        x = (torch.randn(4, 32, 256, generator=g) * 2).to(device)
        dy = (torch.randn(4, 32, 256, generator=g) * 1e-2).to(device)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yc = eager(xe), compiled(xc)
        _bits_equal(ye, yc, "step %d output" % step)
        ye.backward(dy)
        yc.backward(dy)
        _bits_equal(xe.grad, xc.grad, "step %d input gradient" % step)
        for (name, pe), (_, pc) in zip(eager.named_parameters(), model.named_parameters()):
            _bits_equal(pe.grad, pc.grad, "step %d %s.grad" % (step, name))
        eager.zero_grad()
        model.zero_grad()
    assert eager.fc1.step == model.fc1.step == steps


@needs_ops
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "fp8-delayed", "quartet"])
def test_compiled_model_equals_eager_on_the_cpu(recipe):
    eager, model = _pair(recipe, "cpu")
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    _steps_equal(eager, compiled, model, "cpu")


@needs_ops
@needs_gpu
@pytest.mark.parametrize("recipe,backend", [(r, "aot_eager") for r in ("mxfp8", "nvfp4", "fp8-current", "quartet")] +
                         [("mxfp8", "inductor"), ("quartet", "inductor")])
def test_compiled_model_equals_eager_on_cuda(recipe, backend):
    if backend == "inductor":
        from torch.utils._triton import has_triton
        if not has_triton():
            pytest.skip("inductor test skipped: Triton is not installed")
    eager, model = _pair(recipe, "cuda")
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    _steps_equal(eager, compiled, model, "cuda")


@needs_ops
def test_compiled_fake_quantize_and_the_size_rules():
    x = torch.randn(64, 128).requires_grad_()
    f = torch.compile(lambda t: qt.fake_quantize(t, "mxfp8") * 2, backend="aot_eager", fullgraph=True)
    y = f(x)
    _bits_equal(y, torch.from_numpy(qmx.fake_quantize(x.detach().numpy(), "mxfp8")) * 2, "fake_quantize")
    y.sum().backward()
    _bits_equal(x.grad, torch.full_like(x, 2.0), "straight-through gradient")
    layer = qt.Linear(256, 64, recipe="quartet", name="blocks.0.fc")
    g = torch.compile(layer, backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception, match="blocks.0.fc.*not a multiple of 32"):
        g(torch.randn(40, 256))


@needs_ops
def test_saved_state_lives_as_long_as_the_graph():
    layer = qt.Linear(256, 64, recipe="mxfp8")
    gc.collect()
    before = len(qt._SAVED)
    with torch.no_grad():
        layer(torch.randn(32, 256))
    gc.collect()
    assert len(qt._SAVED) == before, "an inference forward left its state behind"
    y = layer(torch.randn(32, 256).requires_grad_())
    assert len(qt._SAVED) == before + 1
    del y
    gc.collect()
    assert len(qt._SAVED) == before, "a freed graph left its state behind"
    y = layer(torch.randn(32, 256).requires_grad_())
    y.sum().backward(retain_graph=True)
    assert layer.step == 1
    with pytest.raises(RuntimeError, match="saved state is gone"):
        y.sum().backward()


@needs_ops
@needs_gpu
def test_cuda_fake_quantize_equals_the_cpu():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(96, 256, generator=g) * torch.exp2(torch.randint(-12, 12, (96, 1), generator=g).float())
    for spec in ("mxfp8", "mxfp4", "nvfp4", "fp8-block1x128"):
        xc = x.cuda().requires_grad_()
        y = qt.fake_quantize(xc, spec)
        assert y.is_cuda
        _bits_equal(y, qt.fake_quantize(x, spec), spec)
        y.sum().backward()
        _bits_equal(xc.grad, torch.ones_like(x), spec + " gradient")
