#!/usr/bin/env bash
# ctest rtl.verilator_example: builds rtl/example with Verilator against this build's libqmx_c.so, runs it
# on every golden/level1 conversion file (each case checked against the file and the DPI model), then on a
# copy with one expected code changed, which must fail; then the $readmemh bench (tb_golden_memh.sv) on the
# images of the FP32 conversion files (golden gen --layout memh), and on one with a changed word; then the
# MX block bench (tb_golden_mx_block.sv) on every level-1 mx-block file and on one with a changed code; then
# the NVFP4 block and dot benches on every level-1 nvfp4-block and dot file and on one changed file of each.
# Usage: run_example.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
command -v verilator > /dev/null || { echo "SKIP: verilator not found (Debian: apt-get install verilator)"; exit 77; }
out=$build/rtl-example
rm -rf "$out" && mkdir -p "$out"
mapfile -t files < <(ls "$src"/golden/level1/conversions/*.txt | grep -v '/decode_')
bash "$src/rtl/example/run.sh" "$build/lib" "$out" "${files[@]}" > "$out/run.log" 2>&1 || { tail -20 "$out/run.log"; exit 1; }
passed=$(grep -c '^PASS ' "$out/run.log")
[ "$passed" -eq "${#files[@]}" ] || { echo "FAIL: $passed of ${#files[@]} files passed"; tail -20 "$out/run.log"; exit 1; }
echo "the example bench agrees with $passed golden conversion files"
# One expected code changed (the first case's, its lowest bit flipped): the bench must say so and fail.
changed=$out/changed.txt
done_one=0
while IFS= read -r line; do
  if [ "$done_one" -eq 0 ] && [ -n "$line" ] && [ "${line:0:1}" != "#" ]; then
    read -r x code flags <<< "$line"
    line=$(printf '%s %02x %s' "$x" $((16#$code ^ 1)) "$flags")
    done_one=1
  fi
  printf '%s\n' "$line"
done < "${files[0]}" > "$changed"
if "$out/tb_golden_convert/Vtb_golden_convert" "+golden=$changed" > "$out/changed.log" 2>&1; then
  echo "FAIL: the bench passed a file with a changed expected code"; cat "$out/changed.log"; exit 1
fi
grep -q 'MISMATCH' "$out/changed.log" || { echo "FAIL: no MISMATCH line for the changed code"; cat "$out/changed.log"; exit 1; }
echo "a changed expected code fails the bench: $(grep -m1 MISMATCH "$out/changed.log")"
# The $readmemh images of the FP32 conversion files (golden gen --layout memh), through tb_golden_memh.sv.
mo=$out/memh
"$build/cli/qmx-sim" golden gen --suite conversions --layout memh --out "$mo/golden" --quiet > /dev/null
mapfile -t images < <(grep -l '^// layout: 32 8 8 ' "$mo"/golden/conversions/f32_*.memh)
[ "${#images[@]}" -gt 100 ] || { echo "FAIL: only ${#images[@]} FP32 conversion images"; exit 1; }
bash "$src/rtl/example/run.sh" "$build/lib" "$out" "${images[@]}" > "$mo/run.log" 2>&1 || { tail -20 "$mo/run.log"; exit 1; }
passed=$(grep -c '^PASS ' "$mo/run.log")
[ "$passed" -eq "${#images[@]}" ] || { echo "FAIL: $passed of ${#images[@]} images passed"; tail -20 "$mo/run.log"; exit 1; }
echo "the memh bench agrees with $passed \$readmemh images"
# One word's expected code changed: the memh bench must fail too.
img=${images[0]}
done_one=0
while IFS= read -r line; do
  if [ "$done_one" -eq 0 ] && [ "${line:0:2}" != "//" ] && [ -n "$line" ]; then
    line=$(printf '%s%02x%s' "${line:0:8}" $((16#${line:8:2} ^ 1)) "${line:10}")
    done_one=1
  fi
  printf '%s\n' "$line"
done < "$img" > "$mo/changed.memh"
head_line=$(sed -n 's|^// qmx-golden memh v1: ||p' "$img")
if bash "$src/rtl/example/run.sh" "$build/lib" "$out" "$mo/changed.memh" > "$mo/changed.log" 2>&1; then
  echo "FAIL: the memh bench passed an image with a changed code ($head_line)"; cat "$mo/changed.log"; exit 1
fi
grep -q 'MISMATCH' "$mo/changed.log" || { echo "FAIL: no MISMATCH line for the changed word"; cat "$mo/changed.log"; exit 1; }
echo "a changed word fails the memh bench: $(grep -m1 MISMATCH "$mo/changed.log")"
# Every golden/level1 MX block file through tb_golden_mx_block.sv (qmx_expect_mx_block), then one with an
# element code changed (element 5 of the first block, its lowest bit flipped), which must fail.
xo=$out/mx
mkdir -p "$xo"
mapfile -t blocks < <(ls "$src"/golden/level1/mx-block/*.txt)
bash "$src/rtl/example/run.sh" "$build/lib" "$out" "${blocks[@]}" > "$xo/run.log" 2>&1 || { tail -20 "$xo/run.log"; exit 1; }
passed=$(grep -c '^PASS ' "$xo/run.log")
[ "$passed" -eq "${#blocks[@]}" ] || { echo "FAIL: $passed of ${#blocks[@]} MX block files passed"; tail -20 "$xo/run.log"; exit 1; }
echo "the MX block bench agrees with $passed golden MX block files"
done_one=0
while IFS= read -r line; do
  if [ "$done_one" -eq 0 ] && [ -n "$line" ] && [ "${line:0:1}" != "#" ]; then
    line=$(printf '%s%02x%s' "${line:0:301}" $((16#${line:301:2} ^ 1)) "${line:303}")
    done_one=1
  fi
  printf '%s\n' "$line"
done < "${blocks[0]}" > "$xo/changed.txt"
if bash "$src/rtl/example/run.sh" "$build/lib" "$out" "$xo/changed.txt" > "$xo/changed.log" 2>&1; then
  echo "FAIL: the MX block bench passed a file with a changed code"; cat "$xo/changed.log"; exit 1
fi
grep -q 'MISMATCH' "$xo/changed.log" || { echo "FAIL: no MISMATCH line for the changed code"; cat "$xo/changed.log"; exit 1; }
echo "a changed element code fails the MX block bench: $(grep -m1 MISMATCH "$xo/changed.log" | cut -c1-100)"
rm -rf "$out"
# Every golden/level1 NVFP4 block file through tb_golden_nvfp4_block.sv (qmx_expect_nvfp4_block) and every dot
# file (golden/level1/gemm, the H200's measured outputs among them) through tb_golden_dot.sv (qmx_expect_dot);
# then one of each with an expected value changed (an element code; D's lowest bit), which must fail.
no=$out/nvfp4-dot
mkdir -p "$no"
mapfile -t nd < <(ls "$src"/golden/level1/nvfp4-block/*.txt "$src"/golden/level1/gemm/*.txt)
bash "$src/rtl/example/run.sh" "$build/lib" "$out" "${nd[@]}" > "$no/run.log" 2>&1 || { tail -20 "$no/run.log"; exit 1; }
passed=$(grep -c '^PASS ' "$no/run.log")
[ "$passed" -eq "${#nd[@]}" ] || { echo "FAIL: $passed of ${#nd[@]} NVFP4 block and dot files passed"; tail -20 "$no/run.log"; exit 1; }
echo "the NVFP4 block and dot benches agree with $passed golden files"
# change_first FILE COLUMN WIDTH: the first case line's field at COLUMN (WIDTH hex digits) with its lowest bit
# flipped; COLUMN -1 means the second-last space-separated field (a dot file's D).
change_first() {
  local file=$1 col=$2 w=$3 done_one=0 line
  while IFS= read -r line; do
    if [ "$done_one" -eq 0 ] && [ -n "$line" ] && [ "${line:0:1}" != "#" ]; then
      if [ "$col" -lt 0 ]; then
        read -r -a f <<< "$line"
        f[5]=$(printf '%08x' $((16#${f[5]} ^ 1)))
        line="${f[*]}"
      else
        line=$(printf "%s%0${w}x%s" "${line:0:$col}" $((16#${line:$col:$w} ^ 1)) "${line:$((col + w))}")
      fi
      done_one=1
    fi
    printf '%s\n' "$line"
  done < "$file"
}
change_first "$src/golden/level1/nvfp4-block/e2m1_nvfp4.txt" 170 1 > "$no/nvfp4-changed.txt"
change_first "$src/golden/level1/gemm/nvfp4_blackwell-mxf4nvf4.txt" -1 8 > "$no/dot-changed.txt"
for f in "$no/nvfp4-changed.txt" "$no/dot-changed.txt"; do
  if bash "$src/rtl/example/run.sh" "$build/lib" "$out" "$f" > "$f.log" 2>&1; then
    echo "FAIL: the bench passed $(basename "$f"), which has a changed expected value"; cat "$f.log"; exit 1
  fi
  grep -q 'MISMATCH' "$f.log" || { echo "FAIL: no MISMATCH line for $(basename "$f")"; cat "$f.log"; exit 1; }
  echo "a changed expected value fails the bench: $(grep -m1 MISMATCH "$f.log" | cut -c1-120)"
done
# A design's own unit with AMD gfx1250-style E5M3 block scales (ue5m3) on blocks of 16: the dot bench takes the
# scale format from the header and the model through qmx_dot.
"$build/cli/qmx-sim" golden gen --out "$no/unit" --quiet \
  --unit "name=gfx a=e2m1 b=e2m1 k=64 scale=ue5m3 block=16 model=fused:step=64,F=25,bits=24,out=rz,scale=products" > /dev/null
bash "$src/rtl/example/run.sh" "$build/lib" "$out" "$no/unit/unit/gfx.txt" > "$no/unit.log" 2>&1 || { tail -20 "$no/unit.log"; exit 1; }
grep -q '^PASS ' "$no/unit.log" || { echo "FAIL: the dot bench did not pass the ue5m3 unit file"; cat "$no/unit.log"; exit 1; }
echo "the dot bench agrees with a ue5m3-scaled unit file: $(grep -m1 '^PASS ' "$no/unit.log" | cut -c1-100)"
