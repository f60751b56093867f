// test_mx_scale_format.cc: the UE8M0 (MX) rules with their power-of-two scales stored in another format
// (QuantSpec::scale_format, MxSpec::scale_format): E4M3 (as an NVFP4 tensor core reads its scales), UE4M3, AMD
// gfx1250's UE5M3, E5M2, E3M4, E4M3FNUZ and E2M3 (no NaN code), against an oracle written from the definitions
// (docs/numerics.md "Block-scale formats"): the rule's exponent from the block amax (OCP's floor of log2, and
// the power of two at or above fl32(amax / destmax)), clamped to UE8M0's range and then to the powers of two the
// format holds (found by rounding each 2^k into it with the naive table and reading it back); each element
// x / 2^k rounded by the naive table; the scale the format's code of 2^k, its NaN code for a NaN block. Also
// dequantization, ScaleAt, the GEMM operand, the 1-D MX API, the JSON form and the refusals.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "support/fl32.h"
#include "support/hex.h"
#include "support/naive_round.h"

using namespace qmx;
using qmx::test::Fl32Div;
using qmx::test::FloatBits;
using qmx::test::NaiveRounder;

namespace {

// The powers of two 2^lo ... 2^hi (within [-127, 127]) that f holds: those the naive table rounds to a code
// that reads back as the same value.
std::pair<int, int> Pow2Range(const Format& f) {
  const NaiveRounder to(f);
  int lo = 1000, hi = -1000;
  for (int k = -127; k <= 127; ++k) {
    const double p = std::ldexp(1.0, k);
    if (DecodeToDouble(f, to.Round(p, CastOptions{}, 0)) == p) lo = std::min(lo, k), hi = std::max(hi, k);
  }
  return {lo, hi};
}

// The rule's exponent k of a block's scale 2^k from its finite amax (OCP MX 6.3's floor; the MXFP8 recipe's
// round-up), clamped to UE8M0's [-127, 127].
int RuleExponent(ScaleRule rule, double amax, const Format& elem) {
  const FormatLimits lim = Limits(elem);
  int k = -127;
  if (rule == ScaleRule::kOcpFloor) {
    if (amax > 0) k = std::ilogb(amax) - lim.emax;
  } else {
    const float q = Fl32Div(static_cast<float>(amax), static_cast<float>(lim.max_finite));
    if (q > 0) {
      k = std::ilogb(q);
      if (static_cast<double>(q) != std::ldexp(1.0, k)) ++k;
    }
  }
  return std::max(-127, std::min(127, k));
}

struct MxWant {
  std::vector<uint8_t> codes, scales;
  std::vector<int> k;  // each block's exponent (unused for a NaN block)
  std::vector<bool> nan;
};

// Row-major blocks of br x bc over a rows x cols tensor, exact element scaling.
MxWant Oracle(const std::vector<float>& x, size_t rows, size_t cols, size_t br, size_t bc, const QuantSpec& s,
              const Format& sf) {
  const NaiveRounder to_elem(s.elem), to_scale(sf);
  const auto [lo, hi] = Pow2Range(sf);
  MxWant o;
  o.codes.resize(x.size());
  const uint8_t elem_nan = s.elem.HasNan() ? static_cast<uint8_t>(s.elem.CanonicalNan()) : 0;
  for (size_t r0 = 0; r0 < rows; r0 += br)
    for (size_t c0 = 0; c0 < cols; c0 += bc) {
      double amax = 0;
      bool nan = false;
      for (size_t r = r0; r < std::min(rows, r0 + br); ++r)
        for (size_t c = c0; c < std::min(cols, c0 + bc); ++c) {
          const float v = x[r * cols + c];
          if (std::isnan(v)) nan = true;
          else amax = std::max(amax, std::fabs(static_cast<double>(v)));
        }
      const bool nan_block = nan && s.nan == NanPolicy::kBlockNan;
      const int k = std::max(lo, std::min(hi, RuleExponent(s.rule, amax, s.elem)));
      o.k.push_back(k);
      o.nan.push_back(nan_block);
      o.scales.push_back(nan_block ? static_cast<uint8_t>(sf.CanonicalNan())
                                   : static_cast<uint8_t>(to_scale.Round(std::ldexp(1.0, k), CastOptions{}, 0)));
      for (size_t r = r0; r < std::min(rows, r0 + br); ++r)
        for (size_t c = c0; c < std::min(cols, c0 + bc); ++c)
          o.codes[r * cols + c] = nan_block ? elem_nan
                                            : static_cast<uint8_t>(to_elem.Round(
                                                  std::ldexp(static_cast<double>(x[r * cols + c]), -k), s.cast, 0));
    }
  return o;
}

// Blocks of 8 along rows, each at its own power of two over 140 binades (past every 8-bit format's powers of
// two at both ends), zero blocks, and one NaN.
std::vector<float> Data(size_t rows, size_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-70, 70);
  std::vector<float> x(rows * cols);
  for (size_t b = 0; b < x.size() / 8; ++b) {
    const float s = std::ldexp(1.0f, ex(rng));
    const bool zero = rng() % 11 == 0;
    for (size_t i = 0; i < 8; ++i) x[b * 8 + i] = zero ? 0.0f : nd(rng) * s;
  }
  x[3 * cols + 5] = std::nanf("");
  return x;
}

const char* const kScaleFormats[] = {"e4m3", "ue4m3", "ue5m3", "e5m2", "e3m4", "e4m3fnuz", "e2m3"};

}  // namespace

TEST_CASE("mx scale format: codes and scales equal the rules' definitions in every format", "[quantize][mx]") {
  std::mt19937 rng(71);
  const size_t rows = 24, cols = 64;
  const std::vector<float> x = Data(rows, cols, rng);
  size_t specs = 0, clamped_lo = 0, clamped_hi = 0;
  for (const char* recipe : {"mxfp8", "mxfp8-ocp", "mxfp8_e5m2", "mxfp4", "mxfp6_e2m3"})
    for (const char* name : kScaleFormats)
      for (const auto& [br, bc] : {std::pair<int, int>{1, 32}, std::pair<int, int>{1, 16}, std::pair<int, int>{4, 8}}) {
        QuantSpec s = QuantSpecByName(recipe);
        const Format sf = ParseFormat(name);
        s.scale_format = sf.name;
        s.scaling = ElementScaling::kExact;
        s.block_rows = br;
        s.block_cols = bc;
        if (!sf.HasNan()) s.nan = NanPolicy::kIgnore;  // block-nan needs a NaN code (refused below)
        INFO(recipe << " " << name << " " << br << "x" << bc);
        const QuantizedTensor q = Quantize({DType::kF32, x.data(), rows, cols}, s);
        const MxWant e = Oracle(x, rows, cols, static_cast<size_t>(br), static_cast<size_t>(bc), s, sf);
        REQUIRE(q.scales.size() == e.scales.size());
        CHECK(q.scales == e.scales);
        CHECK(std::vector<uint8_t>(q.codes.begin(), q.codes.end()) == e.codes);
        // The reference directly, and the tensor read back: ScaleAt, and dequantization on both paths.
        const QuantizedTensor r = QuantizeRef({DType::kF32, x.data(), rows, cols}, s);
        CHECK(r.scales == q.scales);
        std::vector<float> fast(x.size()), ref(x.size());
        Dequantize(q, fast.data());
        DequantizeRef(q, ref.data());
        const auto [lo, hi] = Pow2Range(sf);
        size_t bad = 0;
        for (size_t b = 0; b < e.k.size(); ++b) {
          const float at = q.ScaleAt(b / q.scale_cols, b % q.scale_cols);
          if (e.nan[b] ? !std::isnan(at) : at != std::ldexp(1.0f, e.k[b])) ++bad;
          clamped_lo += !e.nan[b] && e.k[b] == lo;
          clamped_hi += !e.nan[b] && e.k[b] == hi;
        }
        CHECK(bad == 0);
        for (size_t i = 0; i < x.size(); ++i) {
          const size_t b = (i / cols / static_cast<size_t>(br)) * q.scale_cols + (i % cols) / static_cast<size_t>(bc);
          const double want = e.nan[b] ? std::nan("") : DecodeToDouble(s.elem, e.codes[i]) * std::ldexp(1.0, e.k[b]);
          const float w = static_cast<float>(want);
          if (FloatBits(fast[i]) != FloatBits(ref[i]) || (std::isnan(w) ? !std::isnan(fast[i]) : fast[i] != w)) ++bad;
        }
        CHECK(bad == 0);
        ++specs;
      }
  CHECK(specs == 5 * 7 * 3);
  CHECK(clamped_lo > 0);  // the data reach past both ends of every format's powers of two
  CHECK(clamped_hi > 0);
}

TEST_CASE("mx scale format: UE8M0 by name is the default, and a format wide enough changes no code", "[quantize][mx]") {
  std::mt19937 rng(72);
  std::normal_distribution<float> nd;
  std::vector<float> x(16 * 64);
  for (float& v : x) v = nd(rng) * 1e-2f;  // block exponents within E5M2's powers of two
  const QuantSpec base = QuantSpecByName("mxfp8");
  const QuantizedTensor u = Quantize({DType::kF32, x.data(), 16, 64}, base);
  QuantSpec named = base;
  named.scale_format = "ue8m0";
  const QuantizedTensor n = Quantize({DType::kF32, x.data(), 16, 64}, named);
  CHECK(n.scales == u.scales);
  QuantSpec e5 = base;
  e5.scale_format = "e5m2";
  const QuantizedTensor q = Quantize({DType::kF32, x.data(), 16, 64}, e5);
  CHECK(std::vector<uint8_t>(q.codes.begin(), q.codes.end()) == std::vector<uint8_t>(u.codes.begin(), u.codes.end()));
  CHECK(q.scales != u.scales);  // another format's codes of the same powers of two
  for (size_t sr = 0; sr < q.scale_rows; ++sr)
    for (size_t sc = 0; sc < q.scale_cols; ++sc) CHECK(q.ScaleAt(sr, sc) == u.ScaleAt(sr, sc));
}

TEST_CASE("mx scale format: the GEMM operand holds the same powers of two, and the products equal UE8M0's",
          "[quantize][mx][gemm]") {
  std::mt19937 rng(73);
  std::normal_distribution<float> nd;
  std::vector<float> xa(16 * 64), xb(64 * 24);
  for (float& v : xa) v = nd(rng) * 1e6f;  // past E4M3's largest power of two, 2^8: clamped scales
  for (float& v : xb) v = nd(rng);
  QuantSpec s = QuantSpecByName("mxfp8");
  s.scale_format = "e4m3";
  QuantSpec sc = s;
  sc.axis = Axis::kCol;
  const QuantizedTensor qa = Quantize({DType::kF32, xa.data(), 16, 64}, s);
  const QuantizedTensor qb = Quantize({DType::kF32, xb.data(), 64, 24}, sc);
  // The same tensors with their scales rewritten as UE8M0 bytes of the same values.
  const auto as_ue8m0 = [](QuantizedTensor q) {
    for (uint8_t& b : q.scales) b = static_cast<uint8_t>(127 + std::ilogb(MxScaleValue(fmt::kE4M3, b)));
    q.spec.scale_format.clear();
    return q;
  };
  const GemmOperand a = OperandFromQuantized(qa), b = OperandFromQuantized(qb);
  const GemmOperand ua = OperandFromQuantized(as_ue8m0(qa)), ub = OperandFromQuantized(as_ue8m0(qb));
  CHECK(a.scale_format == ScaleFormat::kUe8m0);
  CHECK(a.scales == ua.scales);
  CHECK(b.scales == ub.scales);
  size_t clamped = 0;
  for (float v : a.scales) clamped += v == 256.0f;
  CHECK(clamped > 0);
  for (const char* model : {"exact", "blackwell-mxf8f6f4", "block-exact"}) {
    const AccumModel m = AccumModelByName(model);
    INFO(model);
    const std::vector<float> got = Gemm(a, b, nullptr, m), want = Gemm(ua, ub, nullptr, m);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += FloatBits(got[i]) != FloatBits(want[i]);
    CHECK(bad == 0);
  }
  // Scales that are not powers of two (a file's) stay codes of their format.
  QuantizedTensor odd = qa;
  odd.scales[0] = static_cast<uint8_t>(ConvertF32(3.0f, fmt::kE4M3, CastOptions{}));
  const GemmOperand o = OperandFromQuantized(odd);
  CHECK(o.scale_format == ScaleFormat::kCode);
  CHECK(o.scale_code == fmt::kE4M3);
  CHECK(o.scales[0] == 3.0f);
}

TEST_CASE("mx scale format: the 1-D MX API, the JSON form and the refusals", "[quantize][mx]") {
  std::mt19937 rng(74);
  std::normal_distribution<float> nd;
  std::vector<float> x(32 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i / 32) * 4 - 80);
  MxSpec ms;
  ms.scale_format = ParseFormat("ue5m3");
  std::vector<uint8_t> c(x.size()), s(MxScaleCount(x.size(), ms)), rc(c.size()), rs(s.size());
  QuantizeMx(DType::kF32, x.data(), x.size(), ms, c.data(), s.data(), {}, Exec::kParallel);
  QuantizeMxRef(DType::kF32, x.data(), x.size(), ms, rc.data(), rs.data());
  CHECK(c == rc);
  CHECK(s == rs);
  QuantSpec qs = QuantSpecByName("mxfp8");
  qs.scale_format = ms.scale_format.name;
  const QuantizedTensor q = Quantize({DType::kF32, x.data(), 1, x.size()}, qs);
  CHECK(q.scales == s);
  CHECK(std::vector<uint8_t>(q.codes.begin(), q.codes.end()) == c);
  std::vector<float> d(x.size()), dr(x.size());
  DequantizeMx(c.data(), s.data(), x.size(), ms, d.data());
  DequantizeMxRef(c.data(), s.data(), x.size(), ms, dr.data());
  size_t bad = 0;
  for (size_t i = 0; i < d.size(); ++i)
    bad += FloatBits(d[i]) != FloatBits(dr[i]) ||
           d[i] != static_cast<float>(DecodeToDouble(ms.elem, c[i]) * MxScaleValue(ms.scale_format, s[i / 32]));
  CHECK(bad == 0);
  // JSON and the spec's description name the format.
  CHECK(QuantSpecFromJson(QuantSpecToJson(qs)).scale_format == qs.scale_format);
  CHECK(DescribeSpec(qs).find(qs.scale_format + " scales") != std::string::npos);
  // Refusals, each naming the problem.
  MxSpec bad_fmt;
  bad_fmt.scale_format = fmt::kInt8;
  CHECK_THROWS_WITH(ValidateMxSpec(bad_fmt), Catch::Contains("cannot hold MX scales"));
  MxSpec no_nan;
  no_nan.scale_format = fmt::kE2M3;  // block-nan, the default, writes a NaN scale
  CHECK_THROWS_WITH(ValidateMxSpec(no_nan), Catch::Contains("has no NaN code"));
  no_nan.nan = NanPolicy::kIgnoreNan;
  CHECK_NOTHROW(ValidateMxSpec(no_nan));
  QuantSpec te = QuantSpecByName("mxfp8");
  te.scale_format = "e3m2";
  te.nan = NanPolicy::kTe;
  CHECK_THROWS_WITH(ValidateQuantSpec(te), Catch::Contains("has no NaN code"));
  te.scale_format = "e5m3";  // 9 bits
  CHECK_THROWS_WITH(ValidateQuantSpec(te), Catch::Contains("cannot hold MX scales"));
}
