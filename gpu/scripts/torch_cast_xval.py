#!/usr/bin/env python3
"""PyTorch's CPU float8 casts as an oracle and a speed baseline for qmx-sim (issue 3).

1. Bits: every one of the 2^32 FP32 inputs (in chunks of 2^28) through torch's fp32 -> float8_e4m3fn and
   fp32 -> float8_e5m2 casts and through `qmx-sim convert --sat nosat` (the reference routine, RNE; the
   OCP nosat rules are torch's: overflow to NaN in e4m3, to Inf in e5m2). Prints the codes that differ.
2. Speed (--speed): torch's fp32 -> float8_e4m3fn cast of 2^24 Gaussian values (the data of
   `qmx-sim bench --suite convert`) on 1 and 2 threads, median of 11, beside torch's own FP32 copy, to
   set beside `qmx-sim bench --suite convert` run on the same machine.

Needs PyTorch (2.1+) and numpy; Debian's packages have no PyTorch, so this runs where it is installed
(the device machines have it). Usage: python3 torch_cast_xval.py QMX_SIM [--speed] [--chunks K]
(K of the 16 chunks of 2^28 inputs, default all).
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch


def speed():
    n = 1 << 24
    x = torch.randn(n, generator=torch.Generator().manual_seed(42))
    x[::997] *= 50.0

    def median(f, reps=11):
        f()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return sorted(ts)[reps // 2]

    for threads in (1, 2):
        torch.set_num_threads(threads)
        q = torch.empty(n, dtype=torch.float8_e4m3fn)
        y = torch.empty_like(x)
        s = median(lambda: q.copy_(x))
        c = median(lambda: y.copy_(x))
        print(f"torch {torch.__version__} fp32->float8_e4m3fn, {threads} thread(s): {n / s / 1e9:.3f} Gelem/s; "
              f"torch FP32 copy {8 * n / c / 1e9:.1f} GB/s", flush=True)


def bits(qmx_sim, chunks):
    torch.set_num_threads(os.cpu_count() or 1)
    chunk = 1 << 28
    differ = {"e4m3": 0, "e5m2": 0}
    with tempfile.TemporaryDirectory() as tmp:
        x_path, out_path = os.path.join(tmp, "x.npy"), os.path.join(tmp, "codes.npy")
        for c in range(chunks):
            u = np.arange(c * chunk, (c + 1) * chunk, dtype=np.uint64).astype(np.uint32)
            x = u.view(np.float32)
            np.save(x_path, x)
            for fmt, dtype in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
                theirs = torch.from_numpy(x).to(dtype).view(torch.uint8).numpy()
                subprocess.run([qmx_sim, "convert", "--in", x_path, "--to", fmt, "--sat", "nosat", "--out", out_path],
                               check=True, stdout=subprocess.DEVNULL)
                ours = np.load(out_path)
                bad = np.nonzero(ours != theirs)[0]
                differ[fmt] += len(bad)
                for i in bad[:3]:
                    print(f"  {fmt} x {u[i]:#010x}: torch {theirs[i]:#04x}, qmx {ours[i]:#04x}")
            print(f"chunk {c + 1}/{chunks}: inputs below {(c + 1) * chunk:#x}; codes that differ so far {differ}", flush=True)
    inputs = "all 2^32" if chunks == 16 else f"{chunks * chunk}"
    print(f"{inputs} FP32 inputs, torch {torch.__version__} vs qmx-sim (RNE, nosat): {differ}")
    return sum(differ.values())


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    qmx_sim = args[0]
    chunks = 16
    if "--chunks" in args:
        chunks = int(args[args.index("--chunks") + 1])
        if not 1 <= chunks <= 16:
            sys.exit("--chunks must be 1..16")
    if "--speed" in args:
        speed()
    sys.exit(1 if bits(qmx_sim, chunks) else 0)


if __name__ == "__main__":
    main()
