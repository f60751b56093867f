#!/usr/bin/env bash
# `qmx-sim prove`, `golden gen`, `audit`, `quantize` and `dequantize` split (tests/CMakeLists.txt scaleout.*): as --shard I/N runs
# merged by `qmx-sim merge`, including a resumed run after a deleted shard, a damaged and a missing shard;
# and, with "mpi", under mpirun with 1, 2, 3 and 4 ranks. Every merged result must equal the one-process
# run's bytes (a golden directory: every file, and nothing more).
# Usage: scaleout.sh QMX_SIM WORKDIR [mpi MPIEXEC]
set -euo pipefail
q=$1
work=$2
mode=${3:-shards}
mpiexec=${4:-mpirun}
rm -rf "$work" && mkdir -p "$work"
job=(prove --to e4m3 e2m1 e5m2fnuz --round rne sr --sat satfinite nosat --range 0x3F7F0000:0x00120001 --quiet)
"$q" "${job[@]}" --out "$work/whole.json"
grep -q '"mismatches": 0' "$work/whole.json"

fail() { echo "scaleout: $*" >&2; exit 1; }
gjob=(golden gen --suite sr,ue8m0,mx-block --level 1 --seed 3 --quiet)
"$q" "${gjob[@]}" --out "$work/golden-whole" > /dev/null
# golden verify's report on it, and on a copy whose files 3, 40, 41 and 120 have 9 expected values changed
# each (36 mismatches; --max-errors 15 stops the one-process replay in the second file).
vjob=(golden verify --quiet --max-errors 15)
"$q" "${vjob[@]}" "$work/golden-whole" > "$work/verify-whole.txt"
cp -r "$work/golden-whole" "$work/golden-bad"
python3 - "$work/golden-bad" <<'PY'
import glob, sys
files = sorted(glob.glob(sys.argv[1] + "/*/*.txt"))
for p in (files[3], files[40], files[41], files[120]):
    lines = open(p).read().split("\n")
    for i in [i for i, l in enumerate(lines) if l and not l.startswith("#")][:9]:
        w = lines[i].split()
        w[-2] = w[-2][:-1] + ("0" if w[-2][-1] != "0" else "1")
        lines[i] = " ".join(w)
    open(p, "w").write("\n".join(lines))
PY
if "$q" "${vjob[@]}" "$work/golden-bad" > "$work/verify-bad.txt" 2> "$work/verify-bad.err"; then fail "verify passed a changed golden set"; fi
grep -q "2 golden file(s) failed verification" "$work/verify-bad.err" || fail "$(cat "$work/verify-bad.err")"
grep -q "18 mismatches, 2 files failing" "$work/verify-bad.txt" || fail "$(tail -n 3 "$work/verify-bad.txt")"
! grep -q "not listed in manifest" "$work/verify-bad.txt" || fail "files left unreplayed after --max-errors were reported as strays"
# A checkpoint in three shards with an index (qmx layout, 5 tensors), audited whole.
ck="$work/ckpt"
mkdir -p "$ck/src"
python3 - "$ck/src" <<'PY'
import json, random, struct, sys
rng = random.Random(5)
groups = [("q_proj", "k_proj"), ("v_proj", "o_proj"), ("up_proj",)]
for i, names in enumerate(groups):
    header, blobs, off = {}, [], 0
    for name in names:
        a = struct.pack("<%df" % (48 * 256), *(rng.gauss(0, 0.02) * (1 + 30 * (rng.random() < 0.01)) for _ in range(48 * 256)))
        header[name] = {"dtype": "F32", "shape": [48, 256], "data_offsets": [off, off + len(a)]}
        blobs.append(a)
        off += len(a)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open("%s/part%d.safetensors" % (sys.argv[1], i + 1), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
for i in 1 2 3; do
  "$q" quantize --spec mxfp8 --in "$ck/src/part$i.safetensors" --out "$ck/model-0000$i-of-00003.safetensors" \
    --no-dequant --quiet > /dev/null
done
# The float checkpoint itself, quantized and dequantized file by file: the one-process results.
fs="$work/float-ckpt"
mv "$ck/src" "$fs"
qjob=(quantize --spec nvfp4 --in "$fs" --quiet)
"$q" "${qjob[@]}" --out "$work/q-whole/" --json "$work/q-whole.json"
[ "$(ls "$work/q-whole" | wc -l)" = 4 ] || fail "quantize of 3 files did not write 3 files and an index: $(ls "$work/q-whole")"
djob=(dequantize --in "$work/q-whole/model.safetensors.index.json" --quiet)
"$q" "${djob[@]}" --out "$work/d-whole/" --json "$work/d-whole.json"
# The index maps every tensor to its file; the directory form reads the same files.
python3 - "$ck" <<'PY'
import json, os, sys, struct
d = sys.argv[1]
wm = {}
for f in sorted(os.listdir(d)):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            for k in json.loads(fh.read(n)):
                if k != "__metadata__":
                    wm[k] = f
json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
PY
"$q" audit "$ck/model.safetensors.index.json" --json "$work/audit-whole.json" --quiet
[ "$(grep -c '"layout": "qmx"' "$work/audit-whole.json")" = 5 ] || fail "the sharded checkpoint's 5 tensors were not all audited"
# audit --convert of the same checkpoint (MXFP8 into E5M2 elements under the same scales): the report.
cjob=(audit "$ck/model.safetensors.index.json" --convert 'mxfp8->e5m2' --quiet)
"$q" "${cjob[@]}" --json "$work/conv-whole.json"
[ "$(grep -c '"inexact_elements"' "$work/conv-whole.json")" = 5 ] || fail "audit --convert did not report the 5 tensors"
# study error and kurtosis over the float checkpoint's tensors and two distributions: one process's table,
# CSV and JSON, kept aside; the split runs below write the same paths and must give the same bytes.
sjob=(study error --in "$fs/part1.safetensors" --in "$fs/part3.safetensors" --dist normal student-t:3 --rows 32 --cols 256
      --spec mxfp8 nvfp4 --quiet --csv "$work/st/e.csv" --json "$work/st/e.json")
kjob=(study kurtosis --in "$fs/part2.safetensors" --dist normal --rows 32 --cols 256 --spec mxfp8 --outlier-sweep 1 16 --quiet
      --csv "$work/st/k.csv" --json "$work/st/k.json")
mkdir -p "$work/st"
"$q" "${sjob[@]}" > "$work/st-e.txt"
"$q" "${kjob[@]}" > "$work/st-k.txt"
mkdir -p "$work/st-whole" && mv "$work"/st/* "$work/st-whole/"
[ "$(grep -c '"input"' "$work/st-whole/e.json")" = 10 ] || fail "study error did not take 5 inputs x 2 specs"
same_study() {  # same_study WHAT TABLE_FILE: the split run's outputs and table equal one process's
  for f in e.csv e.json k.csv k-kurtosis.csv k.json; do
    if [ -f "$work/st/$f" ]; then cmp "$work/st-whole/$f" "$work/st/$f" || fail "$1: $f differs from one process"; fi
  done
  rm -f "$work"/st/*
}

if [ "$mode" = "mpi" ]; then
  # Open MPI refuses root without this, and the CI machine has 2 cores for 4 ranks. Containers often forbid
  # the cross-process reads (CMA) of Open MPI's shared-memory transport: copy through the segment instead.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  flags=(--oversubscribe)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  for np in 1 2 3 4; do
    "$mpiexec" "${flags[@]}" -np $np "$q" "${job[@]}" --out "$work/mpi$np.json" > "$work/mpi$np.log" 2>&1 \
      || { cat "$work/mpi$np.log"; fail "mpirun -np $np failed"; }
    cmp "$work/whole.json" "$work/mpi$np.json" || fail "$np ranks differ from one process"
  done
  for np in 2 3 4; do
    "$mpiexec" "${flags[@]}" -np $np "$q" audit "$ck/model.safetensors.index.json" --json "$work/audit-mpi$np.json" --quiet \
      > "$work/ampi$np.log" 2>&1 || { cat "$work/ampi$np.log"; fail "audit under mpirun -np $np failed"; }
    cmp "$work/audit-whole.json" "$work/audit-mpi$np.json" || fail "audit on $np ranks differs from one process"
    "$mpiexec" "${flags[@]}" -np $np "$q" "${cjob[@]}" --json "$work/conv-mpi$np.json" > "$work/cmpi$np.log" 2>&1 \
      || { cat "$work/cmpi$np.log"; fail "audit --convert under mpirun -np $np failed"; }
    cmp "$work/conv-whole.json" "$work/conv-mpi$np.json" || fail "audit --convert on $np ranks differs from one process"
  done
  for np in 2 3; do
    "$mpiexec" "${flags[@]}" -np $np "$q" "${sjob[@]}" > "$work/st-e-mpi.txt" 2>&1 || { cat "$work/st-e-mpi.txt"; fail "study error on $np ranks failed"; }
    cmp "$work/st-e.txt" "$work/st-e-mpi.txt" || fail "study error's table on $np ranks differs"
    [ -f "$work/st/e.json" ] || fail "study error on $np ranks wrote no JSON"
    same_study "study error on $np ranks"
    "$mpiexec" "${flags[@]}" -np $np "$q" "${kjob[@]}" > "$work/st-k-mpi.txt" 2>&1 || { cat "$work/st-k-mpi.txt"; fail "study kurtosis on $np ranks failed"; }
    cmp "$work/st-k.txt" "$work/st-k-mpi.txt" || fail "study kurtosis's tables on $np ranks differ"
    [ -f "$work/st/k.json" ] || fail "study kurtosis on $np ranks wrote no JSON"
    same_study "study kurtosis on $np ranks"
  done
  for np in 2 3; do
    "$mpiexec" "${flags[@]}" -np $np "$q" "${gjob[@]}" --out "$work/golden-mpi$np" > "$work/gmpi$np.log" 2>&1 \
      || { cat "$work/gmpi$np.log"; fail "golden gen under mpirun -np $np failed"; }
    diff -r "$work/golden-whole" "$work/golden-mpi$np" || fail "golden gen on $np ranks differs from one process"
  done
  for np in 2 3; do
    "$mpiexec" "${flags[@]}" -np $np "$q" "${vjob[@]}" "$work/golden-bad" > "$work/verify-mpi$np.txt" 2> /dev/null \
      && fail "verify on $np ranks passed a changed golden set"
    cmp "$work/verify-bad.txt" "$work/verify-mpi$np.txt" || fail "verify on $np ranks reports otherwise"
  done
  for np in 2 4; do
    "$mpiexec" "${flags[@]}" -np $np "$q" "${qjob[@]}" --out "$work/q-mpi$np/" --json "$work/q-mpi$np.json" \
      > "$work/qmpi$np.log" 2>&1 || { cat "$work/qmpi$np.log"; fail "quantize under mpirun -np $np failed"; }
    diff -r "$work/q-whole" "$work/q-mpi$np" || fail "quantize on $np ranks differs from one process"
    cmp "$work/q-whole.json" "$work/q-mpi$np.json" || fail "quantize's summary on $np ranks differs"
    "$mpiexec" "${flags[@]}" -np $np "$q" "${djob[@]}" --out "$work/d-mpi$np/" --json "$work/d-mpi$np.json" \
      > "$work/dmpi$np.log" 2>&1 || { cat "$work/dmpi$np.log"; fail "dequantize under mpirun -np $np failed"; }
    diff -r "$work/d-whole" "$work/d-mpi$np" || fail "dequantize on $np ranks differs from one process"
    cmp "$work/d-whole.json" "$work/d-mpi$np.json" || fail "dequantize's summary on $np ranks differs"
  done
  # A rank that fails names itself, and the job fails.
  if "$mpiexec" "${flags[@]}" -np 2 "$q" prove --to e4m3 --range 0:0x200000000 --quiet > "$work/bad.log" 2>&1; then
    fail "a job past 2^32 inputs passed under mpirun"
  fi
  grep -q "passes 2^32" "$work/bad.log" || { cat "$work/bad.log"; fail "no reason for the failed job"; }
  echo "scaleout: prove on 1-4 MPI ranks, audit and audit --convert on 2-4, study error and kurtosis on 2 and 3, golden gen and verify on 2 and 3, quantize and dequantize on 2 and 4 equal the one-process results"
  exit 0
fi

d="$work/shards"
for i in 0 1 2; do "$q" "${job[@]}" --shard $i/3 --shard-dir "$d" > /dev/null; done
"$q" merge "$d" --out "$work/merged.json" --quiet
cmp "$work/whole.json" "$work/merged.json" || fail "merged shards differ from one process"
# Resume: shard 1 lost; rerunning all three redoes it alone.
rm "$d/prove-shard-1-of-3.json"
out=$(for i in 0 1 2; do "$q" "${job[@]}" --shard $i/3 --shard-dir "$d"; done)
[ "$(grep -c "skipped" <<<"$out")" = 2 ] || fail "a resumed run did not skip the two finished shards: $out"
"$q" merge "$d" --out "$work/merged2.json" --quiet
cmp "$work/whole.json" "$work/merged2.json" || fail "the resumed run differs"
# A damaged shard is named and redone; a missing one is named.
printf ' ' >> "$d/prove-shard-2-of-3.json"
if "$q" merge "$d" --out "$work/bad.json" --quiet 2> "$work/err.txt"; then fail "merged a damaged shard"; fi
grep -q "prove-shard-2-of-3.json does not match its checksum" "$work/err.txt" || fail "$(cat "$work/err.txt")"
[ ! -e "$work/bad.json" ] || fail "a failed merge left its output"
out=$("$q" "${job[@]}" --shard 2/3 --shard-dir "$d")
grep -q "wrote" <<<"$out" || fail "the damaged shard was not redone: $out"
rm "$d/prove-shard-0-of-3.json" "$d/prove-shard-0-of-3.json.sha256"
if "$q" merge "$d" --quiet 2> "$work/err.txt"; then fail "merged without shard 0"; fi
grep -q "shards 0 of 3 are missing" "$work/err.txt" || fail "$(cat "$work/err.txt")"
# Bad shard arguments.
if "$q" "${job[@]}" --shard 3/3 --shard-dir "$d" 2> "$work/err.txt"; then fail "accepted shard 3/3"; fi
grep -q "expected I/N" "$work/err.txt" || fail "$(cat "$work/err.txt")"
# golden gen in 4 shards into one directory, merged: the one-process directory, file for file.
gd="$work/golden-shards"
for i in 0 1 2 3; do "$q" "${gjob[@]}" --out "$work/golden-4" --shard $i/4 --shard-dir "$gd" > /dev/null; done
[ ! -e "$work/golden-4/manifest.json" ] || fail "a shard wrote the manifest"
"$q" merge "$gd" --out "$work/golden-4" --quiet
diff -r "$work/golden-whole" "$work/golden-4" || fail "merged golden shards differ from one process"
out=$("$q" "${gjob[@]}" --out "$work/golden-4" --shard 1/4 --shard-dir "$gd")
grep -q "skipped" <<<"$out" || fail "a finished golden shard was redone: $out"
f=$(ls "$work/golden-4/sr" | head -n 1)
echo "# changed" >> "$work/golden-4/sr/$f"
if "$q" merge "$gd" --out "$work/golden-4" --quiet 2> "$work/err.txt"; then fail "merged a changed golden file"; fi
grep -q "is not the file shard" "$work/err.txt" || fail "$(cat "$work/err.txt")"
# audit of the sharded checkpoint in 2 job-array shards, merged: the one-process report.
ad="$work/audit-shards"
for i in 0 1; do "$q" audit "$ck/model.safetensors.index.json" --shard $i/2 --shard-dir "$ad" > /dev/null; done
"$q" merge "$ad" --out "$work/audit-merged.json" --quiet
cmp "$work/audit-whole.json" "$work/audit-merged.json" || fail "merged audit shards differ from one process"
out=$("$q" audit "$ck/model.safetensors.index.json" --shard 1/2 --shard-dir "$ad")
grep -q "skipped" <<<"$out" || fail "a finished audit shard was redone: $out"
# audit --convert in 3 shards, merged (one tensor's shard is resumed); --converted stays one process.
cd_="$work/conv-shards"
for i in 0 1 2; do "$q" "${cjob[@]}" --shard $i/3 --shard-dir "$cd_" > /dev/null; done
out=$("$q" "${cjob[@]}" --shard 2/3 --shard-dir "$cd_")
grep -q "skipped" <<<"$out" || fail "a finished audit --convert shard was redone: $out"
"$q" merge "$cd_" --out "$work/conv-merged.json" --quiet
cmp "$work/conv-whole.json" "$work/conv-merged.json" || fail "merged audit --convert shards differ from one process"
if "$q" "${cjob[@]}" --converted "$work/c.safetensors" --shard 0/2 --shard-dir "$work/c2" 2> "$work/err.txt"; then
  fail "audit --converted ran as a shard"
fi
grep -q "writes one file from one process" "$work/err.txt" || fail "$(cat "$work/err.txt")"
# study error in 3 shards (one resumed) and kurtosis in 2, merged: one process's table and files.
for i in 0 1 2; do "$q" "${sjob[@]}" --shard $i/3 --shard-dir "$work/st-sh" > /dev/null; done
out=$("$q" "${sjob[@]}" --shard 0/3 --shard-dir "$work/st-sh")
grep -q "skipped" <<<"$out" || fail "a finished study shard was redone: $out"
[ ! -f "$work/st/e.json" ] || fail "a study shard wrote the final JSON"
"$q" merge "$work/st-sh" --quiet > "$work/st-e-merged.txt"
cmp "$work/st-e.txt" "$work/st-e-merged.txt" || fail "merged study error's table differs from one process"
[ -f "$work/st/e.json" ] && [ -f "$work/st/e.csv" ] || fail "merge wrote no study files"
same_study "merged study error"
for i in 0 1; do "$q" "${kjob[@]}" --shard $i/2 --shard-dir "$work/st-ksh" > /dev/null; done
"$q" merge "$work/st-ksh" --quiet > "$work/st-k-merged.txt"
cmp "$work/st-k.txt" "$work/st-k-merged.txt" || fail "merged study kurtosis's tables differ from one process"
[ -f "$work/st/k.json" ] && [ -f "$work/st/k-kurtosis.csv" ] || fail "merge wrote no kurtosis files"
same_study "merged study kurtosis"
# quantize of the 3-file checkpoint in 2 shards, merged: the one-process files, index and summary. A shard
# whose output file was deleted is redone; the other is skipped.
qd="$work/q-shards"
for i in 0 1; do "$q" "${qjob[@]}" --out "$work/q-sh/" --shard $i/2 --shard-dir "$qd" > /dev/null; done
[ ! -e "$work/q-sh/model.safetensors.index.json" ] || fail "a quantize shard wrote the index"
"$q" merge "$qd" --out "$work/q-sh.json" --quiet
diff -r "$work/q-whole" "$work/q-sh" || fail "merged quantize shards differ from one process"
cmp "$work/q-whole.json" "$work/q-sh.json" || fail "the merged quantize summary differs"
rm "$work/q-sh/part2.safetensors"
if "$q" merge "$qd" --out "$work/q-bad.json" --quiet 2> "$work/err.txt"; then fail "merged without part2's output"; fi
grep -q "q-sh/part2.safetensors is missing or not the file shard 1 wrote" "$work/err.txt" || fail "$(cat "$work/err.txt")"
out=$(for i in 0 1; do "$q" "${qjob[@]}" --out "$work/q-sh/" --shard $i/2 --shard-dir "$qd"; done)
[ "$(grep -c "skipped" <<<"$out")" = 1 ] || fail "the resumed quantize did not skip exactly the intact shard: $out"
"$q" merge "$qd" --out "$work/q-sh.json" --quiet
diff -r "$work/q-whole" "$work/q-sh" || fail "the resumed quantize shards differ from one process"
# dequantize in 3 shards (one file each), merged.
dd="$work/d-shards"
for i in 0 1 2; do "$q" "${djob[@]}" --out "$work/d-sh/" --shard $i/3 --shard-dir "$dd" > /dev/null; done
"$q" merge "$dd" --out "$work/d-sh.json" --quiet
diff -r "$work/d-whole" "$work/d-sh" || fail "merged dequantize shards differ from one process"
cmp "$work/d-whole.json" "$work/d-sh.json" || fail "the merged dequantize summary differs"
# golden verify in 3 shards (a clean set) and 4 (the changed one, --max-errors 15): merge reports what one
# process reports, and fails where it fails.
for i in 0 1 2; do "$q" "${vjob[@]}" "$work/golden-whole" --shard $i/3 --shard-dir "$work/v3" > /dev/null; done
"$q" merge "$work/v3" --quiet > "$work/verify-merged.txt"
cmp "$work/verify-whole.txt" "$work/verify-merged.txt" || fail "merged verify shards report otherwise"
for i in 0 1 2 3; do "$q" "${vjob[@]}" "$work/golden-bad" --shard $i/4 --shard-dir "$work/v4" > /dev/null; done
if "$q" merge "$work/v4" --quiet > "$work/verify-bad-merged.txt" 2> /dev/null; then fail "merged verify shards passed a changed set"; fi
cmp "$work/verify-bad.txt" "$work/verify-bad-merged.txt" || fail "merged verify shards of the changed set report otherwise"
# Output files that would be the input files themselves are refused before anything is written.
cp -r "$fs" "$work/inplace"
before=$(cat "$work/inplace"/*.safetensors | sha256sum)
if "$q" quantize --spec nvfp4 --in "$work/inplace" --out "$work/inplace/" --quiet 2> "$work/err.txt"; then
  fail "quantize wrote over its input files"
fi
grep -q "input" "$work/err.txt" || fail "$(cat "$work/err.txt")"
[ "$(cat "$work/inplace"/*.safetensors | sha256sum)" = "$before" ] || fail "the input files changed"
# One file is one job; a shard of it is refused with the reason.
if "$q" quantize --spec nvfp4 --in "$fs/part1.safetensors" --out "$work/x.safetensors" --shard 0/2 --shard-dir "$work/x" \
  2> "$work/err.txt"; then fail "sharded a one-file quantize"; fi
grep -q "is one file: run it as one process" "$work/err.txt" || fail "$(cat "$work/err.txt")"
echo "scaleout: prove in 3 shards (a resumed, a damaged and a missing one), golden gen in 4, audit in 2, audit --convert in 3, study error in 3 (resumed) and kurtosis in 2, quantize in 2 (resumed), dequantize in 3 and golden verify in 3 and 4 merge to the one-process bytes"
