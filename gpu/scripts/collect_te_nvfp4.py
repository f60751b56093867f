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
Usage: python3 collect_te_nvfp4.py OUTDIR --te-src DIR [--gemm]
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
    for name, x in cases().items():
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
