# The example test file for kernel teams (docs/examples/test_nvfp4_kernel.py, which lib/python/README.md
# points to) passes as written, in a pytest of its own.
import os
import subprocess
import sys

from conftest import REPO


def test_the_kernel_test_example_passes():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error",
                        str(REPO / "docs" / "examples" / "test_nvfp4_kernel.py")],
                       capture_output=True, text=True, env=os.environ.copy(), cwd=str(REPO))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "4 passed" in r.stdout
