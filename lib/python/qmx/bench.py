"""python3 -m qmx.bench: qmx's Python calls timed beside the same C++ kernels in the same process (the
binding's cost) and beside what this machine's Python offers for the same job: a NumPy copy of the
input (memory speed), torch's elementwise casts (float8 where the installed torch has it, bfloat16
otherwise) and a NumPy-vectorized E4M3 fake cast. Medians of repeated runs; each ratio is to the row's
baseline. --json FILE writes the rows."""
import argparse
import json
import platform
import time

import numpy as np

import qmx


def median_seconds(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        t.append(time.perf_counter() - a)
    return sorted(t)[len(t) // 2]


def numpy_e4m3(x):
    """E4M3 round-to-nearest-even fake cast in NumPy (satfinite): the vectorized emulation a Python user writes."""
    a = np.abs(x)
    e = np.floor(np.log2(np.maximum(a, np.float32(2.0 ** -6))))
    q = np.exp2(e - 3).astype(np.float32)
    r = np.minimum(np.round(a / q) * q, np.float32(448))
    return np.copysign(r, x).astype(np.float32)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m qmx.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--log2n", type=int, default=24, help="elements per call, as a power of two")
    p.add_argument("--reps", type=int, default=7, help="timed runs per row (the median is reported)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--json", help="also write the rows as JSON here")
    a = p.parse_args(argv)
    n = 1 << a.log2n
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32).reshape(-1, 4096)
    try:
        import torch
        tx = torch.from_numpy(x)
        has_torch = True
    except ImportError:
        has_torch = False
    rows = []
    before = qmx.get_num_threads()
    print("qmx %s bench: %s; SIMD target %s; %d elements, median of %d runs" % (
        qmx.__version__, cpu_model(), qmx.simd_target(), n, a.reps))
    print("%-44s %4s %10s %10s %8s" % ("call", "thr", "ms", "Melem/s", "ratio"))
    for t in a.threads:
        qmx.set_num_threads(t)
        if has_torch:
            torch.set_num_threads(t)
        buf = np.empty(x.shape, np.uint8)
        cases = [
            ("qmx.convert(x, 'e4m3')", lambda: qmx.convert(x, "e4m3"),
             "C++ ConvertToCodes, new output", lambda: qmx._qmx.kernel_seconds("convert-new", x, "e4m3", a.reps)),
            ("qmx.convert(x, 'e4m3', out=buf)", lambda: qmx.convert(x, "e4m3", out=buf),
             "C++ ConvertToCodes, reused output", lambda: qmx._qmx.kernel_seconds("convert", x, "e4m3", a.reps)),
            ("qmx.quantize(x, 'mxfp8')", lambda: qmx.quantize(x, "mxfp8"),
             "C++ Quantize mxfp8", lambda: qmx._qmx.kernel_seconds("quantize", x, "mxfp8", a.reps)),
            ("qmx.quantize(x, 'nvfp4')", lambda: qmx.quantize(x, "nvfp4"),
             "C++ Quantize nvfp4", lambda: qmx._qmx.kernel_seconds("quantize", x, "nvfp4", a.reps)),
        ]
        for name, fn, base_name, base in cases:
            s = median_seconds(fn, a.reps)
            b = base()
            rows.append({"call": name, "threads": t, "seconds": s, "baseline": base_name, "baseline_seconds": b,
                         "ratio": b / s})
        copy_s = median_seconds(lambda: x.copy(), a.reps)
        conv_s = [r for r in rows if r["threads"] == t and r["call"] == "qmx.convert(x, 'e4m3')"][0]["seconds"]
        rows.append({"call": "numpy x.copy()", "threads": t, "seconds": copy_s, "baseline": "qmx.convert e4m3",
                     "baseline_seconds": conv_s, "ratio": conv_s / copy_s})
        if t == a.threads[0]:  # NumPy runs on one thread whatever qmx's count
            s = median_seconds(lambda: numpy_e4m3(x), max(1, a.reps // 3))
            rows.append({"call": "NumPy-vectorized e4m3 fake cast", "threads": 1, "seconds": s,
                         "baseline": "qmx.convert e4m3", "baseline_seconds": conv_s, "ratio": conv_s / s})
        if has_torch:
            f8 = getattr(torch, "float8_e4m3fn", None)
            dt, label = (f8, "torch x.to(float8_e4m3fn)") if f8 is not None else (torch.bfloat16, "torch x.to(bfloat16)")
            s = median_seconds(lambda: tx.to(dt), a.reps)
            rows.append({"call": label, "threads": t, "seconds": s, "baseline": "qmx.convert e4m3",
                         "baseline_seconds": conv_s, "ratio": conv_s / s})
        for r in rows:
            if r["threads"] == t and "printed" not in r:
                r["printed"] = True
                print("%-44s %4d %10.3f %10.1f %8.2f   (%s / this)" % (
                    r["call"], r["threads"], r["seconds"] * 1e3, n / r["seconds"] / 1e6, r["ratio"], r["baseline"]))
    qmx.set_num_threads(before)
    print("ratio: the baseline's time over the row's (for the qmx rows, >= 0.9 means the binding adds no pass"
          " over the data)")
    if a.json:
        for r in rows:
            r.pop("printed", None)
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_model(), "simd_target": qmx.simd_target(), "n": n, "reps": a.reps, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
