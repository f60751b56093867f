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
    cast_profile_names,
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


def cast_profile(x, fmt, profile, *, src=""):
    """Element codes (uint8, x's shape) of x in `fmt` as another library's cast writes them, bit for bit:
    profile "ml-dtypes" (x.astype(ml_dtypes.float8_e4m3fn) etc.), "pytorch" (tensor.to(torch.float8_*)),
    "onnx" (Cast, saturate=1; E8M0 round_mode "up"), "onnx-nosat", "onnx-nearest", "onnx-down" (E8M0 round
    modes), "ocp-sat", "ocp-nosat" (the reference routine). cast_profile_names() lists them; golden/casts
    holds the libraries' own outputs they are tested against."""
    return _qmx.cast_profile(as_array(x), fmt, profile, _src_of(x, src))


def fake_cast(x, fmt, rounding="rne", saturation="satfinite", **kw):
    """decode(convert(x, fmt, ...)): x rounded into fmt, as float32 values."""
    return decode(convert(x, fmt, rounding, saturation, **kw), fmt)


def _json_loads(text):
    import json
    return json.loads(text)


def make_spec(spec="mxfp8", **overrides):
    """The spec quantize would use, as a dict: a recipe name (see spec_names()) with overrides by the CLI's
    option names: profile, elem, rule, block, axis, rounding, saturation, nan_policy, element_scaling,
    subnormals, nan_fallback, sr_bits, seed, margin, row_scaled (NVFP4: a second-level scale per row)."""
    import json
    return json.loads(_spec_json(spec, overrides))


def _spec_json(spec, overrides):
    import json
    if isinstance(spec, dict):
        if overrides:
            raise TypeError("overrides apply to a recipe name, not to a spec dict")
        return json.dumps(spec)
    unknown = set(overrides) - set(_OVERRIDES) - {"sr_bits", "seed", "margin", "row_scaled"}
    if unknown:
        raise TypeError("unknown spec option(s): " + ", ".join(sorted(unknown)))
    kw = {k: overrides.get(k) for k in _OVERRIDES}
    return _qmx.make_spec(spec, sr_bits=overrides.get("sr_bits", 8), seed=overrides.get("seed", 0),
                          margin=overrides.get("margin", 0), row_scaled=bool(overrides.get("row_scaled", False)), **kw)


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


def dequantize(q, scales=None, spec=None, tensor_amax=0.0, line_amax=None):
    """FP32 values of a QuantizedTensor, or of stored parts: dequantize(codes, scales, spec,
    tensor_amax=...) with uint8 codes in the tensor's shape, the scale grid's scales (uint8, or float32
    for FP32-scale recipes) and the spec (a recipe name, a dict or JSON text); a row-scaled NVFP4 spec
    also takes line_amax, each line's amax."""
    if isinstance(q, QuantizedTensor):
        if scales is not None or spec is not None:
            raise TypeError("dequantize(QuantizedTensor) takes no scales or spec")
        return q.dequantize()
    if scales is None or spec is None:
        raise TypeError("dequantize(codes, scales, spec): give the scales and the spec")
    import json
    spec_arg = spec if isinstance(spec, str) else json.dumps(spec)
    lines = None if line_amax is None else [float(v) for v in line_amax]
    return _qmx.assemble(as_array(q), as_array(scales), spec_arg, tensor_amax, lines).dequantize()


def fake_quantize(x, spec="mxfp8", *, src="", **overrides):
    """dequantize(quantize(x, spec, ...)) in one pass, as float32 in x's shape."""
    return _qmx.fake_quantize(as_array(x), _spec_json(spec, overrides), _src_of(x, src))


def tensor_amax(x, nan_policy="block-nan", *, src="", reference=False):
    """The tensor amax a per-tensor spec measures (NVFP4's S_enc, FP8 current scaling): the largest |x|, NaN
    skipped, Inf counted except under "block-nan" and "ignore" (the default is the nvfp4 spec's policy), as a
    Python float; 0 for an empty tensor. reference=True uses the one-element-at-a-time loop (equal)."""
    return _qmx.tensor_amax(as_array(x), nan_policy, _src_of(x, src), reference)


def gemm(a, b, model="exact", c=None, *, a_format=None, b_format=None, reference=False, alpha="decode"):
    """D = A B (+ C) in float32 under an accumulation model (gemm_models(): exact, fp32-seq, block-exact,
    hopper-fp8, hopper-fp8-fast, hopper-fp8-vec, ada-fp8, blackwell-mxf8f6f4, blackwell-mxf4nvf4, or
    "fused:step=..,F=..,..."). A (M x K) and B (K x N) are QuantizedTensors, A quantized along K
    row-wise and B column-wise (quantize(b, spec, axis="col")), or uint8 codes with a_format/b_format.
    c (float32 M x N) is the accumulator's starting value. reference=True runs the scalar reference.
    alpha: how NVFP4's factor after accumulation is formed: "decode" (the product of the decode scales),
    "te" (Transformer Engine's cuBLASLt alpha, fl(fl(amax_a amax_b) fl(1/(36 bound_a bound_b)))) or
    "te-ref" (TE's reference GEMM, fl(fl(amax_a amax_b) / (36 bound_a bound_b)), per line when row-scaled)."""
    if c is not None:
        c = as_array(c)
    if not isinstance(a, QuantizedTensor):
        a = as_array(a)
    if not isinstance(b, QuantizedTensor):
        b = as_array(b)
    return _qmx.gemm(a, b, model, c, a_format, b_format, reference, alpha)


def scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None, scale_result=None, use_fast_accum=False, *,
              a_format=None, b_format=None, return_model=False):
    """torch._scaled_mm as an H100/H200 computes it (cuBLASLt on sm_90), bit for bit: D = (A scale_a) (B scale_b)
    in float32. a: M x K and b: K x N FP8 codes (uint8 arrays with a_format/b_format, default "e4m3", or
    torch float8_e4m3fn/float8_e5m2 tensors, whose format is their dtype); b may be given column-major
    (b_t.T, as torch wants it), which is copied to row-major codes. scale_a, scale_b: one FP32 value each
    (tensorwise: models hopper-fp8, or hopper-fp8-fast with use_fast_accum), or blockwise FP32 arrays: A's
    1x128 blocks (M x ceil(K/128)) with B's 128x128 (ceil(K/128) x ceil(N/128); hopper-fp8) or 128x1
    (ceil(K/128) x N; hopper-fp8-vec) blocks. What the hardware evidence does not cover raises ValueError:
    row-wise scales, blockwise with use_fast_accum, a bias, scale_result, an out_dtype other than float32.
    (Where K <= 128 an M x 1 scale_a is one 1x128 block per row and is read as blockwise.)
    return_model=True returns (D, model name)."""
    import numpy as np
    if bias is not None or scale_result is not None:
        raise ValueError("scaled_mm: bias and scale_result are not modelled (cuBLAS's epilogue order is unverified)")
    if out_dtype is not None and str(out_dtype) not in ("float32", "torch.float32", "<class 'numpy.float32'>"):
        raise ValueError("scaled_mm: only out_dtype float32 is modelled, not %s" % out_dtype)

    def codes(t, fmt, what):
        if type(t).__module__.startswith("torch"):
            name = str(t.dtype)
            if "float8_e4m3fn" in name or "float8_e5m2" in name:
                f = "e4m3" if "e4m3" in name else "e5m2"
                if fmt is not None and fmt != f:
                    raise TypeError("%s is %s but %s_format is %s" % (what, name, what, fmt))
                import torch
                return t.detach().view(torch.uint8).numpy(), f
        return as_array(t), fmt or "e4m3"

    a, fa = codes(a, a_format, "a")
    b, fb = codes(b, b_format, "b")
    if isinstance(b, np.ndarray) and b.ndim == 2 and not b.flags.c_contiguous and b.flags.f_contiguous:
        b = np.ascontiguousarray(b)  # torch's column-major B: codes are one byte each
    sa = np.asarray(as_array(scale_a), dtype=np.float32)
    sb = np.asarray(as_array(scale_b), dtype=np.float32)
    if sa.size == 1:
        sa = sa.reshape(1)
    if sb.size == 1:
        sb = sb.reshape(1)
    d, model = _qmx.scaled_mm(a, b, np.ascontiguousarray(sa), np.ascontiguousarray(sb), fa, fb, use_fast_accum)
    return (d, model) if return_model else d


def hadamard(x, block=32, *, inverse=False):
    """The normalized block Hadamard transform of each row of float32 x (block 16..256 dividing the last
    dimension); inverse=True undoes it."""
    return _qmx.hadamard(as_array(x), "hadamard:%d" % block, inverse)


def rht(x, block=32, seed=0, *, inverse=False):
    """The randomized Hadamard transform: random signs (seeded Philox) then the block Hadamard."""
    return _qmx.hadamard(as_array(x), "rht:%d:%d" % (block, seed), inverse)


def quest(x, spec="mxfp4", *, clip_ratio=0.0, stat="std", scale_rounding="floor", block=32, seed=None):
    """QuEST's forward quantizer (Quartet's forward pass): with block, the Hadamard transform of that size
    first (seed: the randomized one); then per group a power-of-two scale from the group's std, RNE to the
    element grid, and the trust mask. Returns a dict: dequant (in the transformed domain), codes, mask,
    scales, clipped. block=None skips the transform (x already transformed)."""
    x = as_array(x)
    if block:
        x = _qmx.hadamard(x, ("rht:%d:%d" % (block, seed)) if seed is not None else ("hadamard:%d" % block), False)
    return _qmx.quest(x, spec, clip_ratio, stat, scale_rounding)


from . import golden, io  # noqa: E402,F401

# qmx.torch imports torch; it is loaded on first use (import qmx.torch), so qmx itself needs only NumPy.
