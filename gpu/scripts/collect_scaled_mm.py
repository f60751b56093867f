#!/usr/bin/env python3
"""Collects Hopper tensor-core FP8 GEMM outputs through torch._scaled_mm (cuBLASLt) for qmx-sim's
accumulation models (issue: block-scaled GEMM emulation). Runs on a machine with an sm_90 GPU and
PyTorch; writes one .npz per case set into the output directory: the A and B codes (uint8, A as M x K,
B as K x N), the scales, and D (float32) with use_fast_accum on and off. The CPU side
(`qmx-sim gemm-check`, tests/gemm) replays them against the models.

Usage: python3 collect_scaled_mm.py OUTDIR [--quick]
"""
import json
import sys
import time

import numpy as np
import torch

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


def codes_from_values(x, dtype):
    return x.to(dtype).view(torch.uint8)


def random_codes(rng, shape, fmt, kind):
    """uint8 codes (numpy) of a format, NaN-free."""
    if kind == "normal":
        v = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        return codes_from_values(v, fmt).numpy()
    if kind == "bits":  # every finite code, uniformly (subnormals and the largest values included)
        c = rng.integers(0, 256, size=shape, dtype=np.uint8)
        if fmt == E4M3:
            c[(c & 0x7F) == 0x7F] ^= 0x01  # no NaN
        else:
            c[(c & 0x7C) == 0x7C] &= 0xFB  # no Inf / NaN (exponent all ones -> one less)
        return c
    if kind == "wide":  # log-uniform magnitudes over the whole range
        e = rng.uniform(-12 if fmt == E4M3 else -18, 8.7 if fmt == E4M3 else 15.8, size=shape)
        v = np.sign(rng.standard_normal(shape)) * np.exp2(e)
        return codes_from_values(torch.from_numpy(v.astype(np.float32)), fmt).numpy()
    raise ValueError(kind)


def adversarial(rng, m, k, fmt):
    """Rows built to stress alignment and truncation: one large product among tiny ones, exact
    cancellation, powers of two, runs of equal values."""
    v = rng.standard_normal((m, k)).astype(np.float32) * 2.0 ** rng.integers(-8, 4, size=(m, 1))
    for i in range(m):
        t = i % 6
        if t == 0:  # one big, many tiny
            v[i] = rng.standard_normal(k) * 2.0 ** -7
            v[i, rng.integers(0, k)] = 240.0 * np.sign(rng.standard_normal())
        elif t == 1:  # cancellation: x, -x pairs plus small
            h = k // 2
            v[i, :h] = rng.standard_normal(h) * 16
            v[i, h:2 * h] = -v[i, :h]
            v[i, rng.integers(0, k, size=3)] = rng.standard_normal(3) * 2.0 ** -6
        elif t == 2:  # powers of two
            v[i] = np.sign(rng.standard_normal(k)) * 2.0 ** rng.integers(-9, 8, size=k)
        elif t == 3:  # equal values (carries)
            v[i] = 1.875 * 2.0 ** rng.integers(-3, 3)
        elif t == 4:  # subnormals with a few normals
            v[i] = rng.standard_normal(k) * 2.0 ** -8
            v[i, ::17] = rng.standard_normal(len(v[i, ::17])) * 4
        # t == 5: plain scaled normal
    return codes_from_values(torch.from_numpy(v), fmt).numpy()


def run_mm(a_codes, b_codes, fa, fb, scale_a, scale_b, fast):
    a = torch.from_numpy(a_codes).cuda().view(fa)
    bt = torch.from_numpy(np.ascontiguousarray(b_codes.T)).cuda().view(fb)  # N x K row-major
    d = torch._scaled_mm(a, bt.t(), scale_a=scale_a.cuda(), scale_b=scale_b.cuda(), out_dtype=torch.float32,
                         use_fast_accum=fast)
    torch.cuda.synchronize()
    return d.cpu().numpy()


def tensorwise_case(rng, name, m, n, k, fa, fb, kind_a, kind_b, group):
    if kind_a == "adv":
        a = adversarial(rng, m, k, fa)
    else:
        a = random_codes(rng, (m, k), fa, kind_a)
    if kind_b == "adv":
        b = adversarial(rng, n, k, fb).T.copy()
    else:
        b = random_codes(rng, (k, n), fb, kind_b)
    one = torch.tensor(1.0)
    group[f"{name}_a"] = a
    group[f"{name}_b"] = b
    group[f"{name}_formats"] = np.array([str(fa).split(".")[-1], str(fb).split(".")[-1]])
    for fast in (True, False):
        group[f"{name}_d_fast" if fast else f"{name}_d_slow"] = run_mm(a, b, fa, fb, one, one, fast)
    return m * n


def main():
    out = sys.argv[1]
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(20261121)
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()), "cuda": torch.version.cuda}
    print(json.dumps(info))
    t0 = time.time()
    total = 0
    sets = []
    # K scan: small matrices, every K from 16 to 640 in steps of 16, normal data
    ks = list(range(16, 657, 16)) if "--blockwise-only" not in sys.argv else []
    for k in ks:
        sets.append((f"kscan_{k}", 64, 64, k, E4M3, E4M3, "normal", "normal"))
    if not quick and "--blockwise-only" not in sys.argv:
        sets += [
            ("rand_k4096", 256, 256, 4096, E4M3, E4M3, "normal", "normal"),
            ("rand_k1024", 768, 768, 1024, E4M3, E4M3, "normal", "normal"),
            ("bits_k256", 512, 512, 256, E4M3, E4M3, "bits", "bits"),
            ("wide_k512", 512, 512, 512, E4M3, E4M3, "wide", "wide"),
            ("adv_k512", 512, 512, 512, E4M3, E4M3, "adv", "adv"),
            ("adv_k2048", 256, 256, 2048, E4M3, E4M3, "adv", "normal"),
            ("mixed_k1024", 512, 512, 1024, E4M3, E5M2, "normal", "wide"),
            ("mixed_bits_k256", 512, 512, 256, E5M2, E4M3, "bits", "bits"),
        ]
    # Results are collected into a few files (the transfer takes at most 8).
    groups = {"kscan": {}, "tw1": {}, "tw2": {}, "tw3": {}}
    file_of = {"rand_k4096": "tw1", "rand_k1024": "tw1", "bits_k256": "tw2", "wide_k512": "tw2", "adv_k512": "tw2"}
    kscan = groups["kscan"]
    for (name, m, n, k, fa, fb, ka, kb) in sets:
        try:
            if name.startswith("kscan_"):
                a = random_codes(rng, (m, k), fa, ka)
                b = random_codes(rng, (k, n), fb, kb)
                one = torch.tensor(1.0)
                kscan[f"{name}_a"] = a
                kscan[f"{name}_b"] = b
                kscan[f"{name}_d_fast"] = run_mm(a, b, fa, fb, one, one, True)
                kscan[f"{name}_d_slow"] = run_mm(a, b, fa, fb, one, one, False)
                total += m * n
            else:
                total += tensorwise_case(rng, name, m, n, k, fa, fb, ka, kb, groups[file_of.get(name, "tw3")])
                print(f"{name}: done at {time.time() - t0:.1f} s", flush=True)
        except Exception as e:  # report and go on
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
    for g, d in groups.items():
        if d:
            np.savez_compressed(f"{out}/{g}.npz", **d)
    # Per-tensor scales that are not 1 (the epilogue), fast and slow.
    try:
        m, n, k = 256, 256, 512
        a = random_codes(rng, (m, k), E4M3, "normal")
        b = random_codes(rng, (k, n), E4M3, "normal")
        sa, sb = np.float32(0.37109375 / 3), np.float32(5.3)
        res = {"a": a, "b": b, "sa": np.array([sa]), "sb": np.array([sb])}
        for fast in (True, False):
            res["d_fast" if fast else "d_slow"] = run_mm(a, b, E4M3, E4M3, torch.tensor(sa), torch.tensor(sb), fast)
        np.savez_compressed(f"{out}/tensorscale.npz", **res)
        print("tensorscale: done", flush=True)
    except Exception as e:
        print(f"tensorscale: FAILED {type(e).__name__}: {e}", flush=True)
    # Blockwise FP32 scales (fast accumulation is refused there): A 1x128 with B 128x128, and A 1x128
    # with B 1x128 along K (128x1 in K x N terms).
    for kind in ("blk", "vec"):
        try:
            m, n, k = 256, 256, 1024
            a = random_codes(rng, (m, k), E4M3, "normal")
            b = random_codes(rng, (k, n), E4M3, "normal")
            nb = n // 128 if kind == "blk" else n
            sa = (2.0 ** rng.integers(-3, 4, size=(m, k // 128)) * rng.uniform(1, 2, size=(m, k // 128))).astype(np.float32)
            sb = (2.0 ** rng.integers(-3, 4, size=(k // 128, nb)) * rng.uniform(1, 2, size=(k // 128, nb))).astype(np.float32)
            A = torch.from_numpy(a).cuda().view(E4M3)
            Bt = torch.from_numpy(np.ascontiguousarray(b.T)).cuda().view(E4M3)
            SA = torch.from_numpy(np.ascontiguousarray(sa.T)).cuda().t()  # M x K/128, outer-dim major
            if kind == "blk":  # K/128 x N/128, "near-inner-dim-major": stored N/128 x K/128
                SB = torch.from_numpy(np.ascontiguousarray(sb.T)).cuda().t()
            else:              # K/128 x N, N contiguous
                SB = torch.from_numpy(np.ascontiguousarray(sb)).cuda()
            d = torch._scaled_mm(A, Bt.t(), scale_a=SA, scale_b=SB, out_dtype=torch.float32, use_fast_accum=False)
            torch.cuda.synchronize()
            np.savez_compressed(f"{out}/blockwise_{kind}.npz", a=a, b=b, sa=sa, sb=sb, d_slow=d.cpu().numpy())
            total += m * n
            print(f"blockwise {kind}: done", flush=True)
        except Exception as e:
            print(f"blockwise {kind}: FAILED {type(e).__name__}: {e}", flush=True)
    print(f"outputs per mode: {total}; {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
