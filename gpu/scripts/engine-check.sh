#!/usr/bin/env bash
# The emulation engine's checks on a GPU machine without Debian's packages (gpu/README.md "The emulation
# engine"), in one command: build qmx-sim, qmx_tests and the Python module against the machine's own
# pybind11 (Debian's 2.10 predates NumPy 2), then the [gpu] tests, `xval --engine --quick`, the CUDA Python tests and the CUDA bench.
# Usage, from the repository root with build-deps/ carried: bash gpu/scripts/engine-check.sh [OUT_DIR]
# Logs go to OUT_DIR (default build-gpu-logs/); the exit status is the first failing step's.
# QMX_PIP=1: the Python steps import the package as `pip install .` builds it (setup.py, a fresh CMake tree
# in build-pip/, installed into build-pip/site), built beside the C++ targets, instead of build-gpu/python.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu-logs}
mkdir -p "$out"
status=0
step() {  # step NAME COMMAND...: run, log to OUT/NAME.log, keep the first failure
  local name=$1
  shift
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $((SECONDS - t0)) s"
  tail -n 5 "$out/$name.log"
  [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
  return 0
}
site=$PWD/build-gpu/python
if [ -n "${QMX_PIP:-}" ]; then
  site=$PWD/build-pip/site
  bash gpu/scripts/carry-deps.sh unpack > /dev/null
  # The flags carry-deps.sh builds with; pip's own Python and pybind11 (setup.py finds both).
  (
    # shellcheck disable=SC1091
    source build-deps/env.sh
    rm -rf build-pip "$site"
    QMX_CMAKE_ARGS="$QMX_DEPS_CMAKE '-DCMAKE_CXX_FLAGS=-march=native -ffp-contract=off -DHWY_COMPILE_ONLY_STATIC=1'" \
      python3 -m pip install --no-build-isolation --no-deps --target "$site" . > "$out/pip.log" 2>&1
    echo "pip install: exit $?" >> "$out/pip.log"
  ) &
  pip_pid=$!
fi
if [ ! -x build-gpu/tests/qmx_tests ] || { [ -z "${QMX_PIP:-}" ] && [ ! -d build-gpu/python/qmx ]; }; then
  QMX_GPU_CMAKE="-DQMX_PYTHON=ON -DPython3_EXECUTABLE=$(command -v python3) -Dpybind11_DIR=$(python3 -m pybind11 --cmakedir)" \
    step build bash gpu/scripts/carry-deps.sh build qmx-sim qmx_tests _qmx
else
  bash gpu/scripts/carry-deps.sh unpack > /dev/null
fi
if [ -n "${QMX_PIP:-}" ]; then
  wait "$pip_pid"
  echo "pip: $(tail -n 1 "$out/pip.log")"
  grep -q "exit 0" <(tail -n 1 "$out/pip.log") || { tail -n 30 "$out/pip.log"; [ $status -eq 0 ] && status=1; }
fi
# shellcheck disable=SC1091
source build-deps/env.sh
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} QMX_CLI=$PWD/build-gpu/cli/qmx-sim PYTHONUNBUFFERED=1
step gpu-tests build-gpu/tests/qmx_tests "[gpu]"
step xval-engine build-gpu/cli/qmx-sim xval --no-golden --engine --quick --json "$out/xval-engine.json"
step python python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_cuda.py tests/python/test_torch.py \
  tests/python/test_torch_compile.py tests/python/test_quantize.py
step bench python3 -m qmx.bench --device cuda --json "$out/bench.json"
exit $status
