#!/usr/bin/env bash
# Builds the example benches with Verilator (5.x) against libqmx_c.so and runs them: golden conversion files
# (NAME.txt) through tb_golden_convert.sv, MX block files (op=mx-block) through tb_golden_mx_block.sv, NVFP4
# block files (op=nvfp4-block) through tb_golden_nvfp4_block.sv, dot files (op=dot) through tb_golden_dot.sv, and
# $readmemh images of FP32 -> 8-bit conversion files (NAME.memh,
# qmx-sim golden gen --layout memh) through tb_golden_memh.sv, whose options come from the image's header.
# Usage: rtl/example/run.sh LIBDIR OUTDIR FILE...   (LIBDIR holds libqmx_c.so, e.g. build/lib or an install's
# lib; OUTDIR takes Verilator's builds). Exits non-zero when a file's expected values and the model differ.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
libdir=$(cd "$1" && pwd)
out=$2
shift 2
[ $# -ge 1 ] || { echo "usage: run.sh LIBDIR OUTDIR FILE..." >&2; exit 2; }
command -v verilator > /dev/null || { echo "run.sh: verilator not found (Debian: apt-get install verilator)" >&2; exit 2; }
# The bench `top`, built once into OUTDIR/top.
bench() {
  local top=$1
  if [ ! -x "$out/$top/V$top" ]; then
    mkdir -p "$out/$top"
    verilator --binary -j 2 -Wno-fatal --Mdir "$out/$top" --top-module "$top" "$here/../qmx_dpi.sv" "$here/$top.sv" \
      -LDFLAGS "-L$libdir -lqmx_c -Wl,-rpath,$libdir" > "$out/$top/verilator.log" 2>&1 || { cat "$out/$top/verilator.log" >&2; exit 1; }
  fi
  echo "$out/$top/V$top"
}
for f in "$@"; do
  case "$f" in
    *.memh)
      tb=$(bench tb_golden_memh)
      head=$(sed -n 's|^// qmx-golden memh v1: ||p' "$f")
      key() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< " $head"; }
      [ "$(key op)" = convert ] && [ "$(key src)" = f32 ] || { echo "run.sh: $f is not an f32 conversion image" >&2; exit 2; }
      grep -q '^// layout: 32 8 8 ' "$f" || { echo "run.sh: $f is not laid out 32 8 8" >&2; exit 2; }
      "$tb" "+memh=$f" "+cases=$(sed -n 's|^// cases: ||p' "$f")" "+dst=$(key dst)" "+opts=$head"
      ;;
    *)
      case "$(sed -n 's/^# op=\([^ ]*\) .*/\1/p' "$f" | head -n 1)" in
        mx-block) tb=$(bench tb_golden_mx_block) ;;
        nvfp4-block) tb=$(bench tb_golden_nvfp4_block) ;;
        dot) tb=$(bench tb_golden_dot) ;;
        *) tb=$(bench tb_golden_convert) ;;
      esac
      "$tb" "+golden=$f"
      ;;
  esac
done
