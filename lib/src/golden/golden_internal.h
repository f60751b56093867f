// golden_internal.h: the pieces shared by the golden generators (golden_gen*.cc), the operations
// (golden_ops.cc) and the file/manifest layer (golden.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "float_bits.h"
#include "qmx/golden.h"

namespace qmx::golden::detail {

inline constexpr const char* kMagic = "# qmx-golden v1";

// The "# op=NAME key=value ... generator=qmx-sim VERSION" line. generator is always last and may hold
// a space; every other value is one token.
struct Header {
  std::string op;
  HeaderKeys keys;  // in file order, generator excluded
  std::string generator;

  Header& Set(const std::string& k, const std::string& v);
  bool Has(const std::string& k) const;
  const std::string& Get(const std::string& k) const;  // throws qmx::Error naming the missing key
  std::string Line() const;
  static Header Parse(const std::string& line);  // throws qmx::Error on a malformed line
};

using Fields = std::vector<std::string>;

// One operation: how many hex fields a case line has and how a backend computes the outputs.
class Op {
 public:
  virtual ~Op() = default;
  virtual size_t InputFields() const = 0;
  virtual size_t OutputFields() const = 0;  // the last output field is the flags
  virtual std::string FieldsComment() const = 0;  // "# fields: ..." documenting each field
  // Checks each case's inputs (widths, values the operation accepts): returns "" or the problem.
  virtual std::string CheckInputs(const Fields& in) const = 0;
  // outs[i] receives case i's output fields. cpu-simd writes "--" for flags it cannot compute.
  virtual void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const = 0;
};
// The operation a header describes; throws qmx::Error for an unknown op or bad option values.
std::unique_ptr<Op> MakeOp(const Header& h);

// Parses exactly `digits` hex digits; false when the text is anything else.
bool ParseHex(const std::string& s, int digits, uint64_t& v);
using qmx::detail::F32Bits;
using qmx::detail::F32FromBits;

// Deterministic random numbers for case generation: Philox words keyed by the run's seed and the file.
class CaseRng {
 public:
  CaseRng(uint64_t seed, const std::string& stream);
  uint32_t Next();
  uint64_t Below(uint64_t n);  // uniform in [0, n), n >= 1
 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// A file a suite generator plans: its path under the directory, header and case inputs. The outputs
// come from the cpu-ref backend when the file is written.
struct PlannedFile {
  std::string path;
  Header header;
  std::vector<Fields> inputs;
  // Outputs measured on hardware (the first output field of each case), or empty. Generate refuses to
  // write the file unless the cpu-ref backend reproduces every one.
  std::vector<std::string> observed;
};
// Emits the suite's files in a fixed order (golden_gen.cc, golden_gen_*.cc). Throws qmx::Error for an unknown suite.
void GenerateSuite(const std::string& suite, const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit);
// golden gen --min-per-class for the operations with a coverage model in MeasureOperation (ue8m0, mx-block,
// nvfp4-block, sr, dot; conversion files top themselves up): adds cases to each file until every class of
// its model holds opt.min_per_class, or the candidates run out. The candidates are the same file's cases from
// the suite generated again under derived seeds (up to kTopUpRounds rounds, in order; a file stops after four
// rounds that add nothing), each taken when it adds a hit to a class still short; files of hardware-measured
// outputs are left as they are. Classes only fixed cases reach (the all-zero block: every seed draws the same)
// stay short. The same options give the same cases.
constexpr int kTopUpRounds = 64;
void TopUpFiles(const std::string& suite, const GenOptions& opt, std::vector<PlannedFile>& files);

// The coverage model's helpers (golden_coverage.cc), which the conversion generator targets too: whether the
// exact value v >= 0 is a value of f (and its code), f's distinct non-negative finite values ascending, and
// the label of the binade of f a positive magnitude lies in ("sub" below the smallest normal, else its
// exponent).
bool ExactCodeOf(const Format& f, double v, uint64_t* code);
std::vector<double> PositiveValues(const Format& f);
std::string BinadeLabel(const Format& f, double v);
// GenOptions::min_per_class for one conversion file: the inputs to add (golden_coverage.cc).
std::vector<uint64_t> TopUpConversion(const Format& s, const Format& d, const CastOptions& o,
                                      const std::vector<uint64_t>& inputs, uint64_t n);

// A coverage report's class list, built once (name, description), with hits counted by name.
class CoverageClasses {
 public:
  void Add(const std::string& name, const std::string& what) {
    if (index_.count(name)) return;
    index_[name] = list_.size();
    list_.push_back({name, what, 0});
  }
  void Hit(const std::string& name) {
    const auto it = index_.find(name);
    if (it != index_.end()) ++list_[it->second].hits;
  }
  std::vector<CoverageClass> Take() { return std::move(list_); }
  const std::vector<CoverageClass>& List() const { return list_; }

 private:
  std::vector<CoverageClass> list_;
  std::map<std::string, size_t> index_;
};

// A format of 8 bits or fewer (a registry name, an alias such as float8_e4m3, or a user format), the element
// formats the operations take; throws qmx::Error naming it otherwise (golden_ops.cc).
Format ElementFormat(const std::string& name);

// op=sr layout=ptx-cvt-rs-x4: the shift of element j's random byte in rbits, for a destination of `bits` bits
// (golden_ops.cc SrOp).
int SrRbitsShift(int bits, size_t j);

// Stochastic rounding's threshold for an FP32 input (bits) into dst under cast: the smallest random bits in
// [0, top] that give the code the largest (top) gives, or 0 where every draw gives one code (the draw is
// monotone in the bits; golden_coverage_ops.cc). The sr generator adds it and the bits below it; the
// coverage model's r:threshold class is it.
uint32_t SrThreshold(uint32_t x_bits, const Format& dst, const CastOptions& cast, uint32_t top);

// The coverage models of the ue8m0, mx-block, nvfp4-block, sr and dot operations (golden_coverage_ops.cc):
// the classes of the file `h` describes and the hits of its cases (each case's input fields). False for an
// operation without a model here.
bool MeasureOperation(const Header& h, const std::vector<Fields>& cases, std::vector<CoverageClass>& classes);

}  // namespace qmx::golden::detail
