# qmx.torch: fake quantization inside autograd, bit for bit as qmx.fake_quantize, straight-through.
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import qmx  # noqa: E402
import qmx.torch as qt  # noqa: E402
from conftest import assert_bits_equal  # noqa: E402


def test_forward_bits_and_straight_through_gradient():
    torch.manual_seed(0)
    t = torch.randn(32, 128, requires_grad=True)
    y = qt.fake_quantize(t, "mxfp4", rule="ocp-floor")
    assert_bits_equal(y.detach().numpy(), qmx.fake_quantize(t.detach().numpy(), "mxfp4", rule="ocp-floor"), "fwd")
    g = torch.randn(32, 128)
    y.backward(g)
    assert torch.equal(t.grad, g)
    assert not torch.equal(y.detach(), t.detach())  # the forward really quantized


def test_bfloat16_tensor_and_errors():
    t = torch.randn(8, 64).to(torch.bfloat16)
    y = qt.fake_quantize(t, "nvfp4")
    assert y.dtype == torch.bfloat16
    want = qmx.fake_quantize(t.float().numpy(), "nvfp4")  # bf16 -> f32 is exact
    assert torch.equal(y, torch.from_numpy(want).to(torch.bfloat16))
    with pytest.raises(TypeError, match="contiguous"):
        qt.fake_quantize(torch.randn(64, 8).t(), "mxfp8")
    with pytest.raises(TypeError):
        qt.fake_quantize(np.ones((2, 32), np.float32), "mxfp8")


def test_a_tiny_model_trains_through_fake_quantization():
    torch.manual_seed(1)
    x = torch.randn(256, 32)
    w_true = torch.randn(32, 1)
    y = x @ w_true
    w = torch.zeros(32, 1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.mean((qt.fake_quantize(x, "mxfp8") @ qt.fake_quantize(w.t().contiguous(), "mxfp8").t() - y) ** 2)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]
