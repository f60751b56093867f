# qmx.io: .safetensors files from Python, checked against files built byte by byte from the format's
# description (8-byte little-endian header length, JSON header, raw little-endian data) and against the
# files `qmx-sim quantize` writes and `qmx-sim dequantize` reads.
import json
import os
import struct

import numpy as np
import pytest

import qmx
from conftest import assert_bits_equal


def build_safetensors(path, tensors, metadata=None):
    """A .safetensors file written by hand: {name: (dtype name, shape, raw bytes)}."""
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + blob)


def test_reads_a_hand_built_file(tmp_path):
    rng = np.random.default_rng(1)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f64 = rng.standard_normal(7)
    f16 = rng.standard_normal((2, 2)).astype(np.float16)
    bf16 = (f32.view(np.uint32) >> 16).astype(np.uint16)
    u8 = np.arange(256, dtype=np.uint8).reshape(16, 16)
    p = tmp_path / "hand.safetensors"
    build_safetensors(p, {
        "a": ("F32", f32.shape, f32.tobytes()), "b": ("F64", f64.shape, f64.tobytes()),
        "c": ("F16", f16.shape, f16.tobytes()), "d": ("BF16", bf16.shape, bf16.tobytes()),
        "e": ("U8", u8.shape, u8.tobytes()), "f": ("I64", (2,), b"\0" * 16)}, {"who": "hand"})
    tensors, meta = qmx.io.safetensors_info(p)
    assert meta == {"who": "hand"}
    by = {t["name"]: t for t in tensors}
    assert by["d"]["dtype"] == "BF16" and by["d"]["shape"] == (3, 5) and by["d"]["readable"]
    assert not by["f"]["readable"]
    got = qmx.io.load_safetensors(p)
    assert sorted(got) == ["a", "b", "c", "d", "e"]
    for k, want in zip("abcde", (f32, f64, f16, bf16, u8)):
        assert_bits_equal(got[k], want, k)
    # BF16 bits feed the conversions directly.
    assert_bits_equal(qmx.convert(got["d"], "e4m3", src="bf16"), qmx.convert(bf16, "e4m3", src="bf16"))
    with pytest.raises(ValueError, match="I64"):
        qmx.io.load_safetensors(p, ["f"])
    with pytest.raises(ValueError, match="nope"):
        qmx.io.load_safetensors(p, ["nope"])


def test_write_is_byte_exact(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = np.array([1, 2, 3], dtype=np.uint8)
    p = tmp_path / "w.safetensors"
    qmx.io.save_safetensors(p, {"x": x, "c": c}, {"k": "v"})
    raw = p.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"k": "v"}
    data = raw[8 + n:]
    for name, arr, dt in (("x", x, "F32"), ("c", c, "U8")):
        h = header[name]
        assert h["dtype"] == dt and h["shape"] == list(arr.shape)
        assert data[h["data_offsets"][0]:h["data_offsets"][1]] == arr.tobytes()
    assert [q.name for q in tmp_path.iterdir()] == ["w.safetensors"], "no temporary file is left behind"
    back = qmx.io.load_safetensors(p)
    assert_bits_equal(back["x"], x)
    assert_bits_equal(back["c"], c)


def test_bf16_and_float16_round_trip(tmp_path):
    h = np.array([1.5, -2.0, 65504.0], dtype=np.float16)
    b = np.array([0x3F80, 0xC000, 0x7F80], dtype=np.uint16)
    p = tmp_path / "h.safetensors"
    qmx.io.save_safetensors(p, {"h": h, "b": b, "u": b}, bf16=("b",))
    info = {t["name"]: t["dtype"] for t in qmx.io.safetensors_info(p)[0]}
    assert info == {"h": "F16", "b": "BF16", "u": "U16"}
    back = qmx.io.load_safetensors(p)
    assert_bits_equal(back["h"], h)
    assert_bits_equal(back["b"], b)


def test_write_errors(tmp_path):
    with pytest.raises(TypeError, match="C-contiguous"):
        qmx.io.save_safetensors(tmp_path / "a.safetensors", {"x": np.zeros((4, 4), np.float32)[:, ::2]})
    with pytest.raises(TypeError, match="int64"):
        qmx.io.save_safetensors(tmp_path / "a.safetensors", {"x": np.zeros(4, np.int64)})
    with pytest.raises(ValueError, match="BF16"):
        qmx.io.save_safetensors(tmp_path / "a.safetensors", {"x": np.zeros(4, np.float32)}, bf16=("x",))
    assert not os.path.exists(tmp_path / "a.safetensors")


def test_truncated_file_is_an_error(tmp_path):
    p = tmp_path / "t.safetensors"
    qmx.io.save_safetensors(p, {"x": np.ones(100, np.float32)})
    raw = p.read_bytes()
    p.write_bytes(raw[:-10])
    with pytest.raises(ValueError):
        qmx.io.load_safetensors(p)
    p.write_bytes(raw[:5])
    with pytest.raises(ValueError):
        qmx.io.safetensors_info(p)
    with pytest.raises(ValueError):
        qmx.io.safetensors_info(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("spec", ["mxfp8", "nvfp4", "nvfp4-row", "fp8-block128x128", "fp8-tensor-current"])
def test_cli_quantize_file_loads(cli, tmp_path, spec):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    np.save(tmp_path / "w.npy", x)
    out = tmp_path / "q.safetensors"
    cli("quantize", "--spec", spec, "--in", tmp_path / "w.npy", "--out", out, "--quiet")
    q = qmx.io.load_quantized(out)["w"]
    want = qmx.quantize(x, spec)
    assert q.shape == want.shape and q.spec == want.spec
    assert_bits_equal(q.codes, want.codes, "codes")
    assert_bits_equal(q.scales, want.scales, "scales")
    assert_bits_equal(q.dequantize(), want.dequantize(), "dequantized")
    assert_bits_equal(qmx.io.load_safetensors(out, ["w.dequant"])["w.dequant"], want.dequantize(), "file's dequant")


@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4", "nvfp4-row", "fp8-block1x128"])
def test_saved_file_dequantizes_in_the_cli(cli, tmp_path, spec):
    rng = np.random.default_rng(3)
    qs = {"a": qmx.quantize(rng.standard_normal((32, 128)).astype(np.float32), spec),
          "b": qmx.quantize(rng.standard_normal((16, 256)).astype(np.float32) * 1e3, spec)}
    p = tmp_path / "mine.safetensors"
    qmx.io.save_quantized(p, qs, dequantized=True)
    cli("dequantize", "--in", p, "--out", str(tmp_path) + "/")
    for name, q in qs.items():
        assert_bits_equal(np.load(tmp_path / (name + ".npy")), q.dequantize(), name)
    back = qmx.io.load_quantized(p)
    for name, q in qs.items():
        assert_bits_equal(back[name].codes, q.codes)
        assert back[name].tensor_amax == q.tensor_amax


def test_save_quantized_errors(tmp_path):
    x = np.ones((4, 64), np.float32)
    with pytest.raises(ValueError, match="share one spec"):
        qmx.io.save_quantized(tmp_path / "m.safetensors", {"a": qmx.quantize(x, "mxfp8"), "b": qmx.quantize(x, "nvfp4")})
    p = tmp_path / "plain.safetensors"
    qmx.io.save_safetensors(p, {"x": x})
    with pytest.raises(ValueError, match="qmx.spec"):
        qmx.io.load_quantized(p)


def test_code_dtypes_read_and_written_as_the_format_packs_them(tmp_path):
    # F4 [2, 4]: codes 0..7 packed two per byte, element 2i in the low nibble (torch float4_e2m1fn_x2);
    # F8_E8M0 [3]: scale bytes.
    codes = np.array([[1, 2, 3, 4], [5, 6, 7, 15]], dtype=np.uint8)
    packed = bytes([0x21, 0x43, 0x65, 0xF7])
    p = tmp_path / "codes.safetensors"
    build_safetensors(p, {"w": ("F4", (2, 4), packed), "s": ("F8_E8M0", (3,), bytes([127, 0, 255]))})
    tensors, _ = qmx.io.safetensors_info(p)
    by_name = {t["name"]: t for t in tensors}
    assert by_name["w"]["format"] == "e2m1" and by_name["w"]["readable"]
    got = qmx.io.load_safetensors(p)
    assert_bits_equal(got["w"], codes, "F4 codes")
    assert got["s"].tolist() == [127, 0, 255]
    assert qmx.decode(got["w"], "e2m1").tolist() == [[0.5, 1.0, 1.5, 2.0], [3.0, 4.0, 6.0, -6.0]]
    # Written back with its dtype, the file is the same bytes as the hand-built one's data.
    q = tmp_path / "back.safetensors"
    qmx.io.save_safetensors(q, {"w": codes, "s": got["s"]}, dtypes={"w": "F4", "s": "F8_E8M0"})
    assert q.read_bytes().endswith(packed + bytes([127, 0, 255]))
    with pytest.raises(Exception, match="does not fit F4"):
        qmx.io.save_safetensors(tmp_path / "bad.safetensors", {"w": codes + 16}, dtypes={"w": "F4"})


def test_load_checkpoint_decodes_a_modelopt_nvfp4_tensor(tmp_path):
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 16, size=(4, 32), dtype=np.uint8)
    s8 = rng.integers(0x20, 0x7E, size=(4, 2), dtype=np.uint8)
    ws2 = np.float32(0.0123)
    p = tmp_path / "nvfp4.safetensors"
    build_safetensors(p, {"l.weight": ("U8", (4, 16), (codes[:, 0::2] | (codes[:, 1::2] << 4)).tobytes()),
                          "l.weight_scale": ("F8_E4M3", (4, 2), s8.tobytes()),
                          "l.weight_scale_2": ("F32", (), ws2.tobytes())})
    assert qmx.io.checkpoint_tensors(p) == [
        {"name": "l.weight", "layout": "modelopt-nvfp4", "parts": ["l.weight", "l.weight_scale", "l.weight_scale_2"]}]
    got = qmx.io.load_checkpoint(p)["l.weight"]
    scale = (qmx.decode(s8, "e4m3") * ws2).astype(np.float32)
    want = (qmx.decode(codes, "e2m1") * np.repeat(scale, 16, axis=1)).astype(np.float32)
    assert_bits_equal(got, want, "ModelOpt decode")


def test_cast_profiles_from_python_match_the_cli_and_differ_where_the_libraries_do():
    x = np.array([0.0, -1.0, 3.0, 1.5, np.nan, np.inf, 500.0], dtype=np.float32)
    assert "ml-dtypes" in qmx.cast_profile_names()
    assert qmx.cast_profile(x, "ue8m0", "pytorch").tolist() == [0x00, 0x7F, 0x81, 0x80, 0xFF, 0xFF, 0x88]
    assert qmx.cast_profile(x, "ue8m0", "ml-dtypes").tolist() == [0xFF, 0xFF, 0x81, 0x80, 0xFF, 0xFF, 0x88]
    assert qmx.cast_profile(x, "e4m3", "onnx").tolist() == [0x00, 0xB8, 0x44, 0x3C, 0x7F, 0x7E, 0x7E]
    assert qmx.cast_profile(x, "e4m3", "ml-dtypes").tolist() == [0x00, 0xB8, 0x44, 0x3C, 0x7F, 0x7F, 0x7F]
    with pytest.raises(Exception, match="casts to e4m3 e5m2 ue8m0 e4m3fnuz e5m2fnuz, not e2m1"):
        qmx.cast_profile(x, "e2m1", "pytorch")
