// golden_gen.cc: the suites, GenerateSuite, and the case building their generators (golden_gen_*.cc) share,
// after TestFloat (docs/REFERENCES.md section 6): boundary exponent tables around the destination's range crossed
// with significand patterns (zero, one, all ones, walking ones, runs, and the destination's midpoints),
// specials, and seeded random cases. Level 1 takes a small, seeded selection; level 2 the full cross products.
#include "golden/golden_gen.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "qmx/error.h"
#include "qmx/format.h"

namespace qmx::golden {

const std::vector<SuiteInfo>& Suites() {
  static const std::vector<SuiteInfo> kSuites = {
      {"conversions",
       "FP32, FP16 and BF16 to every registry format of 8 bits or fewer (e4m3 e5m2 e3m2 e2m3 e2m1 int8 ue8m0 e4m3fnuz "
       "e5m2fnuz e4m3b11fnuz) under "
       "every rounding (rne rna rz ru rd ro) and saturation mode the format takes: conversions/SRC_DST_ROUND_SAT.txt; "
       "f32 variants with nan-sign=positive, subnormals=flush, nan-fallback=zero, tininess=after (the underflow "
       "flag's tininess detected after rounding) and RISC-V's canonical NaN in e5m2 (nan-sign=positive "
       "nan-payload=quiet) (..._nanpos, _flush, _nan0, _tinyafter, _nanriscv); "
       "decoding of every code: conversions/decode_FMT.txt. --exhaustive: every FP16/BF16 input."},
      {"ue8m0",
       "amax (FP32) -> UE8M0 scale byte under each scale rule (ocp-floor round-up ceil even max-finite) for each MX "
       "element format: ue8m0/ELEM_RULE.txt. Exponents around 2^-127 and 2^127, destmax * 2^k and its neighbours, "
       "the elements' rounding midpoints."},
      {"mx-block",
       "32 FP32 values -> UE8M0 scale + 32 element codes for each MX element format, UE8M0 scale rule and NaN policy "
       "(exact element scaling): mx-block/ELEM_RULE_POLICY.txt; and microxcaling's, torchao RCEIL's and Transformer "
       "Engine's FP32 element scalings: mx-block/ELEM_RULE_POLICY_SCALING.txt. Edge blocks: zeros, amax a power of two, amax at and around destmax * 2^k, the "
       "block that separates round-down from round-up, amax below 2^-127 * destmax, FLT_MAX, NaN and Inf inside, "
       "element midpoints; then random blocks."},
      {"nvfp4-block",
       "FP32 tensor amax + 16 FP32 values -> tensor decode scale, E4M3 block scale and 16 E2M1 codes in Transformer "
       "Engine's order of operations (nvfp4) and its older divide-first order (nvfp4-div): nvfp4-block/e2m1_RULE.txt."},
      {"sr",
       "Stochastic rounding with explicit random bits, N = 8, as PTX cvt.rs.satfinite.{e4m3x4,e5m2x4,e2m3x4,e3m2x4,"
       "e2m1x4}.f32 consumes them: four FP32 inputs, the 32-bit rbits operand, the packed result, sr/DST_sr-a.txt "
       "(golden/README.md documents the byte order); and one input with its R per line for SR-A with N = 4 and 16, "
       "SR-B and SR-C with N = 8: sr/DST_MODE_nN.txt."},
      {"gemm",
       "Block dot products (codes, block scales, C) -> D under each accumulation model: MXFP8, MXFP6, MXFP4, NVFP4, "
       "plain FP8 and Hopper blockwise FP8, gemm/CONFIG_MODEL.txt; and the Hopper outputs observed on an H200 "
       "(golden/gemm-hopper), gemm/hopper_CASE_slow|fast.txt."},
  };
  return kSuites;
}

namespace detail {
namespace {

// ------------------------------------------------------------------ significands and exponents

// Exponent of the smallest nonzero magnitude of a destination format.
int LowestExp(const Format& d) {
  if (d.IsInt()) return -d.man_bits;
  if (d.encoding == Encoding::kExponentOnly) return d.Emin();
  return d.Emin() - d.man_bits;
}
int HighestExp(const Format& d) { return Limits(d).emax; }

// Fraction bits the destination keeps at binade 2^e (negative: below half its smallest quantum).
int KeptBits(const Format& d, int e) {
  if (d.encoding == Encoding::kExponentOnly) return 0;
  if (d.IsInt()) return e + d.man_bits;
  return e - std::max(e - d.man_bits, d.Emin() - d.man_bits);
}

}  // namespace

Src SrcByName(const std::string& n) {
  if (n == "f32") return {n, fmt::kFP32};
  if (n == "f16") return {n, fmt::kFP16};
  return {"bf16", fmt::kBF16};
}

// Significand patterns over m bits: TestFloat's (zero, one, all ones, walking ones, runs) and the
// destination's rounding points at binade e (the midpoint, its neighbours, the odd-code tie).
std::vector<uint64_t> Patterns(int m, int kept, bool full, CaseRng& rng) {
  const uint64_t all = (uint64_t{1} << m) - 1;
  std::vector<uint64_t> p = {0, 1, all};
  const int pos = m - kept - 1;  // the bit worth half a destination ulp
  if (pos >= 0 && pos < m) {
    const uint64_t half = uint64_t{1} << pos;
    p.insert(p.end(), {half, half - 1, half + 1});
    if (pos + 1 < m) p.insert(p.end(), {(half << 1) | half, (half << 1) | (half - 1), (half << 1) | (half + 1)});
  }
  if (full) {
    for (int j = 0; j < m; ++j) {
      p.push_back(uint64_t{1} << j);          // walking one
      p.push_back(all ^ ((uint64_t{1} << j) - 1));  // run of ones from the top
      p.push_back((uint64_t{1} << j) - 1);    // run of ones from the bottom
    }
  } else {
    p.push_back(uint64_t{1} << rng.Below(m));
    p.push_back(all ^ ((uint64_t{1} << rng.Below(m)) - 1));
    p.push_back(rng.Below(uint64_t{1} << m));
  }
  return p;
}

// Source codes that exercise conversion into d: specials, the boundary table, random values.
std::vector<uint64_t> ConversionInputs(const Src& s, const Format& d, int level, CaseRng& rng) {
  CodeList out;
  const int m = s.m();
  const uint64_t sign = uint64_t{1} << (s.f.Bits() - 1), all = (uint64_t{1} << m) - 1;
  for (bool neg : {false, true}) {
    const uint64_t sg = neg ? sign : 0;
    out.Add(sg);                                       // zero
    out.Add(s.Inf(neg));                               // infinity
    out.Add(s.Inf(neg) | (uint64_t{1} << (m - 1)));    // quiet NaN
    out.Add(s.Inf(neg) | 1);                           // signalling NaN
    out.Add(s.Inf(neg) | all);                         // NaN, every payload bit
    out.Add(s.Code(neg, s.Emax(), all));               // largest finite
    out.Add(s.Code(neg, s.Emin(), 0));                 // smallest normal
    out.Add(sg | 1);                                   // smallest subnormal
    out.Add(sg | all);                                 // largest subnormal
  }
  const int lo = std::max(LowestExp(d) - 3, s.Emin() - m), hi = std::min(HighestExp(d) + 2, s.Emax());
  for (int e = lo; e <= hi; ++e) {
    for (uint64_t p : Patterns(m, KeptBits(d, e), level >= 2, rng)) {
      if (e < s.Emin() && p != 0 && level < 2) continue;  // below the source's normals: patterns collapse
      if (level >= 2) {
        out.Add(s.Code(false, e, p));
        out.Add(s.Code(true, e, p));
      } else {
        out.Add(s.Code(rng.Below(2) == 1, e, p));
      }
    }
  }
  const int n_range = level >= 2 ? 4000 : 24, n_any = level >= 2 ? 1000 : 8;
  for (int i = 0; i < n_range; ++i)
    out.Add(s.Code(rng.Below(2) == 1, lo + static_cast<int>(rng.Below(hi - lo + 1)), rng.Below(uint64_t{1} << m)));
  for (int i = 0; i < n_any; ++i) out.Add(rng.Below(uint64_t{1} << s.f.Bits()));
  // What the coverage model counts (golden coverage) and the cases above can miss: a halfway point between
  // two adjacent values in every binade of d, and d's largest finite and smallest normal values, where the
  // source holds them; each with a random sign (positive into an unsigned format).
  const std::vector<double> values = PositiveValues(d);
  std::set<std::string> binades;
  std::vector<double> targets;
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const double mid = values[i] / 2 + values[i + 1] / 2;
    if (binades.insert(BinadeLabel(d, values[i + 1])).second) targets.push_back(mid);
  }
  targets.push_back(values.back());
  if (!d.IsInt()) targets.push_back(std::ldexp(1.0, d.Emin()));
  for (double v : targets) {
    uint64_t code = 0;
    if (ExactCodeOf(s.f, v, &code)) out.Add(code | (d.is_signed && rng.Below(2) == 1 ? sign : 0));
  }
  return out.codes();
}

const std::vector<std::string>& MxElements() {
  static const std::vector<std::string> k = {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8"};
  return k;
}

// A random FP32 value with magnitude in [2^lo, 2^hi), random sign and significand.
float RandomValue(CaseRng& rng, int lo, int hi) {
  const int e = lo + static_cast<int>(rng.Below(hi - lo));
  const float sig = 1.0f + static_cast<float>(rng.Below(1u << 23)) / 8388608.0f;
  const float v = std::ldexp(sig, e);
  return rng.Below(2) ? -v : v;
}

void GenerateSuite(const std::string& suite, const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  if (suite == "conversions") return GenConversions(opt, emit);
  if (suite == "ue8m0") return GenUe8m0(opt, emit);
  if (suite == "mx-block") return GenMxBlock(opt, emit);
  if (suite == "nvfp4-block") return GenNvfp4Block(opt, emit);
  if (suite == "sr") return GenSr(opt, emit);
  if (suite == "gemm") return GenGemm(opt, emit);
  if (suite == "unit") return GenUnits(opt, emit);
  throw Error("unknown suite '" + suite + "'");
}

namespace {

// A variant of case c of an operation whose classes can outlast the re-seeded rounds (cases every seed draws
// alike), keeping what makes the case fall in its class: an all-zero block with new signs, an all-equal block
// times a power of two (either sign), a dot's (a[k], b[k]) pairs shuffled within each scale block (or, where
// every pair is alike, one pair drawn anew). False
// where the operation or the case has none; MeasureOperation then decides whether the variant is useful.
bool Variant(const Header& h, const Fields& c, CaseRng& rng, Fields& out) {
  out = c;
  if (h.op == "mx-block" || h.op == "nvfp4-block") {
    const size_t first = h.op == "nvfp4-block" ? 1 : 0;  // nvfp4-block: the tensor amax comes first
    std::vector<uint32_t> x;
    for (size_t j = first; j < c.size(); ++j) {
      uint64_t v = 0;
      if (!ParseHex(c[j], 8, v)) return false;
      x.push_back(static_cast<uint32_t>(v));
    }
    if (x.empty()) return false;
    const bool zeros = std::all_of(x.begin(), x.end(), [](uint32_t v) { return (v & 0x7FFFFFFFu) == 0; });
    const bool equal = std::all_of(x.begin(), x.end(), [&](uint32_t v) { return v == x[0]; }) &&
                       std::isfinite(F32FromBits(x[0])) && !zeros;
    if (zeros) {
      for (uint32_t& v : x) v = rng.Below(2) ? 0x80000000u : 0u;
    } else if (equal) {
      const int e = static_cast<int>(rng.Below(9)) - 4;
      const float y = std::ldexp(F32FromBits(x[0]), e == 0 ? 1 : e) * (rng.Below(2) ? -1.0f : 1.0f);
      if (!std::isfinite(y) || y == 0) return false;
      for (uint32_t& v : x) v = F32Bits(y);
    } else {
      return false;
    }
    for (size_t j = 0; j < x.size(); ++j) out[first + j] = Hex(x[j], 8);
    return true;
  }
  if (h.op == "dot") {
    const size_t k = std::stoul(h.Get("k"));
    const size_t block = h.Get("scale") == "none" ? k : std::stoul(h.Get("block"));
    if (c[0].size() != 2 * k || c[1].size() != 2 * k || block == 0) return false;
    for (size_t b0 = 0; b0 < k; b0 += block)
      for (size_t i = std::min(k, b0 + block) - 1; i > b0; --i) {  // Fisher-Yates within the block
        const size_t j = b0 + rng.Below(i - b0 + 1);
        std::swap_ranges(out[0].begin() + 2 * i, out[0].begin() + 2 * i + 2, out[0].begin() + 2 * j);
        std::swap_ranges(out[1].begin() + 2 * i, out[1].begin() + 2 * i + 2, out[1].begin() + 2 * j);
      }
    if (out == c) {  // every pair alike (a block of one code): one pair drawn anew instead
      const size_t i = rng.Below(k);
      const uint64_t ma = ParseFormat(h.Get("a")).CodeMask(), mb = ParseFormat(h.Get("b")).CodeMask();
      out[0].replace(2 * i, 2, Hex(rng.Next() & ma, 2));
      out[1].replace(2 * i, 2, Hex(rng.Next() & mb, 2));
    }
    return out != c;
  }
  return false;
}

}  // namespace

void TopUpFiles(const std::string& suite, const GenOptions& opt, std::vector<PlannedFile>& files) {
  const uint64_t n = opt.min_per_class;
  struct Need {
    PlannedFile* file;
    std::map<std::string, uint64_t> hits;  // by class name
    std::set<std::string> seen;            // the cases it holds, as their joined fields
    int idle = 0;                          // rounds in a row that added nothing
    bool reseeded = false;                 // the re-seeded rounds are done with it
    bool Short(uint64_t want) const {
      for (const auto& [name, h] : hits)
        if (h < want) return true;
      return false;
    }
    // Whether a case's classes (cls) hit a class still short of want.
    bool Helps(const std::vector<CoverageClass>& cls, uint64_t want) {
      for (const CoverageClass& k : cls)
        if (k.hits > 0 && hits[k.name] < want) return true;
      return false;
    }
    // Takes case c when it hits a class still short of want.
    void Offer(Fields&& c, uint64_t want) {
      std::vector<CoverageClass> one;
      MeasureOperation(file->header, {c}, one);
      if (!Helps(one, want)) return;
      for (const CoverageClass& k : one) hits[k.name] += k.hits;
      file->inputs.push_back(std::move(c));
    }
  };
  const auto key = [](const Fields& c) {
    std::string k;
    for (const std::string& x : c) k += x + " ";
    return k;
  };
  std::map<std::string, Need> need;  // by path: the files that can be topped up
  for (PlannedFile& f : files) {
    std::vector<CoverageClass> cls;
    if (!f.observed.empty() || !MeasureOperation(f.header, f.inputs, cls)) continue;
    Need nd{&f, {}, {}, 0, false};
    for (const CoverageClass& c : cls) nd.hits[c.name] = c.hits;
    for (const Fields& c : f.inputs) nd.seen.insert(key(c));
    if (nd.Short(n)) need.emplace(f.path, std::move(nd));
  }
  const auto pending = [&] {
    for (const auto& [path, nd] : need)
      if (!nd.reseeded) return true;
    return false;
  };
  for (int round = 1; round <= kTopUpRounds && pending(); ++round) {
    GenOptions o = opt;
    o.seed = opt.seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(round));
    o.min_per_class = 0;
    GenerateSuite(suite, o, [&](PlannedFile&& g) {
      const auto it = need.find(g.path);
      if (it == need.end() || it->second.reseeded) return;
      Need& nd = it->second;
      // The new cases; measured together first, so that a round with nothing for a short class costs one
      // measurement.
      std::vector<Fields> pool;
      for (Fields& c : g.inputs)
        if (nd.seen.insert(key(c)).second) pool.push_back(std::move(c));
      std::vector<CoverageClass> all;
      const size_t before = nd.file->inputs.size();
      if (!pool.empty() && MeasureOperation(nd.file->header, pool, all) && nd.Helps(all, n))
        for (Fields& c : pool) {
          nd.Offer(std::move(c), n);
          if (!nd.Short(n)) break;
        }
      nd.idle = nd.file->inputs.size() > before ? 0 : nd.idle + 1;
      // Done; or four rounds in a row without a new hit, when the variants below take over.
      if (!nd.Short(n)) need.erase(it);
      else if (nd.idle >= 4) nd.reseeded = true;
    });
  }
  // Classes only fixed cases reach (every seed draws the all-zero block alike): variants of the file's own
  // cases in such classes, kTopUpRounds rounds at most, four idle rounds ending a file.
  for (auto& [path, nd] : need) {
    CaseRng rng(opt.seed, "topup/" + path);
    nd.idle = 0;
    for (int round = 0; round < kTopUpRounds && nd.Short(n) && nd.idle < 4; ++round) {
      const size_t before = nd.file->inputs.size();
      const std::vector<Fields> cases = nd.file->inputs;
      for (const Fields& c : cases) {
        if (!nd.Short(n)) break;
        std::vector<CoverageClass> mine;
        MeasureOperation(nd.file->header, {c}, mine);
        Fields v;
        if (nd.Helps(mine, n) && Variant(nd.file->header, c, rng, v) && nd.seen.insert(key(v)).second)
          nd.Offer(std::move(v), n);
      }
      nd.idle = nd.file->inputs.size() > before ? 0 : nd.idle + 1;
    }
  }
}

}  // namespace detail
}  // namespace qmx::golden
