// qmx/golden.h: golden vectors for hardware verification (golden/README.md documents the format).
// Text files, one case per line in the TestFloat manner (docs/REFERENCES.md section 6): a header naming the
// operation and every option that decides the result, then hex inputs, hex expected outputs and a
// flags field. A JSON manifest lists each file with its operation, header, case count and SHA-256.
// Generate writes suites of such files; Verify replays a directory against a backend.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/mx.h"

namespace qmx::golden {

// What computes the results a directory is checked against.
enum class Backend : uint8_t {
  kCpuRef,   // "cpu-ref": the scalar reference routines (round.h, QuantizeMxRef, QuantizeRef, GemmRef);
             // flags are checked too
  kCpuSimd,  // "cpu-simd": the fast paths (Highway kernels, OpenMP) on the dispatched SIMD target; they
             // compute no flags, so the flags field is not checked
};
const char* BackendName(Backend b);
// "cpu-ref", "cpu-simd"; "cuda" throws qmx::Error saying this build has no CUDA backend.
Backend ParseBackend(const std::string& s);

struct SuiteInfo {
  std::string name;
  std::string description;  // one paragraph: operations, file naming, what the levels hold
};
// conversions, ue8m0, mx-block, nvfp4-block, sr, gemm (in that order).
const std::vector<SuiteInfo>& Suites();

struct GenOptions {
  std::vector<std::string> suites{"all"};  // suite names, or "all"
  int level = 1;         // 1: small (checked into golden/level1, replayed by CI); 2: the full cross products
  uint64_t seed = 1;     // seeds the random cases; each file derives its own stream from seed and its name
  bool exhaustive = false;  // every input where the space allows: all 2^16 FP16/BF16 inputs per conversion
  std::string hopper_dir;   // golden/gemm-hopper (hardware-observed Hopper GEMM outputs); "" skips those files
  // One part of a generation split over processes (MPI ranks, job-array shards): file k, in the generator's
  // order, is planned by every part but written by part k % parts only. With parts > 1 no manifest.json is
  // written: the parts' entries go to WriteManifest (qmx-sim golden gen under MPI, and qmx-sim merge).
  uint64_t part = 0, parts = 1;
  // Also write NAME.memh beside each NAME.txt: the cases as $readmemh words (MemhImage).
  bool memh = false;
  // Add cases until each class of each file's coverage model (Coverage) holds this many, where the
  // candidates have that many distinct inputs in the class; 0: none added. Conversion files draw from every
  // value and halfway point of the destination and their neighbours, the source's extremes and NaN payloads;
  // the scale, block, SR and dot files from the same file generated under derived seeds, then from variants
  // of their own cases (an all-zero block with other signs, an all-equal block times a power of two, a dot's
  // pairs shuffled within each block). Hardware-measured files are left as they are. Recorded in the
  // manifest when nonzero.
  uint64_t min_per_class = 0;
  // A design's own dot-product / MMA units, each "name=N a=FMT b=FMT k=K model=M [scale=S block=B]" (S ue8m0,
  // e4m3, fp32 or any format of 8 bits or fewer holding 1.0, ParseBlockScaleFormat; any
  // accumulation model, `fused:` strings included): the unit suite writes unit/N.txt for each (op=dot: the
  // alignment-shift cases of the model's F, then the gemm suite's adversarial and random cases). With units
  // and suites {"all"} only the unit suite is written; name other suites to write them too.
  std::vector<std::string> units{};
};

struct ManifestEntry {
  std::string path;    // relative to the directory, '/' separated
  std::string suite;
  std::string op;
  std::string header;  // the file's "# op=..." line, verbatim
  uint64_t cases = 0;
  std::string sha256;
  uint64_t index = 0;  // the file's place in the generator's order (the manifest's order)
};

// Writes every file of the chosen suites under dir (dir/SUITE/NAME.txt) and dir/manifest.json, each
// atomically (temporary file, then rename). The same options give the same bytes on every machine,
// thread count and SIMD target. progress (may be empty) is called after each file. Throws qmx::Error
// for an unknown suite or level, an unreadable hopper_dir.
std::vector<ManifestEntry> Generate(const GenOptions& opt, const std::string& dir,
                                    const std::function<void(const ManifestEntry&)>& progress = {});

// A golden file's cases as a $readmemh image (`golden gen --layout memh`): `//` comment lines carrying the
// file's header, its fields line and the word's layout ("// layout: 32 8 8", each field's width in bits,
// the first field in the top bits), then one hex word per case: the case's fields (inputs, outputs,
// flags) concatenated, each at its column's fixed width; a field the text marks absent ("-": no C, no
// block scales) is x digits. Throws qmx::Error when a column's present fields differ in width.
std::string MemhImage(const std::string& golden_text);
// The fields of each case of a memh image, split by its layout line (the inverse of MemhImage's words; x
// fields come back as "-").
std::vector<std::vector<std::string>> MemhFields(const std::string& memh_text);

// dir/manifest.json of a generation from its files' entries, gathered from its parts in any order: written
// in index order (atomically), the bytes Generate writes in one part. Throws qmx::Error when an index repeats
// or is missing (a part not run).
void WriteManifest(const GenOptions& opt, std::vector<ManifestEntry> entries, const std::string& dir);
// A part's entries and options as JSON (a shard's record, qmx-sim merge) and back; qmx::Error naming what is
// wrong.
std::string PartToJson(const GenOptions& opt, const std::vector<ManifestEntry>& entries);
std::vector<ManifestEntry> PartFromJson(const std::string& text, GenOptions& opt);

// The hardware-observed Hopper GEMM data (cases.json and its .npy files) for GenOptions::hopper_dir:
// `given` when not empty (it must hold cases.json); else the first of golden/gemm-hopper under the
// working directory, under the source tree the library was built from, and under the installed
// share/qmx-sim/golden that holds cases.json. Throws qmx::Error naming the places looked in when the
// suites include gemm (or all) and none holds it; otherwise "" when none does.
std::string ResolveHopperDir(const std::vector<std::string>& suites, const std::string& given = "");

// A file header's key=value pairs, in file order (generator excluded).
using HeaderKeys = std::vector<std::pair<std::string, std::string>>;

// Reading headers and writing fields the way the library's own operations do, for external backends.
bool HasKey(const HeaderKeys& keys, const std::string& name);
const std::string& KeyValue(const HeaderKeys& keys, const std::string& name);  // throws qmx::Error naming it
// round, sat and the optional nan-sign, nan-fallback, subnormals, sr-bits, tininess keys.
CastOptions CastOptionsOf(const HeaderKeys& keys);
// An op=mx-block header: elem, rule, nan, scaling, block and the cast keys, validated (qmx::Error).
MxSpec MxSpecOf(const HeaderKeys& keys);
std::string Hex(uint64_t v, int digits);  // lowercase, exactly `digits` hex digits of v's low nibbles
// A run of `count` codes of `digits` hex digits each, as one field, element 0 first.
std::string JoinCodes(const uint8_t* codes, size_t count, int digits);

// A backend outside the library (the CUDA backend, gpu/): given a file's operation, its header keys (in
// file order, generator excluded) and its cases' input fields (hex text), it either fills outputs (one entry
// per case, the same output fields as the file, flags last; "--" where it computes no flags) and returns "",
// or returns why it cannot run the file, which Verify then reports as skipped.
using ExternalRunner = std::function<std::string(const std::string& op, const HeaderKeys& keys,
                                                 const std::vector<std::vector<std::string>>& inputs,
                                                 std::vector<std::vector<std::string>>& outputs)>;

struct VerifyOptions {
  Backend backend = Backend::kCpuSimd;
  ExternalRunner external;  // when set, it computes the outputs instead of `backend` (flags not checked)
  uint64_t max_errors = 20;  // stop after this many mismatches over the whole directory (0 = never)
  std::string only;          // replay only files whose path contains this text ("" = all)
  // Part `part` of `parts` (MPI ranks, job-array shards): the manifest's files k with k mod parts == part, every
  // one replayed (max_errors bounds only this part's `first` lists), strays listed by part 0 alone;
  // MergeVerifyParts turns the parts' results into the one-process results.
  uint64_t part = 0, parts = 1;
};

struct Mismatch {
  uint64_t line = 0;   // 1-based line number in the file
  std::string text;    // the case and what the backend produced, in hex
};

struct FileResult {
  uint64_t index = 0;  // the file's place in the manifest (a stray file: after the last)
  bool stray = false;  // a .txt file the manifest does not list
  std::string path;
  std::string op;
  uint64_t cases = 0;        // cases replayed
  uint64_t mismatches = 0;   // cases whose outputs (or flags, where checked) differ
  bool flags_checked = false;
  std::string skipped;              // why an external backend did not run the file ("" = it ran)
  std::vector<Mismatch> first;      // the first mismatches, up to the directory's max_errors
  std::vector<std::string> errors;  // file-level problems: hash, header, case count, malformed lines
  bool ok() const { return mismatches == 0 && errors.empty(); }  // a skipped file is ok
};

// Replays every file listed in dir/manifest.json. A file whose SHA-256, header or case count differs
// from the manifest is reported as an error (its cases are still replayed, so a changed expected value
// is named by line). Files on disk that the manifest does not list are reported as errors too. Throws
// qmx::Error when the manifest is missing or malformed.
std::vector<FileResult> Verify(const std::string& dir, const VerifyOptions& opt);
// The results of Verify's parts (any order) as Verify in one part gives them: files in manifest order, each
// `first` cut to what remains of max_errors, and no file after the one that exhausts it; the strays last.
std::vector<FileResult> MergeVerifyParts(std::vector<FileResult> all, uint64_t max_errors);

// ------------------------------------------------------------------ coverage
// The coverage model of golden vectors (golden/README.md "Coverage"): each operation's classes of cases for
// a file's options (for a conversion: zero and signed zero, subnormal, Inf and quiet / signalling NaN inputs;
// exact and rounded results, zero from a nonzero input, subnormal results, the smallest normal and the
// largest finite magnitude, overflow, Inf and NaN results, the saturated, underflow and invalid flags;
// inputs at a halfway point between two results, one source ulp from one, and a halfway point in every
// binade of the destination; for decoding, every kind of code), and how many of the file's cases fall in
// each. A case's classes come from its input and the reference routine, so the expected outputs are not
// needed. Operations without a model yet (mx-block, nvfp4-block, ue8m0, sr, gemm) come back with
// modelled = false.
struct CoverageClass {
  std::string name;         // e.g. "in:snan", "out:subnormal", "tie@-3", "underflow"
  std::string description;  // what a case of the class is
  uint64_t hits = 0;        // cases in the class (0: missed)
};
struct CoverageReport {
  std::string file;    // the golden file or log read
  std::string op;      // its operation
  std::string header;  // its "# op=..." line (the options the classes depend on)
  uint64_t cases = 0;
  bool modelled = true;
  std::vector<CoverageClass> classes;
};
// One report per golden file of `paths` (.txt files, or directories searched recursively for them, in
// path order). Throws qmx::Error for a path that is neither, an unreadable or malformed file.
std::vector<CoverageReport> Coverage(const std::vector<std::string>& paths);
// What a simulator ran: its log holds one case per line, the case's first input field in hex (0x optional;
// fewer digits are zero-extended; blank and '#' lines skipped; the rest of a line ignored), measured under
// the header of the golden file `like`.
CoverageReport CoverageOfLog(const std::string& like, const std::string& log_path);

}  // namespace qmx::golden
