// test_bfp.cc: Tenstorrent's block floating point (bfp8_b, bfp4_b, bfp2_b; ScaleRule::kBfp) against an
// oracle written from tt-metal's vectorised packer (the branch-free form: the shift, then "add half minus
// one plus the kept LSB" for ties to even, then the saturation), not from the library's guard-and-tie
// branches; the shared exponent from ilogb rather than from the bit field; tt-metal's own unit-test values;
// the unpacker against exact arithmetic in FP32's normal range and its written-out behaviour elsewhere; and
// the spec's checks.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "qmx/error.h"
#include "qmx/host_device.h"
#include "qmx/quantize.h"
#include "qmx/testing.h"

namespace qmx {
namespace {

using Catch::Matchers::Contains;

uint32_t Bits(float f) { return hd::F32Bits(f); }
float FromBits(uint32_t b) { return hd::F32FromBits(b); }

// The shared exponent field of a block: ilogb's binade of the largest magnitude, biased (0 for zeros and
// FP32 subnormals, 255 for Inf and NaN).
uint32_t OracleShared(const float* x, size_t n) {
  int best = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const int e = std::isnan(v) || std::isinf(v) ? 255 : (v == 0 || std::fabs(v) < 0x1p-126f) ? 0 : std::ilogb(v) + 127;
    best = std::max(best, e);
  }
  return static_cast<uint32_t>(best);
}

// tt-metal's vectorised packer, one lane: m = sig >> diff (0 past 31), m = (m + half - 1 + lsb) >> s for
// ties to even (m >> s when truncating), saturate, 0 for a zero exponent field, the sign only on a nonzero m.
uint8_t OracleCode(float v, uint32_t shared, int w, bool truncate) {
  const uint32_t b = Bits(v), exp = (b >> 23) & 0xFF, sig = (b & 0x7FFFFF) | 0x800000, diff = shared - exp;
  const int s = 24 - w;
  uint32_t m = diff >= 32 ? 0 : sig >> diff;
  m = truncate ? m >> s : (m + (1u << (s - 1)) - 1 + ((m >> s) & 1u)) >> s;
  m = exp != 0 ? std::min(m, (1u << w) - 1) : 0;
  return static_cast<uint8_t>(m != 0 ? m | ((b >> 31) << w) : 0);
}

const struct {
  const char* spec;
  int w;
} kFormats[] = {{"bfp8_b", 7}, {"bfp4_b", 3}, {"bfp2_b", 1}};

// Blocks of 16 built to reach the packer's cases: random bits of every class; ties and "just above a tie"
// (bits past the 24-bit window that the truncating shift drops) under a shared exponent some binades up;
// roundings past the largest magnitude (saturation); all-zero, subnormal-only, Inf and NaN blocks.
std::vector<float> AdversarialBlocks(int w, size_t blocks, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> x(blocks * 16);
  for (size_t b = 0; b < blocks; ++b) {
    float* blk = &x[b * 16];
    const int kind = static_cast<int>(b % 8);
    const int top = static_cast<int>(g() % 200) - 100;
    for (int i = 0; i < 16; ++i) {
      const uint32_t sign = (g() & 1u) << 31;
      switch (kind) {
        case 0:  // any bit pattern
          blk[i] = FromBits(static_cast<uint32_t>(g()));
          break;
        case 1: {  // ties after the alignment shift, with and without dropped bits below them
          if (i == 0) {  // the block's largest value sets the shared exponent
            blk[i] = std::ldexp(1.0f, top);
            break;
          }
          const int s = 24 - w, d = 1 + static_cast<int>(g() % static_cast<uint32_t>(w));  // shift 1 .. w
          const int rb = d + s - 1;  // the source bit that lands on the rounding bit
          uint32_t sig = (1u << 23) | (1u << rb);
          if (rb < 22) sig |= (g() & ((1u << (22 - rb)) - 1)) << (rb + 1);  // kept bits above it
          const uint32_t variant = g() % 3;
          if (variant == 1) sig |= 1u + g() % ((1u << d) - 1);  // bits the shift drops: the packer sees a tie
          if (variant == 2) sig -= 1;                          // one source ulp under the tie
          blk[i] = FromBits(sign | (static_cast<uint32_t>(top + 127 - d) << 23) | (sig & 0x7FFFFFu));
          break;
        }
        case 2:  // just below the next binade: rounds past the largest magnitude
          blk[i] = FromBits(sign | (static_cast<uint32_t>(top + 127) << 23) | (0x7FFFFFu - (g() % 64)));
          break;
        case 3:  // small values far below the block's largest (shifts of 20 to 40 binades)
          blk[i] = i == 0 ? std::ldexp(1.0f, top) : FromBits(sign | (static_cast<uint32_t>(std::max(1, top + 127 - 20 - static_cast<int>(g() % 21))) << 23) | (g() & 0x7FFFFF));
          break;
        case 4:  // zeros and FP32 subnormals only
          blk[i] = FromBits(sign | (g() % 3 == 0 ? 0u : (g() & 0x7FFFFF)));
          break;
        case 5:  // an Inf or a NaN among normal values
          blk[i] = i == 3 ? FromBits(sign | 0x7F800000u | (b % 16 == 5 ? 0u : (g() & 0x7FFFFF) | 1u)) : std::ldexp(1.0f + static_cast<float>(g() % 100) / 100.0f, top);
          break;
        case 6:  // the largest FP32 binade and the smallest normal one
          blk[i] = FromBits(sign | ((i % 2 ? 254u : 1u) << 23) | (g() & 0x7FFFFF));
          break;
        default:  // Gaussian values, a realistic block
          blk[i] = std::ldexp(std::normal_distribution<float>(0.0f, 1.0f)(g), top % 20);
      }
    }
  }
  return x;
}

TEST_CASE("bfp: the packer's codes and shared exponents equal an oracle written from its vectorised form", "[quantize]") {
  for (const auto& f : kFormats) {
    for (bool truncate : {false, true}) {
      QuantSpec spec = QuantSpecByName(f.spec);
      if (truncate) spec.cast.rounding = Rounding::kRz;
      const size_t blocks = 40000;
      const std::vector<float> x = AdversarialBlocks(f.w, blocks, 17 + f.w);
      for (Axis axis : {Axis::kRow, Axis::kCol}) {
        // Row blocks: 16 consecutive values. Column blocks: the same values transposed (16 rows x blocks).
        std::vector<float> xt(x.size());
        const size_t rows = axis == Axis::kRow ? blocks : 16, cols = axis == Axis::kRow ? 16 : blocks;
        for (size_t b = 0; b < blocks; ++b)
          for (size_t i = 0; i < 16; ++i) (axis == Axis::kRow ? xt[b * 16 + i] : xt[i * blocks + b]) = x[b * 16 + i];
        spec.axis = axis;
        const QuantizedTensor q = Quantize({DType::kF32, xt.data(), rows, cols}, spec);
        REQUIRE(q.scales.size() == blocks);
        size_t bad_codes = 0, bad_scales = 0, ties_even = 0, saturated = 0, sticky = 0, infnan = 0;
        for (size_t b = 0; b < blocks; ++b) {
          const uint32_t shared = OracleShared(&x[b * 16], 16);
          bad_scales += q.scales[b] != shared;
          infnan += shared == 255;
          for (size_t i = 0; i < 16; ++i) {
            const float v = x[b * 16 + i];
            const size_t at = axis == Axis::kRow ? b * 16 + i : i * blocks + b;
            const uint8_t want = OracleCode(v, shared, f.w, truncate);
            bad_codes += q.codes[at] != want;
            // What the cases reached: exact value's RNE differs from the packer (the dropped bits), a tie to
            // even, a saturation.
            const uint32_t exp = (Bits(v) >> 23) & 0xFF;
            if (exp == 0 || exp == 255 || shared == 255 || truncate) continue;
            const double scaled = std::ldexp(std::fabs(static_cast<double>(v)), 127 - static_cast<int>(shared) + f.w - 1);
            const double rne = std::nearbyint(scaled);
            const uint32_t mag = want & ((1u << f.w) - 1);
            if (rne > (1u << f.w) - 1) ++saturated;
            else if (static_cast<uint32_t>(rne) != mag) ++sticky;
            if (scaled - std::floor(scaled) == 0.5) ++ties_even;
          }
        }
        INFO(f.spec << (truncate ? " rz" : " rne") << (axis == Axis::kRow ? " rows" : " cols"));
        CHECK(bad_scales == 0);
        CHECK(bad_codes == 0);
        CHECK(infnan > 1000);
        if (!truncate) {
          INFO("ties " << ties_even << ", saturations " << saturated << ", packer != exact RNE " << sticky);
          CHECK(ties_even > 1000);
          CHECK(saturated > 1000);
          CHECK(sticky > 100);  // the truncating shift's dropped bits are reached
        }
      }
    }
  }
}

TEST_CASE("bfp: tt-metal's own unit-test values, and the sign of zero", "[quantize]") {
  // tt-metal's BFP8 rounding test (a value under its own exponent): 64.75 -> 0x41, 65.25 -> 0x41,
  // 64.5 -> 0x40 (tie to even), 65.5 -> 0x42 (tie to even).
  const QuantSpec spec = QuantSpecByName("bfp8_b");
  const std::pair<float, uint8_t> cases[] = {{64.75f, 0x41}, {65.25f, 0x41}, {64.5f, 0x40}, {65.5f, 0x42}};
  for (const auto& [v, code] : cases) {
    std::vector<float> blk(16, 0.0f);
    blk[0] = v;
    blk[5] = -v;
    const QuantizedTensor q = Quantize({DType::kF32, blk.data(), 1, 16}, spec);
    CHECK(q.scales[0] == 133);  // 2^6
    CHECK(q.codes[0] == code);
    CHECK(q.codes[5] == (code | 0x80));
    CHECK(q.codes[1] == 0);  // +0, never 0x80
  }
  // A magnitude that rounds to zero drops its sign; -0 and negative subnormals are code 0.
  std::vector<float> blk = {1.0f, -0x1p-30f, -0.0f, -0x1p-140f};
  blk.resize(16, 0.0f);
  const QuantizedTensor q = Quantize({DType::kF32, blk.data(), 1, 16}, spec);
  CHECK(q.codes[1] == 0);
  CHECK(q.codes[2] == 0);
  CHECK(q.codes[3] == 0);
}

TEST_CASE("bfp: the unpacker is exact in FP32's normal range and follows tt-metal's bit construction elsewhere", "[quantize]") {
  for (const auto& f : kFormats) {
    QuantizedTensor q;
    q.spec = QuantSpecByName(f.spec);
    q.rows = 256;
    q.cols = 16;
    q.scale_rows = 256;
    q.scale_cols = 1;
    q.codes.resize(256 * 16);
    q.scales.resize(256);
    for (size_t r = 0; r < 256; ++r) {
      q.scales[r] = static_cast<uint8_t>(r);  // every shared exponent
      for (size_t c = 0; c < 16; ++c) q.codes[r * 16 + c] = static_cast<uint8_t>(c % (2u << f.w));
    }
    std::vector<float> out(q.codes.size()), ref(q.codes.size());
    Dequantize(q, out.data());
    DequantizeRef(q, ref.data());
    const uint32_t max = (1u << f.w) - 1;
    size_t checked = 0;
    for (size_t r = 0; r < 256; ++r)
      for (size_t c = 0; c < 16; ++c) {
        const size_t i = r * 16 + c;
        const uint8_t code = q.codes[i];
        const uint32_t m = code & max, sign = (code >> f.w) & 1u;
        INFO(f.spec << " shared " << r << " code " << static_cast<int>(code));
        CHECK(Bits(out[i]) == Bits(ref[i]));
        if (m == 0) {
          CHECK(Bits(out[i]) == sign << 31);
          continue;
        }
        const int top = 31 - __builtin_clz(m), shift = f.w - 1 - top;
        const int field = static_cast<int>(r) - shift;
        if (field >= 1 && field <= 254) {  // exact: m * 2^(E - 127 - (w - 1))
          CHECK(out[i] == static_cast<float>((sign ? -1.0 : 1.0) * std::ldexp(static_cast<double>(m), static_cast<int>(r) - 127 - (f.w - 1))));
          ++checked;
        } else if (field == 255) {  // the hidden bit alone is Inf, any bit below it NaN
          CHECK((m == (1u << (f.w - 1)) ? std::isinf(out[i]) : std::isnan(out[i])));
        } else if (field < 0) {
          CHECK(Bits(out[i]) == 0u);  // +0, the sign dropped
        } else {  // field 0: the fraction bits read as an FP32 subnormal (not the block's value)
          const uint32_t frac = (m - (1u << top)) << (23 - top);
          CHECK(Bits(out[i]) == ((sign << 31) | frac));
        }
      }
    CHECK(checked > 1000);
  }
}

TEST_CASE("bfp: values on the grid round-trip; the spec's checks", "[quantize]") {
  // m * 2^(E - 133) for every BFP8 magnitude under a block whose largest value sets E.
  std::vector<float> x(128 * 16, 0.0f);
  for (size_t b = 0; b < 128; ++b) {
    x[b * 16] = std::ldexp(1.0f, static_cast<int>(b) - 60);  // E = b + 67
    for (size_t i = 1; i < 16; ++i) x[b * 16 + i] = std::ldexp(static_cast<float>((b * 7 + i * 13) % 128), static_cast<int>(b) - 66);
  }
  const QuantizedTensor q = Quantize({DType::kF32, x.data(), 128, 16}, QuantSpecByName("bfp8_b"));
  std::vector<float> back(x.size());
  Dequantize(q, back.data());
  for (size_t i = 0; i < x.size(); ++i) CHECK(back[i] == x[i]);
  // BF16 sources widen exactly.
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = static_cast<uint16_t>(Bits(x[i]) >> 16);
  const QuantizedTensor qb = Quantize({DType::kBF16, xb.data(), 128, 16}, QuantSpecByName("bfp8_b"));
  std::vector<float> xw(x.size());
  for (size_t i = 0; i < x.size(); ++i) xw[i] = FromBits(static_cast<uint32_t>(xb[i]) << 16);
  const QuantizedTensor qw = Quantize({DType::kF32, xw.data(), 128, 16}, QuantSpecByName("bfp8_b"));
  CHECK(qb.codes == qw.codes);
  CHECK(qb.scales == qw.scales);
  // The checks: SR, a NaN policy, an element format other than sign-magnitude fixed point.
  QuantSpec s = QuantSpecByName("bfp4_b");
  s.cast.rounding = Rounding::kSrA;
  CHECK_THROWS_WITH(Quantize({DType::kF32, x.data(), 128, 16}, s), Contains("rne (its default) or rz"));
  s = QuantSpecByName("bfp4_b");
  s.nan = NanPolicy::kIgnore;
  CHECK_THROWS_WITH(Quantize({DType::kF32, x.data(), 128, 16}, s), Contains("do not apply"));
  s = QuantSpecByName("bfp4_b");
  s.elem = fmt::kE2M1;
  CHECK_THROWS_WITH(Quantize({DType::kF32, x.data(), 128, 16}, s), Contains("sign-magnitude"));
  CHECK_THAT(DescribeSpec(QuantSpecByName("bfp2_b")), Contains("e1m0:special=finite:bias=1") && Contains("1x16") && Contains("bfp"));
}

}  // namespace
}  // namespace qmx
