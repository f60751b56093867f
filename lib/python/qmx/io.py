"""qmx.io: .safetensors files, which NumPy cannot read or write, and quantized tensors in the layout
`qmx-sim quantize` writes (NAME.codes, NAME.scales, the spec in the metadata), so that files move between
Python and the CLI (`qmx-sim dequantize` reads what save_quantized writes, load_quantized reads what
`qmx-sim quantize` writes)."""
import json

from . import _qmx


def safetensors_info(path):
    """(tensors, metadata): each tensor's name, dtype as the file spells it, shape, whether qmx reads it
    (F32, F64, F16, BF16, U8, U16, and the code dtypes F8_E4M3, F8_E5M2, F8_E8M0, F6_E2M3, F6_E3M2, F4,
    I8, whose entries also name their element "format"), and the __metadata__ map."""
    return _qmx.safetensors_index(str(path))


def load_safetensors(path, names=None):
    """{name: array} of the readable tensors (or those named). BF16 tensors come back as their uint16
    bits (pass src="bf16" to qmx.convert/quantize); code dtypes as uint8 codes, one per element (F4 and
    F6 unpacked), to decode with qmx.decode(codes, format)."""
    tensors, _ = _qmx.safetensors_index(str(path))
    if names is None:
        names = [t["name"] for t in tensors if t["readable"]]
    return _qmx.safetensors_read(str(path), list(names))


def save_safetensors(path, tensors, metadata=None, bf16=(), dtypes=None):
    """Writes {name: array} (float32, float64, float16, uint8, uint16; names in `bf16` are uint16 bits
    written as BF16; `dtypes` maps names of uint8 code arrays to a code dtype such as "F8_E4M3" or "F4",
    packed as the file format wants) atomically: a temporary file, then a rename."""
    dtypes = dict(dtypes or {})
    items = [(name, arr, "BF16" if name in bf16 else dtypes.get(name, "")) for name, arr in tensors.items()]
    _qmx.safetensors_write(str(path), items, {str(k): str(v) for k, v in (metadata or {}).items()})


def save_quantized(path, tensors, dequantized=False):
    """Writes {name: QuantizedTensor} as `qmx-sim quantize` does: NAME.codes (uint8, the tensor's
    shape), NAME.scales (uint8, or float32 for FP32-scale specs), NAME.line_amax (row-scaled NVFP4),
    NAME.dequant with dequantized=True, and
    the metadata qmx.spec, qmx.tensor_amax.NAME, qmx.packed.NAME. All tensors must share one spec."""
    specs = {json.dumps(q.spec, sort_keys=True) for q in tensors.values()}
    if len(specs) != 1:
        raise ValueError("save_quantized: the tensors of one file share one spec (qmx.spec metadata)")
    out, meta = {}, {"qmx.generator": "qmx " + _qmx.__version__}
    for name, q in tensors.items():
        out[name + ".codes"] = q.codes
        out[name + ".scales"] = q.scales
        if q.line_amax is not None:
            out[name + ".line_amax"] = q.line_amax
        if dequantized:
            out[name + ".dequant"] = q.dequantize()
        meta["qmx.tensor_amax." + name] = json.dumps(float(q.tensor_amax))
        meta["qmx.packed." + name] = "0"
        meta["qmx.spec"] = json.dumps(q.spec, separators=(",", ":"))
    save_safetensors(path, out, meta)


def load_quantized(path):
    """{name: QuantizedTensor} from a file of save_quantized or `qmx-sim quantize` (unpacked codes)."""
    tensors, meta = _qmx.safetensors_index(str(path))
    if "qmx.spec" not in meta:
        raise ValueError("%s has no qmx.spec metadata: it was not written by qmx-sim quantize or qmx.io" % path)
    names = [t["name"][:-6] for t in tensors if t["name"].endswith(".codes")]
    have = {t["name"] for t in tensors}
    arrays = _qmx.safetensors_read(str(path), [n + s for n in names for s in (".codes", ".scales", ".line_amax")
                                               if s != ".line_amax" or n + s in have])
    out = {}
    for n in names:
        if meta.get("qmx.packed." + n) == "1":
            raise ValueError("tensor '%s' was written with --pack; load_quantized reads unpacked codes" % n)
        amax = float(json.loads(meta.get("qmx.tensor_amax." + n, "0")))
        lines = arrays.get(n + ".line_amax")
        out[n] = _qmx.assemble(arrays[n + ".codes"], arrays[n + ".scales"], meta["qmx.spec"], amax,
                               None if lines is None else [float(v) for v in lines])
    return out


def checkpoint_tensors(path):
    """The quantized tensors of a checkpoint in the layouts qmx-sim knows (qmx, gpt-oss-mxfp4,
    modelopt-nvfp4, compressed-tensors-nvfp4/-mxfp4, torchao, deepseek-fp8, fp8-scaled): a list of
    {name, layout, parts}."""
    return _qmx.checkpoint_scan(str(path))


def load_checkpoint(path, names=None):
    """{name: float32 array} of a checkpoint's quantized tensors (or those named), each decoded by its
    producer's formula (`qmx-sim dequantize`: the same bits)."""
    if names is None:
        names = [t["name"] for t in checkpoint_tensors(path)]
    return _qmx.checkpoint_decode(str(path), list(names))
