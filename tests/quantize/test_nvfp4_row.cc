// test_nvfp4_row.cc: row-scaled NVFP4 (QuantSpec::row_scaled, Transformer Engine's row_scaled_nvfp4): each
// line quantized alone under the per-tensor rule is the oracle for codes, block scales, line amaxes and
// dequantized values (every NVFP4 rule, both axes, partial blocks, zero and non-finite lines); the fast path
// equals the reference on every source type, SIMD target and thread count, with stochastic rounding; the
// GEMM applies each row's (column's) decode scale as a per-tensor scale on that row alone would be; the spec
// validates, round-trips through JSON and leaves earlier JSON unchanged.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "qmx/scale.h"
#include "qmx/testing.h"
#include "support/codes.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::FloatBits;
using qmx::test::TargetGuard;

namespace {

// rows x cols FP32 whose rows (and columns) span very different magnitudes: row r is Gaussian times
// 2^(r * 7 % 41 - 25), row 1 is all zeros, row 2 has a NaN, row 3 an Inf (when specials).
std::vector<float> Lines(size_t rows, size_t cols, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      x[r * cols + c] = r == 1 ? 0.0f : std::ldexp(nd(rng), static_cast<int>(r * 7 % 41) - 25 + static_cast<int>(c % 3));
  if (specials && rows > 3 && cols > 5) {
    x[2 * cols + 4] = std::numeric_limits<float>::quiet_NaN();
    x[3 * cols + 5] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

QuantSpec RowSpec(ScaleRule rule, Axis axis) {
  QuantSpec s = QuantSpecByName("nvfp4-row");
  s.rule = rule;
  s.axis = axis;
  return s;
}

void RequireSameQ(const QuantizedTensor& got, const QuantizedTensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.codes == want.codes);
  REQUIRE(got.scales == want.scales);
  REQUIRE(got.line_amax.size() == want.line_amax.size());
  for (size_t i = 0; i < got.line_amax.size(); ++i) REQUIRE(FloatBits(got.line_amax[i]) == FloatBits(want.line_amax[i]));
  REQUIRE(FloatBits(got.tensor_amax) == FloatBits(want.tensor_amax));
}

}  // namespace

TEST_CASE("row-scaled NVFP4: each line quantizes as that line alone under the per-tensor rule", "[quantize][nvfp4]") {
  for (ScaleRule rule : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div, ScaleRule::kNvfp4Torchao, ScaleRule::kNvfp4TorchaoCuda,
                         ScaleRule::kNvfp4FourOverSix,
                         ScaleRule::kNvfp4FourOverSixMse}) {
    for (Axis axis : {Axis::kRow, Axis::kCol}) {
      for (size_t len : {size_t{64}, size_t{40}}) {  // 40: a partial last block of 8
        const size_t lines = 9;
        const bool by_col = axis == Axis::kCol;
        const size_t rows = by_col ? len : lines, cols = by_col ? lines : len;
        // Specials only where a row is a line (the NaN and Inf lie in rows 2 and 3).
        const std::vector<float> x = by_col ? [&] {
          const std::vector<float> t = Lines(lines, len, 11, false);
          std::vector<float> y(rows * cols);
          for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c) y[r * cols + c] = t[c * len + r];
          return y;
        }() : Lines(lines, len, 11, true);
        const QuantSpec spec = RowSpec(rule, axis);
        const QuantizedTensor q = QuantizeRef({DType::kF32, x.data(), rows, cols}, spec);
        std::vector<float> dq(x.size());
        Dequantize(q, dq.data());
        REQUIRE(q.line_amax.size() == lines);
        QuantSpec alone = spec;
        alone.row_scaled = false;
        alone.axis = Axis::kRow;
        for (size_t l = 0; l < lines; ++l) {
          std::vector<float> line(len);
          for (size_t t = 0; t < len; ++t) line[t] = by_col ? x[t * cols + l] : x[l * cols + t];
          const QuantizedTensor one = QuantizeRef({DType::kF32, line.data(), 1, len}, alone);
          std::vector<float> one_dq(len);
          Dequantize(one, one_dq.data());
          INFO(ScaleRuleName(rule) << " axis " << AxisName(axis) << " len " << len << " line " << l);
          REQUIRE(FloatBits(q.line_amax[l]) == FloatBits(one.tensor_amax));
          for (size_t t = 0; t < len; ++t) {
            const size_t i = by_col ? t * cols + l : l * cols + t;
            REQUIRE(q.codes[i] == one.codes[t]);
            REQUIRE(FloatBits(dq[i]) == FloatBits(one_dq[t]));
          }
          for (size_t b = 0; b < one.scales.size(); ++b)
            REQUIRE(q.scales[by_col ? b * q.scale_cols + l : l * q.scale_cols + b] == one.scales[b]);
        }
        // The tensor amax is the largest line amax (the summary's).
        float m = 0;
        for (float a : q.line_amax) m = std::max(m, a);
        CHECK(FloatBits(q.tensor_amax) == FloatBits(m));
      }
    }
  }
}

TEST_CASE("row-scaled NVFP4: the fast path equals the reference on every source type, target and thread count",
          "[quantize][nvfp4]") {
  TargetGuard guard;
  const size_t rows = 37;
  for (size_t cols : {size_t{256}, size_t{48}, size_t{40}}) {
    const std::vector<float> x = Lines(rows, cols, 5, true);
    std::vector<uint16_t> bf(x.size()), hf(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t w;
      std::memcpy(&w, &x[i], 4);
      bf[i] = static_cast<uint16_t>(w >> 16);  // truncation: any BF16 values do
      hf[i] = static_cast<uint16_t>(ConvertF32(x[i] * 0x1p-10f, fmt::kFP16, CastOptions{}));
    }
    for (Rounding round : {Rounding::kRne, Rounding::kSrA}) {
      for (Axis axis : {Axis::kRow, Axis::kCol}) {
        QuantSpec spec = RowSpec(ScaleRule::kNvfp4, axis);
        spec.cast.rounding = round;
        spec.seed = 99;
        for (const TensorView& v : {TensorView{DType::kF32, x.data(), rows, cols}, TensorView{DType::kBF16, bf.data(), rows, cols},
                                    TensorView{DType::kF16, hf.data(), rows, cols}}) {
          const QuantizedTensor want = QuantizeRef(v, spec);
          std::vector<float> want_dq(x.size());
          DequantizeRef(want, want_dq.data());
          for (const std::string& target : SimdTargets()) {
            ForceSimdTarget(target);
            for (int threads : {1, 2, 3}) {
              omp_set_num_threads(threads);
              const std::string what = std::string(DTypeName(v.dtype)) + " cols " + std::to_string(cols) + " " +
                                       RoundingName(round) + " " + AxisName(axis) + " " + target + " threads " + std::to_string(threads);
              const QuantizedTensor got = Quantize(v, spec);
              RequireSameQ(got, want, what);
              std::vector<float> dq(x.size());
              Dequantize(got, dq.data());
              for (size_t i = 0; i < dq.size(); ++i) REQUIRE(FloatBits(dq[i]) == FloatBits(want_dq[i]));
            }
          }
          ForceSimdTarget("");
        }
      }
    }
  }
  omp_set_num_threads(2);
}

TEST_CASE("row-scaled NVFP4 in the GEMM: each output row takes its own row's decode scale", "[quantize][nvfp4][gemm]") {
  const size_t m = 6, k = 64, n = 5;
  std::vector<float> xa = Lines(m, k, 3, false), xb(k * n);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = std::ldexp(nd(rng), static_cast<int>(i % n) * 5 - 9);
  const QuantSpec row_a = RowSpec(ScaleRule::kNvfp4, Axis::kRow);
  QuantSpec tensor_b = QuantSpecByName("nvfp4");
  tensor_b.axis = Axis::kCol;
  const GemmOperand a = OperandFromQuantized(Quantize({DType::kF32, xa.data(), m, k}, row_a));
  REQUIRE(a.row_scales.size() == m);
  CHECK(a.tensor_scale == 1.0f);
  for (bool b_rows : {false, true}) {
    const GemmOperand b = OperandFromQuantized(Quantize({DType::kF32, xb.data(), k, n}, b_rows ? RowSpec(ScaleRule::kNvfp4, Axis::kCol) : tensor_b));
    CHECK(b.col_scales.size() == (b_rows ? n : 0));
    for (const char* name : {"exact", "block-exact", "fp32-seq", "blackwell-mxf4nvf4", "blackwell-mxf4nvf4-mmasim"}) {
      const AccumModel model = AccumModelByName(name);
      const std::vector<float> ref = GemmRef(a, b, nullptr, model), fast = Gemm(a, b, nullptr, model);
      // The oracle: row i of A alone, its decode scale as a per-tensor scale (and column j of B likewise).
      for (size_t i = 0; i < m; ++i) {
        GemmOperand ai = a;
        ai.rows = 1;
        ai.codes.assign(a.codes.begin() + static_cast<std::ptrdiff_t>(i * k), a.codes.begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
        ai.scale_rows = 1;
        ai.scales.assign(a.scales.begin() + static_cast<std::ptrdiff_t>(i * a.scale_cols),
                         a.scales.begin() + static_cast<std::ptrdiff_t>((i + 1) * a.scale_cols));
        ai.row_scales.clear();
        ai.tensor_scale = a.row_scales[i];
        for (size_t j = 0; j < n; ++j) {
          GemmOperand bj = b;
          bj.cols = 1;
          bj.codes.clear();
          for (size_t kk = 0; kk < k; ++kk) bj.codes.push_back(b.codes[kk * n + j]);
          bj.scale_cols = 1;
          bj.scales.clear();
          for (size_t sr = 0; sr < b.scale_rows; ++sr) bj.scales.push_back(b.scales[sr * b.scale_cols + j]);
          if (b_rows) {
            bj.col_scales.clear();
            bj.tensor_scale = b.col_scales[j];
          }
          const float want = GemmRef(ai, bj, nullptr, model)[0];
          INFO(name << " b row-scaled " << b_rows << " (" << i << ", " << j << ")");
          REQUIRE(FloatBits(ref[i * n + j]) == FloatBits(want));
          REQUIRE(FloatBits(fast[i * n + j]) == FloatBits(want));
        }
      }
    }
  }
  // A C operand with second-level scales is refused as with per-tensor ones; so are lines across K.
  const std::vector<float> c(m * n, 1.0f);
  const GemmOperand b = OperandFromQuantized(Quantize({DType::kF32, xb.data(), k, n}, tensor_b));
  CHECK_THROWS_AS(Gemm(a, b, c.data(), AccumModelByName("exact")), Error);
  GemmOperand bad = a;
  bad.col_scales.assign(k, 1.0f);
  bad.row_scales.clear();
  CHECK_THROWS_WITH(Gemm(bad, b, nullptr, AccumModelByName("exact")), Catch::Contains("one per row"));
}

TEST_CASE("row-scaled NVFP4: the spec validates, round-trips through JSON and leaves other specs' JSON as it was",
          "[quantize][nvfp4]") {
  const QuantSpec s = QuantSpecByName("nvfp4-row");
  CHECK(s.row_scaled);
  CHECK(QuantSpecToJson(s).find("\"row_scaled\":true") != std::string::npos);
  CHECK(QuantSpecFromJson(QuantSpecToJson(s)).row_scaled);
  CHECK(QuantSpecToJson(QuantSpecByName("nvfp4")).find("row_scaled") == std::string::npos);
  CHECK_FALSE(QuantSpecFromJson(QuantSpecToJson(QuantSpecByName("nvfp4"))).row_scaled);
  CHECK(DescribeSpec(s).find("row-scaled") != std::string::npos);
  SpecOverrides o;
  o.row_scaled = true;
  const QuantSpec built = BuildQuantSpec("nvfp4", o);
  CHECK(built.row_scaled);
  CHECK(built.name == "nvfp4+");
  CHECK_THROWS_WITH(BuildQuantSpec("mxfp4", o), Catch::Contains("row-scaled NVFP4 takes an NVFP4 rule"));
  CHECK_THROWS_WITH(BuildQuantSpec("nvfp4-2d", o), Catch::Contains("1xN blocks"));
  const std::vector<float> x = Lines(4, 32, 1, false);
  CHECK_THROWS_WITH(QuantizeNvfp4WithAmax({DType::kF32, x.data(), 4, 32}, s, 1.0f), Catch::Contains("each line's amax"));
  CHECK_THROWS_WITH(QuantizeNvfp4WithAmaxRef({DType::kF32, x.data(), 4, 32}, s, 1.0f), Catch::Contains("each line's amax"));
  // Stored parts: the line amaxes must match the lines.
  const QuantizedTensor q = Quantize({DType::kF32, x.data(), 4, 32}, s);
  const QuantizedTensor back = AssembleQuantized(s, {4, 32}, qmx::test::PlainCodes(q.codes), q.scales, q.tensor_amax, q.line_amax);
  std::vector<float> d1(x.size()), d2(x.size());
  Dequantize(q, d1.data());
  Dequantize(back, d2.data());
  CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * 4) == 0);
  CHECK_THROWS_WITH(AssembleQuantized(s, {4, 32}, qmx::test::PlainCodes(q.codes), q.scales, q.tensor_amax, {1.0f}), Catch::Contains("one amax per row (4)"));
  CHECK_THROWS_WITH(AssembleQuantized(QuantSpecByName("nvfp4"), {4, 32}, qmx::test::PlainCodes(q.codes), q.scales, 1.0f, q.line_amax),
                    Catch::Contains("not row-scaled"));
  QuantizedTensor broken = q;
  broken.line_amax.pop_back();
  CHECK_THROWS_WITH(Dequantize(broken, d1.data()), Catch::Contains("line amaxes"));
  // Empty tensors keep one (zero) amax per line.
  const QuantizedTensor empty = Quantize({DType::kF32, x.data(), 3, 0}, s);
  CHECK(empty.line_amax.size() == 3);
}

TEST_CASE("quantize: qmx.spec JSON takes integer fields in range only (found by fuzz_spec: \"block\": [1E32] was a cast past int)",
          "[quantize]") {
  std::string json = QuantSpecToJson(QuantSpecByName("mxfp8"));
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = json;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK(QuantSpecFromJson(json).block_cols == 32);
  CHECK_THROWS_WITH(QuantSpecFromJson(with("[1,32]", "[1E32,32]")), Catch::Contains("block[0] must be an integer"));
  CHECK_THROWS_WITH(QuantSpecFromJson(with("[1,32]", "[1,4294967296]")), Catch::Contains("block[1] is out of range"));
  CHECK_THROWS_WITH(QuantSpecFromJson(with("\"sr_bits\":8", "\"sr_bits\":8.5")), Catch::Contains("sr_bits must be an integer"));
  CHECK_THROWS_WITH(QuantSpecFromJson(with("\"seed\":0", "\"seed\":-1")), Catch::Contains("seed is out of range"));
  CHECK_THROWS_WITH(QuantSpecFromJson(with("\"margin\":0", "\"margin\":-9999999999")), Catch::Contains("margin is out of range"));
  CHECK(QuantSpecFromJson(with("\"seed\":0", "\"seed\":18446744073709551615")).seed == ~uint64_t{0});
}
