"""qmx: bit-exact emulation of OCP FP8/FP6/FP4, MX and NVFP4 numerics, from NumPy and PyTorch.

The numerics are qmx-sim's C++ library (libqmx); this package reads arrays in place (C-contiguous
float32, float16, bfloat16 or uint8 codes; anything else raises TypeError rather than being copied),
releases the GIL around every computation, and runs on the library's OpenMP threads
(set_num_threads). Library errors raise ValueError with the library's message.

    import numpy as np, qmx
    x = np.random.default_rng(0).standard_normal((256, 1024), dtype=np.float32)
    >>> import numpy as np, qmx
    >>> x = qmx.distribution("normal", (256, 1024), seed=0)        # float32, unit RMS
    >>> qmx.convert(np.array([1.0, 3.3, -500.0], np.float32), "e4m3")  # codes: 1, 3.25, -448 (saturated)
    array([ 56,  69, 254], dtype=uint8)
    >>> q = qmx.quantize(x, "mxfp8")                                 # QuantizedTensor: .codes .scales .spec
    >>> q.codes.shape, q.scales.shape
    ((256, 1024), (256, 32))
    >>> err = qmx.error_stats(x, q.dequantize())                     # mse, sqnr_db, cosine, ...
    >>> 30 < err["sqnr_db"] < 40
    True
    >>> w = qmx.distribution("laplace", (512, 1024), seed=1)         # a weight, out_features x in_features
    >>> d = qmx.gemm(q, qmx.quantize(w.T.copy(), "mxfp8", axis="col"), model="blackwell-mxf8f6f4")
    >>> d.shape, d.dtype
    ((256, 512), dtype('float32'))
"""
try:
    from ._build import CUDA as _BUILT_WITH_CUDA
except ImportError:
    _BUILT_WITH_CUDA = False
if _BUILT_WITH_CUDA:
    # A CUDA build links the toolkit's libcudart.so.13 and libcublasLt.so.13. PyTorch's CUDA wheels load their
    # own copies under the same names; whichever is loaded first serves both, and torch's cuBLAS on another
    # release's cuBLASLt aborts the process (free(): invalid pointer). Loading torch first, where it is
    # installed, makes its copies the ones both use.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
from . import _qmx
from ._qmx import (  # noqa: F401  (re-exported)
    DelayedScaling,
    QmxFileNotFoundError,
    QmxIOError,
    QuantizedTensor,
    cast_profile_names,
    describe_model,
    describe_recipe,
    describe_spec,
    distribution,
    distribution_names,
    force_simd_target,
    formats,
    gemm_models,
    get_num_threads,
    kurtosis,
    misalignment,
    profile_names,
    recipe_names,
    recipe_shape_rules,
    set_num_threads,
    simd_target,
    simd_targets,
    spec_names,
)

__version__ = _qmx.__version__

_OVERRIDES = tuple(_qmx.spec_override_names())  # the library's one table (SpecOverrideFields)


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


def error_stats(ref, out):
    """Error of out against ref (same shape, float32; NumPy arrays or CPU torch tensors): count, nonfinite,
    out_nonfinite, mse, rmse, nmse, sqnr_db, max_abs_err, max_rel_err, mean_rel_err, bias, cosine,
    sum_sq_err, sum_sq_ref, as `qmx-sim study` reports them. Two CUDA tensors (float32, contiguous, one
    device) are compared on their GPU by the engine, in the same chunked order: the same numbers, bit for
    bit; only the statistics reach the host."""
    if _is_cuda_tensor(ref) or _is_cuda_tensor(out):
        return _error_stats_cuda(ref, out)
    return _qmx.error_stats(as_array(ref), as_array(out))


def _cuda_float32(call, name, t, device=None):
    """t detached, checked to be a contiguous float32 CUDA tensor (on `device` when given)."""
    import torch
    if not _is_cuda_tensor(t):
        raise TypeError("%s: %s must be a CUDA tensor like the other operands (it is %s): a CUDA tensor is never "
                        "copied to the host" % (call, name, type(t).__name__ if not hasattr(t, "device") else t.device))
    t = t.detach()
    if t.dtype != torch.float32:
        raise TypeError("%s: %s must be float32 on the engine, not %s" % (call, name, t.dtype))
    if not t.is_contiguous():
        raise ValueError("%s: %s must be contiguous: .contiguous() makes a contiguous copy on the device" % (call, name))
    if device is not None and t.device != device:
        raise ValueError("%s: %s is on %s, the other operand on %s" % (call, name, t.device, device))
    return t


def _error_stats_cuda(ref, out):
    import torch
    _require_engine("error_stats")
    r = _cuda_float32("error_stats", "ref", ref)
    o = _cuda_float32("error_stats", "out", out, r.device)
    if tuple(r.shape) != tuple(o.shape):
        raise ValueError("error_stats: the two tensors differ in shape (%s and %s)" % (tuple(r.shape), tuple(o.shape)))
    with torch.cuda.device(r.device):
        return _qmx.error_stats_cuda(r.data_ptr(), o.data_ptr(), r.numel(), torch.cuda.current_stream(r.device).cuda_stream)


def quantize_stats(x, q, *, src=""):
    """What quantizing x into q did, as the CLI's quantize summary counts it: elements, nan_inputs,
    inf_inputs, saturated, flushed_to_zero, nan_blocks and the 256-bin scale_histogram."""
    return _qmx.quantize_stats(as_array(x), q, _src_of(x, src))


def recipe_step(recipe, x, weight, grad_output, accum="auto", seed=0, step=0, alpha="decode"):
    """One whole step of `qmx-sim recipe` on given float32 tensors (NumPy or CPU torch): x (m x k), weight
    (n x k, as nn.Linear holds it), grad_output (m x n). Returns {'fprop'|'dgrad'|'wgrad': {'out', 'accum',
    'sqnr_db', 'cosine'}} against FP64 GEMMs."""
    return _qmx.recipe_step(recipe, as_array(x), as_array(weight), as_array(grad_output), accum, seed, step, alpha)


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


def format_name(fmt):
    """The name qmx reads for a format given as a string or as an ml_dtypes / NumPy / torch dtype
    (ml_dtypes.float8_e4m3fn, numpy.dtype("float16"), torch.float8_e4m3fn): their names ("float8_e4m3fn",
    "torch.float8_e4m3fn") are aliases of the registry's ("e4m3"), which every call taking a format accepts."""
    if isinstance(fmt, str):
        return fmt
    if type(fmt).__module__.startswith("torch"):
        return str(fmt)  # "torch.float8_e4m3fn"
    import numpy as np
    try:
        return np.dtype(fmt).name
    except TypeError:
        raise TypeError("a format is a name or a dtype (ml_dtypes, NumPy, torch), not %r" % (fmt,)) from None


def decode(codes, fmt):
    """The float32 values of element codes (uint8) of `fmt` (a name or a dtype)."""
    return _qmx.decode(codes, format_name(fmt))


def format_info(fmt):
    """A format's parameters: bits, bias, max, min normal and subnormal, specials, binades, ..."""
    return _qmx.format_info(format_name(fmt))


def format_values(fmt):
    """Every finite value of a format, ascending, as float64."""
    return _qmx.format_values(format_name(fmt))


class finfo:
    """A format's limits under NumPy's finfo names: bits, max, min (-max for signed formats, 0 else),
    smallest_normal (= tiny), smallest_subnormal, eps (2^-nmant), nmant (mantissa bits), nexp (exponent
    bits), maxexp, minexp, dtype (the format's name). format_info(fmt) has the rest.

    >>> import qmx
    >>> f = qmx.finfo("float8_e4m3fn")
    >>> f.max, f.smallest_normal, f.smallest_subnormal, f.eps, f.nmant, f.nexp, f.bits
    (448.0, 0.015625, 0.001953125, 0.125, 3, 4, 8)
    """

    def __init__(self, fmt):
        i = _qmx.format_info(format_name(fmt))
        self.dtype = i["name"]
        self.bits = i["bits"]
        self.max = i["max"]
        self.min = -i["max"] if i["signed"] else 0.0
        self.smallest_normal = self.tiny = i["min_normal"]
        self.smallest_subnormal = i["min_subnormal"] if i["has_subnormals"] else i["min_normal"]
        self.nmant = i["man_bits"]
        self.nexp = i["exp_bits"]
        self.eps = 2.0 ** -self.nmant
        self.maxexp = i["emax"] + 1
        self.minexp = i["emin"]

    def __repr__(self):
        return "qmx.finfo(dtype=%s, bits=%d, max=%r, smallest_normal=%r, smallest_subnormal=%r, eps=%r)" % (
            self.dtype, self.bits, self.max, self.smallest_normal, self.smallest_subnormal, self.eps)


def convert(x, fmt, rounding="rne", saturation="satfinite", *, nan_sign="keep", nan_fallback="max",
            subnormals="keep", sr_bits=8, seed=0, first_index=0, random_bits=None, src="", reference=False,
            out=None, flags=False, tininess="before", nan_payload="default"):
    """Element codes (uint8, x's shape) of x in format `fmt` (a registry name such as "e4m3", "e2m1",
    "ue8m0", a user format "eXmY[:bias=B][:special=ieee|fn|finite][:unsigned]" or a P3109 name).

    x: float32, float16 or bfloat16 (ml_dtypes.bfloat16, a torch bfloat16 tensor, or uint16 bits with
    src="bf16"), read in place. rounding: rne rna rz ru rd ro sr (= sr-a) sr-a sr-b sr-c; saturation:
    satfinite nosat satpropagate; nan_sign: keep positive; nan_fallback (NaN into FP6/FP4/INT8): max zero;
    subnormals: keep flush. Stochastic rounding uses sr_bits random bits per element: element i takes
    Philox(seed, first_index + i), or random_bits[i] (uint32) when given, as `qmx-sim convert` does.
    reference=True uses the scalar reference routine (slow, equal bit for bit). out: a C-contiguous uint8
    array of x's shape to write the codes into (returned), instead of a new array.

    A CUDA tensor (float32, float64, float16 or bfloat16, contiguous) is converted on its GPU by the
    emulation engine, which runs the same reference routine, on torch's current stream: the codes are a
    uint8 tensor on the same device (random_bits and out then CUDA tensors too), never copied to the host.

    flags=True returns (codes, flags): each element's exception flags as uint8 (1 inexact, 2 underflow,
    4 overflow, 16 invalid, 32 saturated; TestFloat's numbering), from the reference routine per element
    (the same codes). tininess (before after) decides the underflow flag: tininess detected before
    rounding, or after (IEEE 754-2019 7.5, as RISC-V and x86's SSE detect it); codes never depend on it.
    nan_payload (default quiet all-ones): the NaN code of an IEEE-style format (e5m2): the library's 0x7F,
    the quiet bit alone (0x7E: RISC-V's canonical NaN with nan_sign="positive"), or every mantissa bit."""
    if tininess not in ("before", "after"):
        raise ValueError("tininess must be before or after, not %r" % (tininess,))
    if flags:
        if _is_cuda_tensor(x):
            raise ValueError("flags=True converts on the CPU (the engine's Python path returns codes only): "
                             "pass x.cpu()")
        if out is not None or reference:
            raise ValueError("flags=True returns new (codes, flags) arrays by the reference routine: drop out= "
                             "and reference=")
        return _qmx.convert_flags(as_array(x), format_name(fmt), rounding, saturation, nan_sign, nan_fallback,
                                  subnormals, sr_bits, seed, first_index, random_bits, _src_of(x, src), tininess,
                                  nan_payload)
    if _is_cuda_tensor(x):
        return _convert_cuda(x, fmt, rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits, seed,
                             first_index, random_bits, src, reference, out, nan_payload)
    return _qmx.convert(as_array(x), format_name(fmt), rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits,
                        seed, first_index, random_bits, _src_of(x, src), reference, out, nan_payload)


def cuda_engine():
    """'' when this build has the emulation engine (gpu/) and a CUDA device, so that qmx.convert runs CUDA
    tensors on their GPU; otherwise the reason there is none."""
    return _qmx.cuda_engine()


def _is_cuda_tensor(x):
    return type(x).__module__.startswith("torch") and getattr(x, "device", None) is not None and x.device.type == "cuda"


def _require_engine(call):
    why = cuda_engine()
    if why:
        raise RuntimeError("qmx.%s of a CUDA tensor needs the emulation engine: %s" % (call, why))


def _engine_source(x, src, verb, dtypes):
    """x detached and its dtype's name, for an engine entry that `verb`s tensors of `dtypes` (names)."""
    if src:
        raise ValueError("src names the format of NumPy bit arrays; a CUDA tensor's dtype gives its format")
    t = x.detach()
    name = str(t.dtype).replace("torch.", "")
    if name not in dtypes:
        raise TypeError("the engine %s %s or %s tensors, not %s" % (verb, ", ".join(dtypes[:-1]), dtypes[-1], t.dtype))
    return t, name


def _convert_cuda(x, fmt, rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits, seed, first_index,
                  random_bits, src, reference, out, nan_payload="default"):
    import torch
    _require_engine("convert")
    if reference:
        raise ValueError("reference=True is the CPU's scalar routine; on a CUDA tensor the engine runs that same "
                         "routine (drop reference, or pass x.cpu())")
    t, dtype = _engine_source(x, src, "converts", ("float32", "float64", "float16", "bfloat16"))
    if not t.is_contiguous():
        raise ValueError("x must be contiguous: x.contiguous() makes a contiguous copy on the device")
    bits = 0
    if random_bits is not None:
        word_types = (torch.int32,) + ((torch.uint32,) if hasattr(torch, "uint32") else ())
        if (not isinstance(random_bits, torch.Tensor) or random_bits.device != t.device
                or random_bits.dtype not in word_types or not random_bits.is_contiguous()):
            raise TypeError("random_bits of a CUDA tensor: a contiguous int32 (or uint32) tensor on " + str(t.device))
        if random_bits.numel() != t.numel():
            raise ValueError("random_bits holds %d values for %d elements" % (random_bits.numel(), t.numel()))
        bits = random_bits.data_ptr()
    if out is None:
        out = torch.empty(t.shape, dtype=torch.uint8, device=t.device)
    else:
        if (not isinstance(out, torch.Tensor) or out.device != t.device or out.dtype != torch.uint8
                or not out.is_contiguous()):
            raise TypeError("out of a CUDA tensor: a contiguous uint8 tensor on " + str(t.device))
        if tuple(out.shape) != tuple(t.shape):
            raise ValueError("out must have x's shape")
        lo, hi = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
        if out.numel() and out.data_ptr() < hi and lo < out.data_ptr() + out.numel():
            raise ValueError("out shares memory with x: write the codes to a separate tensor")
    with torch.cuda.device(t.device):
        stream = torch.cuda.current_stream(t.device).cuda_stream
        _qmx.convert_cuda(t.data_ptr(), t.numel(), dtype, format_name(fmt), rounding, saturation, nan_sign,
                          nan_fallback, subnormals, sr_bits, seed, first_index, bits, out.data_ptr(), stream,
                          nan_payload)
    return out


def cast_profile(x, fmt, profile, *, src=""):
    """Element codes (uint8, x's shape) of x in `fmt` as another library's cast writes them, bit for bit:
    profile "ml-dtypes" (x.astype(ml_dtypes.float8_e4m3fn) etc.), "pytorch" (tensor.to(torch.float8_*)),
    "onnx" (Cast, saturate=1; E8M0 round_mode "up"), "onnx-nosat", "onnx-nearest", "onnx-down" (E8M0 round
    modes), "ocp-sat", "ocp-nosat" (the reference routine). cast_profile_names() lists them; golden/casts
    holds the libraries' own outputs they are tested against."""
    return _qmx.cast_profile(as_array(x), format_name(fmt), profile, _src_of(x, src))


def fake_cast(x, fmt, rounding="rne", saturation="satfinite", **kw):
    """decode(convert(x, fmt, ...)): x rounded into fmt, as float32 values."""
    return decode(convert(x, fmt, rounding, saturation, **kw), fmt)


def _json_loads(text):
    import json
    return json.loads(text)


def make_spec(spec="mxfp8", **overrides):
    """The spec quantize would use, as a dict: a recipe name (see spec_names()) with overrides by the CLI's
    option names: profile, elem, rule, block, axis, rounding, saturation, nan_policy, element_scaling,
    subnormals, nan_fallback, error_order (4over6: seq, seq-fma, xor16, pairs16), amax_order (a block amax
    reduced by comparisons: any, fold-last, fold-first, tree-gt, tree-lt), scale_format (NVFP4 rules: the
    block scales' code format, e4m3 by default; ue4m3, ue5m3 (AMD gfx1250's E5M3), any float format of 8 bits
    or fewer; MX rules: the format of their power-of-two scales, ue8m0 by default, clamped to its powers of
    two), sr_bits, seed, margin,
    row_scaled (NVFP4: a second-level scale per row)."""
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
    text = {k: overrides[k] for k in _OVERRIDES if overrides.get(k) is not None}
    return _qmx.make_spec(spec, text, sr_bits=overrides.get("sr_bits", 8), seed=overrides.get("seed", 0),
                          margin=overrides.get("margin", 0), row_scaled=bool(overrides.get("row_scaled", False)))


def quantize(x, spec="mxfp8", *, state=None, tensor_amax=None, src="", reference=False, **overrides):
    """Quantizes x (its last dimension is the row; the others fold into rows) under a recipe: mxfp8,
    mxfp8-ocp, mxfp6_e2m3, mxfp4, nvfp4, nvfp4-2d, fp8-tensor-current, fp8-delayed, fp8-rowwise,
    fp8-block1x128, fp8-block128x128, ... (spec_names()), with overrides by the CLI's option names
    (profile="torchao-rceil", rule="ocp-floor", block="1x16", axis="col", rounding="sr", seed=7, ...).
    spec may also be a dict (QuantizedTensor.spec). Returns a QuantizedTensor.

    state: a DelayedScaling for fp8-delayed (quantized with its scale, then the amax is pushed).
    tensor_amax: NVFP4's tensor amax, when it comes from elsewhere (Transformer Engine's amax reduction).
    reference=True uses the scalar reference quantizer (slow, equal bit for bit).

    A CUDA tensor is quantized on its GPU by the emulation engine (the same bits; not fp8-delayed or the
    4over6 rules) into a CudaQuantizedTensor whose codes and scales stay on the device."""
    if _is_cuda_tensor(x):
        return _quantize_cuda(x, _spec_json(spec, overrides), state, tensor_amax, src, reference)
    return _qmx.quantize(as_array(x), _spec_json(spec, overrides), state, tensor_amax, _src_of(x, src), reference)


class CudaQuantizedTensor:
    """qmx.quantize of a CUDA tensor: codes (uint8, the source's shape) and scales (the scale grid: uint8
    UE8M0 bytes or E4M3 codes, or float32 decode scales) are torch tensors on the source's device, equal bit
    for bit to QuantizedTensor's codes and scales for the same input on the CPU. spec is the spec as a dict;
    tensor_amax, tensor_decode and line_amax (a list, row-scaled NVFP4) as on QuantizedTensor. cpu() copies
    it to the host as a QuantizedTensor (for dequantize(), pack() and the rest)."""

    def __init__(self, codes, scales, spec, tensor_amax, tensor_decode, line_amax):
        self.codes, self.scales, self.spec = codes, scales, spec
        self.tensor_amax, self.tensor_decode, self.line_amax = tensor_amax, tensor_decode, line_amax

    @property
    def shape(self):
        return tuple(self.codes.shape)

    @property
    def device(self):
        return self.codes.device

    def cpu(self):
        """The same tensor on the host: a QuantizedTensor (an explicit copy of codes and scales)."""
        import json
        return _qmx.assemble(self.codes.cpu().numpy(), self.scales.cpu().numpy(), json.dumps(self.spec),
                             self.tensor_amax, self.line_amax or None)

    def dequantize(self, order="rule", ftz=False):
        """The values (float32, the source's shape) on the same device, bit for bit as QuantizedTensor.dequantize
        with the same order and ftz (row-scaled NVFP4: q.cpu().dequantize())."""
        import torch
        out = torch.empty(self.shape, dtype=torch.float32, device=self.device)
        with torch.cuda.device(self.device):
            _qmx.dequantize_cuda(self._desc(), out.data_ptr(), torch.cuda.current_stream(self.device).cuda_stream,
                                 order, bool(ftz))
        return out

    def _desc(self):
        """What the engine's entry points read of it: spec, shape, amaxes and the device addresses."""
        cols = self.shape[-1] if self.shape else 1
        rows = self.codes.numel() // cols if cols else 0
        return {"spec": self.spec, "rows": rows, "cols": cols, "tensor_amax": self.tensor_amax,
                "tensor_decode": self.tensor_decode, "line_amax": list(self.line_amax or []),
                "codes": self.codes.data_ptr(), "scales": self.scales.data_ptr()}

    def __repr__(self):
        return "CudaQuantizedTensor(%s, %s, %s)" % ("x".join(map(str, self.shape)), describe_spec(self.spec),
                                                    self.device)


def _quantize_cuda(x, spec_json, state, tensor_amax, src, reference):
    import json
    import torch
    _require_engine("quantize")
    if state is not None:
        raise ValueError("delayed scaling keeps its state on the host: quantize x.cpu() with state")
    if tensor_amax is not None:
        raise ValueError("tensor_amax is not taken on the engine yet: quantize x.cpu() with it")
    if reference:
        raise ValueError("reference=True is the CPU's scalar quantizer; on a CUDA tensor the engine follows that "
                         "definition (drop reference, or pass x.cpu())")
    t, dtype = _engine_source(x, src, "quantizes", ("float32", "float16", "bfloat16"))
    if not t.is_contiguous():
        raise TypeError("x must be C-contiguous: x.contiguous() makes a contiguous copy on the device")
    cols = t.shape[-1] if t.dim() > 0 else 1
    rows = t.numel() // cols if cols else 0
    layout = _qmx.quantize_layout(spec_json, rows, cols)
    codes = torch.empty(t.shape, dtype=torch.uint8, device=t.device)
    scale_dtype = torch.float32 if layout["scale_format"] == "fp32" else torch.uint8
    scales = torch.empty((layout["scale_rows"], layout["scale_cols"]), dtype=scale_dtype, device=t.device)
    with torch.cuda.device(t.device):
        stream = torch.cuda.current_stream(t.device).cuda_stream
        info = _qmx.quantize_cuda(t.data_ptr(), dtype, rows, cols, spec_json, codes.data_ptr(),
                                  scales.data_ptr(), stream)
    return CudaQuantizedTensor(codes, scales, json.loads(info["spec"]), info["tensor_amax"], info["tensor_decode"],
                               list(info["line_amax"]))


def dequantize(q, scales=None, spec=None, tensor_amax=0.0, line_amax=None, order="rule", ftz=False):
    """FP32 values of a QuantizedTensor, or of stored parts: dequantize(codes, scales, spec,
    tensor_amax=...) with uint8 codes in the tensor's shape, the scale grid's scales (uint8, or float32
    for FP32-scale recipes) and the spec (a recipe name, a dict or JSON text); a row-scaled NVFP4 spec
    also takes line_amax, each line's amax. order: how NVFP4's two scales meet each element: "rule" (the
    scale rule's own), "te" (Transformer Engine's kernel), "global-div" (torchao on the CPU, TE's JAX, vLLM),
    "global-recip" (torchao on CUDA); docs/numerics.md "Dequantization orders". ftz=True: as a kernel built
    with flush-to-zero (CUDA's -ftz=true or --use_fast_math) computes it: a decode scale or a result below
    2^-126 in magnitude is read or written as a zero of its sign. A CudaQuantizedTensor is dequantized on its
    GPU into a CUDA tensor (the same bits)."""
    if isinstance(q, (QuantizedTensor, CudaQuantizedTensor)):
        if scales is not None or spec is not None:
            raise TypeError("dequantize(%s) takes no scales or spec" % type(q).__name__)
        return q.dequantize(order=order, ftz=ftz)
    if scales is None or spec is None:
        raise TypeError("dequantize(codes, scales, spec): give the scales and the spec")
    import json
    spec_arg = spec if isinstance(spec, str) else json.dumps(spec)
    lines = None if line_amax is None else [float(v) for v in line_amax]
    return _qmx.assemble(as_array(q), as_array(scales), spec_arg, tensor_amax, lines).dequantize(order=order, ftz=ftz)


def fake_quantize(x, spec="mxfp8", *, src="", **overrides):
    """dequantize(quantize(x, spec, ...)) in one pass, as float32 in x's shape. A CUDA tensor is quantized
    and dequantized on its GPU by the engine (a float32 CUDA tensor, the same bits)."""
    if _is_cuda_tensor(x):
        return quantize(x, spec, src=src, **overrides).dequantize()
    return _qmx.fake_quantize(as_array(x), _spec_json(spec, overrides), _src_of(x, src))


def tensor_amax(x, nan_policy="block-nan", *, src="", reference=False):
    """The tensor amax a per-tensor spec measures (NVFP4's S_enc, FP8 current scaling): the largest |x|, NaN
    skipped, Inf counted except under "block-nan" and "ignore" (the default is the nvfp4 spec's policy), as a
    Python float; 0 for an empty tensor. reference=True uses the one-element-at-a-time loop (equal)."""
    return _qmx.tensor_amax(as_array(x), nan_policy, _src_of(x, src), reference)


def gemm(a, b, model="exact", c=None, *, a_format=None, b_format=None, reference=False, alpha="decode", out=None):
    """D = A B (+ C) in float32 under an accumulation model (gemm_models(): exact, fp32-seq, block-exact,
    hopper-fp8, hopper-fp8-fast, hopper-fp8-vec, ada-fp8, blackwell-mxf8f6f4, blackwell-mxf4nvf4, or
    "fused:step=..,F=..,..."). A (M x K) and B (K x N) are QuantizedTensors, A quantized along K
    row-wise and B column-wise (quantize(b, spec, axis="col")), or uint8 codes with a_format/b_format.
    c (float32 M x N) is the accumulator's starting value. reference=True runs the scalar reference.
    Models that accumulate in FP16 (ada-mma-fp8-f16, hopper-wgmma-fp8-f16, rtx-blackwell-f8f6f4-f16, fused
    strings with acc=fp16) take c as FP16 values (a float16 array, or float32 holding FP16 values) and
    return a float16 array.
    CudaQuantizedTensors (qmx.quantize of CUDA tensors) are multiplied on their GPU by the emulation engine,
    bit for bit as on the CPU, into a float32 CUDA tensor (no c; the engine's models: fused and fp32-seq).
    alpha: how NVFP4's factor after accumulation is formed: "decode" (the product of the decode scales),
    "te" (Transformer Engine's cuBLASLt alpha, fl(fl(amax_a amax_b) fl(1/(36 bound_a bound_b)))) or
    "te-ref" (TE's reference GEMM, fl(fl(amax_a amax_b) / (36 bound_a bound_b)), per line when row-scaled).
    out: an array to write D into and return (C-contiguous M x N, float32, or float16 for the FP16-output
    models), the same bits without a new array each call; it may be c itself (D = A B + C in place)."""
    import numpy as np
    if isinstance(a, CudaQuantizedTensor) or isinstance(b, CudaQuantizedTensor):
        if out is not None:
            raise ValueError("gemm: out is for host operands; on CUDA tensors the engine returns a new tensor")
        return _gemm_cuda(a, b, model, c, a_format, b_format, reference, alpha)
    if c is not None:
        c = as_array(c)
        if c.dtype == np.float16:
            c = c.astype(np.float32)
    if not isinstance(a, QuantizedTensor):
        a = as_array(a)
    if not isinstance(b, QuantizedTensor):
        b = as_array(b)
    fp16 = _qmx.model_accumulates_fp16(model)
    if out is not None and not isinstance(out, np.ndarray):
        raise TypeError("gemm: out must be a numpy array, not %s" % type(out).__name__)
    if out is not None and fp16:
        if out.dtype != np.float16:
            raise TypeError("gemm: out must be float16 for %s (an FP16-output model), not %s" % (model, out.dtype))
        d = _qmx.gemm(a, b, model, c, a_format, b_format, reference, alpha)
        if out.shape != d.shape:
            raise ValueError("gemm: out must be %d x %d (M x N), not %s" % (d.shape[0], d.shape[1], out.shape))
        out[...] = d.astype(np.float16)
        return out
    d = _qmx.gemm(a, b, model, c, a_format, b_format, reference, alpha, out)
    return d.astype(np.float16) if fp16 else d


def _gemm_cuda(a, b, model, c, a_format, b_format, reference, alpha, stats=None):
    """gemm of two CudaQuantizedTensors on their GPU (the emulation engine): a float32 CUDA tensor."""
    import torch
    if not (isinstance(a, CudaQuantizedTensor) and isinstance(b, CudaQuantizedTensor)):
        raise TypeError("gemm: a and b must both be quantized CUDA tensors (qmx.quantize of a CUDA tensor), or both "
                        "on the CPU; call .cpu() on the CUDA one to multiply on the host")
    if a.device != b.device:
        raise ValueError("gemm: a is on %s and b on %s" % (a.device, b.device))
    if c is not None or a_format is not None or b_format is not None or reference:
        raise ValueError("gemm: c, a_format, b_format and reference are for host operands; on CUDA tensors the "
                         "engine multiplies two QuantizedTensors from zero")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError("gemm: a and b must be 2-D for a GEMM")
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
    with torch.cuda.device(a.device):
        info = _qmx.gemm_cuda(a._desc(), b._desc(), model, alpha, out.data_ptr(),
                              torch.cuda.current_stream(a.device).cuda_stream)
    if stats is not None:
        stats.update(info)
    return out


def gemm_stats(a, b, model="exact", *, alpha="decode"):
    """gemm of two CudaQuantizedTensors, with what the engine did: (D, {'kernel': 'fp4' | 'dmma' | 'generic',
    'steps', 'fallback_steps' (steps that took the exact fallback), 'whole_outputs' (exact: outputs whose FP64
    sum over all of K was proven exact up front and ran without per-step checks), 'kernel_seconds'})."""
    stats = {}
    d = _gemm_cuda(a, b, model, None, None, None, False, alpha, stats)
    return d, stats


def _scaled_mm_out(out_dtype):
    """torch._scaled_mm's out_dtype as qmx names it: float32 (None), bfloat16 or float16."""
    if out_dtype is None:
        return "float32"
    name = str(out_dtype).replace("torch.", "").replace("<class 'numpy.", "").rstrip("'>")
    names = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float16", "half": "float16"}
    if name not in names:
        raise ValueError("scaled_mm: out_dtype must be float32, bfloat16 or float16, not %s" % out_dtype)
    return names[name]


def _scaled_mm_bias(bias, out):
    """The bias as uint16 bits of the output type: a torch tensor of that dtype (torch's rule), NumPy
    float16 for float16 output, uint16 bits, or float values that the output type holds exactly."""
    import numpy as np
    if type(bias).__module__.startswith("torch"):
        want = {"bfloat16": "torch.bfloat16", "float16": "torch.float16"}[out]
        if str(bias.dtype) != want:
            raise TypeError("scaled_mm: bias must be %s to compute %s output, not %s" % (want, out, bias.dtype))
        import torch
        return bias.detach().cpu().view(torch.int16).numpy().view(np.uint16)
    x = np.asarray(bias)
    if x.dtype == np.uint16:
        return x
    if x.dtype == np.float16 and out == "float16":
        return x.view(np.uint16)
    v = x.astype(np.float32)
    if out == "bfloat16":
        u = v.view(np.uint32)
        bits = (u >> 16).astype(np.uint16)
        exact = (u & 0xFFFF) == 0
    else:
        h = v.astype(np.float16)
        bits = h.view(np.uint16)
        exact = (h.astype(np.float32) == v) | (np.isnan(v) & np.isnan(h))
    if not np.all(exact):
        raise ValueError("scaled_mm: bias values must be %s values (torch takes a %s bias); %d are not" %
                         (out, out, int((~exact).sum())))
    return bits


def scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None, scale_result=None, use_fast_accum=False, *,
              a_format=None, b_format=None, split_k=None, return_model=False, return_info=False):
    """torch._scaled_mm as an H100/H200 computes it (cuBLASLt on sm_90), bit for bit, in the modes measured on
    an H200 (gpu/README.md). a: M x K and b: K x N FP8 codes (uint8 arrays with a_format/b_format, default
    "e4m3", or torch float8_e4m3fn/float8_e5m2 tensors); b may be given column-major (b_t.T, as torch wants it).
    Scales (FP32): one value each (per tensor), M x 1 and 1 x N (row-wise: per token, per channel), or
    blockwise (A's 1x128 blocks, M x ceil(K/128), with B's 128x128, ceil(K/128) x ceil(N/128), or 128x1,
    ceil(K/128) x N). out_dtype: float32 (default), bfloat16 or float16 (torch dtypes or names); bias: N values
    of the output's type (BF16/FP16 outputs only, as torch). Returns float32 or float16 arrays; bfloat16 as a
    torch.bfloat16 tensor when a or b is a torch tensor, else as uint16 bit patterns.
    split_k: cuBLASLt's numSplitsK for per-tensor scales; None takes the choice measured on the H200 for the
    shape (K <= 4096: unsplit) and raises ValueError where it was not measured. Unmeasured modes raise
    ValueError: scale_result, blockwise with use_fast_accum, a bias or a 16-bit output. return_model=True
    returns (D, model name); return_info=True returns (D, dict of model, scaling, split_k).

    CUDA tensors (a and b, their scales and the bias all on one GPU, as torch._scaled_mm takes them) run on
    that GPU: each split of K through the engine's GEMM under the same Hopper model (on a Hopper GPU,
    cuBLASLt itself), the epilogue by the CPU's own source; D is a CUDA tensor of out_dtype, bit for bit the
    CPU's, and nothing is copied to the host."""
    import numpy as np
    if scale_result is not None:
        raise ValueError("scaled_mm: scale_result (an FP8 output's scale) is not modelled: it was not measured")
    out = _scaled_mm_out(out_dtype)
    if split_k is not None and (int(split_k) != split_k or split_k < 1):
        raise ValueError("scaled_mm: split_k must be a positive integer, not %r" % (split_k,))
    if any(_is_cuda_tensor(t) for t in (a, b, scale_a, scale_b, bias)):
        d, model, scaling, splits = _scaled_mm_cuda(a, b, scale_a, scale_b, bias, out, use_fast_accum, a_format,
                                                    b_format, split_k)
        if return_info:
            return d, {"model": model, "scaling": scaling, "split_k": splits}
        return (d, model) if return_model else d
    torch_in = any(type(t).__module__.startswith("torch") for t in (a, b))

    def codes(t, fmt, what):
        if type(t).__module__.startswith("torch"):
            f = _scaled_mm_float8(t, fmt, what)
            if f is not None:
                import torch
                return t.detach().view(torch.uint8).numpy(), f
        return as_array(t), fmt or "e4m3"

    a, fa = codes(a, a_format, "a")
    b, fb = codes(b, b_format, "b")
    if isinstance(b, np.ndarray) and b.ndim == 2 and not b.flags.c_contiguous and b.flags.f_contiguous:
        b = np.ascontiguousarray(b)  # torch's column-major B: codes are one byte each

    def scale(s):
        if type(s).__module__.startswith("torch"):
            s = s.detach().cpu()
        return np.ascontiguousarray(np.asarray(as_array(s), dtype=np.float32))

    sa, sb = scale(scale_a), scale(scale_b)
    if sa.size == 1:
        sa = sa.reshape(1)
    if sb.size == 1:
        sb = sb.reshape(1)
    bias_bits = None
    if bias is not None:
        if out == "float32":
            raise ValueError("scaled_mm: a bias needs a bfloat16 or float16 out_dtype (torch: bias is not supported "
                             "when out_dtype is float32)")
        bias_bits = np.ascontiguousarray(_scaled_mm_bias(bias, out))
    d, model, scaling, splits = _qmx.scaled_mm(a, b, sa, sb, fa, fb, use_fast_accum, out, bias_bits,
                                               0 if split_k is None else int(split_k))
    if out == "float16":
        d = d.view(np.float16)
    elif out == "bfloat16" and torch_in:
        import torch
        d = torch.from_numpy(d.view(np.int16)).view(torch.bfloat16)
    if return_info:
        return d, {"model": model, "scaling": scaling, "split_k": splits}
    return (d, model) if return_model else d


def _scaled_mm_float8(t, fmt, what):
    """The format of a torch float8 operand ("e4m3" or "e5m2"), checked against fmt; None for other dtypes.
    torch._scaled_mm on Hopper takes the OCP types; the FNUZ types are AMD's (another bias, no -0)."""
    name = str(t.dtype).replace("torch.", "")
    if not name.startswith("float8"):
        return None
    if name not in ("float8_e4m3fn", "float8_e5m2"):
        raise TypeError("scaled_mm: %s is %s; the Hopper model takes float8_e4m3fn and float8_e5m2 (OCP) codes"
                        % (what, name))
    f = "e4m3" if "e4m3" in name else "e5m2"
    if fmt is not None and fmt != f:
        raise TypeError("%s is %s but %s_format is %s" % (what, name, what, fmt))
    return f


def _scaled_mm_cuda(a, b, scale_a, scale_b, bias, out, use_fast_accum, a_format, b_format, split_k):
    """scaled_mm on CUDA tensors: (D on the device, model, scaling, split_k)."""
    import torch
    _require_engine("scaled_mm")
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)) + ((("bias", bias),) if bias is not None else ()):
        if not _is_cuda_tensor(t):
            raise TypeError("scaled_mm: %s must be a CUDA tensor like the other operands: a CUDA tensor is never "
                            "copied to the host (move them all with .cuda() or all with .cpu())" % name)
        if t.device != a.device:
            raise ValueError("scaled_mm: %s is on %s, a on %s" % (name, t.device, a.device))

    def codes(t, fmt, what):
        t = t.detach()
        f = _scaled_mm_float8(t, fmt, what)
        if f is not None:
            t = t.view(torch.uint8)
        elif t.dtype == torch.uint8:
            f = fmt or "e4m3"
        else:
            raise TypeError("scaled_mm: %s must hold FP8 codes (float8_e4m3fn, float8_e5m2 or uint8), not %s" % (what, t.dtype))
        if t.dim() != 2:
            raise ValueError("scaled_mm: a and b must be 2-D")
        return t.contiguous(), f  # torch's column-major B (b_t.T): a contiguous copy on the device

    a2, fa = codes(a, a_format, "a")
    b2, fb = codes(b, b_format, "b")
    m, k = a2.shape
    if b2.shape[0] != k:
        raise ValueError("scaled_mm: a is %d x %d but b has %d rows" % (m, k, b2.shape[0]))
    n = b2.shape[1]

    def scale(t, what):
        t = t.detach()
        if t.dtype != torch.float32:
            raise TypeError("scaled_mm: %s must be float32, not %s" % (what, t.dtype))
        if t.dim() > 2:
            raise ValueError("scaled_mm: a scale has at most 2 dimensions")
        rows = t.shape[0] if t.dim() == 2 else 1
        cols = t.shape[-1] if t.dim() > 0 else 1
        return t.contiguous(), rows, cols

    sa, sar, sac = scale(scale_a, "scale_a")
    sb, sbr, sbc = scale(scale_b, "scale_b")
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    bias_ptr = 0
    if bias is not None:
        if out == "float32":
            raise ValueError("scaled_mm: a bias needs a bfloat16 or float16 out_dtype (torch: bias is not supported "
                             "when out_dtype is float32)")
        if bias.dtype != dtypes[out]:
            raise TypeError("scaled_mm: bias must be %s to compute %s output, not %s" % (dtypes[out], out, bias.dtype))
        bias = bias.detach().contiguous()
        if bias.numel() != n:
            raise ValueError("scaled_mm: bias must hold N = %d values" % n)
        bias_ptr = bias.data_ptr()
    d = torch.empty((m, n), dtype=dtypes[out], device=a2.device)
    with torch.cuda.device(a2.device):
        model, scaling, splits = _qmx.scaled_mm_cuda(
            a2.data_ptr(), b2.data_ptr(), m, k, n, sa.data_ptr(), sar, sac, sb.data_ptr(), sbr, sbc, fa, fb,
            bool(use_fast_accum), out, bias_ptr, 0 if split_k is None else int(split_k), d.data_ptr(),
            torch.cuda.current_stream(a2.device).cuda_stream)
    return d, model, scaling, splits


def scaled_mm_split_k(m, n, k, out_dtype=None):
    """The split-K count cuBLASLt chose on the H200 for a per-tensor e4m3 x e4m3 torch._scaled_mm of this shape
    (1 for K <= 4096), or None where it was not measured (then pass split_k to scaled_mm)."""
    return _qmx.scaled_mm_split_k(int(m), int(n), int(k), _scaled_mm_out(out_dtype))


def hadamard(x, block=32, *, inverse=False):
    """The normalized block Hadamard transform of each row of float32 x (block 16..256 dividing the last
    dimension); inverse=True undoes it. A float32 CUDA tensor is transformed on its GPU into a new CUDA
    tensor (the same bits)."""
    return _transform(x, "hadamard:%d" % block, inverse)


def rht(x, block=32, seed=0, *, inverse=False):
    """The randomized Hadamard transform: random signs (seeded Philox) then the block Hadamard; on CUDA
    tensors as hadamard."""
    return _transform(x, "rht:%d:%d" % (block, seed), inverse)


def _transform(x, transform, inverse):
    if not _is_cuda_tensor(x):
        return _qmx.hadamard(as_array(x), transform, inverse)
    import torch
    _require_engine("hadamard")
    t = _cuda_float32("hadamard", "x", x)
    cols = t.shape[-1] if t.dim() > 0 else 1
    rows = t.numel() // cols if cols else 0
    out = t.clone()
    with torch.cuda.device(t.device):
        _qmx.hadamard_cuda(out.data_ptr(), rows, cols, transform, inverse, torch.cuda.current_stream(t.device).cuda_stream)
    return out


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

# Every public name of the package (`from qmx import *`); qmx.torch is imported on its own (it needs torch).
__all__ = sorted(n for n in dir() if not n.startswith("_"))
