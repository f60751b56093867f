#!/usr/bin/env bash
# The pretraining study's runs (notebooks-data/README.md "Emulated pretraining"), one after another on one
# GPU, each stopped after MINUTES of training (default 5): BF16 and mxfp8 with two seeds (the noise floor),
# the faithful recipes the engine runs, and the fake-quant emulation of mxfp8, mxfp8-ocp and nvfp4.
# Usage, from the repository root with qmx built (PYTHONPATH=build/python or build-gpu/python):
#   bash notebooks-data/training/run.sh [MINUTES] [CORPUS]
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:-5}
# Debian's path, or where gpu/scripts/carry-deps.sh unpacks the package on a GPU machine without it.
default_corpus=/usr/share/games/fortunes
[ -d "$default_corpus" ] || default_corpus=$PWD/build-deps/root/usr/share/games/fortunes
corpus=${2:-$default_corpus}
py=${PYTHON:-python3}
run() { "$py" notebooks-data/training/train.py --device cuda --minutes "$minutes" --corpus "$corpus" "$@"; }
for seed in 1 2; do
  run --recipe bf16 --seed $seed
  run --recipe mxfp8 --seed $seed
done
for r in mxfp8-ocp fp8-blockwise fp8-current nvfp4 fake:mxfp8 fake:mxfp8-ocp fake:nvfp4; do
  run --recipe $r --seed 1
done
