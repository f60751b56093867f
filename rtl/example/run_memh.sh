#!/usr/bin/env bash
# Builds tb_golden_memh.sv with Verilator against libqmx_c.so and runs it on $readmemh images of FP32 -> 8-bit
# conversion files (qmx-sim golden gen --layout memh), taking each image's options from its header comment.
# Usage: rtl/example/run_memh.sh LIBDIR OUTDIR IMAGE.memh...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
libdir=$(cd "$1" && pwd)
out=$2
shift 2
[ $# -ge 1 ] || { echo "usage: run_memh.sh LIBDIR OUTDIR IMAGE.memh..." >&2; exit 2; }
command -v verilator > /dev/null || { echo "run_memh.sh: verilator not found (Debian: apt-get install verilator)" >&2; exit 2; }
mkdir -p "$out"
verilator --binary -j 2 -Wno-fatal --Mdir "$out" --top-module tb_golden_memh \
  "$here/../qmx_dpi.sv" "$here/tb_golden_memh.sv" \
  -LDFLAGS "-L$libdir -lqmx_c -Wl,-rpath,$libdir" > "$out/verilator.log" 2>&1 || { cat "$out/verilator.log"; exit 1; }
for f in "$@"; do
  head=$(sed -n 's|^// qmx-golden memh v1: ||p' "$f")
  key() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< " $head"; }
  [ "$(key op)" = convert ] && [ "$(key src)" = f32 ] || { echo "run_memh.sh: $f is not an f32 conversion image" >&2; exit 2; }
  grep -q '^// layout: 32 8 8 ' "$f" || { echo "run_memh.sh: $f is not laid out 32 8 8" >&2; exit 2; }
  n=$(sed -n 's|^// cases: ||p' "$f")
  "$out/Vtb_golden_memh" "+memh=$f" "+cases=$n" "+dst=$(key dst)" "+round=$(key round)" "+sat=$(key sat)" \
    "+nansign=$(key nan-sign)" "+nanfall=$(key nan-fallback)" "+subn=$(key subnormals)"
done
