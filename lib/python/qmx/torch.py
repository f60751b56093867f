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
input is float16 or bfloat16)."""
import torch as _torch

import qmx as _qmx


class _FakeQuantize(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, spec_json):
        x = t.detach()
        if not x.is_contiguous():
            raise TypeError("qmx.torch.fake_quantize reads C-contiguous tensors; call .contiguous() first")
        y = _qmx.fake_quantize(x, _qmx._json_loads(spec_json))
        return _torch.from_numpy(y).to(t.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def fake_quantize(t, spec="mxfp8", **overrides):
    """dequantize(quantize(t)) under a recipe (qmx.quantize's names and overrides), with a
    straight-through gradient."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError("qmx.torch.fake_quantize takes a torch.Tensor")
    return _FakeQuantize.apply(t, _qmx._spec_json(spec, overrides))


def _cuda_stream(t):
    return _torch.cuda.current_stream(t.device).cuda_stream


class _LinearFunction(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, steps):
        n, k = weight.shape
        x2 = x.detach().reshape(-1, k).to(_torch.float32).contiguous()
        w = weight.detach().to(_torch.float32).contiguous()
        m = x2.shape[0]
        if x.is_cuda or weight.is_cuda:
            _check_cuda(steps, x, weight, bias)
            out = _torch.empty((m, n), dtype=_torch.float32, device=x.device)
            with _torch.cuda.device(x.device):
                saved = steps.forward_cuda(x2.data_ptr(), w.data_ptr(), m, n, k, out.data_ptr(), _cuda_stream(x))
        else:
            y, saved = steps.forward(x2.numpy(), w.numpy())
            out = _torch.from_numpy(y)
        ctx.steps, ctx.saved, ctx.x_shape, ctx.x_dtype, ctx.w_dtype = steps, saved, x.shape, x.dtype, weight.dtype
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x2, w)
        if bias is not None:
            out = out + bias.detach().to(_torch.float32)
        return out.reshape(*x.shape[:-1], n).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x2, w = ctx.saved_tensors
        n, k = w.shape
        m = x2.shape[0]
        dy = grad.detach().reshape(-1, n).to(_torch.float32).contiguous()
        if x2.is_cuda:
            if dy.device != x2.device:
                raise ValueError("qmx.torch.Linear: the gradient is on %s, the layer's input on %s" % (dy.device, x2.device))
            grad_x = _torch.empty((m, k), dtype=_torch.float32, device=x2.device)
            grad_w = _torch.empty((n, k), dtype=_torch.float32, device=x2.device)
            grad_b = _torch.empty((n,), dtype=_torch.float32, device=x2.device) if ctx.has_bias else None
            with _torch.cuda.device(x2.device):
                stream = _cuda_stream(x2)
                ctx.steps.backward_cuda(x2.data_ptr(), w.data_ptr(), dy.data_ptr(), ctx.saved, grad_x.data_ptr(),
                                        grad_w.data_ptr(), stream)
                if ctx.has_bias:
                    _qmx._qmx.bias_grad_cuda(dy.data_ptr(), m, n, grad_b.data_ptr(), stream)
        else:
            dx, dw = ctx.steps.backward(x2.numpy(), w.numpy(), dy.numpy(), ctx.saved)
            grad_x, grad_w = _torch.from_numpy(dx), _torch.from_numpy(dw)
            grad_b = _torch.from_numpy(_qmx._qmx.bias_grad(dy.numpy())) if ctx.has_bias else None
        grad_x = grad_x.reshape(ctx.x_shape).to(ctx.x_dtype)
        grad_w = grad_w.to(ctx.w_dtype)
        return grad_x, grad_w, grad_b, None


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
    return _LinearFunction.apply(x, weight, bias, steps)


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
    def step(self):
        """Steps completed (backward passes run)."""
        return self.steps.step

    def forward(self, x):
        if x.dim() >= 1 and x.shape[-1] == self.in_features:
            self._check_sizes(x.numel() // self.in_features)  # the tokens: every leading dimension
        return _LinearFunction.apply(x, self.weight, self.bias, self.steps)

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
