# Threads, SIMD targets, memory, transforms, metrics and golden vectors through the package.
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qmx
from conftest import REPO, assert_bits_equal


def test_same_bits_on_1_and_2_threads_and_every_target():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 2048)).astype(np.float32)
    b = rng.standard_normal((2048, 64)).astype(np.float32)

    def run():
        q = qmx.quantize(x, "nvfp4", rounding="sr", seed=4)
        return [qmx.convert(x, "e2m1", "sr", seed=3), q.codes.copy(), q.scales.copy(), q.dequantize(),
                qmx.gemm(qmx.quantize(x, "mxfp8"), qmx.quantize(b, "mxfp8", axis="col"), "blackwell-mxf8f6f4"),
                qmx.rht(x, 64, seed=2)]

    before = qmx.get_num_threads()
    try:
        qmx.set_num_threads(1)
        one = run()
        qmx.set_num_threads(2)
        two = run()
        for t in qmx.simd_targets():
            qmx.force_simd_target(t)
            for g, w in zip(run(), one):
                assert_bits_equal(g, w, "target " + t)
    finally:
        qmx.force_simd_target("")
        qmx.set_num_threads(before)
    for g, w in zip(two, one):
        assert_bits_equal(g, w, "threads")
    with pytest.raises(ValueError):
        qmx.set_num_threads(0)


def test_convert_adds_no_copy_of_the_input():
    # Peak RSS over a 2^26-element conversion: the 64 MiB of codes and a small constant, never a copy of
    # the 256 MiB input.
    code = textwrap.dedent("""
        import numpy as np, qmx
        def hwm():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        x = np.empty(1 << 26, np.float32)
        x[:] = 1.5
        qmx.convert(x[:1024], "e4m3")
        base = hwm()
        c = qmx.convert(x, "e4m3")
        print(hwm() - base, c.nbytes)
    """)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    grew, out_bytes = map(int, r.stdout.split())
    assert grew <= out_bytes + (16 << 20), "peak RSS grew by %d bytes for %d bytes of output" % (grew, out_bytes)


def test_hadamard_round_trip_and_metrics():
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    for f in (lambda v, **k: qmx.hadamard(v, 32, **k), lambda v, **k: qmx.rht(v, 128, seed=7, **k)):
        y = f(x)
        back = f(y, inverse=True)
        assert np.max(np.abs(back - x)) < 1e-5
        assert abs(float(np.sum(y.astype(np.float64) ** 2)) / float(np.sum(x.astype(np.float64) ** 2)) - 1) < 1e-5
    h = qmx.hadamard(np.eye(16, dtype=np.float32), 16)
    assert np.allclose(np.abs(h), 0.25)  # the normalized Walsh-Hadamard matrix
    q = qmx.fake_quantize(x, "mxfp4")
    e = qmx.error_stats(x, q)
    d = (q.astype(np.float64) - x)
    assert e["count"] == x.size and np.isclose(e["mse"], np.mean(d * d), rtol=1e-12)
    assert np.isclose(e["sqnr_db"], 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(d * d)), rtol=1e-12)
    assert qmx.error_stats(x, x)["sqnr_db"] == float("inf")
    k = qmx.kurtosis(x, [3.0])
    assert 2.0 < k["mean_kurtosis"] < 4.5 and len(k["outliers"]) == 1
    m = qmx.misalignment(x, q, 32)
    assert m["groups"] == 64 * 8 and abs(m["misalignment"]) < 0.2


def test_golden_generate_and_verify(tmp_path):
    out = tmp_path / "g"
    entries = qmx.golden.generate(out, suites=["ue8m0"], hopper_dir="")
    assert entries and all(e["suite"] == "ue8m0" for e in entries)
    for e in entries:  # the checked-in level 1 files, byte for byte
        assert (out / e["path"]).read_bytes() == (REPO / "golden" / "level1" / e["path"]).read_bytes(), e["path"]
    assert all(r["ok"] for r in qmx.golden.verify(out, "cpu-ref"))
    # One expected value changed: verify names the line.
    path = out / entries[0]["path"]
    header, cases = qmx.golden.read(path)
    assert header["op"] and cases
    lines = path.read_text().splitlines(keepends=True)
    i = next(n for n, l in enumerate(lines) if not l.startswith("#"))
    f = lines[i].split()
    f[1] = "%0*x" % (len(f[1]), int(f[1], 16) ^ 1)
    lines[i] = " ".join(f) + "\n"
    path.write_text("".join(lines))
    res = [r for r in qmx.golden.verify(out, "cpu-simd") if r["path"] == entries[0]["path"]][0]
    assert not res["ok"] and res["mismatches"] == 1 and res["first"][0][0] == i + 1


def test_golden_memh_layout(tmp_path):
    out = tmp_path / "m"
    entries = qmx.golden.generate(out, suites=["mx-block"], hopper_dir="", layout="memh")
    for e in entries[:5]:
        header, cases = qmx.golden.read(out / e["path"])
        words = qmx.golden.read_memh(str(out / e["path"])[:-4] + ".memh")
        assert words == cases, e["path"]
    with pytest.raises(ValueError, match="layout is text or memh"):
        qmx.golden.generate(out, suites=["sr"], hopper_dir="", layout="hex")


def test_checked_in_level1_replays():
    res = qmx.golden.verify(REPO / "golden" / "level1", "cpu-simd", only="mx-block")
    assert res and all(r["ok"] for r in res)


def test_golden_arrays_hold_every_field_of_every_level1_file():
    # Every hex digit of every case lands in the arrays, in the fields' order: each field's elements, printed
    # at its digits per element, give the case's columns back ("-" where NAME_present is false).
    files = sorted((REPO / "golden" / "level1").glob("*/*.txt"))
    assert len(files) > 300
    for path in files:
        header, cases = qmx.golden.read(path)
        h2, arr = qmx.golden.arrays(path)
        assert h2 == header and all(len(v) == len(cases) for v in arr.values()), path
        keys = [k for k in arr if not k.endswith("_present")]
        for i, case in enumerate(cases[:40]):
            pos = 0
            for k in keys:
                elems = [int(e) for e in np.atleast_1d(arr[k][i])]
                if k + "_present" in arr and not arr[k + "_present"][i]:
                    assert set(case[pos]) == {"-"}, (path, i, k)
                    pos += 1
                    continue
                # One column of packed elements (codes, scales), or one column per element (x[0] .. x[N]).
                packed = len(elems) > 1 and len(case[pos]) % len(elems) == 0
                cols = case[pos:pos + 1] if packed else case[pos:pos + len(elems)]
                digits = len(cols[0]) // len(elems) if packed else len(cols[0])
                assert "".join(cols) == "".join("%0*x" % (digits, e) for e in elems), (path, i, k)
                pos += len(cols)
            assert pos == len(case), (path, i)


def test_golden_arrays_drive_a_model_as_a_bench_would():
    # A cocotb-style check: the conversion files' inputs through qmx.convert give their outputs, and the MX
    # block files' blocks through qmx.quantize give their scales and codes.
    conv = sorted((REPO / "golden" / "level1" / "conversions").glob("f32_*_rne_satfinite.txt"))
    assert conv
    for path in conv:
        header, a = qmx.golden.arrays(path)
        x = a["input"].view(np.float32)
        codes = qmx.convert(x, header["dst"], header["round"], header["sat"], nan_sign=header["nan-sign"],
                            nan_fallback=header["nan-fallback"], subnormals=header["subnormals"])
        np.testing.assert_array_equal(codes, a["output"], err_msg=str(path))
    header, a = qmx.golden.arrays(REPO / "golden" / "level1" / "conversions" / "f32_e5m2_rne_satfinite_nanriscv.txt")
    assert header["nan-payload"] == "quiet" and header["nan-sign"] == "positive"
    x = a["input"].view(np.float32)
    codes = qmx.convert(x, "e5m2", nan_sign="positive", nan_payload="quiet")
    np.testing.assert_array_equal(codes, a["output"])
    assert (codes[np.isnan(x)] == 0x7E).all() and np.isnan(x).sum() >= 4
    header, a = qmx.golden.arrays(REPO / "golden" / "level1" / "mx-block" / "e4m3_round-up_block-nan.txt")
    assert a["x"].shape[1] == 32 and a["codes"].shape == a["x"].shape
    q = qmx.quantize(a["x"].view(np.float32), "mxfp8", rule="round-up", nan_policy="block-nan")
    np.testing.assert_array_equal(q.scales.reshape(-1), a["scale"])
    np.testing.assert_array_equal(q.codes, a["codes"])
    # Values read where the text was checked by hand: the first lines of two files.
    _, c = qmx.golden.arrays(REPO / "golden" / "level1" / "conversions" / "bf16_e2m1_rne_satfinite.txt")
    assert c["input"].dtype == np.uint16 and (c["input"][1], c["output"][1], c["flags"][1]) == (0x7F80, 0x07, 0x20)
    _, g = qmx.golden.arrays(REPO / "golden" / "level1" / "gemm" / "fp8_exact.txt")
    assert g["a"].shape[1] == 256 and not g["sa_present"].any() and g["d"].dtype == np.uint32


def test_golden_units_drive_qmx_gemm(tmp_path):
    """A design's own unit (generate(units=...)): its file's cases through qmx.gemm under the unit's model
    give the file's outputs, as a cocotb bench would check its unit against them; bad units are refused
    before anything is written."""
    model = "fused:step=16,F=18,term=rz,out=rne,bits=11"
    entries = qmx.golden.generate(tmp_path / "u", units=["name=mine a=e5m2 b=e4m3 k=32 model=" + model])
    assert [e["path"] for e in entries] == ["unit/mine.txt"]
    header, a = qmx.golden.arrays(tmp_path / "u" / "unit" / "mine.txt")
    assert header["unit"] == "mine" and header["model"] == model and a["a"].shape[1] == 32
    assert a["a"].shape[0] > 40
    for i in range(a["a"].shape[0]):
        c = a["c"][i:i + 1].view(np.float32).reshape(1, 1) if a["c_present"][i] else None
        d = qmx.gemm(a["a"][i:i + 1].astype(np.uint8), a["b"][i].astype(np.uint8).reshape(32, 1), model, c=c,
                     a_format="e5m2", b_format="e4m3")
        assert d.view(np.uint32)[0, 0] == a["d"][i], i
    with pytest.raises(ValueError, match="unknown key 'colour'"):
        qmx.golden.generate(tmp_path / "bad", units="name=x a=e4m3 b=e4m3 k=32 model=exact colour=red")
    assert not (tmp_path / "bad").exists()


def test_golden_generate_checks_the_hopper_data_before_writing(tmp_path):
    with pytest.raises(ValueError, match="cases.json not found"):
        qmx.golden.generate(tmp_path / "g", suites=["gemm"], hopper_dir=tmp_path / "nowhere")
    assert not (tmp_path / "g").exists()
    # Found without being named (the source tree's golden/gemm-hopper from any working directory).
    entries = qmx.golden.generate(tmp_path / "h", suites=["gemm"])
    assert any("hopper" in e["path"] for e in entries)


def test_convert_flags_and_tininess():
    # Each element's flags from the reference routine, the codes equal to the fast path's; an FP32 value just
    # below E4M3's smallest normal 2^-6 that RNE at E4M3's precision carries to 2^-6 is tiny before rounding
    # only; 2^-12 is tiny either way.
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(1000).astype(np.float32) * np.float32(2.0) ** rng.integers(-12, 10, 1000),
                        np.array([2.0 ** -6 * (1 - 2.0 ** -5), 2.0 ** -12, 1000.0, np.nan, np.inf, 0.0],
                                 dtype=np.float32)]).astype(np.float32)
    codes, before = qmx.convert(x, "e4m3", flags=True)
    codes_after, after = qmx.convert(x, "e4m3", flags=True, tininess="after")
    assert codes.dtype == np.uint8 and before.dtype == np.uint8 and before.shape == x.shape
    assert_bits_equal(codes, qmx.convert(x, "e4m3"))
    assert_bits_equal(codes_after, codes)
    assert before[1000] == 3 and after[1000] == 1      # inexact | underflow, then inexact alone
    assert before[1001] == 3 and after[1001] == 3
    assert before[1002] & 0x20                          # 1000 saturates to 448
    assert np.array_equal(before & ~np.uint8(2), after & ~np.uint8(2))  # only the underflow bit may differ
    # Stochastic rounding draws the same bits as the fast path.
    c_sr, f_sr = qmx.convert(x, "e2m1", "sr", seed=11, flags=True)
    assert_bits_equal(c_sr, qmx.convert(x, "e2m1", "sr", seed=11))
    assert (f_sr[:1000] & 1).sum() > 500
    with pytest.raises(ValueError, match="tininess must be before or after"):
        qmx.convert(x, "e4m3", tininess="late")
    with pytest.raises(ValueError, match="applies only to IEEE-style formats"):
        qmx.convert(x, "e4m3", nan_payload="quiet")
    nan = np.array([np.nan, -np.nan], np.float32)
    assert list(qmx.convert(nan, "e5m2", nan_payload="quiet")) == [0x7E, 0xFE]
    assert list(qmx.convert(nan, "e5m2", nan_payload="quiet", flags=True)[0]) == [0x7E, 0xFE]
    with pytest.raises(ValueError, match="drop out="):
        qmx.convert(x, "e4m3", flags=True, out=np.empty(x.shape, np.uint8))
    with pytest.raises(Exception, match="8 bits or fewer"):
        qmx.convert(x, "bf16", flags=True)


def test_golden_coverage():
    import qmx.golden as qg
    level1 = os.path.join(REPO, "golden", "level1")
    reps = qg.coverage(os.path.join(level1, "conversions"))
    modelled = [r for r in reps if r["modelled"]]
    assert len(modelled) == len(reps) > 400
    assert all(not r["missed"] for r in modelled)
    one = qg.coverage(os.path.join(level1, "conversions", "f32_e4m3_rne_satfinite.txt"))[0]
    assert one["op"] == "convert" and one["classes"]["tie@0"] >= 1 and one["cases"] > 250
    # The dot files: modelled, and every file the generator chose the cases of (not the H200's measured ones)
    # reaches each of its classes, the alignment shifts among them.
    gemm = qg.coverage(os.path.join(level1, "gemm"))
    assert gemm and all(r["modelled"] for r in gemm)
    chosen = [r for r in gemm if "observed=hardware" not in r["header"]]
    assert len(chosen) == 27 and all(not r["missed"] for r in chosen)
    nv = qg.coverage(os.path.join(level1, "gemm", "nvfp4_blackwell-mxf4nvf4.txt"))[0]
    assert nv["classes"]["shift:38"] >= 1 and nv["classes"]["out:zero-from-nonzero"] >= 1
    with pytest.raises(ValueError, match="give both"):
        qg.coverage(log="x.log")
