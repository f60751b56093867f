#!/usr/bin/env bash
# Builds the example bench with Verilator (5.x) against libqmx_c.so and runs it on golden conversion files.
# Usage: rtl/example/run.sh LIBDIR OUTDIR FILE...   (LIBDIR holds libqmx_c.so, e.g. build/lib or an install's
# lib; OUTDIR takes Verilator's build). Exits non-zero when a file's expected values and the model differ.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
libdir=$(cd "$1" && pwd)
out=$2
shift 2
[ $# -ge 1 ] || { echo "usage: run.sh LIBDIR OUTDIR FILE..." >&2; exit 2; }
command -v verilator > /dev/null || { echo "run.sh: verilator not found (Debian: apt-get install verilator)" >&2; exit 2; }
mkdir -p "$out"
verilator --binary -j 2 -Wno-fatal --Mdir "$out" --top-module tb_golden_convert \
  "$here/../qmx_dpi.sv" "$here/tb_golden_convert.sv" \
  -LDFLAGS "-L$libdir -lqmx_c -Wl,-rpath,$libdir" > "$out/verilator.log" 2>&1 || { cat "$out/verilator.log"; exit 1; }
for f in "$@"; do
  "$out/Vtb_golden_convert" "+golden=$f"
done
