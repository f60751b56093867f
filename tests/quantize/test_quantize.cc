// test_quantize.cc: the quantize layer. The fast tensor quantizer against the reference for every recipe,
// axis, source type and ragged shape; dequantize and fake-quantize round trips; row-wise against
// column-wise on the transposed input; thread-count independence; each library profile on the behaviour
// it pins; packing; the cuBLASLt scale layouts; clear errors.
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
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "support/codes.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::BitsFloat;
using qmx::test::FloatBits;
using qmx::test::Hex;
using qmx::test::TargetGuard;

namespace {

// Rows of different kinds: Gaussian, heavy-tailed with a wide exponent range, zeros, FP32 subnormals, a
// NaN here and an Inf there.
std::vector<float> MakeMatrix(size_t rows, size_t cols, uint32_t seed, bool specials = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::student_t_distribution<float> td(2.0f);
  std::uniform_int_distribution<int> ex(-130, 100);
  std::vector<float> x(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    const float sc = std::ldexp(1.0f, ex(rng));
    for (size_t c = 0; c < cols; ++c) {
      float v = (r % 5 == 1) ? td(rng) * sc : nd(rng);
      if (r % 7 == 3) v = 0.0f;
      if (r % 11 == 4) v = nd(rng) * 1e-41f;
      x[r * cols + c] = v;
    }
  }
  if (specials && rows * cols > 40) {
    x[17] = std::nanf("");
    x[rows * cols - 3] = -HUGE_VALF;
  }
  return x;
}

bool SameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || FloatBits(a) == FloatBits(b); }

std::string Where(const QuantSpec& s, const TensorView& x) {
  return DescribeSpec(s) + " on " + std::to_string(x.rows) + "x" + std::to_string(x.cols) + " " + DTypeName(x.dtype);
}

void CheckSameQuantized(const QuantizedTensor& a, const QuantizedTensor& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.codes.size() == b.codes.size());
  REQUIRE(a.scales.size() == b.scales.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.codes.size(); ++i) {
    if (a.codes[i] != b.codes[i] && ++bad <= 3) {
      INFO("element " << i << " (" << i / a.cols << ", " << i % a.cols << ") code " << Hex(a.codes[i]) << " want "
                      << Hex(b.codes[i]));
      CHECK(false);
    }
  }
  CHECK(bad == 0);
  CHECK(a.scales == b.scales);
  CHECK(FloatBits(a.tensor_amax) == FloatBits(b.tensor_amax));
}

}  // namespace

TEST_CASE("quantize: quantize equals the reference for every recipe, axis, source type and ragged shape",
          "[quantize]") {
  const std::pair<size_t, size_t> shapes[] = {{37, 70}, {130, 45}, {1, 1}, {3, 200}, {16, 32}};
  for (const auto& [rows, cols] : shapes) {
    const std::vector<float> xf = MakeMatrix(rows, cols, static_cast<uint32_t>(rows * 131 + cols));
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = static_cast<uint16_t>(FloatBits(xf[i]) >> 16);
    for (const std::string& name : QuantSpecNames()) {
      if (name == "fp8-delayed") continue;
      for (Axis axis : {Axis::kRow, Axis::kCol}) {
        for (int variant = 0; variant < 3; ++variant) {
          QuantSpec spec = QuantSpecByName(name);
          spec.axis = axis;
          spec.seed = 99;
          const bool bfp = spec.rule == ScaleRule::kBfp;  // tt-metal's packer: rne or rz, no NaN policy
          if (variant == 1) spec.cast.rounding = bfp ? Rounding::kRz : Rounding::kSrA;
          if (variant == 2 && bfp) continue;
          if (variant == 2) spec.nan = IsPow2Rule(spec.rule) ? NanPolicy::kTe : NanPolicy::kIgnoreNan;
          for (DType t : {DType::kF32, DType::kBF16}) {
            const TensorView x{t, t == DType::kF32 ? static_cast<const void*>(xf.data()) : xb.data(), rows, cols};
            const QuantizedTensor want = QuantizeRef(x, spec);
            const std::string what = Where(spec, x);
            CheckSameQuantized(Quantize(x, spec, Exec::kSequential), want, what);
            CheckSameQuantized(Quantize(x, spec, Exec::kParallel), want, what + " parallel");
            std::vector<float> dq(xf.size()), dq_ref(xf.size()), fq(xf.size());
            Dequantize(want, dq.data());
            DequantizeRef(want, dq_ref.data());
            FakeQuantize(x, spec, fq.data());
            size_t bad = 0;
            for (size_t i = 0; i < dq.size(); ++i) bad += !SameFloat(dq[i], dq_ref[i]) || !SameFloat(fq[i], dq[i]);
            INFO(what << ": dequantize / fake-quantize mismatches " << bad);
            CHECK(bad == 0);
          }
        }
      }
    }
  }
}

// The fast path does not zero its codes before writing them (CodeVector): every route must write each one.
// Before each call freed blocks of the codes' size and alignment full of 0xA5 wait on the heap, and a probe
// shows that a CodeVector of that size takes one back unwritten; a code the route skipped would then differ
// from the reference's. Whether the allocator hands a poisoned block back depends on its state (glibc; blocks
// under about 1 KB come back holding its own words, so every shape here has 2,500 codes or more; run after
// many other tests in one process a size may miss), so the probe must succeed for one shape at least.
TEST_CASE("quantize: Quantize writes every code: none is left over from the heap", "[quantize]") {
  const std::pair<size_t, size_t> shapes[] = {{37, 70}, {64, 1024}, {48, 64}, {130, 48}};
  const auto poison = [](size_t n) {  // blocks of the codes' kind (64-byte aligned), then freed
    std::vector<CodeVector> junk(4);
    for (CodeVector& j : junk) {
      j.resize(n);
      std::fill(j.begin(), j.end(), uint8_t{0xA5});
    }
    volatile uint8_t keep = junk[0][n / 2];
    (void)keep;
  };
  size_t poisoned_shapes = 0;
  for (const auto& [rows, cols] : shapes) {
    const std::vector<float> xf = MakeMatrix(rows, cols, static_cast<uint32_t>(rows + cols));
    const TensorView x{DType::kF32, xf.data(), rows, cols};
    const size_t n = rows * cols;
    poison(n);
    CodeVector probe;
    probe.resize(n);
    size_t dirty = 0;
    for (uint8_t b : probe) dirty += b == 0xA5;
    INFO(rows << "x" << cols << ": the probe found " << dirty << " poisoned bytes");
    poisoned_shapes += dirty > n / 2;
    probe = CodeVector();
    for (const std::string& name : QuantSpecNames()) {
      if (name == "fp8-delayed") continue;
      for (Axis axis : {Axis::kRow, Axis::kCol}) {
        QuantSpec spec = QuantSpecByName(name);
        spec.axis = axis;
        const QuantizedTensor want = QuantizeRef(x, spec);
        for (Exec e : {Exec::kSequential, Exec::kParallel}) {
          poison(n);
          CheckSameQuantized(Quantize(x, spec, e), want, Where(spec, x) + (e == Exec::kParallel ? " parallel" : ""));
        }
      }
    }
  }
#if defined(__SANITIZE_ADDRESS__)
  (void)poisoned_shapes;  // AddressSanitizer quarantines freed blocks; it fills new ones with 0xbe itself
#else
  INFO("shapes whose probe came back poisoned: " << poisoned_shapes << " of 4");
  CHECK(poisoned_shapes >= 1);
#endif
}

TEST_CASE("quantize: quantize equals the reference on every SIMD target and thread count", "[quantize][simd]") {
  TargetGuard guard;
  const size_t rows = 96, cols = 160;
  const std::vector<float> xf = MakeMatrix(rows, cols, 7);
  const TensorView x{DType::kF32, xf.data(), rows, cols};
  for (const char* name : {"mxfp8", "mxfp4", "nvfp4", "nvfp4-2d", "fp8-block1x128"}) {
    QuantSpec spec = QuantSpecByName(name);
    spec.axis = Axis::kCol;
    spec.cast.rounding = Rounding::kSrA;
    const QuantizedTensor want = QuantizeRef(x, spec);
    for (const std::string& t : SimdTargets()) {
      ForceSimdTarget(t);
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        CheckSameQuantized(Quantize(x, spec), want, std::string(name) + " " + t + " threads " + std::to_string(threads));
      }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("quantize: row-wise quantization of X^T equals column-wise quantization of X, transposed", "[quantize]") {
  const size_t rows = 70, cols = 45;
  const std::vector<float> x = MakeMatrix(rows, cols, 3);
  std::vector<float> xt(x.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  const char* const name = GENERATE(values<const char*>({"mxfp8", "mxfp6_e3m2", "nvfp4", "fp8-block1x128", "fp8-block128x128", "fp8-rowwise"}));
  CAPTURE(name);
  QuantSpec col = QuantSpecByName(name);
  col.axis = Axis::kCol;
  const QuantSpec row = QuantSpecByName(name);
  const QuantizedTensor qc = Quantize({DType::kF32, x.data(), rows, cols}, col);
  const QuantizedTensor qr = Quantize({DType::kF32, xt.data(), cols, rows}, row);
  INFO(name);
  REQUIRE(qc.scale_rows == qr.scale_cols);
  REQUIRE(qc.scale_cols == qr.scale_rows);
  size_t bad = 0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) bad += qc.codes[r * cols + c] != qr.codes[c * rows + r];
  for (size_t i = 0; i < qc.scale_rows; ++i)
    for (size_t j = 0; j < qc.scale_cols; ++j) bad += !SameFloat(qc.ScaleAt(i, j), qr.ScaleAt(j, i));
  CHECK(bad == 0);
}

TEST_CASE("quantize: A column-wise MX copy is not the transpose of the row-wise one", "[quantize]") {
  // MXFP8 recipes and NVIDIA FP8 talk (docs/REFERENCES.md section 3): each tensor is quantized twice from the high-precision source.
  const size_t n = 64;
  const std::vector<float> x = MakeMatrix(n, n, 5, false);
  QuantSpec col = QuantSpecByName("mxfp8");
  col.axis = Axis::kCol;
  const QuantizedTensor qr = Quantize({DType::kF32, x.data(), n, n}, QuantSpecByName("mxfp8"));
  const QuantizedTensor qc = Quantize({DType::kF32, x.data(), n, n}, col);
  std::vector<float> dr(n * n), dc(n * n);
  Dequantize(qr, dr.data());
  Dequantize(qc, dc.data());
  size_t differ = 0;
  for (size_t i = 0; i < n * n; ++i) differ += FloatBits(dr[i]) != FloatBits(dc[i]);
  CHECK(differ > 0);
}

TEST_CASE("quantize: profiles reproduce the library behaviour they name", "[quantize][profile]") {
  const auto run = [](const char* profile, std::vector<float> block, const char* spec_name = "mxfp8") {
    QuantSpec spec = QuantSpecByName(spec_name);
    ApplyProfile(spec, profile);
    return Quantize({DType::kF32, block.data(), 1, block.size()}, spec);
  };
  std::vector<float> nan_block(32, 1.0f), inf_block(32, 1.0f);
  nan_block[4] = std::nanf("");
  inf_block[9] = HUGE_VALF;
  // ocp (OCP MX v1.0 6.3, microxcaling): a NaN or Inf makes the whole block NaN: scale 0xFF, NaN codes.
  for (const auto& b : {nan_block, inf_block}) {
    const QuantizedTensor q = run("ocp", b);
    CHECK(q.scales[0] == 0xFF);
    for (uint8_t c : q.codes) CHECK(c == 0x7F);
  }
  // microxcaling: elements round half away from zero (its default "nearest", floor(|x| + 0.5)).
  // amax 448 -> X = 1; 1.0625 lies halfway between e4m3 1.0 and 1.125.
  std::vector<float> tie(32, 0.0f);
  tie[0] = 448.0f;
  tie[1] = 1.0625f;
  CHECK(run("microxcaling", tie).codes[1] == ConvertF32(1.125f, fmt::kE4M3, CastOptions{}));
  CHECK(run("ocp", tie).codes[1] == ConvertF32(1.0f, fmt::kE4M3, CastOptions{}));
  // torchao (mx_tensor.py to_mx): NaN or Inf amax -> scale 0xFF (E8M0_EXPONENT_NAN_VAL), both FLOOR and RCEIL;
  // FLOOR keeps X = 1 for amax 480 (480 saturates), RCEIL takes X = 2.
  for (const char* p : {"torchao-floor", "torchao-rceil"}) {
    CHECK(run(p, nan_block).scales[0] == 0xFF);
    CHECK(run(p, inf_block).scales[0] == 0xFF);
  }
  std::vector<float> b480(32, 1.0f);
  b480[0] = 480.0f;
  CHECK(run("torchao-floor", b480).scales[0] == 127);
  CHECK(run("torchao-rceil", b480).scales[0] == 128);
  // transformer-engine (quantize_mxfp8.cuh, ptx.cuh float_to_e8m0 / exp2f_rcp): NaN elements do not set the
  // scale (fmaxf amax) and stay NaN; an Inf gives 0xFE; a tiny block (scale byte 0) is multiplied by 1.0,
  // not 2^127, so its elements flush to zero where exact scaling keeps them.
  {
    const QuantizedTensor q = run("transformer-engine", nan_block);
    CHECK(q.scales[0] == 119);  // amax 1 -> 1/448 rounded up to 2^-8
    CHECK(q.codes[4] == 0x7F);
    CHECK(q.codes[0] == ConvertF32(256.0f, fmt::kE4M3, CastOptions{}));
    CHECK(run("transformer-engine", inf_block).scales[0] == 0xFE);
    std::vector<float> tiny(32, 0x1p-130f);
    const QuantizedTensor qt = run("transformer-engine", tiny);
    CHECK(qt.scales[0] == 0);
    CHECK(qt.codes[0] == 0);
    CHECK(run("ocp", tiny).codes[0] != 0);  // exact V/X = 2^-130 * 2^127 = 2^-3
  }
  // cuda-host (cvt.rp.satfinite.ue8m0x2.f32 on a NaN-propagating amax): NaN -> 0xFF, Inf -> 0xFE; with
  // 0xFE the finite elements scale to 0 and the Inf saturates to 448.
  CHECK(run("cuda-host", nan_block).scales[0] == 0xFF);
  {
    const QuantizedTensor q = run("cuda-host", inf_block);
    CHECK(q.scales[0] == 0xFE);
    CHECK(q.codes[0] == 0x00);
    CHECK(q.codes[9] == 0x7E);
  }
  // transformer-engine on NVFP4 keeps TE's order; the other profiles do not describe NVFP4.
  CHECK_NOTHROW(run("transformer-engine", tie, "nvfp4"));
  CHECK_THROWS_WITH(run("torchao-floor", tie, "nvfp4"), Catch::Contains("MX (UE8M0)"));
  QuantSpec s = QuantSpecByName("mxfp8");
  CHECK_THROWS_WITH(ApplyProfile(s, "pytorch"), Catch::Contains("transformer-engine"));
}

TEST_CASE("quantize: NVFP4 tensors: tensor amax, E4M3 block scales, TE dequantization", "[quantize]") {
  std::vector<float> x(32);
  for (size_t i = 0; i < 32; ++i) x[i] = (i < 16 ? 1.0f : 0.01f) * static_cast<float>(i % 7) - 2.0f;
  const QuantizedTensor q = Quantize({DType::kF32, x.data(), 2, 16}, QuantSpecByName("nvfp4"));
  CHECK(q.tensor_amax == 4.0f);
  const float s_enc = 2688.0f / 4.0f;
  CHECK(q.tensor_decode == 1.0f / s_enc);
  CHECK(q.scales[0] == Nvfp4BlockScale(4.0f, s_enc, ScaleRule::kNvfp4));
  CHECK(q.scales[1] == Nvfp4BlockScale(2.0f, s_enc, ScaleRule::kNvfp4));
  std::vector<float> dq(32);
  Dequantize(q, dq.data());
  CHECK(dq[0] == static_cast<float>(DecodeToDouble(fmt::kE2M1, q.codes[0]) * Nvfp4DecodeScale(q.scales[0], 4.0f)));
}

TEST_CASE("quantize: delayed scaling through QuantizeDelayed", "[quantize]") {
  QuantSpec spec = QuantSpecByName("fp8-delayed");
  DelayedScaling state(spec.elem, 4);
  std::vector<float> x(64, 0.5f);
  x[3] = 2.0f;
  const TensorView v{DType::kF32, x.data(), 8, 8};
  const QuantizedTensor q1 = QuantizeDelayed(v, spec, state);  // scale 1: codes of x itself
  CHECK(q1.codes[3] == ConvertF32(2.0f, fmt::kE4M3, CastOptions{}));
  CHECK(state.scale().encode == 224.0f);
  const QuantizedTensor q2 = QuantizeDelayed(v, spec, state);  // now 2 * 224 = 448
  CHECK(q2.codes[3] == 0x7E);
  CHECK_THROWS_WITH(Quantize(v, spec), Catch::Contains("delayed"));
}

TEST_CASE("quantize: Specs: short names, descriptions and clear errors", "[quantize]") {
  CHECK(DescribeBlock(QuantSpecByName("fp8-block128x128")) == "128x128");
  CHECK(DescribeBlock(QuantSpecByName("fp8-tensor-current")) == "per-tensor");
  CHECK(DescribeBlock(QuantSpecByName("fp8-rowwise")) == "per-row");
  CHECK_THROWS_WITH(QuantSpecByName("mxfp5"), Catch::Contains("mxfp8") && Catch::Contains("nvfp4"));
  QuantSpec s = QuantSpecByName("nvfp4");
  s.elem = fmt::kInt8;  // NVFP4's rules take float elements (E2M1, or FP8 and FP6 ones: docs/numerics.md)
  CHECK_THROWS_WITH(ValidateQuantSpec(s), Catch::Contains("float elements"));
  s.elem = fmt::kE4M3;
  s.rule = ScaleRule::kNvfp4FourOverSix;  // 4over6 is E2M1's alone
  CHECK_THROWS_WITH(ValidateQuantSpec(s), Catch::Contains("E2M1"));
  s = QuantSpecByName("fp8-block1x128");
  s.nan = NanPolicy::kScaleNan;
  CHECK_THROWS_WITH(ValidateQuantSpec(s), Catch::Contains("UE8M0"));
  s = QuantSpecByName("mxfp8");
  s.rule = ScaleRule::kMaxFinite;
  CHECK_THROWS_WITH(ValidateQuantSpec(s), Catch::Contains("ignore"));
  s = QuantSpecByName("mxfp4");
  s.cast.saturation = Saturation::kNoSat;
  CHECK_THROWS(ValidateQuantSpec(s));
  std::vector<double> d(4);
  CHECK_THROWS_WITH(Quantize({DType::kF64, d.data(), 2, 2}, QuantSpecByName("mxfp8")), Catch::Contains("f64"));
  // Zero-size tensors give empty results.
  const QuantizedTensor q = Quantize({DType::kF32, nullptr, 0, 5}, QuantSpecByName("mxfp8"));
  CHECK(q.codes.empty());
  CHECK(q.scales.empty());
}

TEST_CASE("quantize: FP4 and FP6 packing: documented bit order, round trip", "[quantize]") {
  const uint8_t c4[] = {0x1, 0x2, 0xF, 0x7, 0x9};
  const std::vector<uint8_t> p4 = PackCodes(c4, 5, 4);
  CHECK(p4 == std::vector<uint8_t>{0x21, 0x7F, 0x09});  // element 2i low nibble, 2i+1 high nibble
  CHECK(UnpackCodes(p4.data(), p4.size(), 5, 4) == std::vector<uint8_t>(c4, c4 + 5));
  const uint8_t c6[] = {0x3F, 0x00, 0x2A, 0x15, 0x01};
  const std::vector<uint8_t> p6 = PackCodes(c6, 5, 6);
  // code i occupies stream bits [6i, 6i + 6), bit 0 the low bit of byte 0:
  // byte 1 = code 1 bits 2..5 (0) | code 2 bits 0..3 (0xA) << 4; byte 2 = code 2 bits 4..5 (2) | 0x15 << 2.
  CHECK(p6 == std::vector<uint8_t>{0x3F, 0xA0, 0x56, 0x01});
  CHECK(UnpackCodes(p6.data(), p6.size(), 5, 6) == std::vector<uint8_t>(c6, c6 + 5));
  std::mt19937 rng(1);
  std::vector<uint8_t> r(1001);
  for (auto& v : r) v = static_cast<uint8_t>(rng() & 0x3F);
  const std::vector<uint8_t> pr = PackCodes(r.data(), r.size(), 6);
  CHECK(pr.size() == 751);
  CHECK(UnpackCodes(pr.data(), pr.size(), r.size(), 6) == r);
  CHECK_THROWS_WITH(UnpackCodes(pr.data(), 10, r.size(), 6), Catch::Contains("too small"));
}

TEST_CASE("cuBLASLt scale layouts: 128x4 tiles and blockwise FP32", "[quantize]") {
  const size_t rows = 130, cols = 200;  // 7 scale columns of 1x32: padded to 8, rows to 256
  const std::vector<float> x = MakeMatrix(rows, cols, 11, false);
  const QuantizedTensor q = Quantize({DType::kF32, x.data(), rows, cols}, QuantSpecByName("mxfp8"));
  const std::vector<uint8_t> t = ScalesToCublasTiled(q);
  REQUIRE(t.size() == 256 * 8);
  // Independent statement: TE's un-swizzle views the buffer as [M/128][K/4][32][4][4] holding scale
  // (m_tile * 128 + i4 * 32 + i32, k_tile * 4 + j).
  size_t bad = 0;
  for (size_t mt = 0; mt < 2; ++mt)
    for (size_t kt = 0; kt < 2; ++kt)
      for (size_t i32 = 0; i32 < 32; ++i32)
        for (size_t i4 = 0; i4 < 4; ++i4)
          for (size_t j = 0; j < 4; ++j) {
            const size_t r = mt * 128 + i4 * 32 + i32, c = kt * 4 + j;
            const uint8_t want = r < rows && c < q.scale_cols ? q.scales[r * q.scale_cols + c] : 0;
            bad += t[(((mt * 2 + kt) * 32 + i32) * 4 + i4) * 4 + j] != want;
          }
  CHECK(bad == 0);
  const QuantizedTensor b = Quantize({DType::kF32, x.data(), rows, cols}, QuantSpecByName("fp8-block1x128"));
  const std::vector<float> bw = ScalesToCublasBlockwise(b);
  REQUIRE(bw.size() == 2 * 132);  // ceil(200/128) x roundup(130, 4)
  CHECK(bw[1 * 132 + 129] == b.ScaleAt(129, 1));
  const QuantizedTensor b2 = Quantize({DType::kF32, x.data(), rows, cols}, QuantSpecByName("fp8-block128x128"));
  const std::vector<float> bw2 = ScalesToCublasBlockwise(b2);
  REQUIRE(bw2.size() == 2 * 4);
  CHECK(bw2[1 * 4 + 1] == b2.ScaleAt(1, 1));
  CHECK_THROWS_WITH(ScalesToCublasTiled(b), Catch::Contains("128x4"));
}

TEST_CASE("quantize: spec overrides, the JSON form of a spec and reassembled tensors", "[quantize]") {
  // Every recipe, plain and under every profile that fits it, survives its JSON form field for field.
  for (const std::string& name : QuantSpecNames()) {
    std::vector<QuantSpec> specs = {QuantSpecByName(name)};
    for (const std::string& p : ProfileNames()) {
      try {
        SpecOverrides o;
        o.profile = p;
        specs.push_back(BuildQuantSpec(name, o));
      } catch (const Error&) {  // a profile that does not fit this recipe
      }
    }
    for (const QuantSpec& s : specs) {
      const std::string j = QuantSpecToJson(s);
      const QuantSpec back = QuantSpecFromJson(j);
      INFO(j);
      CHECK(QuantSpecToJson(back) == j);
      CHECK(DescribeSpec(back) == DescribeSpec(s));
    }
  }
  // Overrides by option name, as the CLI and Python spell them.
  SpecOverrides o;
  o.elem = "e5m2";
  o.rule = "max-finite";
  o.block = "1x16";
  o.round = "sr";
  o.sr_bits = 12;
  o.seed = 9;
  const QuantSpec s = BuildQuantSpec("mxfp8", o);
  CHECK(s.name == "mxfp8+");
  CHECK(std::string(s.elem.name) == "e5m2");
  CHECK(s.rule == ScaleRule::kMaxFinite);
  CHECK(s.nan == NanPolicy::kIgnore);  // max-finite brings the ignore policy with it
  CHECK((s.block_rows == 1 && s.block_cols == 16));
  CHECK((s.cast.rounding == Rounding::kSrA && s.cast.sr_bits == 12 && s.seed == 9));
  CHECK_THROWS_WITH(QuantSpecFromJson("{\"name\": \"x\"}"), Catch::Matchers::Contains("incomplete"));
  CHECK_THROWS_WITH(QuantSpecFromJson("not json"), Catch::Matchers::Contains("not valid JSON"));
  o = SpecOverrides{};
  o.sat = "nosat";
  CHECK_THROWS_AS(BuildQuantSpec("mxfp4", o), Error);  // e2m1 has no Inf or NaN

  // The table of text overrides: each keyword sets its own field and no other, each CLI option starts
  // with "--", and an unknown keyword is refused with the known ones named.
  const auto& fields = SpecOverrideFields();
  REQUIRE(fields.size() == 14);
  for (const SpecOverrideField& f : fields) {
    INFO(f.name);
    CHECK(f.option.rfind("--", 0) == 0);
    CHECK(!f.help.empty());
    SpecOverrides one;
    SetSpecOverride(one, f.name, "x");
    for (const SpecOverrideField& g : fields) CHECK((one.*g.field == "x") == (g.name == f.name));
  }
  SpecOverrides by_name;
  SetSpecOverride(by_name, "rounding", "rz");
  SetSpecOverride(by_name, "element_scaling", "fp32");
  CHECK(by_name.round == "rz");
  CHECK(by_name.scaling == "fp32");
  CHECK_THROWS_WITH(SetSpecOverride(by_name, "scale_rule", "ceil"),
                    Catch::Matchers::Contains("unknown spec option 'scale_rule'") &&
                        Catch::Matchers::Contains("nan_policy"));

  // Stored codes and scales give back the tensor they came from.
  std::vector<float> x(48 * 80);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  for (const char* name : {"mxfp8", "nvfp4", "fp8-block128x128"}) {
    const QuantSpec sp = QuantSpecByName(name);
    const QuantizedTensor q = Quantize(TensorView{DType::kF32, x.data(), 48, 80}, sp);
    const QuantizedTensor r = AssembleQuantized(sp, {6, 8, 80}, qmx::test::PlainCodes(q.codes), q.scales, q.tensor_amax);
    CHECK((r.rows == 48 && r.cols == 80 && r.scale_rows == q.scale_rows && r.scale_cols == q.scale_cols));
    std::vector<float> a(x.size()), b(x.size());
    Dequantize(q, a.data());
    Dequantize(r, b.data());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    std::vector<uint8_t> short_scales(q.scales.begin(), q.scales.end() - 1);
    CHECK_THROWS_WITH(AssembleQuantized(sp, {48, 80}, qmx::test::PlainCodes(q.codes), short_scales, q.tensor_amax),
                      Catch::Matchers::Contains("scale bytes"));
    CHECK_THROWS_AS(AssembleQuantized(sp, {48, 81}, qmx::test::PlainCodes(q.codes), q.scales, q.tensor_amax), Error);
  }
  // The dequantization error over finite elements, in element order.
  const float src[4] = {1.0f, 2.0f, NAN, 4.0f}, dq[4] = {1.0f, 2.5f, 3.0f, 4.0f};
  const DequantError e = ComputeDequantError(TensorView{DType::kF32, src, 1, 4}, dq);
  CHECK(e.finite_elements == 3);
  CHECK(e.mse == 0.25 / 3);
  CHECK(e.max_abs_error == 0.5);
  CHECK((e.has_sqnr && std::fabs(e.sqnr_db - 10 * std::log10(21.0 / 0.25)) < 1e-12));
}

TEST_CASE("quantize: FP32-scaled recipes on tensors of several pieces equal the reference", "[quantize]") {
  // 300 x 512: the contiguous FP32 path works in pieces of 2^16 elements; here a per-tensor block spans
  // three pieces (maxima combined across them), 1x128 and row-wise blocks fill pieces whole, 128 x all
  // blocks straddle pieces. Specials sit in the second and third pieces.
  const size_t rows = 300, cols = 512;
  std::vector<float> xf = MakeMatrix(rows, cols, 21, false);
  xf[70000] = std::nanf("");
  xf[140001] = HUGE_VALF;
  xf[140500] = -HUGE_VALF;
  std::vector<uint16_t> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xb[i] = static_cast<uint16_t>(FloatBits(xf[i]) >> 16);
  for (const char* name : {"fp8-tensor-current", "fp8-rowwise", "fp8-block1x128", "fp8-block128x128"}) {
    for (NanPolicy nan : {NanPolicy::kBlockNan, NanPolicy::kIgnoreNan, NanPolicy::kIgnore}) {
      for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
        for (DType t : {DType::kF32, DType::kBF16}) {
          QuantSpec spec = QuantSpecByName(name);
          spec.nan = nan;
          spec.cast.rounding = r;
          spec.seed = 5;
          const TensorView x{t, t == DType::kF32 ? static_cast<const void*>(xf.data()) : xb.data(), rows, cols};
          const QuantizedTensor want = QuantizeRef(x, spec);
          for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            CheckSameQuantized(Quantize(x, spec), want, Where(spec, x) + " threads " + std::to_string(threads));
          }
          CheckSameQuantized(Quantize(x, spec, Exec::kSequential), want, Where(spec, x) + " sequential");
        }
      }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("quantize: Batched FP32 block scales equal the per-block scale: pow2, margins, zero, tiny and huge blocks",
          "[quantize]") {
  // Fp32ScalesFromAmaxes against Fp32ScaleFromAmax on maxima that reach each branch: zero (fallback 1),
  // subnormal and tiny (destmax / amax overflows to FLT_MAX), FLT_MAX, Inf and NaN (fallback), ordinary.
  std::vector<float> amax = {0.0f, 1e-45f, 1e-40f, 1e-38f, 3e-36f, 1.0f, 0.75f, 448.0f, 3.0e38f, std::numeric_limits<float>::max(),
                             HUGE_VALF, std::nanf("")};
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) amax.push_back(qmx::test::BitsFloat(rng() & 0x7FFFFFFFu));
  for (bool pow2 : {false, true}) {
    for (int margin : {0, 3, -2}) {
      for (float destmax : {448.0f, 57344.0f}) {
        std::vector<Fp32Scale> got(amax.size());
        Fp32ScalesFromAmaxes(amax.data(), amax.size(), destmax, pow2, margin, got.data());
        for (size_t i = 0; i < amax.size(); ++i) {
          const Fp32Scale want = Fp32ScaleFromAmax(amax[i], destmax, pow2, margin);
          INFO("amax bits " << FloatBits(amax[i]) << " pow2 " << pow2 << " margin " << margin << " destmax " << destmax);
          CHECK(FloatBits(got[i].encode) == FloatBits(want.encode));
          CHECK(FloatBits(got[i].decode) == FloatBits(want.decode));
        }
      }
    }
  }
  // Through Quantize: 1 x 128 and row-wise blocks take their scales from the batched call (blocks without
  // NaN or Inf); the reference takes each block's from BlockMultiplyScale.
  const size_t rows = 300, cols = 512;
  std::vector<float> xf = MakeMatrix(rows, cols, 23, false);
  xf[1000] = std::nanf("");
  xf[70001] = HUGE_VALF;
  for (const char* name : {"fp8-block1x128", "fp8-rowwise"}) {
    for (ScaleRule rule : {ScaleRule::kFp32, ScaleRule::kFp32Pow2}) {
      for (int margin : {0, 2}) {
        for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
          QuantSpec spec = QuantSpecByName(name);
          spec.rule = rule;
          spec.margin = margin;
          spec.cast.rounding = r;
          spec.seed = 9;
          const TensorView x{DType::kF32, xf.data(), rows, cols};
          const QuantizedTensor want = QuantizeRef(x, spec);
          const std::string what = Where(spec, x) + " margin " + std::to_string(margin);
          CheckSameQuantized(Quantize(x, spec, Exec::kSequential), want, what + " sequential");
          omp_set_num_threads(2);
          CheckSameQuantized(Quantize(x, spec), want, what + " threads 2");
        }
      }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

namespace {

// ComputeStats's definition, element by element: NaN and Inf inputs counted apart; flushed = a nonzero
// input whose code decodes to zero; saturated = |x| above the element maximum times the block's decode
// scale (NVFP4: E4M3 scale times the tensor decode scale), where that scale is finite and positive.
QuantStats NaiveStats(const std::vector<float>& x, const QuantizedTensor& q) {
  QuantStats st;
  st.elements = q.rows * q.cols;
  st.scale_histogram.assign(256, 0);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  for (size_t i = 0; i < q.scale_rows * q.scale_cols; ++i) {
    uint32_t bin = q.scales[i * (sf == ScaleFormat::kFp32 ? 4 : 1)];
    if (sf == ScaleFormat::kFp32) bin = (FloatBits(q.ScaleAt(i / q.scale_cols, i % q.scale_cols)) >> 23) & 0xFF;
    ++st.scale_histogram[bin];
    st.nan_blocks += sf == ScaleFormat::kE4m3 ? (bin & 0x7F) == 0x7F : bin == 0xFF;
  }
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  for (size_t r = 0; r < q.rows; ++r) {
    for (size_t c = 0; c < q.cols; ++c) {
      const float v = x[r * q.cols + c];
      if (std::isnan(v)) { ++st.nan_inputs; continue; }
      if (std::isinf(v)) { ++st.inf_inputs; continue; }
      const size_t sr = r / be.rows, sc = c / be.cols;
      st.flushed_to_zero += v != 0 && DecodeToDouble(q.spec.elem, q.codes[r * q.cols + c]) == 0;
      const double s = sf == ScaleFormat::kE4m3 ? Nvfp4DecodeScale(q.scales[sr * q.scale_cols + sc], q.tensor_amax) : q.ScaleAt(sr, sc);
      st.saturated += std::isfinite(s) && s > 0 && std::fabs(static_cast<double>(v)) > Limits(q.spec.elem).max_finite * s;
    }
  }
  return st;
}

}  // namespace

TEST_CASE("quantize: computeStats counts NaN and Inf inputs, flushes, saturations and scale bins as defined",
          "[quantize]") {
  const size_t rows = 48, cols = 96;
  std::vector<float> x = MakeMatrix(rows, cols, 17);
  x[100] = 1e30f;  // saturates under a delayed (given) scale
  const char* const name = GENERATE(values<const char*>({"mxfp8", "mxfp4", "nvfp4", "nvfp4-2d", "fp8-block1x128", "fp8-tensor-current", "fp8-rowwise"}));
  CAPTURE(name);
  for (NanPolicy nan : {NanPolicy::kBlockNan, NanPolicy::kIgnore}) {
    QuantSpec spec = QuantSpecByName(name);
    spec.nan = nan;
    const TensorView v{DType::kF32, x.data(), rows, cols};
    std::vector<QuantizedTensor> qs = {Quantize(v, spec)};
    if (ScaleFormatOf(spec.rule) == ScaleFormat::kFp32 && spec.block_rows == 0 && spec.block_cols == 0)
      qs.push_back(QuantizeWithScale(v, spec, Fp32ScaleFromAmax(1.0f, 448.0f, false, 0)));
    for (const QuantizedTensor& q : qs) {
      const QuantStats got = ComputeStats(v, q), want = NaiveStats(x, q);
      INFO(DescribeSpec(spec));
      CHECK(got.elements == want.elements);
      CHECK(got.nan_inputs == want.nan_inputs);
      CHECK(got.inf_inputs == want.inf_inputs);
      CHECK(got.flushed_to_zero == want.flushed_to_zero);
      CHECK(got.saturated == want.saturated);
      CHECK(got.nan_blocks == want.nan_blocks);
      CHECK(got.scale_histogram == want.scale_histogram);
      CHECK(got.nan_inputs + got.inf_inputs > 0);
      const std::vector<std::pair<std::string, uint64_t>> counts = {
          {"elements", want.elements},   {"nan_inputs", want.nan_inputs},
          {"inf_inputs", want.inf_inputs}, {"saturated", want.saturated},
          {"flushed_to_zero", want.flushed_to_zero}, {"nan_blocks", want.nan_blocks}};
      CHECK(QuantStatsCounts(got) == counts);
    }
  }
}

// A given per-tensor FP32 scale (delayed scaling) can be stale: fl32(x * encode) then overflows for some
// elements. The elements path takes the fused tier straight from the source only where every product of a
// block is finite (quantize.cc, ConvertScaledBlocks); here each piece holds overflowing products, NaN and
// Inf, and the codes must equal the scalar conversion of fl32(x * encode), on every target.
TEST_CASE("quantize: A given FP32 scale whose products overflow: codes equal the reference conversion of fl32(x * encode)",
          "[quantize][simd]") {
  TargetGuard guard;
  const size_t rows = 70, cols = 1024;  // two pieces of 2^16 elements, the second partial
  std::vector<float> x = MakeMatrix(rows, cols, 23);
  for (size_t i = 0; i < x.size(); i += 997) x[i] = (i % 2 ? -1.0f : 1.0f) * 3e35f;
  const Fp32Scale scale{1e4f, 1e-4f};
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale.encode;
  const TensorView v{DType::kF32, x.data(), rows, cols};
  const char* const elem = GENERATE(values<const char*>({"e4m3", "e5m2"}));
  CAPTURE(elem);
  for (Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat}) {
    for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
      QuantSpec spec = QuantSpecByName("fp8-tensor-current");
      spec.elem = ParseFormat(elem);
      spec.nan = NanPolicy::kIgnore;
      spec.cast.saturation = sat;
      spec.cast.rounding = r;
      spec.seed = 99;
      std::vector<uint8_t> want(x.size());
      ConvertToCodesRef(DType::kF32, y.data(), y.size(), spec.elem, spec.cast, want.data(), {spec.seed, 0, nullptr});
      for (const std::string& target : SimdTargets()) {
        ForceSimdTarget(target);
        for (Exec e : {Exec::kSequential, Exec::kParallel}) {
          const QuantizedTensor q = QuantizeWithScale(v, spec, scale, e);
          INFO(DescribeSpec(spec) << " " << target);
          size_t bad = 0;
          for (size_t i = 0; i < want.size(); ++i) bad += q.codes[i] != want[i];
          CHECK(bad == 0);
        }
      }
      ForceSimdTarget("");
    }
  }
}
