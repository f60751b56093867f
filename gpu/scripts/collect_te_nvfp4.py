#!/usr/bin/env python3
"""Transformer Engine's NVFP4 reference quantizer as an oracle for qmx-sim's rules nvfp4 (TE's default
order) and nvfp4-4over6 / nvfp4-4over6-mse (TE's 4over6, E4M3 bound 256).

Runs NVFP4QuantizerRef._quantize_blockwise_reference from transformer_engine/pytorch/custom_recipes/
reference_nvfp4.py (pure PyTorch) on seeded inputs, 1x16 blocks, the tensor amax as global amax. TE's
compiled package is not needed: the module's two imports of it (quantized_tensor's base classes and
tensor.utils.is_custom, unused by this function) are stubbed in a temporary package beside a copy of
custom_recipes/ from a source checkout (--te-src, the directory holding transformer_engine/).

Writes per case NAME and MODE (default, 4over6-mae, 4over6-mse, and the same three row-scaled, row_scaled_nvfp4
with each row's amax as its global amax: row-default, row-4over6-mae, row-4over6-mse), numpy .npy:
  NAME_x.npy               the input, float32 (no exact -0.0: TE's reference cast_to_fp4x2 takes -0.0 to
                           the +0 code, where the CUDA kernels keep the sign)
  NAME_MODE_scales.npy     E4M3 block scales, M x K/16 uint8
  NAME_MODE_codes.npy      E2M1 codes, M x K uint8 (unpacked: element 2i in the low nibble of the output)
into OUTDIR and OUTDIR/te-nvfp4.tar (one file to bring back from the device).

With --gemm it also runs TE's reference NVFP4 GEMM (NVFP4QuantizerRef.qgemm, FPROP: Y = X W^T, per 16-K
block fp32 sums scaled by fl32(sx * sw) and added in FP32, then Y = alpha * Y with alpha =
fl32(amax_x * amax_w) / (36 * e4m3_max_x * e4m3_max_w)) on X (M x K) and W (N x K) quantized by
NVFP4QuantizerRef._quantize, for modes GMODE: default, 4over6-mae, mixed (X default, W 4over6 MAE: bounds
448 and 256), row-default and row-4over6-mae (X row-scaled, W per-tensor under the same rule), and writes
  gemm_NAME_x.npy, gemm_NAME_w.npy   the inputs, float32
  gemm_NAME_GMODE_y.npy              TE's output, float32 M x N
  gemm_NAME_GMODE_alpha.npy          TE's alpha, float32 (1 value, or M for row-scaled X)
With --orders it adds two crafted inputs, orders-default and orders-4over6 (crafted_cases: rows on which
TE's op orders and plausible other orders give other scales or codes), to the quantizer cases.
Usage: python3 collect_te_nvfp4.py OUTDIR --te-src DIR [--gemm] [--orders]
"""
import os
import shutil
import sys
import tarfile
import tempfile

import numpy as np

STUB_QT = '''class QuantizedTensorStorage:
    pass


class Quantizer:
    def __init__(self, *args, rowwise=True, columnwise=True, **kwargs):
        self.rowwise_usage = rowwise
        self.columnwise_usage = columnwise
'''


def import_reference(te_src):
    root = tempfile.mkdtemp()
    pkg = os.path.join(root, "transformer_engine", "pytorch")
    os.makedirs(os.path.join(pkg, "tensor"))
    for d in (os.path.join(root, "transformer_engine"), pkg, os.path.join(pkg, "tensor")):
        open(os.path.join(d, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "quantized_tensor.py"), "w") as f:
        f.write(STUB_QT)
    with open(os.path.join(pkg, "tensor", "utils.py"), "w") as f:
        f.write("def is_custom(*args, **kwargs):\n    return False\n")
    shutil.copytree(os.path.join(te_src, "transformer_engine", "pytorch", "custom_recipes"),
                    os.path.join(pkg, "custom_recipes"))
    sys.path.insert(0, root)
    from transformer_engine.pytorch.custom_recipes import reference_nvfp4
    return reference_nvfp4


def cases():
    rng = np.random.default_rng(20261127)
    out = {}
    out["normal"] = rng.standard_normal((64, 256)).astype(np.float32)
    mag = np.exp2(rng.uniform(-20, 8, size=(64, 32, 1))).astype(np.float32)
    out["logmag"] = (rng.standard_normal((64, 32, 16)).astype(np.float32) * mag).reshape(64, 512)
    out["heavy"] = rng.standard_t(2, size=(32, 512)).astype(np.float32)
    # Rows 2^-24 .. 2^21 apart (row-scaled NVFP4 keeps the small rows a per-tensor scale flushes).
    out["rowmag"] = (rng.standard_normal((48, 256)) * np.exp2(rng.uniform(-24, 21, size=(48, 1)))).astype(np.float32)
    for x in out.values():
        x[x == 0] = 1e-3  # no exact zeros (see above)
    return out


def crafted_cases(mod):
    """Two tensors whose rows separate TE's op orders from plausible other orders, so that a test replaying
    TE's output on them fails under the other order. The rows come from scans near E4M3 and error-tie
    boundaries, kept where an emulation of each order in torch float32 (torch's own E4M3 cast and TE's FP4
    cast; independent of qmx-sim) gives another scale byte or other codes than TE's order:
      orders-default  rule default (bound 448), T chosen where S_enc = fl(2688 / T) and fl(fl(448 / T) * 6)
                      differ: rows whose result differs between the two S_enc
      orders-4over6   4over6 (bound 256), T where fl(1536 / T) and fl(fl(256 / T) * 6) differ: rows that
                      separate that, the base fl(fl(b / 6) * S) from fl(b * fl(S / 6)), the map-to-4 scale
                      e4m3(fl(base * 1.5)) from e4m3(fl(fl(b / 4) * S)), and the error
                      fl(fl(fl(q * s) * T) / 1536) from fl(fl(q * s) * fl(T / 1536)) (MAE and MSE)
    Row 0 holds the tensor amax T; every other row stays below it."""
    import torch
    f32 = torch.float32
    fmax = torch.finfo(f32).max
    rng = np.random.default_rng(20261128)

    def div(a, b):  # fl32(a / b); Python's number / tensor would be fl(fl(1 / b) * a) in torch
        return torch.div(torch.as_tensor(a, dtype=f32), b)

    def e4m3(v):
        return torch.clamp(v, -448.0, 448.0).to(torch.float8_e4m3fn).to(f32)

    def fp4(v):
        return mod.cast_from_fp4x2(mod.cast_to_fp4x2(torch.clamp(v, -6.0, 6.0)), f32)

    def near(v, k):  # every float32 within k ulps of each value of v (1-D), flattened
        bits = torch.from_numpy(np.asarray(v, dtype=np.float32)).view(torch.int32).reshape(-1, 1)
        return (bits + torch.arange(-k, k + 1, dtype=torch.int32)).reshape(-1).view(f32)

    def pick_t(six_bound):
        for _ in range(100000):
            t = torch.tensor(float(np.float32(rng.uniform(0.5, 64.0))), dtype=f32)
            if div(six_bound, t) != div(six_bound / 6.0, t) * 6.0:
                return t
        raise SystemExit("no tensor amax separates the S_enc orders")

    def four_over_six(x, b, s, dec, t, variant, mse):
        """TE's two 4over6 candidates of each row of x (block amax b, S_enc s, its reciprocal dec), each
        (scale byte as a value, FP4 values), and their errors summed in element order (n x 1)."""
        base = (b / 6.0) * s if variant != "base" else b * (s / 6.0)
        m4 = e4m3(base * 1.5) if variant != "map4" else e4m3((b / 4.0) * s)
        cands, errs = [], []
        for sc in (m4, e4m3(base)):
            q = fp4(x * torch.clamp(div(1.0, sc * dec), max=fmax))
            err = torch.zeros_like(b)
            for i in range(16):
                v = ((q[:, i:i + 1] * sc) * t) / 1536.0 if variant != "err" else (q[:, i:i + 1] * sc) * (t / 1536.0)
                d = v - x[:, i:i + 1]
                err = err + (d * d if mse else d.abs())
            cands.append((sc, q))
            errs.append(err)
        return cands, errs

    def quantize(x, t, bound, variant, mse=False):
        """(scale bytes as values, FP4 values) per row of x (n x 16) under TE's order, or one step replaced."""
        b = x.abs().amax(dim=1, keepdim=True)
        s = div(6.0 * bound, t) if variant != "senc" else div(float(bound), t) * 6.0
        dec = div(1.0, s)
        if bound == 448:
            s8 = e4m3(b * (s * torch.reciprocal(torch.tensor(6.0, dtype=f32))))
            return s8, fp4(x * torch.clamp(div(1.0, s8 * dec), max=fmax))
        cands, errs = four_over_six(x, b, s, dec, t, variant, mse)
        pick4 = errs[0] < errs[1]
        return torch.where(pick4, cands[0][0], cands[1][0]), torch.where(pick4, cands[0][1], cands[1][1])

    def differ(x, t, bound, variant, mse=False):
        s0, q0 = quantize(x, t, bound, "te", mse)
        s1, q1 = quantize(x, t, bound, variant, mse)
        return ((s0 != s1).squeeze(1) | (q0 != q1).any(dim=1))

    def tie_rows(bv, ys):  # rows [bv, y, tiny ...], one per y
        x = torch.full((ys.numel(), 16), float(bv) * 2.0 ** -40, dtype=f32)
        x[:, 0] = bv
        x[:, 1] = ys
        return x

    def rows_of(b, fill):  # rows [b, fill * b ...] (fill: n x 15 in (-1, 1))
        x = torch.empty((b.numel(), 16), dtype=f32)
        x[:, 0] = b
        x[:, 1:] = torch.from_numpy(fill[: b.numel()].astype(np.float32)) * b.reshape(-1, 1)
        return x

    fill = rng.uniform(-0.9, 0.9, size=(400000, 15))
    # E4M3 midpoints 2^-6 .. 448: where a scale one ulp off rounds the other way.
    codes = torch.arange(0x08, 0x7E, dtype=torch.uint8).view(torch.float8_e4m3fn).to(f32)
    mids = ((codes[:-1] + codes[1:]) / 2.0).numpy()
    out = {}

    t = pick_t(2688.0)
    m = (div(2688.0, t) * torch.reciprocal(torch.tensor(6.0, dtype=f32))).item()
    b = near(mids / m, 12)
    b = b[(b > 0) & (b < t * 0.999)]
    x = rows_of(b, fill)
    keep = differ(x, t, 448, "senc").nonzero().squeeze(1)
    print("orders-default: T %r: %d of %d scanned rows separate the S_enc orders" % (float(t), keep.numel(), x.shape[0]))
    out["orders-default"] = (t, x[keep[:48]])

    t = pick_t(1536.0)
    s = div(1536.0, t).item()
    b = near(np.concatenate([mids, mids / 1.5]) * 6.0 / s, 12)
    b = b[(b > 0) & (b < t * 0.999)]
    x = rows_of(b, fill)
    picked = []
    for variant in ("senc", "base", "map4"):
        keep = differ(x, t, 256, variant).nonzero().squeeze(1)
        print("orders-4over6: T %r, %s: %d of %d scanned rows" % (float(t), variant, keep.numel(), x.shape[0]))
        picked.append(x[keep[:24]])
    # Error ties: rows [b, y, tiny ...] with y scanned across (0, b); near each sign change of
    # err4 - err6 (TE's order) every float within 64 ulps of y.
    for mse in (False, True):
        bs = torch.from_numpy((rng.uniform(0.05, 0.99, size=64) * float(t)).astype(np.float32))
        found = []
        for bv in bs:
            ys = torch.linspace(0.0, float(bv), 4097, dtype=f32)[1:-1]
            x = tie_rows(bv, ys)
            s_t = div(1536.0, t)
            _, errs = four_over_six(x, x.abs().amax(dim=1, keepdim=True), s_t, div(1.0, s_t), t, "te", mse)
            sign = (errs[0] < errs[1]).squeeze(1).to(torch.int8)
            flips = (sign[1:] != sign[:-1]).nonzero().squeeze(1)
            if flips.numel() == 0:
                continue
            xs = tie_rows(bv, near(ys[flips].numpy(), 64))
            keep = differ(xs, t, 256, "err", mse).nonzero().squeeze(1)
            found.append(xs[keep[:2]])
        found = torch.cat(found) if found else torch.empty((0, 16), dtype=f32)
        print("orders-4over6: error order (%s): %d rows" % ("MSE" if mse else "MAE", found.shape[0]))
        picked.append(found[:24])
    out["orders-4over6"] = (t, torch.cat(picked))
    result = {}
    for name, (t, rows_x) in out.items():
        first = torch.zeros((1, 16), dtype=f32)
        first[0, 0] = t
        first[0, 1:] = torch.from_numpy(rng.uniform(-1, 1, size=15).astype(np.float32)) * t * 0.5
        xt = torch.cat([first, rows_x]).numpy().copy()
        xt[xt == 0] = 1e-3
        result[name] = xt
    return result


def gemm_cases():
    rng = np.random.default_rng(20261126)
    out = {}
    out["normal"] = (rng.standard_normal((64, 256)).astype(np.float32),
                     (rng.standard_normal((48, 256)) * 0.02).astype(np.float32))
    mag = np.exp2(rng.uniform(-20, 8, size=(32, 32, 1)))
    out["logmag"] = ((rng.standard_normal((32, 32, 16)) * mag).reshape(32, 512).astype(np.float32),
                     rng.standard_t(3, size=(40, 512)).astype(np.float32))
    out["rowmag"] = ((rng.standard_normal((48, 256)) * np.exp2(rng.uniform(-24, 21, size=(48, 1)))).astype(np.float32),
                     rng.standard_normal((16, 256)).astype(np.float32))
    for pair in out.values():
        for x in pair:
            x[x == 0] = 1e-3
    return out


def collect_gemm(mod, outdir, written):
    import torch
    from types import SimpleNamespace
    ref = mod.NVFP4QuantizerRef
    fp4 = mod.reference_utils.Fp4Formats.E2M1
    rules = {"default": dict(nvfp4_use_4over6=False),
             "4over6-mae": dict(nvfp4_use_4over6=True, nvfp4_e4m3_max=256, nvfp4_4over6_err_mode="MAE")}
    gmodes = {"default": ("default", "default", False), "4over6-mae": ("4over6-mae", "4over6-mae", False),
              "mixed": ("default", "4over6-mae", False), "row-default": ("default", "default", True),
              "row-4over6-mae": ("4over6-mae", "4over6-mae", True)}

    def quantize(t, rule, row_scaled):
        q = ref(dtype=fp4, rowwise=True, columnwise=False, quant_tile_shape=(1, 16), row_scaled_nvfp4=row_scaled,
                **rules[rule])
        qx, sx, _, _, amax_row, amax_col = q._quantize(t)
        res = SimpleNamespace(global_amax_row=amax_row, global_amax_col=amax_col,
                              nvfp4_use_4over6=q.nvfp4_use_4over6, nvfp4_e4m3_max=q.nvfp4_e4m3_max)
        return q, qx, sx, res

    for name, (x, w) in gemm_cases().items():
        for k, v in (("x", x), ("w", w)):
            p = os.path.join(outdir, "gemm_%s_%s.npy" % (name, k))
            np.save(p, v)
            written.append(p)
        for gmode, (rx, rw, row) in gmodes.items():
            qobj, qx, sx, resx = quantize(torch.from_numpy(x), rx, row)
            _, qw, sw, resw = quantize(torch.from_numpy(w), rw, False)
            y = qobj.qgemm(qx, qw, None, torch.float32, sx, sw, gemm_type=mod.gemm.GEMMType.FPROP,
                           qresult_x=resx, qresult_w=resw)
            factor = 6.0 * 6.0 * resx.nvfp4_e4m3_max * resw.nvfp4_e4m3_max
            alpha = torch.div(resx.global_amax_row * resw.global_amax_row, factor).reshape(-1)
            for k, v in (("y", y.cpu().numpy().astype(np.float32)), ("alpha", alpha.cpu().numpy().astype(np.float32))):
                p = os.path.join(outdir, "gemm_%s_%s_%s.npy" % (name, gmode, k))
                np.save(p, np.ascontiguousarray(v))
                written.append(p)
            print("gemm %-7s %-15s y %s alpha[0] %r" % (name, gmode, tuple(y.shape), float(alpha[0])))


def main():
    args = sys.argv[1:]
    outdir = args[0]
    te_src = args[args.index("--te-src") + 1]
    import torch
    mod = import_reference(te_src)
    ref = mod.NVFP4QuantizerRef
    os.makedirs(outdir, exist_ok=True)
    written = []
    modes = {"default": dict(nvfp4_use_4over6=False),
             "4over6-mae": dict(nvfp4_use_4over6=True, nvfp4_e4m3_max=256, nvfp4_4over6_err_mode="MAE"),
             "4over6-mse": dict(nvfp4_use_4over6=True, nvfp4_e4m3_max=256, nvfp4_4over6_err_mode="MSE")}
    all_cases = cases()
    if "--orders" in args:
        all_cases.update(crafted_cases(mod))
    for name, x in all_cases.items():
        p = os.path.join(outdir, name + "_x.npy")
        np.save(p, x)
        written.append(p)
        t = torch.from_numpy(x)
        amax = torch.max(torch.abs(t)).to(torch.float32).view(1)
        # Row-scaled (row_scaled_nvfp4=True): the global amax per row, as NVFP4QuantizerRef computes it.
        row_amax = torch.max(torch.abs(t), dim=1).values.to(torch.float32)
        runs = [(mode, kw, amax) for mode, kw in modes.items()]
        runs += [("row-" + mode, dict(kw, row_scaled_nvfp4=True), row_amax) for mode, kw in modes.items()]
        for mode, kw, g in runs:
            qx, scale = ref._quantize_blockwise_reference(t.clone(), g, 16, 1, pow_2_scales=False, eps=0.0, **kw)
            packed = qx.cpu().numpy().astype(np.uint8)
            codes = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.uint8)
            codes[:, 0::2] = packed & 0xF
            codes[:, 1::2] = packed >> 4
            for k, v in (("scales", scale.view(torch.uint8).cpu().numpy().reshape(x.shape[0], -1)), ("codes", codes)):
                p = os.path.join(outdir, "%s_%s_%s.npy" % (name, mode, k))
                np.save(p, np.ascontiguousarray(v))
                written.append(p)
            print("%-8s %-11s scales %s" % (name, mode, scale.shape))
    if "--gemm" in args:
        collect_gemm(mod, outdir, written)
    with tarfile.open(os.path.join(outdir, "te-nvfp4.tar"), "w") as tar:
        for p in written:
            tar.add(p, arcname=os.path.basename(p))


if __name__ == "__main__":
    main()
