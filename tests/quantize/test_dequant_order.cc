// test_dequant_order.cc: NVFP4 dequantization in each peer's order (DequantOrder, qmx/scale.h): every
// element against its formula written out here in FP32 operations (E4M3 block scales decoded from their
// fields, not the library's table), for the TE, 4over6 and torchao rules, row-scaled tensors and the
// reference path; the orders part on ordinary data with many amaxes; other recipes refuse them.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/quantize.h"
#include "qmx/scale.h"

using namespace qmx;

namespace {

float E4m3FromFields(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (b & 0x80) ? -mag : mag;
}

float E2m1FromFields(uint8_t b) {
  static const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (b & 8) ? -v[b & 7] : v[b & 7];
}

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// The element's value by the order's formula, in FP32 operations.
float Expected(const QuantizedTensor& q, size_t r, size_t c, DequantOrder order, float d) {
  const size_t sr = r / (q.rows / q.scale_rows), sc = c / 16;
  const float s = E4m3FromFields(q.scales[sr * q.scale_cols + sc]), amax = q.SecondLevelAmax(r, c);
  const float x = E2m1FromFields(q.codes[r * q.cols + c]);
  volatile float scale = 0.0f;  // each product rounded to FP32 as written (no contraction, no reassociation)
  volatile float t = 0.0f;
  switch (order) {
    case DequantOrder::kTe:
      t = s * amax;
      scale = t * (1.0f / d);
      break;
    case DequantOrder::kGlobalDiv:
      t = amax / d;
      scale = s * t;
      break;
    case DequantOrder::kGlobalRecip:
      t = amax * (1.0f / d);
      scale = s * t;
      break;
    default: break;
  }
  return x * scale;
}

}  // namespace

TEST_CASE("quantize: NVFP4 dequantization orders follow their formulas and tell each other apart", "[quantize]") {
  std::mt19937 rng(48);
  std::normal_distribution<float> nd;
  const size_t rows = 24, cols = 128;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 7) * 3 - 9);
  const TensorView v{DType::kF32, x.data(), rows, cols};
  for (const char* rule : {"nvfp4", "nvfp4-4over6", "nvfp4-torchao"})
    for (const bool row_scaled : {false, true}) {
      if (row_scaled && std::string(rule) == "nvfp4-torchao") continue;  // row scaling is TE's
      QuantSpec spec = QuantSpecByName("nvfp4");
      spec.rule = ParseScaleRule(rule);
      spec.row_scaled = row_scaled;
      const QuantizedTensor q = Quantize(v, spec);
      const float d = std::string(rule) == "nvfp4-4over6" ? 1536.0f : 2688.0f;
      std::vector<float> by_rule(x.size()), got(x.size()), ref(x.size());
      Dequantize(q, by_rule.data());
      size_t te_vs_div = 0, div_vs_recip = 0;
      std::vector<std::vector<float>> outs;
      for (DequantOrder o : {DequantOrder::kTe, DequantOrder::kGlobalDiv, DequantOrder::kGlobalRecip}) {
        INFO(rule << (row_scaled ? " row-scaled" : "") << " order " << DequantOrderName(o));
        Dequantize(q, got.data(), o);
        DequantizeRef(q, ref.data(), o);
        size_t bad = 0;
        for (size_t r = 0; r < rows; ++r)
          for (size_t c = 0; c < cols; ++c) {
            const float want = Expected(q, r, c, o, d);
            bad += Bits(got[r * cols + c]) != Bits(want) || Bits(ref[r * cols + c]) != Bits(want);
          }
        CHECK(bad == 0);
        outs.push_back(got);
      }
      for (size_t i = 0; i < x.size(); ++i) {
        te_vs_div += Bits(outs[0][i]) != Bits(outs[1][i]);
        div_vs_recip += Bits(outs[1][i]) != Bits(outs[2][i]);
      }
      INFO(rule << (row_scaled ? " row-scaled" : "") << ": te vs global-div " << te_vs_div << ", global-div vs global-recip "
                << div_vs_recip);
      // With many amaxes (row-scaled lines) the orders part on ordinary data; with one tensor amax whether
      // they do depends on that amax's bits (on this data they agree for nvfp4 and differ for 4over6).
      if (row_scaled || std::string(rule) == "nvfp4-4over6") CHECK(te_vs_div > 0);
      // The rule's own order: TE's for the TE rules, torchao's division for nvfp4-torchao (whose tensor
      // scale falls back to 1 only for a zero or non-finite amax, absent here).
      const std::vector<float>& own = std::string(rule) == "nvfp4-torchao" ? outs[1] : outs[0];
      size_t differ = 0;
      for (size_t i = 0; i < x.size(); ++i) differ += Bits(by_rule[i]) != Bits(own[i]);
      CHECK(differ == 0);
    }
}

TEST_CASE("quantize: dequantization orders are NVFP4's and parse by name", "[quantize]") {
  std::vector<float> x(64, 1.5f);
  const QuantizedTensor mx = Quantize(TensorView{DType::kF32, x.data(), 2, 32}, QuantSpecByName("mxfp8"));
  std::vector<float> out(64);
  CHECK_NOTHROW(Dequantize(mx, out.data(), DequantOrder::kByRule));
  CHECK_THROWS_WITH(Dequantize(mx, out.data(), DequantOrder::kTe), Catch::Contains("how NVFP4's block and tensor scales meet"));
  CHECK_THROWS_WITH(DequantizeRef(mx, out.data(), DequantOrder::kGlobalDiv), Catch::Contains("order rule"));
  for (const std::string& n : DequantOrderNames()) CHECK(DequantOrderName(ParseDequantOrder(n)) == n);
  CHECK_THROWS_WITH(ParseDequantOrder("torchao"), Catch::Contains("rule, te, global-div or global-recip"));
}

namespace {

// Flush-to-zero as written in the header: a magnitude below 2^-126 becomes a zero of its sign.
float FlushF(float v) { return v != 0 && std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v; }

}  // namespace

TEST_CASE("quantize: flush-to-zero dequantization flushes the decode scale and the result", "[quantize]") {
  // MXFP8 blocks with the scale bytes 0 (2^-127, an FP32 subnormal), 1, 2 and 10: under FTZ byte 0's block
  // decodes to signed zeros, and products below 2^-126 of the others to signed zeros too.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(4 * 64);
  for (float& v : x) v = nd(rng) * 30.0f;
  QuantizedTensor q = Quantize(TensorView{DType::kF32, x.data(), 4, 64}, QuantSpecByName("mxfp8"));
  const uint8_t bytes[4] = {0, 1, 2, 10};
  for (size_t b = 0; b < q.scales.size(); ++b) q.scales[b] = bytes[b % 4];
  std::vector<float> plain(x.size()), ftz(x.size()), ref(x.size());
  Dequantize(q, plain.data(), DequantOrder::kByRule, false);
  Dequantize(q, ftz.data(), DequantOrder::kByRule, true);
  DequantizeRef(q, ref.data(), DequantOrder::kByRule, true);
  size_t flushed = 0, subnormal_plain = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t r = i / 64, c = i % 64;
    const uint8_t byte = q.scales[r * q.scale_cols + c / 32];
    const float s = std::ldexp(1.0f, static_cast<int>(byte) - 127);
    const float v = DecodeToFloat(fmt::kE4M3, q.codes[i]);
    volatile float p = v * FlushF(s);
    const float want = FlushF(p);
    INFO("element " << i << " code " << int(q.codes[i]) << " scale byte " << int(byte));
    CHECK(Bits(ftz[i]) == Bits(want));
    CHECK(Bits(ref[i]) == Bits(want));
    CHECK(Bits(plain[i]) == Bits(v * s));
    flushed += Bits(ftz[i]) != Bits(plain[i]);
    // byte 0's nonzero elements (their scale flushed), and the other blocks' subnormal results
    subnormal_plain += byte == 0 ? v != 0 : plain[i] != 0 && std::fabs(plain[i]) < 0x1p-126f;
    if (byte == 0) CHECK(ftz[i] == 0.0f);
    if (byte == 0) CHECK(std::signbit(ftz[i]) == std::signbit(v));
  }
  CHECK(flushed == subnormal_plain);  // FTZ changes exactly those
  CHECK(flushed > 64);                // byte 0's whole blocks, and part of bytes 1 and 2

  // NVFP4 with a tiny tensor amax: decode scales near the bottom of FP32, each order's scale flushed as it is
  // formed, then the product.
  std::vector<float> y(8 * 64);
  for (size_t i = 0; i < y.size(); ++i) y[i] = nd(rng) * std::ldexp(1.0f, -118 - static_cast<int>(i / 64) % 4 * 3);
  for (const char* rule : {"nvfp4", "nvfp4-torchao"}) {
    QuantSpec spec = QuantSpecByName("nvfp4");
    spec.rule = ParseScaleRule(rule);
    const QuantizedTensor n = Quantize(TensorView{DType::kF32, y.data(), 8, 64}, spec);
    for (DequantOrder order : {DequantOrder::kTe, DequantOrder::kGlobalDiv, DequantOrder::kGlobalRecip}) {
      std::vector<float> got(y.size()), got_ref(y.size()), base(y.size());
      Dequantize(n, got.data(), order, true);
      DequantizeRef(n, got_ref.data(), order, true);
      Dequantize(n, base.data(), order, false);
      size_t changed = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const size_t r = i / 64, c = i % 64;
        const float scale = Nvfp4DecodeScale(n.scales[r * n.scale_cols + c / 16], n.tensor_amax, n.spec.rule, order);
        volatile float p = E2m1FromFields(n.codes[i]) * FlushF(scale);
        INFO(rule << " order " << DequantOrderName(order) << " element " << i);
        CHECK(Bits(got[i]) == Bits(FlushF(p)));
        CHECK(Bits(got_ref[i]) == Bits(got[i]));
        changed += Bits(got[i]) != Bits(base[i]);
      }
      CHECK(changed > 0);
    }
  }
}
