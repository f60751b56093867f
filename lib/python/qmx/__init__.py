"""qmx: bit-exact emulation of OCP FP8/FP6/FP4, MX and NVFP4 numerics, from NumPy and PyTorch.

The numerics are qmx-sim's C++ library (libqmx); this package reads arrays in place (C-contiguous
float32, float16, bfloat16 or uint8 codes; anything else raises TypeError rather than being copied),
releases the GIL around every computation, and runs on the library's OpenMP threads
(set_num_threads). Library errors raise ValueError with the library's message.

    import numpy as np, qmx
    x = np.random.default_rng(0).standard_normal((256, 1024), dtype=np.float32)
    codes = qmx.convert(x, "e4m3")                       # uint8 codes, x's shape
    q = qmx.quantize(x, "mxfp8")                          # QuantizedTensor: .codes .scales .spec
    err = qmx.error_stats(x, q.dequantize())              # mse, sqnr_db, cosine, ...
    d = qmx.gemm(q, qmx.quantize(w.T, "mxfp8", axis="col"), model="blackwell-mxf8f6f4")
"""
from . import _qmx
from ._qmx import (  # noqa: F401  (re-exported)
    DelayedScaling,
    QuantizedTensor,
    decode,
    describe_model,
    error_stats,
    force_simd_target,
    format_info,
    format_values,
    formats,
    gemm_models,
    get_num_threads,
    kurtosis,
    misalignment,
    profile_names,
    set_num_threads,
    simd_target,
    simd_targets,
    spec_names,
)

__version__ = _qmx.__version__

_OVERRIDES = ("profile", "elem", "rule", "block", "axis", "rounding", "saturation", "nan_policy",
              "element_scaling", "subnormals", "nan_fallback")


def as_array(x):
    """x as a NumPy array without a copy: ndarrays as they are, CPU torch tensors through .numpy()
    (bfloat16 tensors as their uint16 bits), other objects with the buffer protocol or
    __array_interface__ through numpy.asarray."""
    import numpy as np
    if isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        t = x.detach()
        if t.device.type != "cpu":
            raise TypeError("qmx reads CPU tensors; this one is on " + str(t.device))
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    return np.asarray(x)


def _src_of(x, src):
    """bfloat16 torch tensors arrive as uint16 bits; say so unless the caller did."""
    if src:
        return src
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        if x.dtype == torch.bfloat16:
            return "bf16"
    return ""


def convert(x, fmt, rounding="rne", saturation="satfinite", *, nan_sign="keep", nan_fallback="max",
            subnormals="keep", sr_bits=8, seed=0, first_index=0, random_bits=None, src="", reference=False,
            out=None):
    """Element codes (uint8, x's shape) of x in format `fmt` (a registry name such as "e4m3", "e2m1",
    "ue8m0", a user format "eXmY[:bias=B][:special=ieee|fn|finite][:unsigned]" or a P3109 name).

    x: float32, float16 or bfloat16 (ml_dtypes.bfloat16, a torch bfloat16 tensor, or uint16 bits with
    src="bf16"), read in place. rounding: rne rna rz ru rd ro sr (= sr-a) sr-a sr-b sr-c; saturation:
    satfinite nosat satpropagate; nan_sign: keep positive; nan_fallback (NaN into FP6/FP4/INT8): max zero;
    subnormals: keep flush. Stochastic rounding uses sr_bits random bits per element: element i takes
    Philox(seed, first_index + i), or random_bits[i] (uint32) when given, as `qmx-sim convert` does.
    reference=True uses the scalar reference routine (slow, equal bit for bit). out: a C-contiguous uint8
    array of x's shape to write the codes into (returned), instead of a new array."""
    return _qmx.convert(as_array(x), fmt, rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits,
                        seed, first_index, random_bits, _src_of(x, src), reference, out)


def fake_cast(x, fmt, rounding="rne", saturation="satfinite", **kw):
    """decode(convert(x, fmt, ...)): x rounded into fmt, as float32 values."""
    return decode(convert(x, fmt, rounding, saturation, **kw), fmt)


def _json_loads(text):
    import json
    return json.loads(text)


def make_spec(spec="mxfp8", **overrides):
    """The spec quantize would use, as a dict: a recipe name (see spec_names()) with overrides by the CLI's
    option names: profile, elem, rule, block, axis, rounding, saturation, nan_policy, element_scaling,
    subnormals, nan_fallback, sr_bits, seed, margin."""
    import json
    return json.loads(_spec_json(spec, overrides))


def _spec_json(spec, overrides):
    import json
    if isinstance(spec, dict):
        if overrides:
            raise TypeError("overrides apply to a recipe name, not to a spec dict")
        return json.dumps(spec)
    unknown = set(overrides) - set(_OVERRIDES) - {"sr_bits", "seed", "margin"}
    if unknown:
        raise TypeError("unknown spec option(s): " + ", ".join(sorted(unknown)))
    kw = {k: overrides.get(k) for k in _OVERRIDES}
    return _qmx.make_spec(spec, sr_bits=overrides.get("sr_bits", 8), seed=overrides.get("seed", 0),
                          margin=overrides.get("margin", 0), **kw)


def quantize(x, spec="mxfp8", *, state=None, tensor_amax=None, src="", reference=False, **overrides):
    """Quantizes x (its last dimension is the row; the others fold into rows) under a recipe: mxfp8,
    mxfp8-ocp, mxfp6_e2m3, mxfp4, nvfp4, nvfp4-2d, fp8-tensor-current, fp8-delayed, fp8-rowwise,
    fp8-block1x128, fp8-block128x128, ... (spec_names()), with overrides by the CLI's option names
    (profile="torchao-rceil", rule="ocp-floor", block="1x16", axis="col", rounding="sr", seed=7, ...).
    spec may also be a dict (QuantizedTensor.spec). Returns a QuantizedTensor.

    state: a DelayedScaling for fp8-delayed (quantized with its scale, then the amax is pushed).
    tensor_amax: NVFP4's tensor amax, when it comes from elsewhere (Transformer Engine's amax reduction).
    reference=True uses the scalar reference quantizer (slow, equal bit for bit)."""
    return _qmx.quantize(as_array(x), _spec_json(spec, overrides), state, tensor_amax, _src_of(x, src), reference)


def dequantize(q, scales=None, spec=None, tensor_amax=0.0):
    """FP32 values of a QuantizedTensor, or of stored parts: dequantize(codes, scales, spec,
    tensor_amax=...) with uint8 codes in the tensor's shape, the scale grid's scales (uint8, or float32
    for FP32-scale recipes) and the spec (a recipe name, a dict or JSON text)."""
    if isinstance(q, QuantizedTensor):
        if scales is not None or spec is not None:
            raise TypeError("dequantize(QuantizedTensor) takes no scales or spec")
        return q.dequantize()
    if scales is None or spec is None:
        raise TypeError("dequantize(codes, scales, spec): give the scales and the spec")
    import json
    spec_arg = spec if isinstance(spec, str) else json.dumps(spec)
    return _qmx.assemble(as_array(q), as_array(scales), spec_arg, tensor_amax).dequantize()


def fake_quantize(x, spec="mxfp8", *, src="", **overrides):
    """dequantize(quantize(x, spec, ...)) in one pass, as float32 in x's shape."""
    return _qmx.fake_quantize(as_array(x), _spec_json(spec, overrides), _src_of(x, src))


def gemm(a, b, model="exact", c=None, *, a_format=None, b_format=None, reference=False):
    """D = A B (+ C) in float32 under an accumulation model (gemm_models(): exact, fp32-seq, block-exact,
    hopper-fp8, hopper-fp8-fast, hopper-fp8-vec, ada-fp8, blackwell-mxf8f6f4, blackwell-mxf4nvf4, or
    "fused:step=..,F=..,..."). A (M x K) and B (K x N) are QuantizedTensors, A quantized along K
    row-wise and B column-wise (quantize(b, spec, axis="col")), or uint8 codes with a_format/b_format.
    c (float32 M x N) is the accumulator's starting value. reference=True runs the scalar reference."""
    if c is not None:
        c = as_array(c)
    if not isinstance(a, QuantizedTensor):
        a = as_array(a)
    if not isinstance(b, QuantizedTensor):
        b = as_array(b)
    return _qmx.gemm(a, b, model, c, a_format, b_format, reference)


def hadamard(x, block=32, *, inverse=False):
    """The normalized block Hadamard transform of each row of float32 x (block 16..256 dividing the last
    dimension); inverse=True undoes it."""
    return _qmx.hadamard(as_array(x), "hadamard:%d" % block, inverse)


def rht(x, block=32, seed=0, *, inverse=False):
    """The randomized Hadamard transform: random signs (seeded Philox) then the block Hadamard."""
    return _qmx.hadamard(as_array(x), "rht:%d:%d" % (block, seed), inverse)


from . import golden  # noqa: E402,F401

# qmx.torch imports torch; it is loaded on first use (import qmx.torch), so qmx itself needs only NumPy.
