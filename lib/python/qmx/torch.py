"""qmx.torch: qmx inside PyTorch (CPU tensors; Debian 12's torch 1.13 and later).

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
