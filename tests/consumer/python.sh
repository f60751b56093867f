#!/usr/bin/env bash
# The Python package the two ways a user installs it, each then imported from a fresh interpreter that sees
# only that copy: `pip install .` (setup.py, reusing this build's extension through QMX_BUILD_DIR, into a
# --target folder), and `cmake --install --component python` into a scratch prefix that is not Debian's
# (PYTHONPATH names its dist-packages, as lib/python/README.md says). Usage: python.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1 build=$2 py=$3
work=$build/python-install-test
rm -rf "$work" && mkdir -p "$work"
check() {  # PYTHONPATH: qmx must load from there, know how it was built, and compute
  PYTHONPATH=$1 "$py" -c "
import os, sys, numpy as np
import qmx
assert os.path.realpath(qmx.__file__).startswith(os.path.realpath('$1')), qmx.__file__
from qmx import _build  # whether the extension links CUDA: a CUDA build must load torch's runtime first
assert open(_build.__file__).read() == open('$build/python/qmx/_build.py').read(), _build.__file__
codes = qmx.convert(np.array([1.0, 448.0, 1000.0, -0.0], dtype=np.float32), 'e4m3')
assert codes.tolist() == [0x38, 0x7E, 0x7E, 0x80], codes
print('qmx', qmx.__version__, 'from', os.path.dirname(qmx.__file__))
"
}
(cd "$src" && QMX_BUILD_DIR=$build "$py" -m pip install --quiet --no-build-isolation --no-deps --no-index \
  --target "$work/site" .) > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
check "$work/site"
cmake --install "$build" --prefix "$work/prefix" --component python > "$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
check "$(ls -d "$work"/prefix/lib/python3*/dist-packages)"
rm -rf "$work"
