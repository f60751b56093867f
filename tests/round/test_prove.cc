// test_prove.cc: the exhaustive-proof engine of `qmx-sim prove` (qmx/prove.h) on small ranges: every mode
// agrees with the SIMD path and the table oracle, parts merge into the whole's bytes, the JSON reads back,
// and bad jobs and merges fail with their reason.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/prove.h"

namespace prove_test {

using namespace qmx;

ProveJob SmallJob() {
  ProveJob job;
  job.formats = {"e4m3", "e2m1", "e4m3fnuz"};
  job.roundings = {Rounding::kRne, Rounding::kRz, Rounding::kSrA};
  job.saturations = {Saturation::kSatFinite, Saturation::kNoSat};
  // Around 1.0 and 448 (e4m3's largest) and a slice of the negative subnormals.
  job.first = 0x3F700000u;
  job.count = 0x00300000u;
  return job;
}

TEST_CASE("prove: a small range agrees on every mode, and its modes are the defined ones", "[round][prove]") {
  const ProveJob job = SmallJob();
  uint64_t calls = 0;
  const ProveResult r = Prove(job, job.first, job.count, [&](uint64_t done, uint64_t total) {
    ++calls;
    CHECK(done <= total);
  });
  CHECK(r.Mismatches() == 0);
  // nosat is not defined into e2m1: 3 roundings x (2 + 1 + 2) saturations.
  CHECK(r.modes.size() == 15);
  CHECK(calls == r.modes.size());
  for (const ProveMode& m : r.modes) {
    INFO(m.format << " " << RoundingName(m.rounding) << " " << SaturationName(m.saturation));
    CHECK(m.inputs == job.count);
    CHECK(m.oracle);
    CHECK(m.fast_first.empty());
  }
}

TEST_CASE("prove: parts merge into the whole, byte for byte, and the JSON reads back", "[round][prove]") {
  ProveJob job = SmallJob();
  job.formats = {"e5m2", "e2m3"};
  job.first = 0xC3000000u;
  job.count = 0x00123457u;  // not a multiple of the chunk or of the part count
  const std::string whole = ProveToJson(Prove(job, job.first, job.count));
  for (uint64_t n : {2u, 3u, 7u}) {
    std::vector<ProveResult> parts;
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t f = 0, c = 0;
      ProvePart(job.first, job.count, i, n, f, c);
      parts.push_back(Prove(job, f, c));
    }
    CHECK(ProveToJson(MergeProofs(parts, true)) == whole);
    // Out of order, or one missing: refused with the reason.
    std::vector<ProveResult> swapped = parts;
    std::swap(swapped[0], swapped[1]);
    CHECK_THROWS_WITH(MergeProofs(swapped, true), Catch::Contains("starts at input"));
    std::vector<ProveResult> short_set(parts.begin(), parts.end() - 1);
    CHECK_THROWS_WITH(MergeProofs(short_set, true), Catch::Contains("not the job's"));
    CHECK_NOTHROW(MergeProofs(short_set, false));
  }
  const ProveResult back = ProveFromJson(whole);
  CHECK(ProveToJson(back) == whole);
}

TEST_CASE("prove: mismatches round-trip through JSON and a damaged file is named", "[round][prove]") {
  ProveJob job = SmallJob();
  job.formats = {"e4m3"};
  job.roundings = {Rounding::kRne};
  job.saturations = {Saturation::kSatFinite};
  ProveResult r = Prove(job, job.first, 1024);
  r.modes[0].fast_mismatches = 2;
  r.modes[0].fast_first = {{0x3F700001u, 0x38, 0x39}, {0x3F700005u, 0x38, 0x37}};
  const std::string text = ProveToJson(r);
  CHECK(text.find("\"0x3f700005\"") != std::string::npos);
  const ProveResult back = ProveFromJson(text);
  CHECK(back.Mismatches() == 2);
  CHECK(back.modes[0].fast_first.size() == 2);
  CHECK(back.modes[0].fast_first[1].other == 0x37);
  std::string bad = text;
  bad.replace(bad.find("\"mismatches\": 2"), 15, "\"mismatches\": 3");
  CHECK_THROWS_WITH(ProveFromJson(bad), Catch::Contains("not the sum"));
  CHECK_THROWS_WITH(ProveFromJson("{"), Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(ProveFromJson("{}"), Catch::Contains("prove result"));
}

TEST_CASE("prove: jobs and parts are validated with their reasons", "[round][prove]") {
  ProveJob job = SmallJob();
  job.formats = {"fp16"};
  CHECK_THROWS_WITH(ValidateProveJob(job), Catch::Contains("8 bits or fewer"));
  job = SmallJob();
  job.first = 0xFFFFFFFFu;
  job.count = 2;
  CHECK_THROWS_WITH(ValidateProveJob(job), Catch::Contains("passes 2^32"));
  job = SmallJob();
  job.formats = {"e2m1"};
  job.saturations = {Saturation::kNoSat};
  CHECK_THROWS_WITH(ValidateProveJob(job), Catch::Contains("none of the rounding and saturation modes"));
  uint64_t f = 0, c = 0;
  CHECK_THROWS_WITH(ProvePart(0, 10, 3, 3, f, c), Catch::Contains("does not exist"));
  ProvePart(0, uint64_t{1} << 32, 15, 16, f, c);
  CHECK(f == 0xF0000000u);
  CHECK(c == 0x10000000u);
  job = SmallJob();
  CHECK_THROWS_WITH(Prove(job, job.first - 1, 10), Catch::Contains("outside the job's"));
}

}  // namespace prove_test
