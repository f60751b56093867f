# Shared fixtures of the Python package's tests: the qmx-sim CLI of the same build (the independent
# in-process-external reference the bindings are compared with) and a runner for it.
import os
import pathlib
import subprocess

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _cli():
    p = os.environ.get("QMX_CLI") or str(REPO / "build" / "cli" / "qmx-sim")
    if not os.path.exists(p):
        pytest.skip("the qmx-sim binary is not built (set QMX_CLI)", allow_module_level=True)
    return p


@pytest.fixture(scope="session")
def repo():
    return REPO


@pytest.fixture(scope="session")
def cli():
    """Runs qmx-sim with the given arguments; fails the test with its stderr when it exits non-zero."""
    path = _cli()

    def run(*args):
        r = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError("qmx-sim %s failed (%d): %s" % (" ".join(map(str, args)), r.returncode, r.stderr))
        return r.stdout

    return run


def assert_bits_equal(got, want, what=""):
    """Arrays equal bit for bit (NaNs compared by their bits), with the first differences in hex."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, "%s: shape %s != %s" % (what, got.shape, want.shape)
    assert got.dtype == want.dtype, "%s: dtype %s != %s" % (what, got.dtype, want.dtype)
    gi = got.view(np.uint8 if got.itemsize == 1 else np.dtype("u%d" % got.itemsize))
    wi = want.view(gi.dtype)
    bad = np.flatnonzero(gi.ravel() != wi.ravel())
    if bad.size:
        i = bad[:5]
        raise AssertionError("%s: %d of %d differ; first at %s: got %s want %s" % (
            what, bad.size, gi.size, i.tolist(), [hex(v) for v in gi.ravel()[i]], [hex(v) for v in wi.ravel()[i]]))


def probe_inputs(n_random=4096, seed=0):
    """float32 values that reach every binade and rounding boundary of the 8-bit formats: every bfloat16
    bit pattern (its low 16 bits zero, which holds every midpoint of formats with up to 7 mantissa bits),
    those patterns plus and minus one ulp, and random normals at several scales."""
    bf = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    up = (bf.view(np.uint32) + 1).view(np.float32)
    down = (bf.view(np.uint32) - 1).view(np.float32)
    rng = np.random.default_rng(seed)
    rnd = (rng.standard_normal(n_random) * np.exp2(rng.integers(-20, 12, n_random))).astype(np.float32)
    return np.concatenate([bf, up, down, rnd])
