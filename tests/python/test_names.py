"""Every name lib/python/README.md documents is importable from qmx, and the helpers a study needs from
Python (named distributions, quantization counts, error statistics on torch tensors, one recipe step) equal
the CLI's numbers for the same input."""
import json
import re

import numpy as np
import pytest

import qmx
from conftest import REPO, assert_bits_equal


def test_every_documented_name_is_in_the_package():
    import qmx.golden
    import qmx.io
    import qmx.testing
    readme = (REPO / "lib" / "python" / "README.md").read_text()
    names = set(re.findall(r"`(?:qmx\.)?([a-z_][a-z0-9_.]*)\(", readme))
    modules = [qmx, qmx.io, qmx.golden, qmx.testing]
    try:
        import qmx.torch
        modules.append(qmx.torch)
    except ImportError:
        pass

    def found(name):
        if "." in name:  # golden.verify, io.safetensors_info, torch.linear: from the package down
            obj = qmx
            for part in name.split("."):
                if not hasattr(obj, part):
                    return name.startswith("torch.") and len(modules) == 4  # no torch here
                obj = getattr(obj, part)
            return True
        return any(hasattr(m, name) for m in modules)  # qmx.io's and qmx.golden's names by themselves too

    names = {n for n in names if not n.startswith(("numpy.", "x.", "np."))}
    assert len(names) > 30, "the README's names were not found"
    assert sorted(n for n in names if not found(n)) == []


def test_distribution_equals_the_study_inputs(cli, tmp_path):
    # study error --dist writes its input with --dump? No: compare against the CLI's sqnr of the same draw.
    x = qmx.distribution("student-t:3+tau20", (64, 512), seed=9)
    assert x.dtype == np.float32 and x.shape == (64, 512)
    assert_bits_equal(qmx.distribution("student-t:3+tau20", (64, 512), seed=9), x)
    # Element i depends only on (seed, first + i): a later slice of the stream is the same values.
    tail = qmx.distribution("student-t:3+tau20", (512,), seed=9, first=63 * 512)
    assert_bits_equal(tail, x[63])
    out = cli("study", "error", "--spec", "mxfp4", "--dist", "student-t:3+tau20", "--rows", 64, "--cols", 512,
              "--seed", 9, "--quiet", "--json", tmp_path / "e.json")
    rec = json.loads((tmp_path / "e.json").read_text())["records"][0]
    err = qmx.error_stats(x, qmx.quantize(x, "mxfp4").dequantize())
    assert err["mse"] == pytest.approx(rec["mse"], rel=0, abs=0)
    assert "normal" in " ".join(qmx.distribution_names())
    with pytest.raises(ValueError, match="student"):
        qmx.distribution("student", (4,))


def test_quantize_stats_equal_the_cli_counts(cli, tmp_path):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 256)) * np.float32(2.0) ** rng.integers(-30, 30, (64, 256))).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, 1e38]
    np.save(tmp_path / "x.npy", x)
    changed = 0
    for spec in ("mxfp4", "nvfp4", "fp8-tensor-current"):
        cli("quantize", "--spec", spec, "--in", tmp_path / "x.npy", "--out", tmp_path / (spec + ".safetensors"),
            "--json", tmp_path / (spec + ".json"))
        counts = json.loads((tmp_path / (spec + ".json")).read_text())["tensors"][0]["counts"]
        st = qmx.quantize_stats(x, qmx.quantize(x, spec))
        assert {k: st[k] for k in counts} == counts, spec
        assert st["scale_histogram"].shape == (256,)
        changed += st["saturated"] + st["flushed_to_zero"]
    assert changed > 0
    with pytest.raises(ValueError, match="elements"):
        qmx.quantize_stats(x[:32], qmx.quantize(x, "mxfp4"))


def test_error_stats_and_recipe_step_take_torch_tensors():
    torch = pytest.importorskip("torch")
    x = qmx.distribution("normal", (32, 64), seed=1)
    w = qmx.distribution("laplace", (16, 64), seed=2)
    dy = qmx.distribution("normal", (32, 16), seed=3)
    y = qmx.quantize(x, "mxfp8").dequantize()
    assert qmx.error_stats(torch.from_numpy(x), torch.from_numpy(y)) == qmx.error_stats(x, y)
    a = qmx.recipe_step("mxfp8", torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy))
    b = qmx.recipe_step("mxfp8", x, w, dy)
    for g in ("fprop", "dgrad", "wgrad"):
        assert_bits_equal(a[g]["out"], b[g]["out"], g)
    assert a["fprop"]["out"].shape == (32, 16)
    # The CLI's recipe fields, from the one list in the library (RecipeGemmFields).
    for key in ("sqnr_db", "nmse", "cosine", "mean_rel_err", "max_abs_err", "bias", "out_nonfinite", "a_sqnr_db",
                "b_sqnr_db", "a_saturated", "b_saturated", "a_flushed", "b_flushed"):
        assert key in a["wgrad"], key
    assert isinstance(a["fprop"]["a_saturated"], int) and a["fprop"]["cosine"] == b["fprop"]["cosine"]
    assert "mxfp8" in qmx.recipe_names() and qmx.describe_recipe("mxfp8")
    assert qmx.describe_spec("mxfp8")


def test_all_lists_the_public_names_and_nothing_private():
    assert "convert" in qmx.__all__ and "finfo" in qmx.__all__ and "QuantizedTensor" in qmx.__all__
    assert not [n for n in qmx.__all__ if n.startswith("_")]
    assert all(hasattr(qmx, n) for n in qmx.__all__)
    ns = {}
    exec("from qmx import *", ns)
    assert "gemm" in ns and "_qmx" not in ns


def test_formats_by_ml_dtypes_and_torch_names_and_objects():
    x = np.array([1.0, 448.0, 1000.0, -0.0, 0.3], dtype=np.float32)
    want = qmx.convert(x, "e4m3")
    for name in ("float8_e4m3fn", "torch.float8_e4m3fn"):
        assert_bits_equal(qmx.convert(x, name), want)
    assert qmx.format_info("float8_e8m0fnu")["name"] == "ue8m0"
    assert qmx.format_info("float4_e2m1fn")["name"] == "e2m1"
    # ml_dtypes' IEEE-like float8_e4m3: bias 7 with Inf, so its largest finite value is 240.
    assert qmx.finfo("float8_e4m3").max == 240.0
    assert qmx.format_name(np.dtype("float16")) == "float16" and qmx.finfo(np.float16).max == 65504.0
    torch = pytest.importorskip("torch")
    assert qmx.format_name(torch.bfloat16) == "torch.bfloat16" and qmx.finfo(torch.bfloat16).max == 3.3895313892515355e38
    if hasattr(torch, "float8_e4m3fn"):  # torch 2.1 and later
        assert_bits_equal(qmx.convert(x, torch.float8_e4m3fn), want)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert_bits_equal(qmx.convert(x, ml_dtypes.float8_e4m3fn), want)
    assert_bits_equal(qmx.decode(want, ml_dtypes.float8_e4m3fn), qmx.decode(want, "e4m3"))
    with pytest.raises(TypeError, match="a format is a name or a dtype"):
        qmx.convert(x, 3.5)


def test_finfo_uses_numpy_names_and_agrees_with_numpy_for_ieee_formats():
    for name, np_type in (("fp16", np.float16), ("fp32", np.float32)):
        q, n = qmx.finfo(name), np.finfo(np_type)
        assert (q.max, q.smallest_normal, q.tiny, q.eps, q.nmant, q.nexp, q.bits) == (
            float(n.max), float(n.smallest_normal), float(n.tiny), float(n.eps), n.nmant, n.nexp, n.bits)
        assert (q.maxexp, q.minexp) == (n.maxexp, n.minexp)
        assert q.smallest_subnormal == float(n.smallest_subnormal)
    f = qmx.finfo("e2m1")
    assert (f.max, f.min, f.smallest_normal, f.smallest_subnormal, f.eps, f.nmant, f.nexp, f.bits) == (
        6.0, -6.0, 1.0, 0.5, 0.5, 1, 2, 4)
    assert qmx.finfo("ue8m0").min == 0.0


def test_missing_files_raise_file_not_found_and_other_file_errors_os_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file"):
        qmx.io.safetensors_info(str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError):  # what callers caught before: still a ValueError too
        qmx.io.safetensors_info(str(tmp_path / "missing.safetensors"))
    (tmp_path / "bad.npy").write_bytes(b"not an npy file")
    with pytest.raises(OSError) as e:
        qmx.io.safetensors_info(str(tmp_path / "bad.npy"))
    assert not isinstance(e.value, FileNotFoundError)
