#!/usr/bin/env python3
"""Probes torch._scaled_mm on an sm_90 GPU in the modes FP8 inference runs (issue: scaled_mm in every mode
and shape): per-tensor FP32 scales at large K (where cuBLASLt may pick split-K kernels), row-wise scales
(A: M x 1, B: 1 x N), BF16 / FP16 / FP32 output, a bias, use_fast_accum on and off, e4m3 x e4m3 and
e5m2 x e4m3. Operands are integer hashes of their indices (hash_codes below, mirrored by the CPU replay in
tests/python/scaled_mm_probe.py), so only the outputs travel. Writes OUTDIR/NAME.npz per group (each case:
d as raw bits, plus its scales and bias), OUTDIR/cases.json (every case's parameters, or why torch refused
it), and with CUBLASLT_LOG_LEVEL set by the caller, cuBLASLt's own log of the algorithms it ran.

Usage: python3 probe_scaled_mm_modes.py OUTDIR [--quick] [--only GROUP,GROUP...]
       CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=LOG python3 probe_scaled_mm_modes.py OUTDIR --splitk-grid
       python3 probe_scaled_mm_modes.py --parse-grid LOG OUTDIR/grid.json TABLE.json
       python3 probe_scaled_mm_modes.py --export GOLDEN_DIR OUTDIR [OUTDIR...]   (golden/gemm-hopper/scaled-mm)
"""
import json
import sys
import time

import os

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scaled_mm_operands import hash_codes, hash_floats  # noqa: E402

E4M3 = getattr(torch, "float8_e4m3fn", None)  # torch >= 2.1 on the GPU machine; --export runs anywhere
E5M2 = getattr(torch, "float8_e5m2", None)


TORCH_FMT = {"e4m3": E4M3, "e5m2": E5M2}
OUT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def raw_bits(d):
    d = d.cpu()
    if d.dtype == torch.float32:
        return d.view(torch.int32).numpy().view(np.uint32)
    return d.view(torch.int16).numpy().view(np.uint16)


def run_case(c):
    """One torch._scaled_mm call as the case dict says; returns the output's raw bits."""
    m, n, k = c["m"], c["n"], c["k"]
    a = hash_codes(c["seed"], m, k, c["fa"], c["spread"])
    bt = hash_codes(c["seed"] + 1, n, k, c["fb"], c["spread"])  # B as N x K (torch wants B column-major)
    A = torch.from_numpy(a).cuda().view(TORCH_FMT[c["fa"]])
    B = torch.from_numpy(bt).cuda().view(TORCH_FMT[c["fb"]]).t()
    if c["scales"] == "tensor":
        sa = torch.tensor(np.float32(c["sa"])).cuda()
        sb = torch.tensor(np.float32(c["sb"])).cuda()
    else:  # row-wise: A's per row (M x 1), B's per column (1 x N)
        sa = torch.from_numpy(hash_floats(c["seed"] + 2, m, c["sa_lo"], c["sa_hi"]).reshape(m, 1)).cuda()
        sb = torch.from_numpy(hash_floats(c["seed"] + 3, n, c["sb_lo"], c["sb_hi"]).reshape(1, n)).cuda()
    bias = None
    if c.get("bias"):
        bias = torch.from_numpy(hash_floats(c["seed"] + 4, n, c["bias_lo"], c["bias_hi"])).to(OUT[c["bias"]]).cuda()
    d = torch._scaled_mm(A, B, scale_a=sa, scale_b=sb, bias=bias, out_dtype=OUT[c["out"]],
                         use_fast_accum=c["fast"])
    torch.cuda.synchronize()
    return raw_bits(d)


def cases(quick):
    out = []

    def add(group, **c):
        c.setdefault("seed", 1000 + len(out) * 10)
        c.setdefault("fa", "e4m3")
        c.setdefault("fb", "e4m3")
        c.setdefault("spread", 4)
        c.setdefault("out", "float32")
        c["group"] = group
        c["name"] = "%s_%d" % (group, len(out))
        out.append(c)

    # 1. Per-tensor, scales 1, FP32 output: the K scan up to large K, decode (small M) and prefill shapes.
    shapes = [(16, 1024, 65536), (16, 64, 131072), (256, 256, 16384), (48, 2048, 24576), (32, 4096, 8192),
              (4096, 16, 4096), (16, 256, 8192), (16, 256, 12288), (16, 256, 16384), (16, 256, 28672),
              (64, 512, 28672), (128, 1024, 8192), (1, 4096, 4096), (8, 8192, 8192)]
    if quick:
        shapes = shapes[:3]
    for (m, n, k) in shapes:
        for fast in (False, True):
            add("largek", m=m, n=n, k=k, scales="tensor", sa=1.0, sb=1.0, fast=fast)
    # The same shapes with every finite code (spread 0) and a wide band (spread 10): split-K partial sums
    # that FP32 rounds, so the reduction's order shows.
    for spread in (0, 10):
        for (m, n, k) in shapes:
            for fast in (False, True):
                add("largekw", m=m, n=n, k=k, scales="tensor", sa=1.0, sb=1.0, fast=fast, spread=spread)
    # Split-K with non-unit scales, BF16 output and a bias, and row-wise scales at large K.
    for (m, n, k) in ((16, 256, 16384), (16, 1024, 65536), (64, 512, 28672)):
        for fast in (False, True):
            add("largeks", m=m, n=n, k=k, scales="tensor", sa=0.123456789, sb=3.3, fast=fast, spread=0)
            add("largeks", m=m, n=n, k=k, scales="tensor", sa=0.123456789, sb=3.3, fast=fast, spread=0,
                out="bfloat16", bias="bfloat16", bias_lo=-4, bias_hi=12)
            add("largeks", m=m, n=n, k=k, scales="rowwise", sa_lo=-6, sa_hi=2, sb_lo=-4, sb_hi=3, fast=fast,
                spread=0, out="bfloat16", bias="bfloat16", bias_lo=-4, bias_hi=12)
            add("largeks", m=m, n=n, k=k, scales="rowwise", sa_lo=-6, sa_hi=2, sb_lo=-4, sb_hi=3, fast=fast,
                spread=0)
    # 2. Per-tensor with non-unit scales, BF16 / FP16 output and a bias (cuBLASLt's epilogue).
    for out_dtype in ("bfloat16", "float16", "float32"):
        for bias in (None, "bfloat16", "float16"):
            for fast in (False, True):
                add("tensorepi", m=64, n=256, k=1024, scales="tensor", sa=0.123456789, sb=3.3, fast=fast,
                    out=out_dtype, bias=bias, bias_lo=-4, bias_hi=6)
    # 3. Row-wise FP32 scales (per token x per channel), every output dtype and bias dtype torch accepts.
    for (fa, fb) in (("e4m3", "e4m3"), ("e5m2", "e4m3")):
        for out_dtype in ("bfloat16", "float16", "float32"):
            for bias in (None, "bfloat16", "float16", "float32"):
                for fast in (False, True):
                    add("rowwise", m=64, n=256, k=1024, fa=fa, fb=fb, scales="rowwise", sa_lo=-6, sa_hi=2,
                        sb_lo=-4, sb_hi=3, fast=fast, out=out_dtype, bias=bias, bias_lo=-2, bias_hi=8)
    # Row-wise: the K scan (accumulation of the kernel torch picks), decode and prefill shapes.
    for (m, n, k) in ((16, 256, 128), (16, 256, 256), (16, 256, 384), (16, 256, 512), (16, 256, 640),
                      (16, 256, 4096), (1, 512, 4096), (128, 512, 8192), (16, 1024, 28672), (512, 512, 2048)):
        for fast in (False, True):
            add("rowk", m=m, n=n, k=k, scales="rowwise", sa_lo=0, sa_hi=1, sb_lo=0, sb_hi=1, fast=fast)
    # Row-wise adversarial epilogues: BF16 overflow, subnormal results, a bias that cancels the product.
    for fast in (False, True):
        add("rowadv", m=32, n=256, k=512, scales="rowwise", sa_lo=100, sa_hi=120, sb_lo=0, sb_hi=20, fast=fast,
            out="bfloat16")  # overflow to Inf in BF16 and FP32
        add("rowadv", m=32, n=256, k=512, scales="rowwise", sa_lo=-140, sa_hi=-120, sb_lo=-10, sb_hi=0, fast=fast,
            out="bfloat16")  # subnormal and zero results
        add("rowadv", m=32, n=256, k=512, scales="rowwise", sa_lo=-140, sa_hi=-120, sb_lo=-10, sb_hi=0, fast=fast,
            out="float16")
        add("rowadv", m=32, n=256, k=512, scales="rowwise", sa_lo=-3, sa_hi=3, sb_lo=-3, sb_hi=3, fast=fast,
            out="float16", spread=10)  # FP16 overflow
    return out


def splitk_grid(outdir):
    """Calls torch._scaled_mm once per shape of a grid (random codes made on the GPU; only the algorithm
    matters) for cuBLASLt's log to record its choice: tensorwise FP32 out, tensorwise BF16 out, row-wise
    BF16 out, fast accumulation off and on. Writes OUTDIR/grid.json, the calls in order."""
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    ns = [16, 64, 256, 1024, 2048, 4096, 8192, 16384]
    ks = [128, 256, 512, 1024, 2048, 4096, 6144, 8192, 12288, 16384, 28672, 65536]
    calls = []
    for k in ks:
        for n in ns:
            b = torch.randint(0, 120, (n, k), dtype=torch.uint8, device="cuda").view(E4M3).t()
            for m in ms:
                a = torch.randint(0, 120, (m, k), dtype=torch.uint8, device="cuda").view(E4M3)
                for mode in ("tensor-f32", "tensor-bf16", "rowwise-bf16"):
                    for fast in (False, True):
                        if mode.startswith("tensor"):
                            sa = torch.tensor(1.0, device="cuda")
                            sb = torch.tensor(1.0, device="cuda")
                        else:
                            sa = torch.ones((m, 1), device="cuda")
                            sb = torch.ones((1, n), device="cuda")
                        out = torch.float32 if mode.endswith("f32") else torch.bfloat16
                        try:
                            torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out, use_fast_accum=fast)
                            calls.append([m, n, k, mode, fast, "ok"])
                        except Exception as e:
                            calls.append([m, n, k, mode, fast, str(e).splitlines()[0][:120]])
            torch.cuda.synchronize()
    with open("%s/grid.json" % outdir, "w") as f:
        json.dump(calls, f)


def parse_grid(log_path, grid_path, out_path):
    """Pairs cuBLASLt's log lines with grid.json's calls: OUT_PATH gets [m, n, k, mode, fast, splits, tile]."""
    import re
    lines = [l for l in open(log_path).read().splitlines() if "cublasLtMatmul]" in l]
    calls = [c for c in json.load(open(grid_path)) if c[5] == "ok"]
    if len(lines) != len(calls):
        raise SystemExit("%d log lines for %d calls" % (len(lines), len(calls)))
    rows = []
    for c, l in zip(calls, lines):
        sp = re.search(r"numSplitsK=(\d+)", l)
        tile = re.search(r"tile=MATMUL_TILE_(\w+)", l)
        rows.append(c[:5] + [int(sp.group(1)) if sp else 1, tile.group(1) if tile else "?"])
    with open(out_path, "w") as f:
        json.dump(rows, f)


def export(golden, probes, rows=8, cols=256):
    """Golden data from probe runs: GOLDEN/cases.json (each case with numSplitsK from the run's cuBLASLt log and
    the rows and columns kept) and GOLDEN/GROUP.npz (each output cut to its first ROWS rows and COLS columns:
    rows and columns of a GEMM are independent, so the cut keeps the replay exact and cheap)."""
    import re
    out_cases, arrays, info = [], {}, None
    for probe in probes:
        manifest = json.load(open(os.path.join(probe, "cases.json")))
        info = manifest["info"]
        lines = [l for l in open(os.path.join(probe, "cublaslt.log")).read().splitlines() if "cublasLtMatmul]" in l]
        ok = [c for c in manifest["cases"] if c["status"] == "ok"]
        if len(ok) != len(lines):
            raise SystemExit("%s: %d log lines for %d cases" % (probe, len(lines), len(ok)))
        algo = {c["name"]: l for c, l in zip(ok, lines)}
        loaded = {}
        for c in manifest["cases"]:
            c = dict(c)
            if c["status"] == "ok":
                sp = re.search(r"numSplitsK=(\d+)", algo[c["name"]])
                c["splits"] = int(sp.group(1)) if sp else 1
                g = c["group"]
                if g not in loaded:
                    loaded[g] = np.load(os.path.join(probe, g + ".npz"))
                d = loaded[g][c["name"]]
                c["rows"], c["cols"] = min(rows, c["m"]), min(cols, c["n"])
                arrays.setdefault(g, {})[c["name"]] = np.ascontiguousarray(d[:c["rows"], :c["cols"]])
            out_cases.append(c)
    os.makedirs(golden, exist_ok=True)
    for g, d in arrays.items():
        np.savez_compressed(os.path.join(golden, g + ".npz"), **d)
    with open(os.path.join(golden, "cases.json"), "w") as f:
        json.dump({"info": info, "rows": rows, "cols": cols, "cases": out_cases}, f, indent=0)


def main():
    if "--export" in sys.argv:
        i = sys.argv.index("--export")
        export(sys.argv[i + 1], sys.argv[i + 2:])
        return
    if "--splitk-grid" in sys.argv:
        splitk_grid(sys.argv[1])
        return
    if "--parse-grid" in sys.argv:
        i = sys.argv.index("--parse-grid")
        parse_grid(*sys.argv[i + 1:i + 4])
        return
    outdir = sys.argv[1]
    quick = "--quick" in sys.argv
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()), "cuda": torch.version.cuda}
    print(json.dumps(info), flush=True)
    t0 = time.time()
    groups = {}
    manifest = []
    only = None
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
    for c in cases(quick):
        if only is not None and c["group"] not in only:
            continue
        rec = dict(c)
        try:
            groups.setdefault(c["group"], {})[c["name"]] = run_case(c)
            rec["status"] = "ok"
        except Exception as e:  # torch refuses the mode: record why
            rec["status"] = "refused"
            rec["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])
        manifest.append(rec)
        print("%s %s %.1f s" % (c["name"], rec["status"], time.time() - t0), flush=True)
    for g, d in groups.items():
        np.savez_compressed("%s/%s.npz" % (outdir, g), **d)
    with open("%s/cases.json" % outdir, "w") as f:
        json.dump({"info": info, "cases": manifest}, f, indent=1)


if __name__ == "__main__":
    main()
