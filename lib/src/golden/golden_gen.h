// golden_gen.h (internal): the case-building pieces the suite generators share (golden_gen.cc) and the
// generators GenerateSuite dispatches to, one file per group of suites: golden_gen_conversions.cc
// (conversions, ue8m0), golden_gen_blocks.cc (mx-block, nvfp4-block, sr), golden_gen_gemm.cc (gemm).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "golden/golden_internal.h"
#include "qmx/format.h"

namespace qmx::golden::detail {

// A source format (f32, f16, bf16) and its encoding of sign * 2^e * (1 + p / 2^m).
struct Src {
  std::string name;
  Format f;
  int m() const { return f.man_bits; }
  int EmaxField() const { return (1 << f.exp_bits) - 2; }
  int Emax() const { return EmaxField() - f.bias; }
  int Emin() const { return 1 - f.bias; }
  int Digits() const { return f.Bits() / 4; }
  // The code of (-1)^neg * 2^e * (1 + p / 2^m); below the normal range the subnormal code keeps the
  // pattern's top bits (shifted right by the distance to Emin).
  uint64_t Code(bool neg, int e, uint64_t p) const {
    const uint64_t sign = neg ? uint64_t{1} << (f.Bits() - 1) : 0;
    if (e >= Emin()) return sign | (static_cast<uint64_t>(e + f.bias) << m()) | p;
    const int shift = Emin() - e;
    return sign | (((uint64_t{1} << m()) | p) >> shift);
  }
  uint64_t Inf(bool neg) const { return (neg ? uint64_t{1} << (f.Bits() - 1) : 0) | (uint64_t(EmaxField() + 1) << m()); }
};

Src SrcByName(const std::string& n);

// Significand patterns over m bits: TestFloat's (zero, one, all ones, walking ones, runs) and the
// destination's rounding points at binade e (the midpoint, its neighbours, the odd-code tie).
std::vector<uint64_t> Patterns(int m, int kept, bool full, CaseRng& rng);

// Deduplicating list of codes in first-seen order.
class CodeList {
 public:
  void Add(uint64_t c) {
    if (seen_.insert(c).second) codes_.push_back(c);
  }
  const std::vector<uint64_t>& codes() const { return codes_; }

 private:
  std::set<uint64_t> seen_;
  std::vector<uint64_t> codes_;
};

// Source codes that exercise conversion into d: specials, the boundary table, random values.
std::vector<uint64_t> ConversionInputs(const Src& s, const Format& d, int level, CaseRng& rng);

// The MX element formats (UE8M0 scale rules and MX blocks are generated for each).
const std::vector<std::string>& MxElements();
// A random FP32 value with magnitude in [2^lo, 2^hi), random sign and significand.
float RandomValue(CaseRng& rng, int lo, int hi);

// The suites' generators (GenerateSuite).
void GenConversions(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
void GenUe8m0(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
void GenMxBlock(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
void GenNvfp4Block(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
void GenSr(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
void GenGemm(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
// The unit suite: a file per GenOptions::units entry, unit/NAME.txt (op=dot under the unit's own model).
void GenUnits(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);

// One GenOptions::units entry: "name=N a=FMT b=FMT k=K model=M [scale=ue8m0|e4m3|fp32 block=B]".
struct UnitSpec {
  std::string name, a, b, model, scale;
  size_t k = 0, block = 0;
};
// Parses and checks every entry (formats, model, k, block, file-safe and distinct names): qmx::Error
// naming the entry and the problem.
std::vector<UnitSpec> ParseUnits(const std::vector<std::string>& texts);

}  // namespace qmx::golden::detail
