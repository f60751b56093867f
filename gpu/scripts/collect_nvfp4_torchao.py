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

--device cuda runs the same calls on CUDA tensors (golden/nvfp4-torchao-cuda) and adds two cases built to
show where torchao on CUDA parts from torchao on the CPU. On CUDA, PyTorch divides a tensor by a Python
scalar as a multiply by the scalar's FP32 reciprocal (div_true_kernel_cuda), so `max_abs / 6` and `amax /
2688` become fl32(x * fl32(1/6)) and fl32(x * fl32(1/2688)):
  cuda_scales  block amaxes whose E4M3 scale the two orders round to different codes
  cuda_codes   a tensor amax whose tensor scale the two orders round apart, and elements next to the FP4
               rounding boundaries where the two multipliers then give different codes
(found by emulating both orders in NumPy's FP32 arithmetic; the golden holds what torchao itself wrote).
Usage: python3 collect_nvfp4_torchao.py OUTDIR [--torchao-src DIR] [--device cuda]
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


F32 = np.float32
R6, R2688 = F32(1) / F32(6), F32(1) / F32(2688)
# E4M3's positive finite values with their codes, and E2M1's, ascending (RNE below: nearest, ties to even code).
E4M3 = sorted((((8 + (c & 7)) / 8.0) * 2.0 ** ((c >> 3) - 7) if c >> 3 else (c & 7) / 8.0 * 2.0 ** -6, c)
              for c in range(0x7F))
E2M1 = [(0.0, 0), (0.5, 1), (1.0, 2), (1.5, 3), (2.0, 4), (3.0, 5), (4.0, 6), (6.0, 7)]


def rne(table, v):
    """The value of table nearest to v >= 0 (ties to the even code), saturating at the top."""
    vals = [t[0] for t in table]
    i = int(np.searchsorted(vals, v))
    if i == 0:
        return table[0]
    if i == len(vals):
        return table[-1]
    lo, hi = table[i - 1], table[i]
    dl, dh = v - lo[0], hi[0] - v
    return lo if dl < dh or (dl == dh and lo[1] % 2 == 0) else hi


def torchao_order(x_block, amax, cuda):
    """torchao's nvfp4_quantize of one block in FP32, CPU order or CUDA order: (E4M3 value, element codes)."""
    sg = F32(amax) * R2688 if cuda else F32(amax) / F32(2688)
    b = F32(np.max(np.abs(x_block)))
    v = (b * R6 if cuda else b / F32(6)) / sg
    v = min(max(v, F32(2.0 ** -6)), F32(448))
    s8 = F32(rne(E4M3, float(v))[0])
    mult = (F32(1) / sg) / s8
    codes = [rne(E2M1, float(min(abs(F32(x) * mult), F32(6))))[1] | (8 if x < 0 else 0) for x in x_block]
    return s8, codes


def ulps(x, n):
    """x and its n FP32 neighbours on each side (positive x)."""
    bits = np.array([x], dtype=F32).view(np.uint32)[0]
    return [np.array([int(bits) + d], dtype=np.uint32).view(F32)[0] for d in range(-n, n + 1)]


def cuda_cases():
    """Inputs on which torchao's CUDA order and its CPU order give different scales or codes."""
    rng = np.random.default_rng(20261130)
    out = {}
    # Scales: tensor amax 2688 (s_g 1 in both orders); each block's amax sits next to 6 x an E4M3 midpoint,
    # where fl32(b / 6) and fl32(b * fl32(1/6)) can fall on either side of it.
    amax = F32(2688)
    blocks = [np.concatenate(([amax], rng.standard_normal(15).astype(F32)))]
    vals = [t[0] for t in E4M3 if t[0] >= 2.0 ** -6]
    for lo, hi in zip(vals, vals[1:]):
        for b in ulps(F32((lo + hi) / 2 * 6), 256):
            if b > amax or b / F32(6) == b * R6:
                continue
            blk = np.concatenate(([b], (rng.uniform(-1, 1, 15) * b).astype(F32)))
            if torchao_order(blk, amax, False)[0] != torchao_order(blk, amax, True)[0]:
                blocks.append(blk)
                if len(blocks) % 4 == 0:
                    break
    while len(blocks) % 8:
        blocks.append((rng.standard_normal(16) * 100).astype(F32))
    out["cuda_scales"] = np.stack(blocks).reshape(-1, 128)
    # Codes: a tensor amax whose s_g differs between the orders, blocks of amax 6 s_g s8 with elements next to
    # the FP4 midpoints of the two multipliers.
    t = next(F32(a) for a in rng.uniform(1000, 5000, 100000)
             if F32(a) / F32(2688) != F32(a) * R2688)
    blocks = [np.concatenate(([t], np.zeros(15, F32)))]
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    while len(blocks) < 256:
        b = F32(rng.uniform(0.01, 1.0) * t)
        s8, _ = torchao_order(np.array([b], F32), t, False)
        mult = (F32(1) / (F32(t) / F32(2688))) / s8
        elems = [b]
        for m in rng.permutation(mids):
            for x in ulps(F32(m / mult), 8):
                x = F32(x) * (1 if rng.random() < 0.5 else -1)
                if abs(x) >= b:
                    continue
                blk = np.array([b, x], F32)
                if torchao_order(blk, t, False)[1][1] != torchao_order(blk, t, True)[1][1]:
                    elems.append(x)
                    break
            if len(elems) == 16:
                break
        elems += list((rng.uniform(-1, 1, 16 - len(elems)) * b).astype(F32))
        blocks.append(np.array(elems, F32))
    out["cuda_codes"] = np.stack(blocks).reshape(-1, 256).astype(F32)
    return out


def main():
    args = sys.argv[1:]
    outdir = args[0] if args else "."
    if "--torchao-src" in args:
        sys.path.insert(0, args[args.index("--torchao-src") + 1])
    device = args[args.index("--device") + 1] if "--device" in args else "cpu"
    import torch
    import torchao  # noqa: F401
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    os.makedirs(outdir, exist_ok=True)
    written = []
    print("torch", torch.__version__, "torchao", getattr(torchao, "__version__", "?"), torchao.__file__, device)
    todo = cases()
    if device == "cuda":
        todo.update(cuda_cases())
    for name, x in todo.items():
        if x.dtype == np.uint16:
            t = torch.from_numpy(x.astype(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(x)
        t = t.to(device)
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
    with tarfile.open(os.path.join(outdir, "nvfp4-torchao%s.tar" % ("-cuda" if device == "cuda" else "")), "w") as tar:
        for p in written:
            tar.add(p, arcname=os.path.basename(p))


if __name__ == "__main__":
    main()
