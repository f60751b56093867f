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


@pytest.mark.parametrize("recipe,alpha", [(r, "decode") for r in qmx._qmx.recipe_names()] + [("nvfp4", "te")])
def test_linear_equals_the_recipe_layer(recipe, alpha):
    # One step through qmx.torch.Linear: forward, dX and dW equal the C++ recipe layer's GEMM outputs on
    # the same tensors, bit for bit (alpha="te": Transformer Engine's NVFP4 alpha from the amax).
    torch.manual_seed(2)
    m, n, k = 32, 64, 128
    lin = qt.Linear(k, n, bias=False, recipe=recipe, seed=7, alpha=alpha)
    # recipe_step primes its histories
    lin.steps = qmx._qmx.LinearSteps(recipe, seed=7, prime_history=True, alpha=alpha)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k) * 0.05)
    x = torch.randn(m, k, requires_grad=True)
    y = lin(x)
    dy = torch.randn(m, n) * 1e-3
    y.backward(dy)
    args = (x.detach().numpy(), lin.weight.detach().numpy(), dy.numpy())
    ref = qmx._qmx.recipe_step(recipe, *args, seed=7, alpha=alpha)
    assert_bits_equal(y.detach().numpy(), ref["fprop"]["out"], recipe + " fprop")
    assert_bits_equal(x.grad.numpy(), ref["dgrad"]["out"], recipe + " dgrad")
    assert_bits_equal(lin.weight.grad.numpy(), ref["wgrad"]["out"], recipe + " wgrad")
    assert lin.step == 1
    if alpha != "decode":
        # The option reaches the GEMMs: some of them move (about half of all amax pairs give another alpha).
        moved = 0
        for f in (1, 3, 5, 7):
            xs = (args[0] * np.float32(f), args[1], args[2])
            te, dec = (qmx._qmx.recipe_step(recipe, *xs, seed=7, alpha=a) for a in (alpha, "decode"))
            moved += sum(not np.array_equal(dec[g]["out"], te[g]["out"]) for g in ("fprop", "dgrad", "wgrad"))
        assert moved > 0
        with pytest.raises(ValueError, match="unknown alpha rule"):
            qt.Linear(k, n, recipe=recipe, alpha="cuda")


def test_linear_backward_needs_its_own_step():
    lin = qt.Linear(64, 32, recipe="mxfp8")
    x = torch.randn(8, 64)
    y1, y2 = lin(x).sum(), lin(x).sum()
    y2.backward()
    with pytest.raises(ValueError, match="LinearForward"):
        y1.backward()


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "quartet"])
def test_tiny_mlp_trains(recipe):
    torch.manual_seed(3)
    x = torch.randn(128, 64)
    teacher = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 32))
    with torch.no_grad():
        target = teacher(x)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 32))
    qt.swap_linear(model, recipe, seed=1)
    assert all(isinstance(mod, qt.Linear) for mod in (model[0], model[2]))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        opt.zero_grad()
        loss = torch.mean((model(x) - target) ** 2)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model[0].step == 50
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_recipe_sizes_are_checked_when_built_and_called_naming_the_layer():
    # quartet needs every K (in_features, out_features, tokens) a multiple of 32; nvfp4 the tokens of 16.
    assert all(m == 32 for _, m, _ in qmx.recipe_shape_rules("quartet"))
    assert [r[:2] for r in qmx.recipe_shape_rules("nvfp4")] == [("m", 16)]
    assert qmx.recipe_shape_rules("mxfp8") == []
    with pytest.raises(ValueError, match=r"Linear\(40, 64\) under recipe quartet: in_features \(k\) = 40 is not a multiple of 32 \(fprop"):
        qt.Linear(40, 64, recipe="quartet")
    with pytest.raises(ValueError, match=r"out_features \(n\) = 24 is not a multiple of 32"):
        qt.Linear(64, 24, recipe="quartet")
    layer = qt.Linear(32, 16, recipe="nvfp4")
    with pytest.raises(ValueError, match=r"the tokens \(m, rows of X\) = 6 is not a multiple of 16"):
        layer(torch.randn(2, 3, 32))  # refused at the call, before a forward whose backward could not run
    assert layer(torch.randn(4, 4, 32)).shape == (4, 4, 16)
    # swap_linear names each layer by its path in the model.
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Sequential(torch.nn.Linear(64, 48)))
    with pytest.raises(ValueError, match=r"qmx.torch.Linear 1.0 under recipe quartet: out_features \(n\) = 48"):
        qt.swap_linear(model, "quartet")
