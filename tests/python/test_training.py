# notebooks-data/training/train.py, the pretraining study's harness, on the CPU with a tiny model: it writes
# its files, the same seed gives the same losses bit for bit, every Linear runs under the recipe (the
# faithful and fake-quant runs differ from FP32 and from each other), and bad arguments fail clearly.
import csv
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "notebooks-data", "training"))
import train  # noqa: E402

TINY = ["--device", "cpu", "--layers", "1", "--width", "64", "--heads", "2", "--context", "32", "--batch", "2",
        "--steps", "4", "--eval-every", "2", "--eval-batches", "1", "--stats-every", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    text = "".join("fortune %d: the quick brown fox jumps over the lazy dog.\n%%\n" % i for i in range(200))
    (d / "cookie").write_text(text)
    (d / "cookie.dat").write_bytes(b"\x00" * 16)  # index files are not text: skipped
    return str(d)


def run(tmp_path, corpus, recipe, seed=1, extra=()):
    out = tmp_path / recipe.replace(":", "-")
    meta = train.main(["--recipe", recipe, "--seed", str(seed), "--corpus", corpus, "--out", str(out)] + TINY + list(extra))
    name = "%s-s%d" % (recipe.replace(":", "-"), seed)
    with open(out / (name + ".csv")) as f:
        rows = list(csv.DictReader(f))
    return meta, rows, out, name


def test_runs_write_losses_layers_and_sidecar(tmp_path, corpus):
    meta, rows, out, name = run(tmp_path, corpus, "mxfp8")
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3]
    assert rows[0]["val_loss"] != "" and rows[1]["val_loss"] == ""
    assert meta["corpus"]["files"] == ["cookie"] and meta["steps"] == 4 and meta["parameters"] > 0
    side = json.load(open(out / (name + ".json")))
    assert side["recipe"] == "mxfp8" and side["seed"] == 1 and "torch" in side["versions"]
    with open(out / (name + "-layers.csv")) as f:
        layers = list(csv.DictReader(f))
    names = {r["layer"] for r in layers}
    assert names == {"blocks.0.qkv", "blocks.0.proj", "blocks.0.fc1", "blocks.0.fc2", "head"}
    assert {r["step"] for r in layers} == {"0", "2"}
    # Under MXFP8 the GEMMs are not exact (finite SQNR), and the counts are integers.
    assert all(20 < float(r["gemm_sqnr_db"]) < 60 for r in layers)
    assert all(int(r["x_saturated"]) >= 0 and int(r["w_flushed"]) >= 0 for r in layers)


def test_layer_sqnr_compares_the_weights_the_forward_used(tmp_path, corpus):
    # FP32 GEMMs against FP64 ones of the same input and weight: about 24 bits of agreement (over 100 dB).
    # Measured after the optimizer step (the weights moved), it fell to 20-40 dB.
    _, _, out, name = run(tmp_path, corpus, "fp32")
    with open(out / (name + "-layers.csv")) as f:
        layers = list(csv.DictReader(f))
    assert layers and all(float(r["gemm_sqnr_db"]) > 100 for r in layers)


def test_same_seed_same_bits_and_recipes_differ(tmp_path, corpus):
    _, a, _, _ = run(tmp_path / "a", corpus, "nvfp4")
    _, b, _, _ = run(tmp_path / "b", corpus, "nvfp4")
    assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b]
    _, f32, _, _ = run(tmp_path, corpus, "fp32")
    _, fake, _, _ = run(tmp_path, corpus, "fake:nvfp4")
    # The first step's loss is the forward of the same initial weights: each recipe's own quantization.
    losses = {float(r[0]["train_loss"]) for r in (a, f32, fake)}
    assert len(losses) == 3
    _, s2, _, _ = run(tmp_path, corpus, "fp32", seed=2)
    assert s2[0]["train_loss"] != f32[0]["train_loss"]


def test_bad_arguments_fail_clearly(tmp_path, corpus):
    with pytest.raises(SystemExit, match="unknown recipe"):
        train.main(["--recipe", "mxfp9", "--corpus", corpus, "--out", str(tmp_path)] + TINY)
    with pytest.raises(SystemExit, match="fake-quant emulation covers"):
        train.main(["--recipe", "fake:fp8-current", "--corpus", corpus, "--out", str(tmp_path)] + TINY)
    with pytest.raises(SystemExit, match="no corpus"):
        train.main(["--recipe", "fp32", "--corpus", str(tmp_path / "none"), "--out", str(tmp_path)] + TINY)


def test_fake_quant_pieces_match_the_library():
    # The fake-quant emulation's PyTorch quantizers against qmx's own: the E2M1 grid under RNE, the block
    # Hadamard transform, and QuEST (values and trust mask) on Gaussian rows with outliers.
    import numpy as np
    import qmx
    g = torch.Generator().manual_seed(3)
    v = torch.linspace(-6, 6, 24001)
    want = qmx.decode(qmx.convert(v.numpy(), "e2m1"), "e2m1")
    np.testing.assert_array_equal(train.e2m1_round(v).numpy(), want)
    x = torch.randn(64, 128, generator=g)
    x[:, 5] *= 40
    h = train.block_hadamard(x, 32)
    assert float((h.double() - torch.from_numpy(qmx.hadamard(x.numpy(), 32)).double()).abs().max()) < 1e-6
    assert torch.allclose(train.block_hadamard(h, 32, inverse=True), x, atol=1e-5)
    s = train.random_signs(32, 7, "cpu")
    assert torch.allclose(train.block_hadamard(train.block_hadamard(x, 32, s), 32, s, inverse=True), x, atol=1e-5)
    deq, mask = train.quest_fake(h)
    ref = qmx.quest(h.numpy(), "mxfp4", block=None)
    np.testing.assert_array_equal(deq.numpy(), ref["dequant"])
    np.testing.assert_array_equal(mask.numpy(), ref["mask"].astype(bool))
    assert 0 < int((~mask).sum()) < mask.numel() // 10  # the outlier channel clips some groups
    # SR: unbiased on average, and only the two neighbouring grid values.
    t = torch.full((4096, 32), 0.3)
    t[:, 0] = 4.0  # amax 4: X = 1, s = 4/3; 0.3 / s = 0.225 lies between 0 and 0.5
    q = train.quartet_sr_fake(t, torch.Generator().manual_seed(1))
    vals = set((q[:, 1:] / (4.0 / 3.0)).flatten().tolist())
    assert vals == {0.0, 0.5}
    assert abs(float(q[:, 1:].mean()) - 0.3) < 0.01
    # The scale's exponent exactly: FP32's log2(0.12499999) is -3.0, which gave X = 2^-5 instead of 2^-6 (an
    # element 0.0375 then lay between 1 s and 2 s instead of 1.5 s and 2 s); an amax below 2^-147 gave the
    # scale 0 and NaN before the clamp to UE8M0's 2^-127.
    t = torch.full((64, 32), 0.0375)
    t[:, 0] = 0.12499999
    s = float(torch.tensor(2.0 ** -6) * (4.0 / 3.0))
    assert set((train.quartet_sr_fake(t, torch.Generator().manual_seed(2))[:, 1:] / s).flatten().tolist()) == {1.5, 2.0}
    tiny = torch.zeros(2, 32)
    tiny[0, 3], tiny[1, 0] = 1e-45, -3e-44
    assert bool(train.quartet_sr_fake(tiny, torch.Generator().manual_seed(2)).isfinite().all())
    assert int(train.floor_log2(torch.tensor([0.12499999, 0.125, 1e-45, 3.4e38])).tolist() == [-4, -3, -149, 127])


def test_fake_quartet_trains_and_differs_from_the_faithful_recipe(tmp_path, corpus):
    _, fake, _, _ = run(tmp_path, corpus, "fake:quartet")
    _, faithful, _, _ = run(tmp_path, corpus, "quartet")
    assert len(fake) == len(faithful) == 4
    assert all(abs(float(a["train_loss"]) - float(b["train_loss"])) < 0.5 for a, b in zip(fake, faithful))
    assert [r["train_loss"] for r in fake] != [r["train_loss"] for r in faithful]
