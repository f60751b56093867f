// test_nvfp4.cc: NVFP4 quantization's block kernel (quantize/mx_simd.cc under E4M3 scales) against
// QuantizeRef: both scale orders, every NaN policy NVFP4 takes, fused and general roundings, FP32/BF16/FP16
// sources, tensor magnitudes from FP32 subnormals to 2^100, a given tensor amax below the real one, 1x16
// and 16x16 blocks, every SIMD target and thread count. The data put block scales on every E4M3 rounding
// boundary, where the two orders differ. Also the public TensorAmax.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::FloatBits;
using qmx::test::Hex;
using qmx::test::TargetGuard;

namespace {

// Blocks of 16 of five kinds, all times `scale`, the tensor amax 2688 * scale (each block's E4M3 scale input
// is fl32(amax * fl32(s_enc / 6)) or fl32((amax / 6) * s_enc), s_enc = 2688 / tensor amax; where scale is a
// power of two the scale inputs land on the E4M3 boundaries exactly, elsewhere 1 / s_enc is inexact and the
// multipliers' orders differ):
//  0: Gaussian times 2^e, e in [-150, 11]: FP32-subnormal, zero-scale (multiplier FLT_MAX) and every
//     E4M3 binade, normal and subnormal;
//  1: amax at 6 x the midpoint between two neighbouring E4M3 values, nudged by -2..2 ulps: the scale
//     lands on, just below and just above a rounding boundary;
//  2: zeros, with a -0 here and there;
//  3: amax 6 x an E4M3 value exactly (scale exact, elements on the E2M1 grid's edges);
//  4: the block holding the tensor amax.
// Specials: a NaN, +Inf and -Inf in three blocks, and a block with both.
std::vector<float> Nvfp4Matrix(size_t rows, size_t cols, uint32_t seed, float scale, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-150, 11), code(0, 125), nudge(-2, 2), kind(0, 3);
  std::uniform_real_distribution<float> frac(0.0f, 1.0f);
  const std::vector<float> e4m3 = DecodeTableF32(fmt::kE4M3);
  std::vector<float> x(rows * cols);
  const size_t blocks = x.size() / 16;
  for (size_t b = 0; b < blocks; ++b) {
    float* v = &x[b * 16];
    const int k = b == blocks / 2 ? 4 : kind(rng);
    if (k == 0) {
      const float s = std::ldexp(1.0f, ex(rng));
      for (int i = 0; i < 16; ++i) v[i] = nd(rng) * s;
    } else if (k == 1 || k == 3) {
      const int c = code(rng);
      float amax = k == 1 ? 3.0f * (e4m3[static_cast<size_t>(c)] + e4m3[static_cast<size_t>(c) + 1]) : 6.0f * e4m3[static_cast<size_t>(c) + 1];
      if (k == 1)
        for (int n = nudge(rng); n != 0; n += n > 0 ? -1 : 1) amax = std::nextafter(amax, n > 0 ? HUGE_VALF : 0.0f);
      for (int i = 0; i < 16; ++i) v[i] = (frac(rng) * 2.0f - 1.0f) * amax;
      v[rng() % 16] = (rng() & 1) ? amax : -amax;
    } else if (k == 2) {
      for (int i = 0; i < 16; ++i) v[i] = (rng() % 5 == 0) ? -0.0f : 0.0f;
    } else {
      for (int i = 0; i < 16; ++i) v[i] = nd(rng) * 300.0f;
      v[3] = -2688.0f;
    }
    for (int i = 0; i < 16; ++i) v[i] *= scale;
  }
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i]) > 2688.0f * scale) x[i] = std::copysign(2688.0f * scale, x[i]);
  if (specials && blocks > 8) {
    x[5 * 16 + 2] = std::nanf("");
    x[6 * 16 + 9] = HUGE_VALF;
    x[7 * 16 + 0] = -HUGE_VALF;
    x[8 * 16 + 4] = -std::nanf("");
    x[8 * 16 + 5] = HUGE_VALF;
  }
  return x;
}

// 16x16 blocks: Nvfp4Matrix with every row but the first of each strip of 16 rows times 1/4, so that each
// block's amax is its first row's piece, and that piece's kind (above) puts the block's scale on, just
// below or just above an E4M3 rounding boundary, as it does for 1x16 blocks. The specials lie in row 0.
std::vector<float> Nvfp4Matrix2D(size_t rows, size_t cols, uint32_t seed, float scale, bool specials) {
  std::vector<float> x = Nvfp4Matrix(rows, cols, seed, scale, specials);
  for (size_t r = 0; r < rows; ++r)
    if (r % 16 != 0)
      for (size_t c = 0; c < cols; ++c) x[r * cols + c] *= 0.25f;
  return x;
}

struct Source {
  DType type;
  std::vector<uint16_t> half;  // BF16 or FP16 bits
  const void* data(const std::vector<float>& f) const { return type == DType::kF32 ? static_cast<const void*>(f.data()) : half.data(); }
};

Source MakeSource(DType t, const std::vector<float>& x) {
  Source s{t, {}};
  if (t == DType::kF32) return s;
  CastOptions keep;
  keep.saturation = Saturation::kNoSat;
  s.half.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    s.half[i] = static_cast<uint16_t>(ConvertF32(x[i], t == DType::kBF16 ? fmt::kBF16 : fmt::kFP16, keep));
  return s;
}

void CheckSameNvfp4(const QuantizedTensor& a, const QuantizedTensor& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.codes.size() == b.codes.size());
  REQUIRE(a.scales.size() == b.scales.size());
  size_t bad = 0, bad_scales = 0;
  for (size_t i = 0; i < a.codes.size(); ++i) {
    if (a.codes[i] != b.codes[i] && ++bad <= 3) {
      INFO("element " << i << " code " << Hex(a.codes[i]) << " want " << Hex(b.codes[i]));
      CHECK(false);
    }
  }
  for (size_t i = 0; i < a.scales.size(); ++i) {
    if (a.scales[i] != b.scales[i] && ++bad_scales <= 3) {
      INFO("scale " << i << " " << Hex(a.scales[i]) << " want " << Hex(b.scales[i]));
      CHECK(false);
    }
  }
  CHECK(bad == 0);
  CHECK(bad_scales == 0);
  CHECK(FloatBits(a.tensor_amax) == FloatBits(b.tensor_amax));
  CHECK(FloatBits(a.tensor_decode) == FloatBits(b.tensor_decode));
}

QuantSpec Nvfp4Spec(ScaleRule rule, NanPolicy nan, Rounding r, int block_rows = 1) {
  QuantSpec s = QuantSpecByName(block_rows == 16 ? "nvfp4-2d" : "nvfp4");
  s.rule = rule;
  s.nan = nan;
  s.cast.rounding = r;
  s.seed = 4242;
  return s;
}

std::string Name(const QuantSpec& s, DType t, float scale, size_t rows, size_t cols) {
  return DescribeSpec(s) + " " + DTypeName(t) + " scale " + Hex(FloatBits(scale)) + " " + std::to_string(rows) + "x" +
         std::to_string(cols);
}

// Tensor magnitudes: exact powers of two from FP32 subnormals (s_enc = FLT_MAX, s_dec subnormal) to 2^100,
// and two that make 1 / s_enc inexact.
const float kScales[] = {1.0f, 0x1p-140f, 0x1p-100f, 0x1p100f, 0.7123f, 3.3e-5f};

constexpr ScaleRule kRules[] = {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div, ScaleRule::kNvfp4Torchao, ScaleRule::kNvfp4TorchaoCuda};

}  // namespace

// check(what) on every SIMD target at each thread count, `what` naming the target and thread count.
template <class Check>
void OnEveryTarget(std::initializer_list<int> thread_counts, const std::string& what, Check&& check) {
  for (const std::string& target : SimdTargets()) {
    ForceSimdTarget(target);
    for (int threads : thread_counts) {
      omp_set_num_threads(threads);
      check(what + " " + target + " threads " + std::to_string(threads));
    }
  }
  ForceSimdTarget("");
}

// x (rows x cols, at magnitude `scale`) from each source type, under every scale rule, NaN policy and
// rounding NVFP4 takes (RNE and SR-A fused, RZ through the general tiers), sequential and parallel, against
// the reference.
void CheckEverySpec(const std::vector<float>& x, size_t rows, size_t cols, float scale, int block_rows) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (t == DType::kF16 && (scale < 1e-4f || scale > 1.0f)) continue;  // outside FP16's range
    const Source src = MakeSource(t, x);
    const TensorView v{t, src.data(x), rows, cols};
    for (ScaleRule rule : kRules) {
      for (NanPolicy nan : {NanPolicy::kBlockNan, NanPolicy::kIgnoreNan, NanPolicy::kIgnore}) {
        for (Rounding r : {Rounding::kRne, Rounding::kSrA, Rounding::kRz}) {
          const QuantSpec spec = Nvfp4Spec(rule, nan, r, block_rows);
          const QuantizedTensor want = QuantizeRef(v, spec);
          const std::string what = Name(spec, t, scale, rows, cols);
          CheckSameNvfp4(Quantize(v, spec, Exec::kSequential), want, what);
          CheckSameNvfp4(Quantize(v, spec, Exec::kParallel), want, what + " parallel");
        }
      }
    }
  }
}

TEST_CASE("quantize: NVFP4 quantization equals the reference: both orders, NaN policies, roundings, sources, magnitudes",
          "[quantize][nvfp4]") {
  // 64 x 1024: 4096 blocks, two of the kernel's runs of 2048 blocks; 40 x 200: ragged rows (strip path).
  const std::pair<size_t, size_t> shapes[] = {{64, 1024}, {40, 200}};
  for (const auto& [rows, cols] : shapes) {
    for (float scale : kScales)
      CheckEverySpec(Nvfp4Matrix(rows, cols, static_cast<uint32_t>(rows) + FloatBits(scale), scale, true), rows, cols, scale, 1);
  }
}

TEST_CASE("quantize: NVFP4 16x16 blocks equal the reference: strips in place, ragged strips and groups, fallbacks",
          "[quantize][nvfp4]") {
  // The strip kernel (quantize/nvfp4_strip_simd.cc, Nvfp4StripLoop) takes columns that the blocks tile: 64 x 1024 (4
  // strips of 64 blocks), 40 x 208 (a last strip of 8 rows; 13 blocks a strip, fewer than a vector's
  // lanes), 17 x 48 (a last strip of one row). 40 x 200 does not tile and takes the gathered strips, as
  // RZ (not a fused rounding) does everywhere.
  const std::pair<size_t, size_t> shapes[] = {{64, 1024}, {40, 208}, {17, 48}, {40, 200}};
  for (const auto& [rows, cols] : shapes) {
    for (float scale : kScales) {
      const uint32_t seed = static_cast<uint32_t>(rows + cols) + FloatBits(scale);
      CheckEverySpec(Nvfp4Matrix2D(rows, cols, seed, scale, true), rows, cols, scale, 16);
    }
  }
}

TEST_CASE("quantize: NVFP4 16x16 blocks on every SIMD target: ragged strips and groups", "[quantize][nvfp4][simd]") {
  TargetGuard guard;
  const size_t rows = 40, cols = 208;
  const std::vector<float> x = Nvfp4Matrix2D(rows, cols, 9, 0.7123f, true);
  const TensorView v{DType::kF32, x.data(), rows, cols};
  for (ScaleRule rule : kRules) {
    for (NanPolicy nan : {NanPolicy::kBlockNan, NanPolicy::kIgnore}) {
      for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
        const QuantSpec spec = Nvfp4Spec(rule, nan, r, 16);
        const QuantizedTensor want = QuantizeRef(v, spec);
        // A given amax below the real one: the blocks' maxima from the data, and saturated scales.
        const QuantizedTensor want_given = QuantizeNvfp4WithAmaxRef(v, spec, 1000.0f);
        OnEveryTarget({1, 2}, DescribeSpec(spec), [&](const std::string& what) {
          CheckSameNvfp4(Quantize(v, spec), want, what);
          CheckSameNvfp4(QuantizeNvfp4WithAmax(v, spec, 1000.0f), want_given, what + " amax given");
        });
      }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("quantize: NVFP4 quantization with a given tensor amax equals the reference, saturated scales included",
          "[quantize][nvfp4]") {
  const size_t rows = 32, cols = 512;
  const std::vector<float> x = Nvfp4Matrix(rows, cols, 11, 1.0f, false);
  const TensorView v{DType::kF32, x.data(), rows, cols};
  // The real amax is 2688: smaller amaxes push block scales past 448 (and, at 1e-37, their inputs to Inf).
  // 16x16 blocks: the strip kernel takes each block's maximum from the data (no amax pass to give it).
  for (float amax : {2688.0f, 100.0f, 1.0f, 1e-37f, 0.0f, 1e30f, 3001.7f}) {
    for (ScaleRule rule : kRules) {
      for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
        for (int block_rows : {1, 16}) {
          const QuantSpec spec = Nvfp4Spec(rule, NanPolicy::kIgnore, r, block_rows);
          const QuantizedTensor want = QuantizeNvfp4WithAmaxRef(v, spec, amax);
          const std::string what = DescribeSpec(spec) + " amax " + std::to_string(amax);
          CheckSameNvfp4(QuantizeNvfp4WithAmax(v, spec, amax, Exec::kSequential), want, what);
          CheckSameNvfp4(QuantizeNvfp4WithAmax(v, spec, amax, Exec::kParallel), want, what + " parallel");
        }
      }
    }
  }
  // A user's amax that is negative, NaN or infinite, or 0 on nonzero data, is refused (it flipped every sign,
  // gave all NaN, or quantized everything to 0); 0 on all-zero data is the data's own amax, and a calibrated
  // amax below the data's saturates.
  const QuantSpec spec = Nvfp4Spec(ScaleRule::kNvfp4, NanPolicy::kIgnore, Rounding::kRne, 1);
  for (float bad : {-1.0f, -1e-30f, 0.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    INFO("amax " << bad);
    CHECK_THROWS_AS(CheckGivenAmax(v, spec, bad), Error);
  }
  const std::vector<float> zeros(rows * cols, 0.0f);
  CHECK_NOTHROW(CheckGivenAmax(TensorView{DType::kF32, zeros.data(), rows, cols}, spec, 0.0f));
  CHECK_NOTHROW(CheckGivenAmax(v, spec, 1e-37f));
}

TEST_CASE("quantize: NVFP4 quantization equals the reference on every SIMD target and thread count",
          "[quantize][nvfp4][simd]") {
  TargetGuard guard;
  const size_t rows = 64, cols = 1024;
  const std::vector<float> x = Nvfp4Matrix(rows, cols, 5, 0.7123f, true);
  const TensorView v{DType::kF32, x.data(), rows, cols};
  for (ScaleRule rule : kRules) {
    for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
      for (int block_rows : {1, 16}) {
        for (Axis axis : {Axis::kRow, Axis::kCol}) {
          QuantSpec spec = Nvfp4Spec(rule, NanPolicy::kIgnoreNan, r, block_rows);
          spec.axis = axis;
          const QuantizedTensor want = QuantizeRef(v, spec);
          OnEveryTarget({1, 2, 3}, DescribeSpec(spec), [&](const std::string& what) { CheckSameNvfp4(Quantize(v, spec), want, what); });
        }
      }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

// The amax pass keeps every block's maximum for the quantize pass (quantize/amax_simd.cc, AmaxBitsOfBlocks):
// chunks of whole vectors of maxima, then the blocks left over one at a time. Tensors of 1 to 2048 + 37
// blocks put the leftovers at every count, with NaN and Inf in the last blocks (left over, or the last
// chunk's), under each NaN policy, on every target.
TEST_CASE("quantize: NVFP4 block maxima from the amax pass: leftover blocks and specials at the end",
          "[quantize][nvfp4][simd]") {
  TargetGuard guard;
  for (size_t blocks : {size_t{1}, size_t{5}, size_t{21}, size_t{63}, size_t{64}, size_t{65}, size_t{129}, size_t{2048 + 37}}) {
    const size_t rows = blocks % 2 == 0 ? 2 : 1, cols = blocks * 16 / rows;
    std::vector<float> x = Nvfp4Matrix(rows, cols, static_cast<uint32_t>(blocks), 1.0f, false);
    const size_t n = x.size();
    for (int special = 0; special < 3; ++special) {
      if (special == 1) x[n - 3] = std::nanf("");
      if (special == 2) x[n - 20 < n ? n - 20 : 0] = -HUGE_VALF;
      for (DType t : {DType::kF32, DType::kBF16}) {
        const Source src = MakeSource(t, x);
        const TensorView v{t, src.data(x), rows, cols};
        for (NanPolicy nan : {NanPolicy::kBlockNan, NanPolicy::kIgnoreNan, NanPolicy::kIgnore}) {
          const QuantSpec spec = Nvfp4Spec(ScaleRule::kNvfp4, nan, Rounding::kRne);
          const QuantizedTensor want = QuantizeRef(v, spec);
          for (const std::string& target : SimdTargets()) {
            ForceSimdTarget(target);
            CheckSameNvfp4(Quantize(v, spec, Exec::kSequential), want,
                      Name(spec, t, 1.0f, rows, cols) + " special " + std::to_string(special) + " " + target);
          }
          ForceSimdTarget("");
        }
      }
    }
  }
}

// Past 2^23 codes the quantize pass stores its codes non-temporally (kStreamCodes), whole 64-byte lines
// (CodeVector's storage is line-aligned); the tensor here is 2^23 + 2^12 elements, so the last run is partial.
TEST_CASE("quantize: NVFP4 quantization past the non-temporal threshold equals the reference",
          "[quantize][nvfp4][simd]") {
  TargetGuard guard;
  const size_t rows = 2049, cols = 4096;
  const std::vector<float> x = Nvfp4Matrix(rows, cols, 77, 0.7123f, true);
  const TensorView v{DType::kF32, x.data(), rows, cols};
  const int saved = omp_get_max_threads();
  // 1x16 blocks under RNE and SR; 16x16 blocks (the strip kernel's non-temporal stores) under RNE.
  for (const auto& [r, block_rows] : {std::pair{Rounding::kRne, 1}, std::pair{Rounding::kSrA, 1}, std::pair{Rounding::kRne, 16}}) {
    const QuantSpec spec = Nvfp4Spec(ScaleRule::kNvfp4, NanPolicy::kIgnoreNan, r, block_rows);
    const QuantizedTensor want = QuantizeRef(v, spec);
    OnEveryTarget({1, 2}, DescribeSpec(spec), [&](const std::string& what) {
      const QuantizedTensor got = Quantize(v, spec);
      CHECK(reinterpret_cast<uintptr_t>(got.codes.data()) % 64 == 0);
      CheckSameNvfp4(got, want, what);
    });
  }
  omp_set_num_threads(saved);
}

TEST_CASE("quantize: the NVFP4 test data separate the two scale orders", "[quantize][nvfp4]") {
  // Were the kernel to swap nvfp4's order for nvfp4-div's (or the reverse), the tests above would see it:
  // on these data the two orders give different scales.
  const size_t rows = 64, cols = 1024;
  const std::vector<float> x = Nvfp4Matrix(rows, cols, 5, 1.0f, false);
  const TensorView v{DType::kF32, x.data(), rows, cols};
  const QuantizedTensor a = QuantizeRef(v, Nvfp4Spec(ScaleRule::kNvfp4, NanPolicy::kIgnore, Rounding::kRne));
  const QuantizedTensor b = QuantizeRef(v, Nvfp4Spec(ScaleRule::kNvfp4Div, NanPolicy::kIgnore, Rounding::kRne));
  size_t differ = 0;
  for (size_t i = 0; i < a.scales.size(); ++i) differ += a.scales[i] != b.scales[i];
  INFO("blocks whose scale differs between the orders: " << differ << " of " << a.scales.size());
  CHECK(differ >= 10);
}

namespace {

float F(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Quantizes one row: block 0 holds the tensor amax, block 1 the given values (padded with zeros), and
// returns block 1's scale byte and codes, through `Quantize` on the current target and through the
// reference (which must agree).
std::pair<uint8_t, std::vector<uint8_t>> SecondBlock(float tensor_amax, const std::vector<float>& block,
                                                     ScaleRule rule) {
  std::vector<float> x(32, 0.0f);
  x[0] = tensor_amax;
  for (size_t i = 0; i < block.size(); ++i) x[16 + i] = block[i];
  const TensorView v{DType::kF32, x.data(), 1, 32};
  const QuantSpec spec = Nvfp4Spec(rule, NanPolicy::kIgnore, Rounding::kRne);
  const QuantizedTensor q = Quantize(v, spec), r = QuantizeRef(v, spec);
  CHECK(q.scales == r.scales);
  CHECK(q.codes == r.codes);
  return {q.scales[1], std::vector<uint8_t>(q.codes.begin() + 16, q.codes.begin() + 16 + block.size())};
}

}  // namespace

TEST_CASE("quantize: NVFP4 op orders: known answers on which the kernel order, the divide-first order and their "
          "neighbours differ", "[quantize][nvfp4][orders]") {
  // Vectors computed outside qmx (a standalone C++ program with the CUDA 13 host conversion
  // __nv_cvt_float_to_fp8 for E4M3, and again in NumPy float32), each in the op order of Transformer
  // Engine's NVFP4 kernel (core_nvfp4.cuh: s8 = e4m3(fl(b * fl(S * fl(1/6)))), encode
  // fl(1 / fl(s8 * fl(1 / S)))) and of the divide-first order (s8 = e4m3(fl(fl(b / 6) * S)), encode
  // fl(S / s8)). Each case names the alternative order it rules out.
  TargetGuard guard;
  const std::string target = GENERATE(from_range(SimdTargets()));
  CAPTURE(target);
  ForceSimdTarget(target);
  INFO("target " << target);
  // fl(S * fl(1/6)) = 0x3F0F700A but fl(S / 6) = 0x3F0F7009: b * that lands on 168 exactly, a tie that
  // rounds down to 160 (0x72); the kernel order gives 0x43280001 -> 176 (0x73). Rules out S / 6.
  CHECK(SecondBlock(F(0x4447E449), {F(0x4395EB37)}, ScaleRule::kNvfp4).first == 0x73);
  // S = 1: the kernel order's fl(b * fl(1/6)) = 0.296875 exactly (a tie -> 0x2A), fl(b / 6) is one ulp
  // below (-> 0x29). Rules out the other order for each rule.
  CHECK(SecondBlock(F(0x45280000), {F(0x3FE3FFFF)}, ScaleRule::kNvfp4).first == 0x2A);
  CHECK(SecondBlock(F(0x45280000), {F(0x3FE3FFFF)}, ScaleRule::kNvfp4Div).first == 0x29);
  CHECK(SecondBlock(F(0x422C92ED), {F(0x3D3F1061)}, ScaleRule::kNvfp4).first == 0x30);
  CHECK(SecondBlock(F(0x422C92ED), {F(0x3D3F1061)}, ScaleRule::kNvfp4Div).first == 0x2F);
  // torchao's fl(fl(b / 6) / fl(amax / 2688)) gives 0x3C here; the kernel order 0x3D.
  CHECK(SecondBlock(F(0x410A9325), {F(0x3CF77479)}, ScaleRule::kNvfp4).first == 0x3D);
  // The encode factor: with s8 = 0x69 (72) under S = fl(2688 / 0x419AE321), the kernel's
  // fl(1 / fl(72 * fl(1 / S))) = 0x3FF6D20A puts x = 0x3EC72405 at 0.75 exactly (a tie -> 1.0, code 2);
  // fl(S / 72) = 0x3FF6D209 puts it one ulp below (-> 0.5, code 1). Rules out S / s8 for nvfp4 and
  // 1 / (s8 / S) for nvfp4-div.
  const float t = F(0x419AE321), block_amax = 3.111f;
  for (ScaleRule r : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
    const auto [s8, codes] = SecondBlock(t, {block_amax, F(0x3EC72405)}, r);
    REQUIRE(s8 == 0x69);
    CHECK(codes[1] == (r == ScaleRule::kNvfp4 ? 0x2 : 0x1));
  }
  CHECK(Nvfp4EncodeFactor(0x69, Nvfp4TensorEncodeScale(t), ScaleRule::kNvfp4) == F(0x3FF6D20A));
  CHECK(Nvfp4EncodeFactor(0x69, Nvfp4TensorEncodeScale(t), ScaleRule::kNvfp4Div) == F(0x3FF6D209));
  // A block far below the tensor amax: s8 = 0; the kernel's encode factor is FLT_MAX, so 1e-6 saturates
  // to 6 (code 7); the divide-first order's is 0 (code 0).
  CHECK(SecondBlock(1.0f, {F(0x358637BD)}, ScaleRule::kNvfp4) == std::make_pair(uint8_t{0}, std::vector<uint8_t>{0x7}));
  CHECK(SecondBlock(1.0f, {F(0x358637BD)}, ScaleRule::kNvfp4Div) == std::make_pair(uint8_t{0}, std::vector<uint8_t>{0x0}));
}

TEST_CASE("quantize: NVFP4 dequantization order: TE's fl(code * fl(fl(s8 * amax) * fl(1/2688))), not torchao's "
          "fl(code * fl(fl(amax / 2688) * s8))", "[quantize][nvfp4][orders]") {
  // Tensor amax 0x441A72C5, block scale 0x4C (6), element code 0x4 (2): TE (dequantize_nvfp4.cuh) gives
  // 0x4030832B, torchao's order 0x4030832A (computed outside qmx with CUDA's E4M3 decoding; the orders
  // differ on a third of random cases).
  const float amax = F(0x441A72C5);
  CHECK(FloatBits(Nvfp4DecodeScale(0x4C, amax)) == 0x3FB0832Bu);
  volatile float p = amax / 2688.0f, ts = p * 6.0f;
  CHECK(FloatBits(2.0f * ts) == 0x4030832Au);  // torchao's order, for contrast
  const std::vector<uint8_t> codes(16, 0x4), scales{0x4C};
  const QuantizedTensor q = AssembleQuantized(QuantSpecByName("nvfp4"), {1, 16}, codes, scales, amax);
  std::vector<float> out(16), ref(16);
  Dequantize(q, out.data());
  DequantizeRef(q, ref.data());
  CHECK(FloatBits(out[0]) == 0x4030832Bu);
  CHECK(FloatBits(ref[0]) == 0x4030832Bu);
}

// The public tensor amax (qmx::TensorAmax) against its one-element-at-a-time reference and an independent
// loop here, and against the amax that Quantize records: FP32, BF16 and FP16 sources; sizes below, at and
// above the fast path's 2^18-element chunks (several chunks on two threads); NaN, +-Inf, -0 and FP32
// subnormals placed at the start, the end and across a chunk boundary; every NaN policy; every target.
TEST_CASE("quantize: tensorAmax equals its reference and Quantize's tensor amax: sources, policies, specials, targets",
          "[quantize][nvfp4][simd]") {
  TargetGuard guard;
  std::mt19937 rng(2027);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const NanPolicy policies[] = {NanPolicy::kBlockNan, NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan,
                                NanPolicy::kIgnore};
  for (size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{1} << 18, (size_t{1} << 19) + 16 * 41}) {
    for (int special = 0; special < 5; ++special) {
      std::vector<float> x(n);
      for (float& v : x) v = nd(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
      if (n > 0 && special == 1) x[n - 1] = std::nanf("");                     // NaN last
      if (n > 0 && special == 2) x[0] = -HUGE_VALF;                            // -Inf first
      if (n > (size_t{1} << 18) && special == 3) {                             // both, across a chunk boundary
        x[(size_t{1} << 18) - 1] = HUGE_VALF;
        x[size_t{1} << 18] = -std::nanf("");
      }
      if (special == 4) {                                                      // tiny values only
        for (float& v : x) v = std::ldexp(nd(rng), -140);                      // FP32 subnormals and -0
        if (n > 2) x[n / 2] = -0.0f;
      }
      for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        const Source src = MakeSource(t, x);
        const TensorView v{t, src.data(x), 1, n};
        for (NanPolicy nan : policies) {
          // Independent: decode each element, skip NaN (and Inf where the policy drops it).
          float want = 0.0f;
          for (size_t i = 0; i < n; ++i) {
            const float e = t == DType::kF32 ? x[i] : static_cast<float>(DecodeToDouble(t == DType::kBF16 ? fmt::kBF16 : fmt::kFP16, src.half[i]));
            if (std::isnan(e) || (std::isinf(e) && (nan == NanPolicy::kBlockNan || nan == NanPolicy::kIgnore))) continue;
            want = std::max(want, std::fabs(e));
          }
          const std::string what = std::string(DTypeName(t)) + " n=" + std::to_string(n) + " special=" + std::to_string(special) +
                                   " nan=" + std::to_string(static_cast<int>(nan));
          INFO(what);
          REQUIRE(FloatBits(TensorAmaxRef(v, nan)) == FloatBits(want));
          OnEveryTarget({2}, what, [&](const std::string& where) {
            INFO(where);
            CHECK(FloatBits(TensorAmax(v, nan, Exec::kSequential)) == FloatBits(want));
            CHECK(FloatBits(TensorAmax(v, nan, Exec::kParallel)) == FloatBits(want));
          });
          omp_set_num_threads(omp_get_num_procs());
          if (n > 0 && n % 16 == 0 && (nan == NanPolicy::kBlockNan || nan == NanPolicy::kIgnoreNan)) {
            QuantSpec spec = QuantSpecByName("nvfp4");
            spec.nan = nan;
            CHECK(FloatBits(Quantize(v, spec).tensor_amax) == FloatBits(want));
          }
        }
      }
    }
  }
}

// The two-pass quantizer on FP32 input at every 4-byte offset from a 64-byte line (NumPy's and std::vector's
// large buffers sit 16 bytes past one; a kernel that reads whole aligned lines must form the same vectors):
// two runs of blocks (the second partial), Gaussian data with outliers (long fused runs) and a NaN, an Inf
// and a zero block that cut them, both scale orders, RNE and SR, every target, one and two threads, against
// the reference on the same values.
TEST_CASE("quantize: NVFP4 quantization of FP32 input at every 4-byte offset from a 64-byte line equals the reference",
          "[quantize][nvfp4][simd]") {
  TargetGuard guard;
  const size_t rows = 2, cols = 16 * 1066;  // 2048 + 84 blocks of 16, whole blocks per row
  std::vector<float> x(rows * cols);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 97 == 0 ? 40.0f : 1.0f);
  x[16 * 300 + 5] = std::nanf("");
  x[16 * 1500 + 9] = HUGE_VALF;
  std::fill(x.begin() + 16 * 2100, x.begin() + 16 * 2101, 0.0f);
  std::vector<unsigned char> raw(x.size() * 4 + 128);
  unsigned char* line = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;
  for (ScaleRule rule : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
    for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
      const QuantSpec spec = Nvfp4Spec(rule, NanPolicy::kIgnoreNan, r);
      const QuantizedTensor want = QuantizeRef(TensorView{DType::kF32, x.data(), rows, cols}, spec);
      for (size_t off = 0; off < 64; off += 4) {
        std::memcpy(line + off, x.data(), x.size() * 4);
        const TensorView v{DType::kF32, line + off, rows, cols};
        OnEveryTarget({1, 2}, DescribeSpec(spec) + " offset " + std::to_string(off),
                      [&](const std::string& what) { CheckSameNvfp4(Quantize(v, spec), want, what); });
      }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}
