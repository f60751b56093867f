#!/usr/bin/env bash
# run_probe.sh: build and run gpu/probes/mma_probe.cu on the GPU machine (sm_90, H100). From the repo root:
#   OUT=/some/dir bash gpu/probes/run_probe.sh
# Writes into $OUT: env.txt (GPU, driver, nvcc), build.txt (compiler messages), sass.txt (cuobjdump -sass of
# the sm_90a binary), sass_ops.txt (opcode counts per kernel), sass_sm89.txt (the same source compiled for
# sm_89, where FP8 mma.sync is native: for comparison only, not run), mma_probe.ptx, probe.txt (the probe's
# output), probe_stderr.txt, npy/ (the random FP8 GEMMs and the device's D, for qmx-sim gemm --expect).
set -u
OUT=${OUT:-probe_out}
mkdir -p "$OUT"
SRC=gpu/probes/mma_probe.cu
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
BUILD=$(mktemp -d)

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.max.sm --format=csv 2>&1
  "$NVCC" --version 2>&1
} > "$OUT/env.txt"

if ! "$NVCC" -arch=sm_90a -O2 -o "$BUILD/mma_probe" "$SRC" > "$OUT/build.txt" 2>&1; then
  echo "build failed: see $OUT/build.txt"
  exit 1
fi
"$NVCC" -arch=sm_90a -ptx -o "$OUT/mma_probe.ptx" "$SRC" >> "$OUT/build.txt" 2>&1

# SASS of the sm_90a binary (the mma kernels: MmaFp8Tiles<FA,FB> and MmaF16Tiles).
"$CUOBJDUMP" -sass "$BUILD/mma_probe" > "$OUT/sass.txt" 2>&1
# Opcode counts per kernel (HMMA.*, F2FP.*, PRMT, ...): how ptxas lowered each mma.sync.
awk '/Function :/ { fn = $3; next }
     /\/\*[0-9a-f]+\*\// && /;/ {
       line = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line); split(line, w, /[ \t]+/);
       op = (substr(w[1], 1, 1) == "@") ? w[2] : w[1]; sub(/;$/, "", op);
       if (op != "") n[fn " " op]++ }
     END { for (k in n) print k, n[k] }' "$OUT/sass.txt" | sort > "$OUT/sass_ops.txt"
# For comparison: Ada (sm_89) has FP8 mma.sync natively (not run here).
if "$NVCC" -arch=sm_89 -O2 -cubin -o "$BUILD/mma_probe_sm89.cubin" "$SRC" >> "$OUT/build.txt" 2>&1; then
  "$CUOBJDUMP" -sass "$BUILD/mma_probe_sm89.cubin" > "$OUT/sass_sm89.txt" 2>&1
fi

start=$(date +%s.%N)
timeout 300 "$BUILD/mma_probe" --npy "$OUT/npy" > "$OUT/probe.txt" 2> "$OUT/probe_stderr.txt"
rc=$?
end=$(date +%s.%N)
echo "probe rc=$rc in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s" | tee -a "$OUT/env.txt"

# A short digest on stdout.
grep -E '^(SUMMARY|DERIVED [^ ]+ (steps|c-position|F-|emax|term-rounding|output|zero-products)|EMU|MODEL [^ ]+ rank=[1-3] )' "$OUT/probe.txt" | cut -c1-240
grep -E 'HMMA|F2FP|I2F|F2F|PRMT|HADD2|FADD' "$OUT/sass_ops.txt" | head -60
rm -rf "$BUILD"
exit $rc
