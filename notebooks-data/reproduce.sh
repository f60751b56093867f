#!/usr/bin/env bash
# Regenerates every study in notebooks-data/ with the qmx-sim binary of this checkout, then renders the
# notebooks' figures (python3 notebooks-data/render.py; needs Debian's python3-matplotlib).
# Run from the repository root after building: bash notebooks-data/reproduce.sh (about 3 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
Q=${QMX_SIM:-build/cli/qmx-sim}
N=notebooks-data
mkdir -p $N/quickstart $N/quartet-table2 $N/mxfp8-scale-rounding $N/e4m3-vs-e5m2 $N/outlier-tau $N/recipes

# The README's main job.
$Q study quickstart

# Quartet Table 2 analogue (Quartet): MXFP4 on N(0,1), Hadamard 32 before every scheme.
$Q study misalignment --spec mxfp4 --rule round-up fp32 --round sr rne --transform hadamard:32 --dist normal \
  --rows 1024 --cols 4096 --trials 8 --seed 1 --quiet \
  --csv $N/quartet-table2/absmax.csv --json $N/quartet-table2/absmax.json
$Q study misalignment --spec mxfp4 --round sr --sr-bits 12 16 24 --transform hadamard:32 --dist normal \
  --rows 1024 --cols 4096 --trials 8 --seed 1 --quiet \
  --csv $N/quartet-table2/sr_bits.csv --json $N/quartet-table2/sr_bits.json
$Q study misalignment --spec mxfp4 --round rne --transform quest --quest-scale floor nearest exact --dist normal \
  --rows 1024 --cols 4096 --trials 8 --seed 1 --quiet \
  --csv $N/quartet-table2/quest.csv --json $N/quartet-table2/quest.json

# MXFP8 scale rounding: OCP round-down against NVIDIA round-up (MXFP8 recipes).
$Q study error --spec mxfp8 --rule ocp-floor round-up \
  --dist normal laplace uniform student-t:3 student-t:2 lognormal:1 lognormal:2 normal+tau100:0.001 \
  --rows 1024 --cols 4096 --seed 1 --quiet \
  --csv $N/mxfp8-scale-rounding/mxfp8_rules.csv --json $N/mxfp8-scale-rounding/mxfp8_rules.json

# E4M3 against E5M2 on heavy-tailed, gradient-like data at block sizes 32, 128 and per-tensor (FP32 scales).
$Q study error --spec fp8-block1x128 --elem e4m3 e5m2 --block 1x32 1x128 per-tensor \
  --dist student-t:3 student-t:2 student-t:1.5 lognormal:2 lognormal:3 \
  --rows 1024 --cols 4096 --seed 1 --quiet \
  --csv $N/e4m3-vs-e5m2/fp8_formats.csv --json $N/e4m3-vs-e5m2/fp8_formats.json

# Error of the other elements as an injected outlier grows (FOG, theorem 1).
$Q study kurtosis --dist normal laplace student-t:3 normal+tau20 \
  --spec fp8-tensor-current fp8-rowwise fp8-block1x128 mxfp8 mxfp6_e2m3 mxfp4 nvfp4 \
  --outlier-sweep 1 2 4 8 16 32 64 128 256 1024 4096 16384 65536 262144 1048576 --period 256 \
  --rows 1024 --cols 4096 --seed 1 --quiet \
  --csv $N/outlier-tau/outlier_sweep.csv --json $N/outlier-tau/outlier_sweep.json

# Training recipes on one linear layer (MXFP8 recipes, NVIDIA scaling blog, Quartet, NVIDIA FP8 talk): one step of every recipe on a generated
# layer, then a sequence of drifting tensors with decaying gradients and outlier spikes (delayed scaling's
# amax history, FOG's kurtosis per step).
$Q recipe --quiet --csv $N/recipes/recipes.csv --json $N/recipes/recipes.json
$Q recipe --steps 64 --m 128 --n 128 --k 256 --recipe bf16 fp8-delayed fp8-current mxfp8 nvfp4 quartet \
  --spike-rate 0.08 --grad-decay 0.98 --amax-history 16 --quiet \
  --csv $N/recipes/sequence.csv --json $N/recipes/sequence.json

PYTHONPATH=build/python ${PYTHON:-/usr/bin/python3} $N/render.py
