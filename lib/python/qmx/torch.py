"""qmx.torch: qmx inside PyTorch (CPU tensors, and CUDA tensors through the emulation engine; Debian 12's
torch 1.13 and later).

Linear(in_features, out_features, bias=True, recipe="mxfp8") is an nn.Linear whose three GEMMs run as a
training recipe defines them, bit for bit as qmx-sim's recipe layer (docs/studies.md "Training recipes"):
the forward is the recipe's FPROP, the backward its DGRAD and WGRAD, each operand quantized along its
GEMM's K from the high-precision tensor, under the recipe's accumulation models (accum="auto"), with
stochastic rounding and random Hadamard signs seeded per step and delayed-scaling histories carried in
the module. One step is one forward and one backward; each backward ends its step. The bias is added in
FP32 outside the GEMM, as the recipes' epilogues do. swap_linear(model, recipe) replaces every
nn.Linear of a model with one.

On CUDA tensors the layer's three GEMMs run on the device (qmx::gpu::EngineLinearForward/Backward: the
operands quantized and multiplied by the emulation engine), bit for bit as on the CPU, never copied to the
host, under every recipe; the accumulation models the engine does not run (accum="exact", "block-exact")
raise NotImplementedError naming why. The
bias gradient is the column sums of dY in FP32, rows in ascending order, on either device (the same bits).

fake_quantize(t, spec, **overrides) quantizes and dequantizes a tensor under a recipe, bit for bit as
qmx.fake_quantize, with a straight-through gradient (the gradient passes unchanged), the usual way to
train through a quantizer. The tensor is read in place where it is C-contiguous float32, float16 or
bfloat16; the result has the input's dtype (float32 results are rounded to it by PyTorch when the
input is float16 or bfloat16). A CUDA tensor is quantized and dequantized on its GPU by the engine (the
same bits).

Where torch has torch.library.custom_op (2.4+), the layer and fake_quantize are the custom ops
qmx::linear_forward, qmx::linear_backward and qmx::fake_quantize, so that torch.compile(model,
fullgraph=True) traces a model with these layers as one graph (lib/python/README.md "torch.compile")."""
import torch as _torch

import qmx as _qmx


def _fake_quantize_impl(t, spec_json):
    """dequantize(quantize(t)) in t's dtype: on the CPU in place through NumPy, on a CUDA tensor by the
    engine's quantizer and dequantizer on its device (the same bits)."""
    x = t.detach()
    if not x.is_contiguous():
        raise TypeError("qmx.torch.fake_quantize reads C-contiguous tensors; call .contiguous() first")
    if x.is_cuda:
        return _qmx.quantize(x, _qmx._json_loads(spec_json)).dequantize().to(t.dtype)
    return _torch.from_numpy(_qmx.fake_quantize(x, _qmx._json_loads(spec_json))).to(t.dtype)


class _FakeQuantize(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, spec_json):
        return _fake_quantize_impl(t, spec_json)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def fake_quantize(t, spec="mxfp8", **overrides):
    """dequantize(quantize(t)) under a recipe (qmx.quantize's names and overrides), with a
    straight-through gradient; on CPU or CUDA tensors (a custom op, qmx::fake_quantize, where torch has
    torch.library.custom_op)."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError("qmx.torch.fake_quantize takes a torch.Tensor")
    if _CUSTOM_OPS:
        return _torch.ops.qmx.fake_quantize(t, _spec_const(spec, tuple(sorted(overrides.items()))))
    return _FakeQuantize.apply(t, _qmx._spec_json(spec, overrides))


def _spec_const(spec, items):
    """The spec's JSON text; under torch.compile computed once while tracing, a constant of the graph."""
    return _qmx._spec_json(spec, dict(items))


def _cuda_stream(t):
    return _torch.cuda.current_stream(t.device).cuda_stream


def _operands_f32(x, weight):
    """X as float32 rows (tokens x K) and W as float32, contiguous: what the recipe's GEMMs read."""
    x2 = x.detach().reshape(-1, weight.shape[1]).to(_torch.float32).contiguous()
    return x2, weight.detach().to(_torch.float32).contiguous()


def _forward_impl(x, weight, bias, steps):
    """FPROP: (y in x's dtype, the state the backward reads, X and W as float32 rows)."""
    n, k = weight.shape
    x2, w = _operands_f32(x, weight)
    m = x2.shape[0]
    if x.is_cuda or weight.is_cuda:
        _check_cuda(steps, x, weight, bias)
        out = _torch.empty((m, n), dtype=_torch.float32, device=x.device)
        with _torch.cuda.device(x.device):
            saved = steps.forward_cuda(x2.data_ptr(), w.data_ptr(), m, n, k, out.data_ptr(), _cuda_stream(x))
    else:
        y, saved = steps.forward(x2.numpy(), w.numpy())
        out = _torch.from_numpy(y)
    if bias is not None:
        out = out + bias.detach().to(_torch.float32)
    return out.reshape(*x.shape[:-1], n).to(x.dtype), saved, x2, w


def _backward_impl(steps, saved, x2, w, grad, has_bias):
    """DGRAD, WGRAD and the bias gradient (float32; dX as rows), ending the step."""
    n, k = w.shape
    m = x2.shape[0]
    dy = grad.detach().reshape(-1, n).to(_torch.float32).contiguous()
    if x2.is_cuda:
        if dy.device != x2.device:
            raise ValueError("qmx.torch.Linear: the gradient is on %s, the layer's input on %s" % (dy.device, x2.device))
        grad_x = _torch.empty((m, k), dtype=_torch.float32, device=x2.device)
        grad_w = _torch.empty((n, k), dtype=_torch.float32, device=x2.device)
        grad_b = _torch.empty((n,), dtype=_torch.float32, device=x2.device) if has_bias else None
        with _torch.cuda.device(x2.device):
            stream = _cuda_stream(x2)
            steps.backward_cuda(x2.data_ptr(), w.data_ptr(), dy.data_ptr(), saved, grad_x.data_ptr(),
                                grad_w.data_ptr(), stream)
            if has_bias:
                _qmx._qmx.bias_grad_cuda(dy.data_ptr(), m, n, grad_b.data_ptr(), stream)
    else:
        dx, dw = steps.backward(x2.numpy(), w.numpy(), dy.numpy(), saved)
        grad_x, grad_w = _torch.from_numpy(dx), _torch.from_numpy(dw)
        grad_b = _torch.from_numpy(_qmx._qmx.bias_grad(dy.numpy())) if has_bias else None
    return grad_x, grad_w, grad_b


class _LinearFunction(_torch.autograd.Function):
    """The layer under torch without torch.library.custom_op (Debian's 1.13)."""

    @staticmethod
    def forward(ctx, x, weight, bias, steps):
        y, saved, x2, w = _forward_impl(x, weight, bias, steps)
        ctx.steps, ctx.saved, ctx.x_shape, ctx.x_dtype, ctx.w_dtype = steps, saved, x.shape, x.dtype, weight.dtype
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x2, w)
        return y

    @staticmethod
    def backward(ctx, grad):
        x2, w = ctx.saved_tensors
        grad_x, grad_w, grad_b = _backward_impl(ctx.steps, ctx.saved, x2, w, grad, ctx.has_bias)
        return grad_x.reshape(ctx.x_shape).to(ctx.x_dtype), grad_w.to(ctx.w_dtype), grad_b, None


# torch.library custom ops (torch 2.4 and later): qmx::fake_quantize, qmx::linear_forward and
# qmx::linear_backward, so that torch.compile (and export) sees each layer as one opaque call with known
# output shapes instead of breaking the graph at it. The ops take plain values only, so a layer's LinearSteps
# is passed by a number (_STEPS, weak: the layer owns it) and the forward's saved state by a handle, an int64
# CPU tensor that autograd keeps for the backward; the state is dropped with the handle (a weakref finalizer),
# so a forward without a backward (inference) leaves nothing behind.
_CUSTOM_OPS = hasattr(_torch, "library") and hasattr(_torch.library, "custom_op")
_STEPS = None
_STEP_IDS = None
_SAVED = {}
_HANDLES = [0]


def _steps_id(steps):
    key = _STEP_IDS.get(steps)
    if key is None:
        _HANDLES[0] += 1
        key = _HANDLES[0]
        _STEP_IDS[steps] = key
        _STEPS[key] = steps
    return key


def _steps_of(steps_id):
    steps = _STEPS.get(steps_id)
    if steps is None:
        raise ValueError("qmx.torch.Linear: no live layer state numbered %d (the layer was freed)" % steps_id)
    return steps


if _CUSTOM_OPS:
    import typing as _typing

    import torch._dynamo  # noqa: F401 (assume_constant_result below)
    import weakref as _weakref

    _STEPS = _weakref.WeakValueDictionary()
    _STEP_IDS = _weakref.WeakKeyDictionary()
    _spec_const = _torch._dynamo.assume_constant_result(_spec_const)

    @_torch.library.custom_op("qmx::fake_quantize", mutates_args=())
    def _fake_quantize_op(t: _torch.Tensor, spec_json: str) -> _torch.Tensor:
        return _fake_quantize_impl(t, spec_json)

    @_fake_quantize_op.register_fake
    def _(t, spec_json):
        return _torch.empty_like(t)

    _fake_quantize_op.register_autograd(lambda ctx, grad: (grad, None), setup_context=lambda ctx, inputs, output: None)

    @_torch.library.custom_op("qmx::linear_forward", mutates_args=())
    def _linear_forward_op(x: _torch.Tensor, weight: _torch.Tensor, bias: _typing.Optional[_torch.Tensor],
                           steps_id: int, name: str) -> _typing.Tuple[_torch.Tensor, _torch.Tensor]:
        steps = _steps_of(steps_id)
        n, k = weight.shape
        if x.dim() >= 1 and x.shape[-1] == k:
            _qmx._qmx.check_recipe_shape(steps.recipe, x.numel() // k, n, k, "qmx.torch.Linear " + name)
        y, saved, _, _ = _forward_impl(x, weight, bias, steps)
        _HANDLES[0] += 1
        key = _HANDLES[0]
        handle = _torch.tensor(key, dtype=_torch.int64)
        _SAVED[key] = (steps, saved)
        _weakref.finalize(handle, _SAVED.pop, key, None)
        return y, handle

    @_linear_forward_op.register_fake
    def _(x, weight, bias, steps_id, name):
        n, k = weight.shape
        tokens = x.numel() // k if x.dim() >= 1 and x.shape[-1] == k else None
        if isinstance(tokens, int):  # the size rules at trace time, where the shapes are numbers
            _qmx._qmx.check_recipe_shape(_steps_of(steps_id).recipe, tokens, n, k, "qmx.torch.Linear " + name)
        return x.new_empty((*x.shape[:-1], n)), _torch.empty((), dtype=_torch.int64)

    @_torch.library.custom_op("qmx::linear_backward", mutates_args=())
    def _linear_backward_op(grad: _torch.Tensor, x: _torch.Tensor, weight: _torch.Tensor, handle: _torch.Tensor,
                            has_bias: bool) -> _typing.Tuple[_torch.Tensor, _torch.Tensor, _torch.Tensor]:
        entry = _SAVED.pop(int(handle), None)
        if entry is None:
            raise RuntimeError("qmx.torch.Linear: the forward's saved state is gone (a second backward through "
                               "the same forward?)")
        steps, saved = entry
        x2, w = _operands_f32(x, weight)
        grad_x, grad_w, grad_b = _backward_impl(steps, saved, x2, w, grad, has_bias)
        if grad_b is None:
            grad_b = grad_w.new_empty((0,))
        return grad_x.reshape(x.shape).to(x.dtype), grad_w.to(weight.dtype), grad_b

    @_linear_backward_op.register_fake
    def _(grad, x, weight, handle, has_bias):
        return (_torch.empty_like(x), _torch.empty_like(weight),
                weight.new_empty((weight.shape[0] if has_bias else 0,), dtype=_torch.float32))

    def _linear_setup(ctx, inputs, output):
        x, weight, bias, _, _ = inputs
        ctx.save_for_backward(x, weight, output[1])
        ctx.bias_dtype = None if bias is None else bias.dtype

    def _linear_backward(ctx, grad, _grad_handle):
        x, weight, handle = ctx.saved_tensors
        grad_x, grad_w, grad_b = _torch.ops.qmx.linear_backward(grad, x, weight, handle, ctx.bias_dtype is not None)
        return grad_x, grad_w, None if ctx.bias_dtype is None else grad_b.to(ctx.bias_dtype), None, None

    _linear_forward_op.register_autograd(_linear_backward, setup_context=_linear_setup)


def _apply_linear(x, weight, bias, steps, name, steps_key=None):
    if _CUSTOM_OPS:
        key = _steps_id(steps) if steps_key is None else steps_key
        return _torch.ops.qmx.linear_forward(x, weight, bias, key, name)[0]
    return _LinearFunction.apply(x, weight, bias, steps)


def _check_cuda(steps, x, weight, bias):
    """The CUDA path's preconditions: the engine present, the recipe on it, every tensor on one device."""
    why = _qmx.cuda_engine()
    if why:
        raise RuntimeError("qmx.torch.Linear on CUDA tensors needs the emulation engine: " + why)
    why = steps.cuda_support()
    if why:
        raise NotImplementedError("qmx.torch.Linear on CUDA tensors: " + why +
                                  "; run this recipe with the layer and its inputs on the CPU")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise ValueError("qmx.torch.Linear: the input is on %s and the %s on %s" % (x.device, name, t.device))


def linear(x, weight, bias=None, steps=None, *, recipe="mxfp8", **options):
    """The functional form of Linear: y = x W^T + b under a recipe. `steps` (a qmx._qmx.LinearSteps)
    carries the step count and delayed-scaling state across calls; without it every call is step 0 of a
    fresh state built from recipe and options (accum, seed, amax_history, margin, amax_algo, alpha)."""
    if steps is None:
        steps = _qmx._qmx.LinearSteps(recipe, **options)
    return _apply_linear(x, weight, bias, steps, "linear")


class Linear(_torch.nn.Linear):
    """nn.Linear whose FPROP, DGRAD and WGRAD run under a training recipe (qmx.recipe_names(): bf16,
    fp8-delayed, fp8-current, fp8-blockwise, mxfp8, mxfp8-ocp, mxfp8-e5m2-grads, nvfp4, quartet).

    accum: "auto" (the recipe's hardware model per GEMM) or one accumulation model for all three;
    seed: stochastic rounding and random Hadamard signs (mixed with the step); amax_history, margin,
    amax_algo ("max", "most-recent"): delayed scaling, Transformer Engine's defaults; alpha: NVFP4 GEMMs'
    factor after accumulation, "decode" (the decode scales' product), "te" (Transformer Engine's cuBLASLt
    alpha from the amax) or "te-ref" (TE's reference GEMM); name: the layer's name in size errors
    (swap_linear gives its path in the model). Sizes the recipe needs as multiples
    (qmx.recipe_shape_rules) are checked when the layer is built (in_features, out_features) and at each
    call (the tokens), and a ValueError names the layer, the size and the multiple."""

    def __init__(self, in_features, out_features, bias=True, recipe="mxfp8", accum="auto", seed=0,
                 amax_history=1024, margin=0, amax_algo="max", device=None, dtype=None, alpha="decode", name=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe = recipe
        self.name = name or "Linear(%d, %d)" % (in_features, out_features)
        self.steps = _qmx._qmx.LinearSteps(recipe, accum=accum, seed=seed, amax_history=amax_history,
                                            margin=margin, amax_algo=amax_algo, alpha=alpha)
        # The recipe's size rules (the library's CheckRecipeShape): in_features and out_features now, the tokens
        # (0 here: not known yet) at each call.
        self._check_sizes(0)

    def _check_sizes(self, tokens):
        _qmx._qmx.check_recipe_shape(self.recipe, tokens, self.out_features, self.in_features,
                                     "qmx.torch.Linear " + self.name)

    @property
    def steps(self):
        """The recipe's state (a qmx._qmx.LinearSteps: step count, delayed-scaling histories); assignable."""
        return self._steps

    @steps.setter
    def steps(self, steps):
        self._steps = steps
        # The number the custom ops know the state by, fixed here so that forward() is plain to trace.
        self._steps_key = _steps_id(steps) if _CUSTOM_OPS else 0

    @property
    def step(self):
        """Steps completed (backward passes run)."""
        return self.steps.step

    def forward(self, x):
        if not _CUSTOM_OPS and x.dim() >= 1 and x.shape[-1] == self.in_features:
            self._check_sizes(x.numel() // self.in_features)  # the tokens (the custom op checks them itself)
        return _apply_linear(x, self.weight, self.bias, self.steps, self.name, self._steps_key)

    def extra_repr(self):
        return super().extra_repr() + ", recipe=" + self.recipe


def swap_linear(model, recipe="mxfp8", **options):
    """Replaces every nn.Linear of model (recursively) with a Linear under `recipe` holding the same
    weight and bias tensors; returns the model. Options as Linear's (seed is offset per layer, so layers
    draw different random bits)."""
    seed = options.pop("seed", 0)
    count = [0]

    def swap(module, prefix):
        for name, child in module.named_children():
            path = prefix + name
            if type(child) is _torch.nn.Linear:
                # The layer's path in the model names it in a size error ("encoder.0.fc1").
                q = Linear(child.in_features, child.out_features, bias=child.bias is not None, recipe=recipe,
                           seed=seed + count[0], name=path, **options)
                count[0] += 1
                q.weight = child.weight
                if child.bias is not None:
                    q.bias = child.bias
                setattr(module, name, q)
            else:
                swap(child, path + ".")

    swap(model, "")
    return model
