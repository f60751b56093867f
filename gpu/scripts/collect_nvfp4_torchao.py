#!/usr/bin/env python3
"""torchao's NVFP4 quantizer as an oracle for qmx-sim's rule nvfp4-torchao (issue "Hardware fidelity II",
op orders; issue "Real quantized checkpoints", torchao's NVFP4 order).

Runs torchao.prototype.mx_formats.nvfp4_tensor.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=
per_tensor_amax_to_scale(amax(|x|))) (the two-level path, linear scales, no Triton) and .dequantize(float32)
on seeded inputs chosen to make the orders differ (log-uniform magnitudes across blocks so block scales
land everywhere in E4M3, tiny blocks that hit the 2^-6 clamp, all-zero blocks, BF16 input), and writes per
case NAME (numpy .npy, row-major):
  NAME_x.npy       the input: float32, or uint16 BF16 bits for *_bf16 cases
  NAME_scales.npy  torchao's block scales, M x K/16 uint8 (float8_e4m3fn bits)
  NAME_codes.npy   torchao's FP4 codes, M x K uint8 (unpacked from its two-per-byte qdata, low nibble first)
  NAME_pts.npy     torchao's per_tensor_scale, one float32
  NAME_dq.npy      torchao's dequantize(torch.float32), M x K float32
into OUTDIR, plus OUTDIR/nvfp4-torchao.tar holding them all (one file to bring back from the device).

Needs torch (2.7+, for float8_e4m3fn) and torchao, importable from the environment or from a source
checkout given as --torchao-src (its python package imports without the compiled extensions).
Usage: python3 collect_nvfp4_torchao.py OUTDIR [--torchao-src DIR]
"""
import os
import sys
import tarfile

import numpy as np


def cases():
    rng = np.random.default_rng(20261126)
    out = {}
    out["normal"] = rng.standard_normal((32, 256)).astype(np.float32)
    # Block magnitudes log-uniform over 2^-30..2^10: block scales span E4M3 and the 2^-6 clamp.
    mag = np.exp2(rng.uniform(-30, 10, size=(128, 64, 1))).astype(np.float32)
    out["logmag"] = (rng.standard_normal((128, 64, 16)).astype(np.float32) * mag).reshape(128, 1024)
    t = rng.standard_t(2, size=(64, 512)).astype(np.float32)
    t[::7, :16] = 0.0       # all-zero blocks
    t[3, 32:48] = 1e-30     # a block far below the 2^-6 clamp
    t[5, 48:64] = -0.0
    out["heavy"] = t
    b = (rng.standard_normal((16, 128)) * np.exp2(rng.uniform(-8, 8, size=(16, 1)))).astype(np.float32)
    out["rows_bf16"] = (b.view(np.uint32) >> 16).astype(np.uint16)  # BF16 by truncation: exact inputs
    return out


def main():
    args = sys.argv[1:]
    outdir = args[0] if args else "."
    if "--torchao-src" in args:
        sys.path.insert(0, args[args.index("--torchao-src") + 1])
    import torch
    import torchao  # noqa: F401
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    os.makedirs(outdir, exist_ok=True)
    written = []
    print("torch", torch.__version__, "torchao", getattr(torchao, "__version__", "?"), torchao.__file__)
    for name, x in cases().items():
        if x.dtype == np.uint16:
            t = torch.from_numpy(x.astype(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(x)
        pts = per_tensor_amax_to_scale(torch.max(torch.abs(t.float())))
        q = NVFP4Tensor.to_nvfp4(t, per_tensor_scale=pts)
        packed = q.qdata.view(torch.uint8).cpu().numpy()
        codes = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.uint8)
        codes[:, 0::2] = packed & 0xF
        codes[:, 1::2] = packed >> 4
        arrays = {"x": x, "scales": q.scale.view(torch.uint8).cpu().numpy().reshape(x.shape[0], -1),
                  "codes": codes, "pts": np.array([pts.item()], dtype=np.float32),
                  "dq": q.dequantize(torch.float32).cpu().numpy().astype(np.float32)}
        for k, v in arrays.items():
            p = os.path.join(outdir, "%s_%s.npy" % (name, k))
            np.save(p, np.ascontiguousarray(v))
            written.append(p)
        print("%-10s %s pts %.9g" % (name, x.shape, pts.item()))
    with tarfile.open(os.path.join(outdir, "nvfp4-torchao.tar"), "w") as tar:
        for p in written:
            tar.add(p, arcname=os.path.basename(p))


if __name__ == "__main__":
    main()
