// golden_coverage.cc: the coverage model of golden vectors (qmx/golden.h Coverage): for each file, the
// classes of cases its operation has and how many of the file's cases fall in each. A case's classes come
// from its input and from what the reference routine makes of it (round.h), so the model needs no outputs
// and a simulator's log of inputs is measured the same way.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "golden_internal.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/round.h"

namespace qmx::golden {
namespace {

using detail::Fields;
using detail::Header;

namespace fs = std::filesystem;

using Classes = detail::CoverageClasses;

const Format& SourceOf(const std::string& src) {
  if (src == "f32") return fmt::kFP32;
  if (src == "f16") return fmt::kFP16;
  if (src == "bf16") return fmt::kBF16;
  throw Error("coverage: unknown conversion source '" + src + "' (f32, f16, bf16)");
}


}  // namespace

namespace detail {

// Whether the exact value v >= 0 is a value of format s (one rounding toward zero is exact), and its code.
bool ExactCodeOf(const Format& s, double v, uint64_t* code) {
  ExactValue x;
  int e = 0;
  const double m = std::frexp(v, &e);
  x.kind = v == 0 ? ExactValue::Kind::kZero : ExactValue::Kind::kFinite;
  x.negative = false;
  x.sig = static_cast<uint64_t>(std::ldexp(m, 53));
  x.exp = e - 53;
  CastOptions rz;
  rz.rounding = Rounding::kRz;
  rz.saturation = Saturation::kSatFinite;
  const RoundResult r = RoundExact(x, s, rz);
  if (code) *code = r.code;
  return (r.flags & (kFlagInexact | kFlagSaturated)) == 0;
}

std::string BinadeLabel(const Format& d, double v) {
  const int e = static_cast<int>(std::floor(std::log2(v)));
  return e < d.Emin() ? "sub" : std::to_string(e);
}

std::vector<double> PositiveValues(const Format& d) {
  std::vector<double> values;
  for (uint64_t c = 0; c <= d.MaxFiniteCode(); ++c) {
    const double v = DecodeToDouble(d, c);
    if (std::isfinite(v) && v >= 0) values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

}  // namespace detail

namespace {

bool Representable(const Format& s, double v, uint64_t* code) { return detail::ExactCodeOf(s, v, code); }
using detail::BinadeLabel;

// The convert operation's classes for one file (src, dst and cast options), and each case's hits.
class ConvertModel {
 public:
  ConvertModel(const Format& s, const Format& d, const CastOptions& o)
      : s_(s), d_(d), o_(o), values_(detail::PositiveValues(d)) {
    // Midpoints of adjacent values (from 0 up), and whether the source can hold each: a tie class per
    // binade of the destination exists where one of its midpoints is a source value.
    for (size_t i = 0; i + 1 < values_.size(); ++i) {
      const double mid = values_[i] / 2 + values_[i + 1] / 2;
      if (Representable(s_, mid, nullptr)) tie_binades_.insert(BinadeLabel(d_, values_[i + 1]));
    }
    const bool ieee_src = s_.encoding == Encoding::kIeee;
    cls_.Add("in:zero", "+0");
    cls_.Add("in:neg-zero", "-0");
    if (s_.HasSubnormals()) cls_.Add("in:subnormal", "a subnormal input");
    cls_.Add("in:normal", "a normal input");
    if (s_.HasInf()) {
      cls_.Add("in:inf", "+Inf");
      cls_.Add("in:neg-inf", "-Inf");
    }
    if (ieee_src) {
      cls_.Add("in:qnan", "a quiet NaN");
      cls_.Add("in:snan", "a signalling NaN (quiet bit clear)");
    }
    // Which results and flags the file's options can produce at all, from the routine on probes: both
    // signs of the source's extremes (largest finite, smallest subnormal, Inf, a signalling NaN) and of the
    // destination's smallest normal, largest finite and smallest subnormal values where the source holds them.
    std::vector<uint64_t> probes;
    const uint64_t sign = uint64_t{1} << (s_.Bits() - 1);
    for (uint64_t sg : {uint64_t{0}, sign}) {
      probes.push_back(sg | s_.MaxFiniteCode());
      probes.push_back(sg | 1);
      if (s_.HasInf()) probes.push_back(sg | s_.PositiveInfCode());
      if (ieee_src) probes.push_back(sg | s_.PositiveInfCode() | 1);
      for (double v : {values_.back(), d_.IsInt() ? 0.0 : std::ldexp(1.0, d_.Emin()), values_.size() > 1 ? values_[1] : 0.0}) {
        uint64_t c = 0;
        if (v > 0 && Representable(s_, v, &c)) probes.push_back(sg | c);
      }
    }
    uint32_t any_flags = 0;
    bool can_zero = false, can_sub = false, can_inf = false, can_nan = false, can_max = false, can_min = false;
    const double min_normal = d_.IsInt() ? -1.0 : std::ldexp(1.0, d_.Emin());
    for (uint64_t b : probes) {
      const RoundResult r = Convert(s_, b, d_, o_);
      const double v = DecodeToDouble(d_, r.code);
      const ExactValue x = ReadExact(s_, b);
      const bool finite_in = x.kind == ExactValue::Kind::kFinite && x.sig != 0;
      any_flags |= r.flags;
      can_zero |= finite_in && v == 0;
      can_sub |= finite_in && std::isfinite(v) && v != 0 && ClassifyCode(d_, r.code) == CodeClass::kSubnormal;
      can_inf |= std::isinf(v);
      can_nan |= std::isnan(v);
      can_max |= finite_in && std::fabs(v) == values_.back();
      can_min |= finite_in && std::fabs(v) == min_normal;
    }
    cls_.Add("exact", "a finite nonzero result equal to its input");
    cls_.Add("inexact", "a rounded result");
    if (can_zero) cls_.Add("out:zero-from-nonzero", "a nonzero finite input rounded to zero");
    if (can_sub) cls_.Add("out:subnormal", "a subnormal result");
    if (can_min) cls_.Add("out:min-normal", "the smallest normal magnitude, from a nonzero input");
    if (can_max) cls_.Add("out:max", "the largest finite magnitude, from a finite input");
    if (any_flags & kFlagOverflow) cls_.Add("overflow", "the overflow flag: a rounded magnitude past the largest finite value");
    if (can_inf) cls_.Add("out:inf", "an infinite result");
    if (can_nan) cls_.Add("out:nan", "a NaN result");
    if (any_flags & kFlagSaturated) cls_.Add("saturated", "the saturated flag: clamped to the largest value");
    if (any_flags & kFlagUnderflow) cls_.Add("underflow", "the underflow flag");
    if (any_flags & kFlagInvalid) cls_.Add("invalid", "the invalid flag");
    cls_.Add("tie", "an input exactly halfway between two adjacent finite results");
    cls_.Add("near-tie", "an input one source ulp from such a halfway point");
    if (!d_.IsInt())
      for (const std::string& b : TieOrder())
        cls_.Add("tie@" + b, b == "sub" ? "a halfway point below the smallest normal" : "a halfway point in the binade 2^" + b);
  }

  void Case(uint64_t bits) {
    ExactValue x = ReadExact(s_, bits);
    const bool neg = x.negative;
    switch (x.kind) {
      case ExactValue::Kind::kZero:
        cls_.Hit(neg ? "in:neg-zero" : "in:zero");
        break;
      case ExactValue::Kind::kInf:
        cls_.Hit(neg ? "in:neg-inf" : "in:inf");
        break;
      case ExactValue::Kind::kNan:
        cls_.Hit(x.signaling ? "in:snan" : "in:qnan");
        break;
      case ExactValue::Kind::kFinite:
        cls_.Hit(ClassifyCode(s_, bits) == CodeClass::kSubnormal ? "in:subnormal" : "in:normal");
        break;
    }
    const RoundResult r = Convert(s_, bits, d_, o_);
    const double out = DecodeToDouble(d_, r.code);
    const bool finite_in = x.kind == ExactValue::Kind::kFinite && x.sig != 0;
    if (r.flags & kFlagInexact) cls_.Hit("inexact");
    else if (finite_in && std::isfinite(out)) cls_.Hit("exact");
    if (r.flags & kFlagOverflow) cls_.Hit("overflow");
    if (r.flags & kFlagSaturated) cls_.Hit("saturated");
    if (r.flags & kFlagUnderflow) cls_.Hit("underflow");
    if (r.flags & kFlagInvalid) cls_.Hit("invalid");
    if (std::isnan(out)) cls_.Hit("out:nan");
    if (std::isinf(out)) cls_.Hit("out:inf");
    if (finite_in && std::isfinite(out)) {
      const double a = std::fabs(out);
      if (a == 0) cls_.Hit("out:zero-from-nonzero");
      else if (d_.HasSubnormals() && ClassifyCode(d_, r.code) == CodeClass::kSubnormal) cls_.Hit("out:subnormal");
      if (!d_.IsInt() && a == std::ldexp(1.0, d_.Emin())) cls_.Hit("out:min-normal");  // (a > 0 here)
      if (a == values_.back()) cls_.Hit("out:max");
      Ties(std::fabs(DecodeToDouble(s_, bits)));
    }
  }

  std::vector<CoverageClass> Take() { return cls_.Take(); }
  const std::vector<CoverageClass>& List() const { return cls_.List(); }

 private:
  // The tie classes' binades, smallest first ("sub" before the normal binades).
  std::vector<std::string> TieOrder() const {
    std::vector<std::string> order;
    if (tie_binades_.count("sub")) order.push_back("sub");
    std::vector<int> es;
    for (const std::string& b : tie_binades_)
      if (b != "sub") es.push_back(std::stoi(b));
    std::sort(es.begin(), es.end());
    for (int e : es) order.push_back(std::to_string(e));
    return order;
  }

  // |x|'s place among the destination's values: a halfway point, or one source ulp from one.
  void Ties(double a) {
    if (a >= values_.back()) return;
    const auto it = std::upper_bound(values_.begin(), values_.end(), a);  // the first value above a
    if (it == values_.begin()) return;  // below the smallest value of a format without zero: no halfway point
    const double hi = *it, lo = *(it - 1);
    const double mid = lo / 2 + hi / 2;
    uint64_t code = 0;
    if (!Representable(s_, mid, &code)) return;
    if (a == mid) {
      cls_.Hit("tie");
      cls_.Hit("tie@" + BinadeLabel(d_, hi));
      return;
    }
    // The source values next to mid (positive codes are ordered like their values).
    const double up = DecodeToDouble(s_, code + 1), down = code > 0 ? DecodeToDouble(s_, code - 1) : -1;
    if (a == up || a == down) cls_.Hit("near-tie");
  }

  const Format s_, d_;
  const CastOptions o_;
  std::vector<double> values_;
  std::set<std::string> tie_binades_;
  Classes cls_;
};

}  // namespace

namespace detail {

// golden gen --min-per-class: inputs to add to a conversion file's `inputs` so that each class of its model
// holds n cases, from a fixed list of candidates in a fixed order (so the same options give the same bytes):
// both signs of every destination value and halfway point the source holds and of their source neighbours,
// then the source's extremes and NaN payloads. A candidate is taken when it falls in a class still short.
std::vector<uint64_t> TopUpConversion(const Format& s, const Format& d, const CastOptions& o,
                                      const std::vector<uint64_t>& inputs, uint64_t n) {
  ConvertModel have(s, d, o), probe(s, d, o);
  std::set<uint64_t> seen(inputs.begin(), inputs.end());
  for (uint64_t x : inputs) have.Case(x);
  std::vector<uint64_t> counts;
  for (const auto& c : have.List()) counts.push_back(c.hits);
  const uint64_t sign = uint64_t{1} << (s.Bits() - 1);
  std::vector<uint64_t> candidates;
  const std::vector<double> values = PositiveValues(d);
  const auto with_neighbours = [&](double v) {
    uint64_t code = 0;
    if (!ExactCodeOf(s, v, &code)) return;
    for (uint64_t c : {code, code + 1, code > 0 ? code - 1 : code})
      for (uint64_t sg : {uint64_t{0}, sign}) candidates.push_back(c | sg);
  };
  for (size_t i = 0; i < values.size(); ++i) {
    with_neighbours(values[i]);
    if (i + 1 < values.size()) with_neighbours(values[i] / 2 + values[i + 1] / 2);
  }
  const uint64_t inf = s.HasInf() ? s.PositiveInfCode() : 0;
  for (uint64_t sg : {uint64_t{0}, sign}) {
    for (uint64_t c : {uint64_t{0}, uint64_t{1}, uint64_t{2}, s.MaxFiniteCode(), s.MaxFiniteCode() - 1, inf})
      candidates.push_back(c | sg);
    if (s.encoding == Encoding::kIeee)
      for (uint64_t payload = 1; payload <= 8; ++payload) {
        candidates.push_back(inf | payload | sg);                                  // signalling
        candidates.push_back(inf | (uint64_t{1} << (s.man_bits - 1)) | payload | sg);  // quiet
      }
  }
  std::vector<uint64_t> added;
  for (uint64_t c : candidates) {
    if (!seen.insert(c).second) continue;
    std::vector<uint64_t> before;
    for (const auto& k : probe.List()) before.push_back(k.hits);
    probe.Case(c);
    const auto& after = probe.List();
    bool useful = false;
    for (size_t k = 0; k < after.size(); ++k) useful |= after[k].hits > before[k] && counts[k] < n;
    if (!useful) continue;
    for (size_t k = 0; k < after.size(); ++k) counts[k] += after[k].hits - before[k];
    added.push_back(c);
  }
  return added;
}

}  // namespace detail

namespace {

// The decode operation's classes: each kind of code the format has.
class DecodeModel {
 public:
  explicit DecodeModel(const Format& f) : f_(f) {
    if (f.HasZero()) cls_.Add("zero", "+0");
    if (f.HasNegativeZero()) cls_.Add("neg-zero", "-0");
    if (f.HasSubnormals()) cls_.Add("subnormal", "a subnormal code");
    if (!f.IsInt()) cls_.Add("min-normal", "the smallest normal magnitude");
    cls_.Add("normal", "a normal code");
    cls_.Add("max", "the largest finite magnitude");
    if (f.HasInf()) cls_.Add("inf", "an infinity");
    if (f.HasNan()) cls_.Add("nan", "a NaN code");
    max_ = DecodeToDouble(f, f.MaxFiniteCode());
  }
  void Case(uint64_t code) {
    const double v = DecodeToDouble(f_, code);
    if (std::isnan(v)) return cls_.Hit("nan");
    if (std::isinf(v)) return cls_.Hit("inf");
    if (v == 0) return cls_.Hit(std::signbit(v) ? "neg-zero" : "zero");
    const CodeClass c = ClassifyCode(f_, code);
    cls_.Hit(c == CodeClass::kSubnormal ? "subnormal" : "normal");
    if (!f_.IsInt() && std::fabs(v) == std::ldexp(1.0, f_.Emin())) cls_.Hit("min-normal");
    if (std::fabs(v) == max_) cls_.Hit("max");
  }
  std::vector<CoverageClass> Take() { return cls_.Take(); }

 private:
  const Format f_;
  double max_ = 0;
  Classes cls_;
};

// The report of one file's header over its cases' input fields (each case checked as the operation
// checks it, so a malformed log line is named rather than misread).
CoverageReport Measure(const Header& h, const std::vector<Fields>& cases, const std::string& name) {
  CoverageReport rep;
  rep.op = h.op;
  rep.file = name;
  rep.cases = cases.size();
  rep.header = h.Line();
  // A conversion's or decoding's input: hex of at most the input's width (a log may drop leading zeros).
  const auto parse = [&](const std::string& field, int bits) {
    uint64_t v = 0;
    const int digits = static_cast<int>(field.size());
    if (digits == 0 || digits > 16 || !detail::ParseHex(field, digits, v) || (bits < 64 && (v >> bits) != 0))
      throw Error(name + ": '" + field + "' is not a " + std::to_string(bits) + "-bit hex input");
    return v;
  };
  if (h.op == "convert") {
    const Format& s = SourceOf(h.Get("src"));
    ConvertModel m(s, ParseFormat(h.Get("dst")), CastOptionsOf(h.keys));
    for (const Fields& c : cases) m.Case(parse(c[0], s.Bits()));
    rep.classes = m.Take();
  } else if (h.op == "decode") {
    const Format f = ParseFormat(h.Get("fmt"));
    DecodeModel m(f);
    for (const Fields& c : cases) m.Case(parse(c[0], f.Bits()));
    rep.classes = m.Take();
  } else {
    const std::unique_ptr<detail::Op> op = detail::MakeOp(h);
    for (size_t i = 0; i < cases.size(); ++i) {
      std::string why = cases[i].size() != op->InputFields()
                            ? "has " + std::to_string(cases[i].size()) + " input fields, not " + std::to_string(op->InputFields())
                            : op->CheckInputs(cases[i]);
      if (!why.empty()) throw Error(name + ": case " + std::to_string(i + 1) + ": " + why);
    }
    rep.modelled = detail::MeasureOperation(h, cases, rep.classes);
  }
  return rep;
}

// How many input fields a case of the header's operation has (its outputs follow them on a line).
size_t InputCount(const Header& h) {
  return h.op == "convert" || h.op == "decode" ? 1 : detail::MakeOp(h)->InputFields();
}

// A golden file's header and its cases' input fields.
void ReadGolden(const std::string& path, Header& h, std::vector<Fields>& cases) {
  std::ifstream in(path);
  if (!in) throw Error("coverage: cannot read " + path);
  std::string line;
  bool have_header = false;
  size_t inputs = 1;
  while (std::getline(in, line)) {
    if (line.rfind("# op=", 0) == 0) {
      h = Header::Parse(line);
      have_header = true;
      inputs = InputCount(h);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    if (!have_header) throw Error("coverage: " + path + ": a case before the '# op=' header");
    std::istringstream ls(line);
    Fields f;
    std::string t;
    while (f.size() < inputs && ls >> t) f.push_back(t);
    if (!f.empty()) cases.push_back(std::move(f));
  }
  if (!have_header) throw Error("coverage: " + path + " has no '# op=' header line (not a golden file)");
}

}  // namespace

std::vector<CoverageReport> Coverage(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".txt") found.push_back(e.path().string());
      if (found.empty()) throw Error("coverage: " + p + " holds no .txt golden files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw Error("coverage: " + p + " is neither a golden file nor a directory");
    }
  }
  std::vector<CoverageReport> out;
  for (const std::string& f : files) {
    Header h;
    std::vector<Fields> cases;
    ReadGolden(f, h, cases);
    out.push_back(Measure(h, cases, f));
  }
  return out;
}

CoverageReport CoverageOfLog(const std::string& like_file, const std::string& log_path) {
  Header h;
  std::vector<Fields> unused;
  ReadGolden(like_file, h, unused);
  std::ifstream in(log_path);
  if (!in) throw Error("coverage: cannot read the log " + log_path);
  std::vector<Fields> cases;
  std::string line;
  const size_t inputs = InputCount(h);  // a line may go on with the outputs the simulator saw
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    Fields f;
    std::string t;
    while (f.size() < inputs && ls >> t) {
      if (t[0] == '#') break;  // a comment to the end of the line
      if (t.rfind("0x", 0) == 0 || t.rfind("0X", 0) == 0) t = t.substr(2);
      f.push_back(t);
    }
    if (!f.empty()) cases.push_back(std::move(f));  // blank and comment lines hold none
  }
  return Measure(h, cases, log_path);
}

}  // namespace qmx::golden
