#!/usr/bin/env bash
# The emulation engine's checks on a GPU machine without Debian's packages (gpu/README.md "The emulation
# engine"), in one command: build qmx-sim, qmx_tests and the Python module against the machine's own
# pybind11 (Debian's 2.10 predates NumPy 2), then the [gpu] tests, the CUDA Python tests and the CUDA bench.
# Usage, from the repository root with build-deps/ carried: bash gpu/scripts/engine-check.sh [OUT_DIR]
# Logs go to OUT_DIR (default build-gpu-logs/); the exit status is the first failing step's.
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
if [ ! -x build-gpu/tests/qmx_tests ] || [ ! -d build-gpu/python/qmx ]; then
  QMX_GPU_CMAKE="-DQMX_PYTHON=ON -DPython3_EXECUTABLE=$(command -v python3) -Dpybind11_DIR=$(python3 -m pybind11 --cmakedir)" \
    step build bash gpu/scripts/carry-deps.sh build qmx-sim qmx_tests _qmx
else
  bash gpu/scripts/carry-deps.sh unpack > /dev/null
fi
# shellcheck disable=SC1091
source build-deps/env.sh
export PYTHONPATH=$PWD/build-gpu/python QMX_CLI=$PWD/build-gpu/cli/qmx-sim PYTHONUNBUFFERED=1
step gpu-tests build-gpu/tests/qmx_tests "[gpu]"
step python python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda.py tests/python/test_torch.py tests/python/test_quantize.py
step bench python3 -m qmx.bench --device cuda --json "$out/bench.json"
exit $status
