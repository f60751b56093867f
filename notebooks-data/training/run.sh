#!/usr/bin/env bash
# The pretraining study's runs (notebooks-data/README.md "Emulated pretraining"), one after another on one
# GPU, each STEPS steps (default 200, the h200-200steps runs) or MINUTES of training (default 5), whichever
# comes first: BF16 and mxfp8 with two seeds (the noise floor), every faithful recipe on the engine, and the
# fake-quant emulation of mxfp8, mxfp8-ocp, nvfp4 and quartet. OUT (default: notebooks-data/training/runs)
# receives the files; training.ipynb reads the folder named in its first cell.
# Usage, from the repository root with qmx built (PYTHONPATH=build/python or build-gpu/python):
#   [STEPS=200] [OUT=DIR] bash notebooks-data/training/run.sh [MINUTES] [CORPUS]
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:-5}
steps=${STEPS:-200}
out=${OUT:-notebooks-data/training/runs}
# Debian's path, or where gpu/scripts/carry-deps.sh unpacks the package on a GPU machine without it.
default_corpus=/usr/share/games/fortunes
[ -d "$default_corpus" ] || default_corpus=$PWD/build-deps/root/usr/share/games/fortunes
corpus=${2:-$default_corpus}
py=${PYTHON:-python3}
run() {
  "$py" notebooks-data/training/train.py --device cuda --steps "$steps" --minutes "$minutes" --eval-every 25 \
    --stats-every 100 --corpus "$corpus" --out "$out" "$@"
}
for seed in 1 2; do
  run --recipe bf16 --seed $seed
  run --recipe mxfp8 --seed $seed
done
for r in mxfp8-ocp fp8-blockwise fp8-current fp8-delayed nvfp4 quartet fake:mxfp8 fake:mxfp8-ocp fake:nvfp4 fake:quartet; do
  run --recipe $r --seed 1
done
