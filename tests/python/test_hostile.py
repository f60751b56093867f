# The package under hostile or careless use (issue "Defects found by a hostile-input attack"): a fork()
# after a threaded call, an impossible given tensor amax, and an output array that overlaps its input.
import multiprocessing
import os
import signal

import numpy as np
import pytest

import qmx


def _convert_in_child(conn):
    x = np.linspace(-500, 500, 1 << 20, dtype=np.float32)
    conn.send(int(qmx.convert(x, "e4m3").astype(np.int64).sum()))
    conn.close()


def test_fork_after_a_threaded_call_does_not_hang():
    # libgomp's pool does not survive fork(): a child's next parallel region waited forever for threads it
    # does not have. The child now runs on one thread, with the same bits.
    x = np.linspace(-500, 500, 1 << 20, dtype=np.float32)
    qmx.set_num_threads(2)
    expected = int(qmx.convert(x, "e4m3").astype(np.int64).sum())
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_convert_in_child, args=(child,))
    p.start()
    p.join(60)
    if p.is_alive():
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        pytest.fail("the forked child hung in its qmx call")
    assert p.exitcode == 0
    assert parent.recv() == expected


def test_fork_child_refuses_more_threads():
    qmx.set_num_threads(2)
    qmx.convert(np.ones(1 << 16, np.float32), "e4m3")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            qmx.set_num_threads(4)
        except ValueError as e:
            code = 0 if "fork" in str(e) and qmx.get_num_threads() == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("amax", [-1.0, float("nan"), float("inf"), float("-inf")])
def test_given_tensor_amax_must_be_a_finite_non_negative_value(amax):
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    with pytest.raises(ValueError, match="amax"):
        qmx.quantize(x, "nvfp4", tensor_amax=amax)
    with pytest.raises(ValueError, match="amax"):
        qmx.quantize(x, "nvfp4", tensor_amax=amax, reference=True)


def test_given_tensor_amax_of_zero_only_for_zero_data():
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    with pytest.raises(ValueError, match="amax of 0"):
        qmx.quantize(x, "nvfp4", tensor_amax=0.0)
    z = np.zeros((4, 64), np.float32)
    q = qmx.quantize(z, "nvfp4", tensor_amax=0.0)
    assert not q.codes.any()
    # A calibrated amax below the data's saturates; it stays allowed.
    q = qmx.quantize(x, "nvfp4", tensor_amax=0.5)
    assert q.tensor_amax == np.float32(0.5)


def test_convert_out_overlapping_x_is_refused():
    x = np.linspace(-300, 300, 1 << 20, dtype=np.float32)
    for out in (x.view(np.uint8)[: x.size], x.view(np.uint8)[x.nbytes - x.size:]):
        with pytest.raises(ValueError, match="shares memory"):
            qmx.convert(x, "e4m3", out=out)
    bits = np.arange(x.size, dtype=np.uint32)
    with pytest.raises(ValueError, match="random_bits"):
        qmx.convert(x, "e4m3", rounding="sr", random_bits=bits, out=bits.view(np.uint8)[: x.size])
    out = np.empty(x.size, np.uint8)
    assert np.array_equal(qmx.convert(x, "e4m3", out=out), qmx.convert(x, "e4m3"))
