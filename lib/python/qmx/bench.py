"""python3 -m qmx.bench: qmx's Python calls timed beside the same C++ kernels in the same process (the
binding's cost) and beside what this machine's Python offers for the same job: a NumPy copy of the
input (memory speed), torch's elementwise casts (float8 where the installed torch has it, bfloat16
otherwise) and a NumPy-vectorized E4M3 fake cast. Medians of repeated runs; each ratio is to the row's
baseline. --json FILE writes the rows.

--device cuda times the emulation engine instead: one qmx.torch.Linear training step (forward and backward,
the recipe's three GEMMs bit for bit) on CUDA tensors beside BF16 nn.Linear's step, a fake-quant emulation
of the same forward (quantize, dequantize, BF16 matmul: what torchao's and vLLM's emulation run) with the
SQNR of its output against the faithful one, qmx.quantize, error_stats, hadamard and fake_quantize of a CUDA
tensor beside a device copy, qmx.scaled_mm beside torch._scaled_mm, and the GEMM models (--gemm-size, 8192 by default) beside BF16 torch.matmul. Where torchao imports, its own MX and
NVFP4 quantizers (eager and under torch.compile) run on the same input, their codes and scales compared
with qmx's under the matching profile, and its fake-quant forward beside qmx's with its SQNR."""
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


def cuda_seconds(fn, reps):
    """Median wall time of fn() on the GPU (synchronized before and after each run), after one warm-up."""
    import torch
    fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append(time.perf_counter() - a)
    return sorted(t)[len(t) // 2]


# The recipes' forward operands as qmx.quantize spells them (X, W), for the fake-quant emulation.
FAKE_SPECS = {"mxfp8": ("mxfp8", "mxfp8"), "mxfp8-ocp": ("mxfp8-ocp", "mxfp8-ocp"), "nvfp4": ("nvfp4", "nvfp4-2d"),
              "fp8-current": ("fp8-tensor-current", "fp8-tensor-current"),
              "fp8-blockwise": ("fp8-block1x128", "fp8-block128x128")}


def cuda_main(a):
    import torch
    import qmx.torch as qt
    why = qmx.cuda_engine()
    if why or not torch.cuda.is_available():
        raise SystemExit("qmx.bench --device cuda: " + (why or "torch sees no CUDA device"))
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    print("qmx %s bench on %s (torch %s): one training step of a linear layer, median of %d runs" % (
        qmx.__version__, name, torch.__version__, a.reps))
    rows = []
    ao = load_torchao() if a.torchao else None
    g = torch.Generator(device=dev).manual_seed(0)
    for s in a.sizes:
        x = torch.randn(s, s, device=dev, generator=g)
        dy = torch.randn(s, s, device=dev, generator=g) * 1e-3
        ref = torch.nn.Linear(s, s, bias=False, device=dev, dtype=torch.bfloat16)
        xb, dyb = x.to(torch.bfloat16).requires_grad_(), dy.to(torch.bfloat16)

        def bf16_step():
            ref(xb).backward(dyb)
        t_bf16 = cuda_seconds(bf16_step, a.reps)
        rows.append({"call": "BF16 nn.Linear step", "size": s, "seconds": t_bf16, "ratio": 1.0})
        print("%-44s %6d %10.3f ms" % ("BF16 nn.Linear step (forward + backward)", s, t_bf16 * 1e3))
        for recipe in a.recipes:
            lin = qt.Linear(s, s, bias=False, recipe=recipe).to(dev)
            with torch.no_grad():
                lin.weight.copy_(ref.weight.float())
            xr = x.clone().requires_grad_()

            def step():
                lin(xr).backward(dy)
            t = cuda_seconds(step, max(1, a.reps // 2))
            row = {"call": "qmx.torch.Linear(%s) step" % recipe, "size": s, "seconds": t, "ratio": t / t_bf16}
            if recipe in FAKE_SPECS:
                sx, sw = FAKE_SPECS[recipe]
                w = lin.weight.detach()

                def fake():
                    xq = qmx.quantize(x, sx, profile="transformer-engine").dequantize()
                    wq = qmx.quantize(w, sw, profile="transformer-engine").dequantize()
                    return (xq.to(torch.bfloat16) @ wq.to(torch.bfloat16).t()).float()
                row["fake_forward_seconds"] = cuda_seconds(fake, a.reps)
                with torch.no_grad():
                    yf = lin(x).float()
                    yk = fake()
                    row["fake_sqnr_db"] = sqnr_db(yf, yk)
                    row["fake_forward_ratio"] = row["fake_forward_seconds"] / t_bf16
                if ao is not None and recipe in TORCHAO_FAKE:
                    ao_fake = TORCHAO_FAKE[recipe](ao)

                    def ao_forward():
                        return (ao_fake(x) @ ao_fake(w).t()).float()
                    row["torchao_fake_forward_seconds"] = cuda_seconds(ao_forward, a.reps)
                    with torch.no_grad():
                        row["torchao_fake_sqnr_db"] = sqnr_db(yf, ao_forward())
            rows.append(row)
            print("%-44s %6d %10.1f ms %8.0fx BF16%s%s" % (
                row["call"], s, t * 1e3, t / t_bf16,
                "" if "fake_sqnr_db" not in row else "   fake-quant forward %.2f ms, its SQNR vs faithful %.1f dB" % (
                    row["fake_forward_seconds"] * 1e3, row["fake_sqnr_db"]),
                "" if "torchao_fake_sqnr_db" not in row else "; torchao's %.2f ms, %.1f dB" % (
                    row["torchao_fake_forward_seconds"] * 1e3, row["torchao_fake_sqnr_db"])))
    n = 1 << a.log2n
    xs = torch.randn(n // 4096, 4096, device=dev, generator=g)
    t_copy = cuda_seconds(lambda: xs.clone(), a.reps)
    rows.append({"call": "device copy (x.clone())", "size": n, "seconds": t_copy, "ratio": 1.0})
    print("%-44s %6s %10.3f ms" % ("device copy of %d float32" % n, "", t_copy * 1e3))
    for spec in ("mxfp8", "mxfp4", "nvfp4"):
        t = cuda_seconds(lambda: qmx.quantize(xs, spec), a.reps)
        rows.append({"call": "qmx.quantize(x_cuda, %r)" % spec, "size": n, "seconds": t, "ratio": t_copy / t})
        print("%-44s %6s %10.3f ms %8.2fx copy speed" % ("qmx.quantize(x_cuda, %r)" % spec, "", t * 1e3, t_copy / t))
    cuda_tensor_ops(a, xs, t_copy, rows)
    if ao is not None:
        torchao_quantizers(a, ao, xs, t_copy, rows)
    if a.gemm_size > 0:
        cuda_gemms(a, dev, g, rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": name, "torch": torch.__version__, "reps": a.reps, "rows": rows,
                       "torchao": None if ao is None else ao["version"]}, f, indent=1)


def cuda_tensor_ops(a, xs, t_copy, rows):
    """The engine's tensor operations on the same input beside the device copy, and qmx.scaled_mm beside
    torch._scaled_mm (per-tensor E4M3, BF16 output) at --sizes, its outputs compared with torch's."""
    import torch
    ys = xs * 1.01
    ops = [("qmx.error_stats(x_cuda, y_cuda)", lambda: qmx.error_stats(xs, ys)),
           ("qmx.hadamard(x_cuda, 32)", lambda: qmx.hadamard(xs, 32)),
           ("qmx.hadamard(x_cuda, 128)", lambda: qmx.hadamard(xs, 128)),
           ("qmx.fake_quantize(x_cuda, 'mxfp8')", lambda: qmx.fake_quantize(xs, "mxfp8"))]
    for call, fn in ops:
        t = cuda_seconds(fn, a.reps)
        rows.append({"call": call, "size": xs.numel(), "seconds": t, "ratio": t_copy / t})
        print("%-44s %6s %10.3f ms %8.2fx copy speed" % (call, "", t * 1e3, t_copy / t))
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return
    one = torch.tensor(1.0, device=xs.device)
    for s in a.sizes:
        fa = torch.randn(s, s, device=xs.device).to(torch.float8_e4m3fn)
        fb = torch.randn(s, s, device=xs.device).to(torch.float8_e4m3fn).t()
        split = qmx.scaled_mm_split_k(s, s, s, torch.bfloat16) or 1
        t_torch = cuda_seconds(lambda: torch._scaled_mm(fa, fb, one, one, out_dtype=torch.bfloat16), a.reps)
        t = cuda_seconds(lambda: qmx.scaled_mm(fa, fb, one, one, out_dtype=torch.bfloat16, split_k=split), a.reps)
        same = bool(torch.equal(torch._scaled_mm(fa, fb, one, one, out_dtype=torch.bfloat16).view(torch.int16),
                                qmx.scaled_mm(fa, fb, one, one, out_dtype=torch.bfloat16, split_k=split).view(torch.int16)))
        rows.append({"call": "qmx.scaled_mm e4m3 bf16", "size": s, "seconds": t, "ratio": t_torch / t,
                     "torch_seconds": t_torch, "equal_to_torch": same})
        print("%-44s %6d %10.3f ms %8.2fx torch._scaled_mm speed (%.3f ms), outputs %s" % (
            "qmx.scaled_mm e4m3 bf16", s, t * 1e3, t_torch / t, t_torch * 1e3,
            "equal" if same else "DIFFERENT (a GPU other than the measured H200?)"))


def sqnr_db(ref, y):
    """10 log10(sum ref^2 / sum (ref - y)^2), in double."""
    import torch
    err = (ref.double() - y.double())
    return float(10 * torch.log10((ref.double() ** 2).sum() / (err ** 2).sum()))


def load_torchao():
    """torchao's MX and NVFP4 quantizers (its prototype.mx_formats, pure PyTorch), or None with the reason
    printed. Its compiled extensions are not needed (TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 where unset)."""
    import os
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    try:
        import torchao
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import MXTensor, to_mx
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, nvfp4_quantize, per_tensor_amax_to_scale
    except Exception as e:  # noqa: BLE001 (any import failure: the rows are skipped, saying why)
        print("torchao rows skipped: %s: %s" % (type(e).__name__, e))
        return None
    return {"version": getattr(torchao, "__version__", "unknown"), "floor": ScaleCalculationMode.FLOOR,
            "to_mx": to_mx, "MXTensor": MXTensor, "NVFP4Tensor": NVFP4Tensor, "nvfp4_quantize": nvfp4_quantize,
            "tensor_scale": per_tensor_amax_to_scale}


def _ao_mx_fake(ao):
    import torch
    return lambda t: ao["MXTensor"].to_mx(t.contiguous(), torch.float8_e4m3fn, 32).dequantize(torch.bfloat16)


def _ao_nvfp4_fake(ao):
    import torch

    def fake(t):
        t = t.contiguous()
        scale = ao["tensor_scale"](torch.max(torch.abs(t)))
        return ao["NVFP4Tensor"].to_nvfp4(t, per_tensor_scale=scale).dequantize(torch.bfloat16)
    return fake


# torchao's fake-quant emulation of a recipe's forward operands (its default FLOOR scales for MXFP8; NVFP4
# with the tensor scale from the amax), beside qmx's in the step rows.
TORCHAO_FAKE = {"mxfp8": _ao_mx_fake, "nvfp4": _ao_nvfp4_fake}


def _unpack_fp4(packed):
    """torchao's packed FP4 (element 2i in the low nibble) as one code per byte."""
    import torch
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(*packed.shape[:-1], -1)


def torchao_quantizers(a, ao, xs, t_copy, rows):
    """torchao's own quantizers on the same 2^log2n input, eager and under torch.compile, timed beside the
    device copy, and their codes and scales compared with qmx's under the matching profile or rule."""
    import torch
    to_mx, floor = ao["to_mx"], ao["floor"]

    def ao_nvfp4(t):
        return ao["nvfp4_quantize"](t, 16, ao["tensor_scale"](torch.max(torch.abs(t))))
    cases = [
        ("mxfp8", dict(profile="torchao-floor"), lambda t: to_mx(t, torch.float8_e4m3fn, 32, floor), False),
        ("mxfp4", dict(profile="torchao-floor"), lambda t: to_mx(t, torch.float4_e2m1fn_x2, 32, floor), True),
        ("nvfp4", dict(rule="nvfp4-torchao-cuda"), ao_nvfp4, True),  # each returns (scales, codes)
    ]
    for spec, overrides, fn, packed in cases:
        for mode in ("eager", "torch.compile"):
            run = fn
            if mode == "torch.compile":
                try:
                    run = torch.compile(fn)
                    run(xs)
                except Exception as e:  # noqa: BLE001 (Triton missing, an unsupported op: say so, go on)
                    print("torchao %s under torch.compile skipped: %s: %s" % (spec, type(e).__name__, str(e)[:200]))
                    continue
            t = cuda_seconds(lambda: run(xs), a.reps)
            row = {"call": "torchao %s quantize (%s)" % (spec, mode), "size": xs.numel(), "seconds": t,
                   "ratio": t_copy / t}
            if mode == "eager":
                try:
                    scales, codes = run(xs)
                    codes = codes.view(torch.uint8)
                    codes = _unpack_fp4(codes) if packed else codes
                    q = qmx.quantize(xs, spec, **overrides)
                    row["codes_differ"] = int((codes.reshape(q.codes.shape) != q.codes).sum())
                    row["scales_differ"] = int((scales.view(torch.uint8).reshape(q.scales.shape) != q.scales).sum())
                    row["compared_with"] = "qmx.quantize(x, %r, %s)" % (spec, ", ".join(
                        "%s=%r" % kv for kv in overrides.items()))
                except Exception as e:  # noqa: BLE001 (a spec the engine refuses: the row says so)
                    row["compared_with"] = "not compared: %s: %s" % (type(e).__name__, e)
            rows.append(row)
            print("%-44s %6s %10.3f ms %8.2fx copy speed%s" % (
                row["call"], "", t * 1e3, t_copy / t, "" if "codes_differ" not in row else
                "   vs %s: %d codes, %d scales differ" % (row["compared_with"], row["codes_differ"],
                                                       row["scales_differ"])))


# The engine's GEMM models beside BF16 cuBLAS (the speed rows), as qmx.quantize spells the operands.
CUDA_GEMMS = [("nvfp4", "blackwell-mxf4nvf4"), ("mxfp8", "blackwell-mxf8f6f4"), ("mxfp8", "block-exact"),
              ("mxfp8", "exact")]


def cuda_gemms(a, dev, g, rows):
    """--gemm-size n: BF16 torch.matmul at n^3 and each CUDA_GEMMS model's kernel time (qmx.gemm_stats, the
    median of three runs after a warm-up) on the same N(0, 1) operands, quantized on the device."""
    import torch
    n = a.gemm_size
    x = torch.randn(n, n, device=dev, generator=g)
    y = torch.randn(n, n, device=dev, generator=g)
    xb, yb = x.to(torch.bfloat16), y.to(torch.bfloat16)
    t_bf16 = cuda_seconds(lambda: torch.matmul(xb, yb), a.reps)
    rows.append({"call": "BF16 torch.matmul", "size": n, "seconds": t_bf16, "ratio": 1.0})
    print("%-44s %6d %10.3f ms %8.0f TFLOP/s" % ("BF16 torch.matmul", n, t_bf16 * 1e3, 2 * n ** 3 / t_bf16 / 1e12))
    for spec, model in CUDA_GEMMS:
        qx, qy = qmx.quantize(x, spec), qmx.quantize(y, spec, axis="col")
        qmx.gemm_stats(qx, qy, model)
        runs = sorted((qmx.gemm_stats(qx, qy, model)[1] for _ in range(3)), key=lambda st: st["kernel_seconds"])
        st = runs[1]
        t = st["kernel_seconds"]
        rows.append({"call": "qmx.gemm %s %s" % (spec, model), "size": n, "seconds": t, "ratio": t_bf16 / t,
                     "kernel": st["kernel"], "steps": st["steps"], "fallback_steps": st["fallback_steps"],
                     "whole_outputs": st.get("whole_outputs", 0)})
        whole = st.get("whole_outputs", 0)
        print("%-44s %6d %10.1f ms %8.4fx BF16 speed (%s kernel, %.1f%% of steps on the exact fallback%s)" % (
            "qmx.gemm %s %s" % (spec, model), n, t * 1e3, t_bf16 / t, st["kernel"],
            100.0 * st["fallback_steps"] / max(1, st["steps"]),
            ", %.1f%% of outputs summed whole" % (100.0 * whole / (n * n)) if whole else ""))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m qmx.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--log2n", type=int, default=24, help="elements per call, as a power of two")
    p.add_argument("--reps", type=int, default=7, help="timed runs per row (the median is reported)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--json", help="also write the rows as JSON here")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: the emulation engine on CUDA tensors (a linear layer's training step, quantization)")
    p.add_argument("--sizes", type=int, nargs="+", default=[4096], help="--device cuda: the layer's M = N = K")
    p.add_argument("--gemm-size", type=int, default=8192,
                   help="--device cuda: M = N = K of the GEMM models beside BF16 torch.matmul (0: skip them)")
    p.add_argument("--recipes", nargs="+", default=["mxfp8", "nvfp4", "quartet", "fp8-current"],
                   help="--device cuda: training recipes to time")
    p.add_argument("--no-torchao", dest="torchao", action="store_false",
                   help="--device cuda: leave out torchao's quantizers and fake-quant forward (by default timed "
                        "beside qmx's where torchao imports)")
    a = p.parse_args(argv)
    if a.device == "cuda":
        a.log2n = max(a.log2n, 28) if a.log2n == 24 else a.log2n
        return cuda_main(a)
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
