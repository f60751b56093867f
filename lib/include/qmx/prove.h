// qmx/prove.h: exhaustive proofs of the FP32 -> format conversions outside the test suite (`qmx-sim
// prove`): every FP32 input of a range (all 2^32 by default) through the library's fast path
// (ConvertToCodes, the SIMD dispatcher), the scalar reference routine (qmx::Convert) and the independent
// table oracle (a search of the decoded values, lib/src/round/naive_round.h), for each format and each
// valid rounding and saturation mode. A proof splits into parts by input range; MergeProofs of the parts,
// in range order, equals the proof of the whole, and so does its JSON, byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/format.h"

namespace qmx {

struct ProveJob {
  std::vector<std::string> formats;          // registry names (or any spelling ParseFormat reads)
  std::vector<Rounding> roundings;           // modes a format does not define are left out of it
  std::vector<Saturation> saturations;
  uint64_t first = 0, count = uint64_t{1} << 32;  // inputs first .. first + count - 1 (FP32 bit patterns)
  uint64_t seed = 0x5EED5EEDull;            // stochastic rounding: input u draws RandomBitsForElement(seed, u)
};
// Throws qmx::Error naming the problem: an unknown or wider-than-8-bit format, no mode, a range past 2^32.
void ValidateProveJob(const ProveJob& job);

// One (format, rounding, saturation) over a range: how many inputs, and where the fast path or the oracle
// differs from the reference (the first kMaxShown of each, ascending by input).
struct ProveMismatch {
  uint32_t input = 0;
  uint32_t reference = 0, other = 0;  // the codes
};
struct ProveMode {
  std::string format;
  Rounding rounding = Rounding::kRne;
  Saturation saturation = Saturation::kSatFinite;
  bool oracle = true;  // compared with the table oracle (false: its subnormal rule is not the oracle's)
  uint64_t inputs = 0, fast_mismatches = 0, oracle_mismatches = 0;
  std::vector<ProveMismatch> fast_first, oracle_first;
  static constexpr size_t kMaxShown = 10;
};
struct ProveResult {
  ProveJob job;
  uint64_t first = 0, count = 0;  // the range this result covers
  std::vector<ProveMode> modes;
  uint64_t Mismatches() const;
};

// The modes of a job, in order: for each format, each rounding, each saturation, where defined.
std::vector<ProveMode> ProveModes(const ProveJob& job);
// The proof over inputs first .. first + count - 1 (a part of the job's range). progress(done, total) is
// called from the calling thread after each mode (may be empty). OpenMP threads share the range; the result
// does not depend on their count.
ProveResult Prove(const ProveJob& job, uint64_t first, uint64_t count,
                  const std::function<void(uint64_t, uint64_t)>& progress = {});
// Consecutive parts of one job (each starting where the previous ends) into one result. Throws qmx::Error
// when they are not of one job, not consecutive, or do not cover the job's range when `whole` is true.
ProveResult MergeProofs(const std::vector<ProveResult>& parts, bool whole);
// Part i of n of [first, first + count): [first + count * i / n, first + count * (i + 1) / n).
void ProvePart(uint64_t first, uint64_t count, uint64_t i, uint64_t n, uint64_t& part_first, uint64_t& part_count);

// JSON: the job, the range and the modes with their counts and first mismatches (no timing, so equal proofs
// give equal bytes). ProveFromJson reads it back (qmx::Error naming what is wrong).
std::string ProveToJson(const ProveResult& r);
ProveResult ProveFromJson(const std::string& text);

}  // namespace qmx
