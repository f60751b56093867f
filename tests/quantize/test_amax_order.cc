// test_amax_order.cc: block amaxes reduced by comparisons (qmx/scale.h AmaxOrder), whose NaN handling
// depends on the NaN's position. The reductions against a 32-lane warp butterfly and std::max folds written
// here on floats; the quantizers' scales and codes against the rule applied to that amax by hand; the
// refusals.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/scale.h"
#include "support/hex.h"

using namespace qmx;
using qmx::test::Hex;

namespace {

// The orders as a kernel writes them, on floats: std::max folds, and a 32-lane __shfl_xor_sync butterfly
// (every lane computed, lane 0 read) with missing lanes +0.
float WarpOrFold(const std::vector<float>& m, AmaxOrder order) {
  if (order == AmaxOrder::kFoldLast) {
    float r = 0;
    for (float v : m) r = std::max(v, r);
    return r;
  }
  if (order == AmaxOrder::kFoldFirst) {
    float r = m[0];
    for (size_t i = 1; i < m.size(); ++i) r = std::max(r, m[i]);
    return r;
  }
  size_t lanes = 1;
  while (lanes < m.size()) lanes *= 2;
  std::vector<float> v(lanes, 0.0f);
  std::copy(m.begin(), m.end(), v.begin());
  for (size_t off = lanes / 2; off >= 1; off /= 2) {
    std::vector<float> next(lanes);
    for (size_t l = 0; l < lanes; ++l) {
      const float a = v[l], b = v[l ^ off];
      next[l] = order == AmaxOrder::kTreeGt ? (a > b ? a : b) : std::max(a, b);
    }
    v = next;
  }
  return v[0];
}

bool SameFloat(double a, float b) { return std::isnan(a) ? std::isnan(b) : a == static_cast<double>(b); }

// A block of n magnitudes with NaN and Inf at random places (a third of the blocks hold none).
std::vector<float> RandomMags(std::mt19937& g, size_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> m(n);
  for (float& v : m) v = std::fabs(normal(g)) * std::ldexp(1.0f, static_cast<int>(g() % 9) - 4);
  const int specials = static_cast<int>(g() % 3) + static_cast<int>(g() % 2);
  for (int s = 0; s < specials; ++s) m[g() % n] = g() % 4 == 0 ? HUGE_VALF : std::nanf("");
  return m;
}

// OCP MX's floor rule for E4M3, stated here: X = 2^(floor(log2 amax) - 8), byte 0 for a zero amax.
int E4m3FloorByte(double amax) {
  if (amax == 0) return 0;
  return std::min(127, std::max(-127, std::ilogb(amax) - 8)) + 127;
}

const std::vector<AmaxOrder> kOrders = {AmaxOrder::kFoldLast, AmaxOrder::kFoldFirst, AmaxOrder::kTreeGt,
                                        AmaxOrder::kTreeLt};

}  // namespace

TEST_CASE("amax orders: worked blocks keep or drop a NaN by its place", "[quantize][amax-order]") {
  const double nan = std::nan(""), inf = HUGE_VAL;
  const auto run = [](std::vector<double> m, AmaxOrder o) { return OrderedAmax(m.data(), m.size(), m.size(), o); };
  // fold-last: the max after the last NaN.
  CHECK(run({nan, 5, 3}, AmaxOrder::kFoldLast) == 5);
  CHECK(run({9, nan, 3}, AmaxOrder::kFoldLast) == 3);
  CHECK(std::isnan(run({9, 3, nan}, AmaxOrder::kFoldLast)));
  // fold-first: NaN only from the first element.
  CHECK(std::isnan(run({nan, 9, 3}, AmaxOrder::kFoldFirst)));
  CHECK(run({1, nan, 9}, AmaxOrder::kFoldFirst) == 9);
  // tree-gt on 4 lanes: {9, 1, NaN, 2}: 9 > NaN is false, so NaN; then NaN > 2 is false: 2 (9 is lost).
  CHECK(run({9, 1, nan, 2}, AmaxOrder::kTreeGt) == 2);
  CHECK(std::isnan(run({1, 2, 3, nan}, AmaxOrder::kTreeGt)));
  // tree-lt: {1, NaN, 2, 9}: NaN < 9 is false, so NaN (9 is lost); then 2 < NaN is false: 2.
  CHECK(run({1, nan, 2, 9}, AmaxOrder::kTreeLt) == 2);
  CHECK(std::isnan(run({nan, 2, 3, 4}, AmaxOrder::kTreeLt)));
  // A short block's missing lanes are +0 and take part: {1, 2, NaN, +0} under tree-gt gives NaN, 2 at the
  // first level, then 2 (the NaN, now on the left, is dropped); over 3 lanes alone, NaN would survive.
  const std::vector<double> three = {1, 2, nan};
  CHECK(OrderedAmax(three.data(), 3, 4, AmaxOrder::kTreeGt) == 2);
  CHECK(run({7, inf, 3}, AmaxOrder::kFoldLast) == inf);
  CHECK_THROWS_WITH(run({1}, AmaxOrder::kAny), Catch::Contains("not a comparison order"));
}

TEST_CASE("amax orders: the reductions equal a warp butterfly and std::max folds", "[quantize][amax-order]") {
  std::mt19937 g(31);
  int nan_results = 0, finite_with_nan = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const size_t n = trial % 5 == 0 ? 1 + g() % 32 : 32;  // short blocks on 32 lanes too
    const std::vector<float> m = RandomMags(g, n);
    const std::vector<double> md(m.begin(), m.end());
    const bool any_nan = std::any_of(m.begin(), m.end(), [](float v) { return std::isnan(v); });
    for (AmaxOrder o : kOrders) {
      if ((o == AmaxOrder::kFoldFirst || o == AmaxOrder::kFoldLast) && n < 32) continue;  // a fold has no lanes
      const double got = OrderedAmax(md.data(), n, 32, o);
      std::vector<float> lanes(m);
      lanes.resize(32, 0.0f);  // the butterfly's missing lanes
      const float want = WarpOrFold(lanes, o);
      INFO("trial " << trial << " order " << AmaxOrderName(o));
      REQUIRE(SameFloat(got, want));
      nan_results += std::isnan(got);
      finite_with_nan += any_nan && !std::isnan(got);
    }
  }
  // Both outcomes occur often: the data reach the NaN-kept and the NaN-dropped branches of every order.
  CHECK(nan_results > 500);
  CHECK(finite_with_nan > 2000);
}

TEST_CASE("amax orders: MX blocks take the rule's scale of the reduced amax", "[quantize][amax-order]") {
  std::mt19937 g(7);
  const size_t n = 32 * 64 + 11;  // a short last block
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& v : x) v = normal(g) * std::ldexp(1.0f, static_cast<int>(g() % 7) - 3);
  for (size_t b = 0; b < n / 32 + 1; ++b) {  // NaN and Inf at random places of most blocks
    const size_t len = std::min<size_t>(32, n - 32 * b);
    for (int s = 0; s < static_cast<int>(g() % 3); ++s)
      x[32 * b + g() % len] = g() % 5 == 0 ? -HUGE_VALF : std::nanf("");
  }
  const uint8_t nan_code = static_cast<uint8_t>(ConvertF32(std::nanf(""), fmt::kE4M3, CastOptions{}));
  for (AmaxOrder o : kOrders) {
    MxSpec spec;
    spec.rule = ScaleRule::kOcpFloor;
    spec.nan = NanPolicy::kTe;
    spec.amax_order = o;
    std::vector<uint8_t> codes(n), scales(MxScaleCount(n, spec)), fast_codes(n), fast_scales(scales.size());
    QuantizeMxRef(DType::kF32, x.data(), n, spec, codes.data(), scales.data());
    QuantizeMx(DType::kF32, x.data(), n, spec, fast_codes.data(), fast_scales.data(), {}, Exec::kParallel);
    REQUIRE(codes == fast_codes);  // QuantizeMx routes the order to the reference rather than ignoring it
    REQUIRE(scales == fast_scales);
    for (size_t b = 0; b < scales.size(); ++b) {
      const size_t start = 32 * b, len = std::min<size_t>(32, n - start);
      std::vector<float> m(32, 0.0f);
      for (size_t i = 0; i < len; ++i) m[i] = std::fabs(x[start + i]);
      if (o == AmaxOrder::kFoldFirst || o == AmaxOrder::kFoldLast) m.resize(len);
      const float r = WarpOrFold(m, o);
      // Transformer Engine's float_to_e8m0 on the amax: NaN -> 0xFF (every element the NaN code), Inf -> 0xFE.
      const int want = std::isnan(r) ? 0xFF : std::isinf(r) ? 0xFE : E4m3FloorByte(r);
      INFO(AmaxOrderName(o) << " block " << b);
      REQUIRE(Hex(scales[b]) == Hex(static_cast<uint8_t>(want)));
      for (size_t i = 0; i < len; ++i) {
        const float v = x[start + i];
        const uint8_t code =
            want == 0xFF ? nan_code
                         : static_cast<uint8_t>(ConvertF32(std::ldexp(v, 127 - want), fmt::kE4M3, CastOptions{}));
        REQUIRE(Hex(codes[start + i]) == Hex(code));
      }
    }
  }
}

TEST_CASE("amax orders: 2-D blocks cut by the tensor's edge keep their lanes; block-nan and scale-nan",
          "[quantize][amax-order]") {
  // 40 x 40 in 32 x 32 blocks: three of the four blocks are cut, and element (r, c) of a block sits on lane
  // 32 r + c of its 1,024, the missing ones +0 (a kernel's lanes). Packing a cut block's elements onto the
  // first lanes instead pairs each with a zero under tree-gt and drops every NaN at the first level.
  std::mt19937 g(19);
  const size_t n = 40;
  std::vector<float> x(n * n);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(g);
  for (int s = 0; s < 30; ++s) x[g() % x.size()] = std::nanf("");
  // In the cut block (0, 1): a NaN on lane 20 * 32 + 4 = 644 and the block's largest element on lane 132, its
  // partner at the first level (h = 512). tree-gt takes the NaN there and drops it later: 1000 is lost. Packed
  // onto lanes 164 and 36, both would meet padding and nothing would be lost.
  x[20 * n + 36] = std::nanf("");
  x[4 * n + 36] = 1000.0f;
  const TensorView view{DType::kF32, x.data(), n, n};
  bool lost = false;
  for (AmaxOrder o : {AmaxOrder::kTreeGt, AmaxOrder::kTreeLt, AmaxOrder::kFoldLast, AmaxOrder::kFoldFirst}) {
    QuantSpec spec = QuantSpecByName("mxfp8");
    spec.rule = ScaleRule::kOcpFloor;
    spec.nan = NanPolicy::kTe;
    spec.block_rows = spec.block_cols = 32;
    spec.amax_order = o;
    const QuantizedTensor q = Quantize(view, spec);
    REQUIRE(q.scale_rows == 2);
    REQUIRE(q.scale_cols == 2);
    for (size_t br = 0; br < 2; ++br)
      for (size_t bc = 0; bc < 2; ++bc) {
        std::vector<float> lanes(1024, 0.0f), packed;
        for (size_t r = 32 * br; r < std::min(n, 32 * br + 32); ++r)
          for (size_t c = 32 * bc; c < std::min(n, 32 * bc + 32); ++c) {
            lanes[(r - 32 * br) * 32 + (c - 32 * bc)] = std::fabs(x[r * n + c]);
            packed.push_back(std::fabs(x[r * n + c]));
          }
        const bool fold = o == AmaxOrder::kFoldLast || o == AmaxOrder::kFoldFirst;
        // A fold walks the elements in order (no lanes); a tree the block's lanes.
        const float r = WarpOrFold(fold ? packed : lanes, o);
        const int want = std::isnan(r) ? 0xFF : std::isinf(r) ? 0xFE : E4m3FloorByte(r);
        INFO(AmaxOrderName(o) << " block " << br << "," << bc);
        CHECK(Hex(q.scales[br * 2 + bc]) == Hex(static_cast<uint8_t>(want)));
        if (o == AmaxOrder::kTreeGt && br == 0 && bc == 1) lost = want != E4m3FloorByte(1000.0);
      }
  }
  CHECK(lost);  // the lanes, not a packed layout, decide
  // block-nan and scale-nan under an order: a NaN amax fills the block with the element format's NaN code
  // (block-nan: 0 for e2m1, which has none) or the conversion of NaN (scale-nan: the NaN fallback, e2m1's
  // largest code 0x7); a finite one leaves a NaN element to the conversion.
  std::vector<float> row(32, 1.0f);
  row[31] = std::nanf("");  // fold-last: the last element is NaN, so the block is
  for (NanPolicy pol : {NanPolicy::kBlockNan, NanPolicy::kScaleNan}) {
    QuantSpec spec = QuantSpecByName("mxfp4");
    spec.nan = pol;
    spec.amax_order = AmaxOrder::kFoldLast;
    const QuantizedTensor q = Quantize({DType::kF32, row.data(), 1, 32}, spec);
    CHECK(Hex(q.scales[0]) == Hex(uint8_t{0xFF}));
    CHECK(Hex(q.codes[5]) == Hex(uint8_t{pol == NanPolicy::kBlockNan ? uint8_t{0} : uint8_t{7}}));
    spec.amax_order = AmaxOrder::kFoldFirst;  // NaN only from the first element: the block is finite
    const QuantizedTensor f = Quantize({DType::kF32, row.data(), 1, 32}, spec);
    CHECK(f.scales[0] != 0xFF);
    CHECK(Hex(f.codes[31]) == Hex(uint8_t{7}));  // the NaN element converted on its own: the fallback
  }
}

TEST_CASE("amax orders: whole tensors, NVFP4 blocks and the refusals", "[quantize][amax-order]") {
  std::mt19937 g(11);
  const size_t rows = 64, cols = 64;
  std::vector<float> x(rows * cols);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(g);
  for (int s = 0; s < 200; ++s) x[g() % x.size()] = std::nanf("");
  const TensorView view{DType::kF32, x.data(), rows, cols};
  // Quantize and QuantizeMx route an order to the reference: these checks hold the fast entry points to not
  // ignoring it (they would give the order-free result, which the orders differ from).
  SECTION("mxfp8 along rows and columns: Quantize equals QuantizeRef, and the orders differ from each other") {
    for (Axis axis : {Axis::kRow, Axis::kCol}) {
      std::vector<std::vector<uint8_t>> seen;
      for (AmaxOrder o : AllAmaxOrders()) {
        QuantSpec spec = QuantSpecByName("mxfp8");
        spec.nan = NanPolicy::kTe;
        spec.axis = axis;
        spec.amax_order = o;
        const QuantizedTensor q = Quantize(view, spec), r = QuantizeRef(view, spec);
        REQUIRE(std::vector<uint8_t>(q.codes.begin(), q.codes.end()) ==
                std::vector<uint8_t>(r.codes.begin(), r.codes.end()));
        REQUIRE(q.scales == r.scales);
        std::vector<uint8_t> all(q.codes.begin(), q.codes.end());
        all.insert(all.end(), q.scales.begin(), q.scales.end());
        seen.push_back(all);
      }
      for (size_t a = 0; a < seen.size(); ++a)
        for (size_t b = a + 1; b < seen.size(); ++b) CHECK(seen[a] != seen[b]);
    }
  }
  SECTION("nvfp4 with block-nan: a NaN amax makes the block NaN, a finite one sets the E4M3 scale") {
    QuantSpec spec = QuantSpecByName("nvfp4");
    spec.amax_order = AmaxOrder::kFoldLast;
    const QuantizedTensor q = Quantize(view, spec);
    const float s_enc = Nvfp4TensorScale(q.tensor_amax, spec.rule);
    int nan_blocks = 0, dropped = 0;
    for (size_t r = 0; r < rows; ++r)
      for (size_t b = 0; b < cols / 16; ++b) {
        std::vector<float> m(16);
        bool has_nan = false;
        for (size_t i = 0; i < 16; ++i) has_nan |= std::isnan(m[i] = std::fabs(x[r * cols + 16 * b + i]));
        const float a = WarpOrFold(m, AmaxOrder::kFoldLast);
        const uint8_t s = q.scales[r * (cols / 16) + b];
        INFO("row " << r << " block " << b);
        if (std::isnan(a)) {
          REQUIRE(Hex(s) == Hex(uint8_t{0x7F}));
          ++nan_blocks;
        } else {
          REQUIRE(Hex(s) == Hex(Nvfp4BlockScale(a, s_enc, spec.rule)));
          dropped += has_nan;
        }
      }
    CHECK(nan_blocks > 0);
    CHECK(dropped > 0);
  }
  SECTION("refused: a NaN-ignoring policy, 4over6, delayed scaling, bfp, an unknown name") {
    QuantSpec spec = QuantSpecByName("mxfp8");
    spec.amax_order = AmaxOrder::kTreeGt;
    spec.nan = NanPolicy::kIgnoreNan;
    CHECK_THROWS_WITH(Quantize(view, spec), Catch::Contains("drops NaN elements first"));
    MxSpec ms;
    ms.amax_order = AmaxOrder::kFoldLast;
    ms.nan = NanPolicy::kIgnore;
    uint8_t c[32], s[1];
    CHECK_THROWS_WITH(QuantizeMx(DType::kF32, x.data(), 32, ms, c, s), Catch::Contains("drops NaN elements first"));
    QuantSpec four = QuantSpecByName("nvfp4");
    four.rule = ScaleRule::kNvfp4FourOverSix;
    four.amax_order = AmaxOrder::kTreeLt;
    CHECK_THROWS_WITH(ValidateQuantSpec(four), Catch::Contains("4over6"));
    QuantSpec delayed = QuantSpecByName("fp8-delayed");
    delayed.amax_order = AmaxOrder::kFoldFirst;
    CHECK_THROWS_WITH(ValidateQuantSpec(delayed), Catch::Contains("history"));
    CHECK_THROWS_WITH(ParseAmaxOrder("tree"), Catch::Contains("fold-last"));
    QuantSpec bfp = QuantSpecByName("bfp8_b");
    bfp.amax_order = AmaxOrder::kTreeGt;
    CHECK_THROWS_WITH(ValidateQuantSpec(bfp), Catch::Contains("amax orders do not apply"));
  }
  SECTION("the spec's text form and JSON keep the order") {
    SpecOverrides o;
    o.nan_policy = "te";
    o.amax_order = "tree-gt";
    const QuantSpec spec = BuildQuantSpec("mxfp8", o);
    CHECK(spec.amax_order == AmaxOrder::kTreeGt);
    CHECK(DescribeSpec(spec).find("block amax tree-gt") != std::string::npos);
    CHECK(QuantSpecFromJson(QuantSpecToJson(spec, -1)).amax_order == AmaxOrder::kTreeGt);
    CHECK(QuantSpecToJson(QuantSpecByName("mxfp8"), -1).find("amax_order") == std::string::npos);
  }
}
