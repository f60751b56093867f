"""qmx.testing: bitwise tests of your own quantization kernels and GEMMs, and which documented variant a
kernel actually implements.

    >>> import numpy as np, qmx, qmx.testing as qt
    >>> x = qmx.distribution("normal", (8, 64), seed=3)
    >>> q = qmx.quantize(x, "mxfp8", rule="ocp-floor")            # stands in for your kernel's outputs
    >>> qt.assert_bitwise(q.codes, qmx.quantize(x, "mxfp8", rule="ocp-floor").codes, fmt="e4m3")
    >>> found = qt.identify("quantizer", x, (q.codes, q.scales), elem="e4m3", block=32)
    >>> "mx:rule=ocp-floor,nan=block-nan,scaling=exact" in found.matches
    True

Variants have stable names ("mx:rule=round-up,nan=block-nan,scaling=exact", "gemm:hopper-fp8,alpha=decode");
variants(kind) lists them. Every variant is the library's own computation, tested bit for bit elsewhere
against the hardware and the peers' references (docs/numerics.md, docs/gemm.md)."""
import numpy as np

from . import _qmx, as_array, cast_profile, cast_profile_names, convert, decode, gemm, gemm_models, quantize

__all__ = ["assert_bitwise", "identify", "variants", "run_variant", "Identification", "cases", "case_kinds", "strategy"]

# The documented choices of a block quantizer, by family: UE8M0 power-of-two scales (MX) and E4M3 block
# scales with an FP32 tensor scale (NVFP4).
_MX_RULES = ("ocp-floor", "round-up", "ceil", "even", "max-finite")
_NVFP4_RULES = ("nvfp4", "nvfp4-div", "nvfp4-torchao", "nvfp4-torchao-cuda", "nvfp4-4over6", "nvfp4-4over6-mse")
_NAN_POLICIES = ("block-nan", "scale-nan", "te", "ignore-nan", "ignore")
_NVFP4_NAN_POLICIES = ("block-nan", "ignore-nan", "ignore")
_SCALINGS = ("exact", "fp32", "te-rcp")
_ALPHAS = ("decode", "te", "te-ref")
# The 4over6 rules' error-sum orders (qmx/scale.h ErrorOrder); "seq" is the default and keeps the older names.
_ERROR_ORDERS = ("seq", "seq-fma", "xor16", "pairs16")
# Block amaxes reduced by comparisons that keep or drop a NaN by its position (qmx/scale.h AmaxOrder), under
# the NaN policies that react to a NaN amax; the names without ",amax=" take the policy's order-free amax.
_AMAX_ORDERS = ("fold-last", "fold-first", "tree-gt", "tree-lt")
_ORDERED_NAN = ("block-nan", "scale-nan", "te")
# A conversion's choices: the reference routine's rounding x saturation, and the libraries' cast profiles.
_ROUNDINGS = ("rne", "rna", "rz", "ru", "rd", "ro")
_SATURATIONS = ("satfinite", "nosat", "satpropagate")


def _bits(a):
    """An array's elements as unsigned integers of the same width (floats by their bit patterns)."""
    a = np.ascontiguousarray(as_array(a))
    if a.dtype.kind in "ui":
        return a.view(np.dtype("u%d" % a.dtype.itemsize))
    if a.dtype.kind == "f" or a.dtype.kind == "V":
        return a.view(np.dtype("u%d" % a.dtype.itemsize))
    raise TypeError("assert_bitwise compares integer codes or floating-point values, not %s" % a.dtype)


def _show(v, bits, fmt):
    width = bits.dtype.itemsize * 2
    text = "0x%0*X" % (width, int(bits))
    if fmt is not None:
        text += " (%r)" % float(decode(np.array([int(bits)], np.uint8), fmt)[0])
    elif v.dtype.kind == "f":
        text += " (%r)" % float(v)
    return text


def assert_bitwise(actual, expected, *, what="codes", fmt=None, inputs=None, max_report=8):
    """Raises AssertionError unless `actual` and `expected` (NumPy arrays or CPU torch tensors of one shape
    and element width: uint8 codes, or float values compared by their bit patterns, so -0 differs from +0
    and NaN payloads count) are identical. The message gives the count of differing elements, the first
    max_report of them by index, both values in hex (decoded under `fmt` for codes) and, when `inputs` (of
    the same shape) is given, the input at each index."""
    a, e = as_array(actual), as_array(expected)
    if a.shape != e.shape:
        raise AssertionError("%s: shapes differ: actual %s, expected %s" % (what, a.shape, e.shape))
    ab, eb = _bits(a), _bits(e)
    if ab.dtype.itemsize != eb.dtype.itemsize:
        raise AssertionError("%s: element widths differ: actual %s, expected %s" % (what, a.dtype, e.dtype))
    diff = np.flatnonzero(ab.reshape(-1) != eb.reshape(-1))
    if diff.size == 0:
        return
    x = None if inputs is None else as_array(inputs).reshape(-1)
    lines = ["%s: %d of %d elements differ" % (what, diff.size, ab.size)]
    for flat in diff[:max_report]:
        index = np.unravel_index(flat, a.shape)
        line = "  at %s: actual %s, expected %s" % (tuple(int(i) for i in index),
                                                    _show(a.reshape(-1)[flat], ab.reshape(-1)[flat], fmt),
                                                    _show(e.reshape(-1)[flat], eb.reshape(-1)[flat], fmt))
        if x is not None and x.size == ab.size:
            line += ", input %r" % (x[flat].item(),)
        lines.append(line)
    if diff.size > max_report:
        lines.append("  ... and %d more" % (diff.size - max_report))
    raise AssertionError("\n".join(lines))


def variants(kind):
    """The stable names of every documented variant of `kind`: "quantizer" (MX and NVFP4 block quantizers:
    scale rule x NaN policy x element scaling, and for the 4over6 rules the order of the error sums, ",order="
    seq-fma, xor16 or pairs16 where it is not the element order; a block amax reduced by comparisons, ",amax="
    fold-last, fold-first, tree-gt or tree-lt, under the NaN policies a NaN amax reaches), "gemm"
    (accumulation model x alpha rule), "dequantizer" (NVFP4's scale order x the output's type, and the same
    computed with flush-to-zero, ",ftz=on") or "converter" (a cast into one format: the libraries' cast
    profiles, qmx.cast_profile, and the reference routine's rounding x saturation, qmx.convert)."""
    if kind == "quantizer":
        mx = ["mx:rule=%s,nan=%s,scaling=%s" % (r, n, s) for r in _MX_RULES for n in _NAN_POLICIES for s in _SCALINGS]
        # max-finite takes the ignore policy only, which no order reaches.
        mx += ["mx:rule=%s,nan=%s,scaling=%s,amax=%s" % (r, n, s, o) for r in _MX_RULES if r != "max-finite"
               for n in _ORDERED_NAN for s in _SCALINGS for o in _AMAX_ORDERS]
        nv = ["nvfp4:rule=%s,nan=%s" % (r, n) for r in _NVFP4_RULES for n in _NVFP4_NAN_POLICIES]
        nv += ["nvfp4:rule=%s,nan=block-nan,amax=%s" % (r, o) for r in _NVFP4_RULES if "4over6" not in r
               for o in _AMAX_ORDERS]
        # 4over6 under its other error orders (",order=..."; the bare names sum in element order, "seq").
        nv += ["nvfp4:rule=%s,nan=%s,order=%s" % (r, n, o) for r in _NVFP4_RULES if "4over6" in r
               for n in _NVFP4_NAN_POLICIES for o in _ERROR_ORDERS[1:]]
        return mx + nv
    if kind == "gemm":
        return ["gemm:%s,alpha=%s" % (m, a) for m in gemm_models() for a in _ALPHAS]
    if kind == "dequantizer":
        plain = ["dequantizer:order=%s,out=%s" % (o, t) for o in _DEQUANT_ORDERS for t in _DEQUANT_OUTPUTS]
        return plain + [p + ",ftz=on" for p in plain]
    if kind == "converter":
        return (["converter:profile=%s" % p for p in cast_profile_names()] +
                ["converter:round=%s,sat=%s" % (r, s) for r in _ROUNDINGS for s in _SATURATIONS])
    raise ValueError("identify/variants: kind must be 'quantizer', 'gemm', 'dequantizer' or 'converter', not %r"
                     % (kind,))


# How NVFP4's two scales meet each element (qmx.dequantize's order) and the output type the FP32 value is
# rounded to (to nearest even, as a kernel's final cast does).
_DEQUANT_ORDERS = ("rule", "te", "global-div", "global-recip")
_DEQUANT_OUTPUTS = ("float32", "bfloat16", "float16")


def _round_output(values, out):
    """float32 values as a dequantizer writes them in `out`: float32 as they are, float16 by NumPy's RNE cast,
    bfloat16 as uint16 bits rounded to nearest even, a NaN kept quiet with its sign and top payload bits
    (casts differ on NaN: torch 1.13's CPU cast gives 0xFFFF)."""
    if out == "float32":
        return values
    if out == "float16":
        return values.astype(np.float16)
    b = values.astype(np.float32).view(np.uint32)
    rounded = ((b.astype(np.uint64) + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    return np.where(nan, ((b >> 16) | 0x40).astype(np.uint16), rounded)


def _parse(name):
    family, _, rest = name.partition(":")
    fields = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
    return family, rest.split(",")[0], fields


class Identification:
    """What identify found: `matches`, the variants that reproduce every output bit for bit, and, when none
    does, `closest`: (name, differing elements, first differing flat index) of the nearest, fewest first.
    `tried` counts the variants run; `refused` maps the variants the library refused for these inputs to
    its message."""

    def __init__(self, matches, closest, tried, refused):
        self.matches, self.closest, self.tried, self.refused = matches, closest, tried, refused

    def __bool__(self):
        return bool(self.matches)

    def __repr__(self):
        if self.matches:
            return "Identification(matches=%r)" % (self.matches,)
        return "Identification(matches=[], closest=%r)" % (self.closest[:3],)


def _mismatch(got, want):
    count, first = 0, None
    for g, w in zip(got, want):
        gb, wb = _bits(g).reshape(-1), _bits(w).reshape(-1)
        if gb.shape != wb.shape or gb.dtype.itemsize != wb.dtype.itemsize:
            return max(gb.size, wb.size), 0
        d = np.flatnonzero(gb != wb)
        if d.size and first is None:
            first = int(d[0])
        count += int(d.size)
    return count, first


def identify(kind, x, outputs, *, elem=None, block=None, axis="row", rounding="rne", tensor_amax=None,
             a_format=None, b_format=None, c=None, src="", closest=5):
    """Which documented variants of `kind` reproduce a kernel's outputs bit for bit.

    kind "quantizer": x the input (float32, float16 or bfloat16, its last dimension the row) and outputs
    (codes, scales) as your kernel wrote them (uint8 element codes, one per byte, and uint8 scale bytes:
    UE8M0 for MX, E4M3 codes for NVFP4, in the library's row-major scale layout). elem (default: e4m3 for MX,
    e2m1 for NVFP4), block (1-D length along the row; default 32 for MX, 16 for NVFP4), axis, rounding and
    tensor_amax (NVFP4's, when your kernel takes it from elsewhere) fix what you know.

    kind "gemm": x = (a, b) as QuantizedTensors or uint8 codes with a_format / b_format (and c, the
    accumulator's start), outputs the float32 D; every accumulation model under every alpha rule is tried.

    kind "converter": x the values your cast read (float32; float16 or bfloat16 as their dtype or uint16 bits
    with src), outputs its codes (uint8), elem the destination format; every cast profile and every
    rounding x saturation of the reference routine is tried.

    kind "dequantizer": x the QuantizedTensor your kernel read (its codes, scales and amax), outputs the
    values it wrote (float32, float16, or bfloat16 as a torch tensor or its uint16 bits); every NVFP4 scale
    order under each output rounding is tried (MX and FP8 tensors have one order: "rule").

    Returns an Identification: .matches (names as variants(kind) lists them) or, when empty, .closest."""
    names = variants(kind)
    if kind == "quantizer":
        if isinstance(outputs, tuple) or isinstance(outputs, list):
            want = (as_array(outputs[0]), as_array(outputs[1]))
        else:
            want = (as_array(outputs.codes), as_array(outputs.scales))
        x = as_array(x)
    else:
        want = (as_array(outputs),)
    known = dict(elem=elem, block=block, axis=axis, rounding=rounding, tensor_amax=tensor_amax, a_format=a_format,
                 b_format=b_format, c=c, src=src)
    matches, scored, refused = [], [], {}
    for name in names:
        try:
            got = run_variant(kind, name, x, **known)
        except (ValueError, TypeError) as err:
            refused[name] = str(err)
            continue
        count, first = _mismatch(got, want)
        if count == 0:
            matches.append(name)
        else:
            scored.append((name, count, first))
    scored.sort(key=lambda t: t[1])
    return Identification(matches, [] if matches else scored[:closest], len(names) - len(refused), refused)


def run_variant(kind, name, x, *, elem=None, block=None, axis="row", rounding="rne", tensor_amax=None, a_format=None,
                b_format=None, c=None, src=""):
    """The outputs variant `name` (as variants(kind) lists it) gives for inputs x, in the form identify compares:
    (codes, scales) for a quantizer, (values,) for a dequantizer or a GEMM; the keywords as identify's.
    Raises ValueError where the library refuses the variant for these inputs."""
    family, head, f = _parse(name)
    if name not in variants(kind):
        raise ValueError("run_variant: %r is not a %s variant (see variants(%r))" % (name, kind, kind))
    if kind == "quantizer":
        spec = "mxfp8" if family == "mx" else "nvfp4"
        e = elem or ("e4m3" if family == "mx" else "e2m1")
        n = block or (32 if family == "mx" else 16)
        kw = dict(elem=e, block="1x%d" % n, axis=axis, rounding=rounding, rule=f["rule"], nan_policy=f["nan"])
        if family == "mx":
            kw["element_scaling"] = f["scaling"]
        if "order" in f:
            kw["error_order"] = f["order"]
        if "amax" in f:
            kw["amax_order"] = f["amax"]
        q = quantize(as_array(x), spec, tensor_amax=tensor_amax, **kw)
        return (q.codes, q.scales)
    if kind == "converter":
        if elem is None:
            raise ValueError("run_variant: a converter variant needs elem, the destination format")
        if "profile" in f:
            return (cast_profile(x, elem, f["profile"], src=src),)
        return (convert(x, elem, f["round"], f["sat"], src=src),)
    if kind == "dequantizer":
        return (_round_output(x.dequantize(order=f["order"], ftz=f.get("ftz") == "on"), f["out"]),)
    a, b = x
    return (gemm(a, b, head, c, a_format=a_format, b_format=b_format, alpha=f["alpha"]),)


# ------------------------------------------------------------------ adversarial inputs

# kind -> (golden suite, the header key naming the format or element, how a case's inputs are read)
_CASE_KINDS = {
    "convert": ("conversions", "dst"),    # 1-D: the source values (float32; float16/bfloat16 as uint16 bits)
    "mx-block": ("mx-block", "elem"),     # (n, 32) float32 blocks
    "nvfp4-block": ("nvfp4-block", None),  # (n, 16) float32 blocks, with each case's tensor amax
    "ue8m0": ("ue8m0", "elem"),           # 1-D float32 block amaxes
    "sr": ("sr", "dst"),                  # (n, 4) float32 values and (n,) uint32 random words
}
_GENERATED = {}


def case_kinds():
    """The kinds cases() takes: convert, mx-block, nvfp4-block, ue8m0, sr."""
    return sorted(_CASE_KINDS)


def _suite_dir(suite, level, seed):
    """A directory holding the golden generator's files of one suite (generated once per process)."""
    import os
    import tempfile
    from . import golden
    key = (suite, level, seed)
    if key not in _GENERATED:
        d = tempfile.mkdtemp(prefix="qmx_cases_")
        golden.generate(d, (suite,), level, seed, hopper_dir="")
        _GENERATED[key] = os.path.join(d, suite)
    return _GENERATED[key]


def _f32(fields):
    return np.array([int(f, 16) for f in fields], dtype=np.uint32).view(np.float32)


def cases(kind, spec, *, level=1, seed=1, src="f32"):
    """The golden generator's adversarial inputs (qmx-sim golden gen, golden/README.md) as arrays, for a test to
    feed a kernel: ties and their neighbours at every exponent, every code's boundaries, subnormals, the
    largest finite values and overflow, signed zeros, NaN and Inf, all-zero and all-equal blocks, scales at
    the rules' edges. Each distinct input once, in the generator's order (the same on every machine).

    kind "convert", spec a destination format ("e4m3", "e2m1", ...): the inputs of every conversion into it
    from `src` ("f32": float32; "f16", "bf16": uint16 bit patterns). "mx-block", spec an element format:
    (n, 32) float32 blocks. "nvfp4-block" (spec "e2m1"): a dict of "blocks" (n, 16) float32 and
    "tensor_amax" (n,) float32, the amax each block was quantized under. "ue8m0", spec an element format:
    block amaxes (float32). "sr", spec a destination format: a dict of "x" (n, 4) float32 and "rbits" (n,)
    uint32, PTX cvt.rs's operands. level 2 gives the full cross products (larger)."""
    import glob
    import os
    from . import golden, format_name
    if kind not in _CASE_KINDS:
        raise ValueError("cases: unknown kind %r (known: %s)" % (kind, ", ".join(case_kinds())))
    if level not in (1, 2):
        raise ValueError("cases: level is 1 or 2, not %r" % (level,))
    suite, key = _CASE_KINDS[kind]
    want = format_name(spec)
    rows, seen, amax = [], set(), []
    for path in sorted(glob.glob(os.path.join(_suite_dir(suite, level, seed), "*.txt"))):
        header, lines = golden.read(path)
        if key is not None and header.get(key) != want:
            continue
        if kind == "nvfp4-block" and want != "e2m1":
            continue
        if kind == "convert" and header.get("src") != src:
            continue
        if kind == "sr" and header.get("layout") != "ptx-cvt-rs-x4":
            continue
        for c in lines:
            if kind == "convert":
                ins = (c[0],)
            elif kind == "mx-block":
                ins = tuple(c[:32])
            elif kind == "nvfp4-block":
                ins = tuple(c[:17])
            elif kind == "ue8m0":
                ins = (c[0],)
            else:
                ins = tuple(c[:5])
            if ins not in seen:
                seen.add(ins)
                rows.append(ins)
    if not rows:
        raise ValueError("cases: the %s files hold no case for %r%s" % (
            suite, spec, " from " + src if kind == "convert" else ""))
    if kind == "convert":
        if src == "f32":
            return _f32([r[0] for r in rows])
        return np.array([int(r[0], 16) for r in rows], dtype=np.uint16)
    if kind == "mx-block":
        return _f32([f for r in rows for f in r]).reshape(-1, 32)
    if kind == "nvfp4-block":
        return {"tensor_amax": _f32([r[0] for r in rows]), "blocks": _f32([f for r in rows for f in r[1:]]).reshape(-1, 16)}
    if kind == "ue8m0":
        return _f32([r[0] for r in rows])
    return {"x": _f32([f for r in rows for f in r[:4]]).reshape(-1, 4),
            "rbits": np.array([int(r[4], 16) for r in rows], dtype=np.uint32)}


def strategy(kind, spec, *, level=1, seed=1, src="f32"):
    """A hypothesis strategy (Debian's python3-hypothesis) drawing tensors from cases(kind, spec): for
    "convert", 1-D arrays of 1 to 256 of its inputs; for "mx-block", (1..8, 32 * (1..4)) float32 tensors
    made of its blocks (each row a run of whole blocks). Raises ImportError without hypothesis."""
    from hypothesis import strategies as st
    if kind == "convert":
        pool = cases(kind, spec, level=level, seed=seed, src=src)
        return st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=256).map(lambda idx: pool[np.array(idx)])
    if kind == "mx-block":
        pool = cases(kind, spec, level=level, seed=seed)

        def tensor(shape_and_idx):
            (rows, per_row), idx = shape_and_idx
            return pool[np.array(idx[:rows * per_row])].reshape(rows, per_row * 32)
        return st.tuples(st.integers(1, 8), st.integers(1, 4)).flatmap(
            lambda rp: st.tuples(st.just(rp), st.lists(st.integers(0, len(pool) - 1), min_size=rp[0] * rp[1],
                                                       max_size=rp[0] * rp[1]))).map(tensor)
    raise ValueError("strategy: kinds convert and mx-block (cases() gives the others as arrays)")

