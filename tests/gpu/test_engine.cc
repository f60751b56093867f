// test_engine.cc: the emulation engine (gpu/src/engine_*.cu) against the CPU library, bit for bit: every
// model the engine runs, on random, structured and adversarial operands (specials, zero groups, exact
// cancellation, scales at the formats' edges, NaN scales, C, alpha rules, row-scaled NVFP4, odd shapes).
// Without a GPU only the support messages are checked.
#if defined(QMX_HAVE_CUDA)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "support/gpu.h"
#include "support/modes.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/gpu.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/rng.h"
#include "qmx/round.h"

namespace engine_test {

using namespace qmx;
using qmx::test::AddFp32;
using qmx::test::AddUe8m0;
using qmx::test::Codes;
using qmx::test::FloatBits;
using qmx::test::Hex;
using qmx::test::ModelsUnderTest;
using qmx::test::RandomCodes;

// QMX_ENGINE_DGEMM set for a scope (exact's whole sums: "1" on cuBLASLt's FP64 GEMM, "0" on the engine's own
// FP64 tensor-core kernel), the previous value restored after.
struct ScopedDgemm {
  std::string old;
  bool had;
  explicit ScopedDgemm(const char* v) : had(std::getenv("QMX_ENGINE_DGEMM") != nullptr) {
    if (had) old = std::getenv("QMX_ENGINE_DGEMM");
    setenv("QMX_ENGINE_DGEMM", v, 1);
  }
  ~ScopedDgemm() { had ? setenv("QMX_ENGINE_DGEMM", old.c_str(), 1) : unsetenv("QMX_ENGINE_DGEMM"); }
};

struct Tally {
  size_t compared = 0, outputs = 0;
  std::map<std::string, size_t> per_model, per_kernel;
  std::map<std::string, uint64_t> steps, fallback_steps;  // per kernel
  std::map<std::string, uint64_t> dmma_outputs, whole_outputs;  // per model: on the tensor-core kernel, summed whole
};

// Every model on (a, b, c): where the CPU refuses, the engine refuses with the same message; where the
// engine runs, its bits equal qmx::Gemm's.
void CheckModels(const GemmOperand& a, const GemmOperand& b, const float* c, const std::string& what, Tally& t,
                 const std::vector<AccumModel>& models = ModelsUnderTest()) {
  for (const AccumModel& m : models) {
    std::vector<float> want;
    std::string cpu_error;
    try {
      want = Gemm(a, b, c, m);
    } catch (const Error& e) {
      cpu_error = e.what();
    }
    if (!gpu::EngineGemmSupport(a, b, m).empty()) continue;
    if (!cpu_error.empty()) {
      INFO(what << " / " << m.name);
      CHECK_THROWS_WITH(gpu::EngineGemm(a, b, c, m), cpu_error);
      continue;
    }
    gpu::EngineGemmStats stats;
    const std::vector<float> got = gpu::EngineGemm(a, b, c, m, &stats);
    ++t.per_kernel[stats.kernel];
    t.steps[stats.kernel] += stats.steps;
    t.fallback_steps[stats.kernel] += stats.fallback_steps;
    if (stats.kernel == "dmma" || stats.kernel == "dgemm") {  // (dgemm: exact's whole sums on cuBLASLt)
      t.dmma_outputs[m.name] += got.size();
      t.whole_outputs[m.name] += stats.whole_outputs;
    }
    REQUIRE(got.size() == want.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (FloatBits(got[i]) != FloatBits(want[i]) && bad++ < 3)
        UNSCOPED_INFO(what << " / " << m.name << ": output " << i << " engine " << Hex(FloatBits(got[i]), 8) << " cpu "
                           << Hex(FloatBits(want[i]), 8));
    CHECK(bad == 0);
    ++t.compared;
    t.outputs += got.size();
    ++t.per_model[m.name];
  }
}

TEST_CASE("gpu engine: support names what the engine does not run", "[gpu]") {
  std::mt19937 rng(1);
  const GemmOperand a = Codes(fmt::kE4M3, 2, 32, rng), b = Codes(fmt::kE4M3, 32, 2, rng);
  CHECK(gpu::EngineGemmSupport(a, b, AccumModelByName("blackwell-mxf8f6f4")).empty());
  CHECK(gpu::EngineGemmSupport(a, b, AccumModelByName("fp32-seq")).empty());
  CHECK(gpu::EngineGemmSupport(a, b, AccumModelByName("exact")).empty());
  CHECK(gpu::EngineGemmSupport(a, b, AccumModelByName("block-exact")).empty());
  CHECK_THAT(gpu::EngineGemmSupport(a, b, AccumModelByName("ada-mma-fp8-f16")), Catch::Contains("runs on the CPU"));
  // F = 50 leaves no room for 33 terms in 53 bits; E5M2 groups of 16 span more than 53 bits.
  CHECK_THAT(gpu::EngineGemmSupport(a, b, AccumModelByName("fused:step=32,F=50")), Catch::Contains("more than the engine's 53"));
  const GemmOperand a5 = Codes(fmt::kE5M2, 2, 32, rng), b5 = Codes(fmt::kE5M2, 32, 2, rng);
  CHECK_THAT(gpu::EngineGemmSupport(a5, b5, AccumModelByName("fused:step=32,F=25,group=16")),
             Catch::Contains("a group of 16 products spans"));
  if (!gpu::Device().available) {
    CHECK_THROWS_WITH(gpu::EngineGemm(a, b, nullptr, AccumModelByName("hopper-fp8")), Catch::Contains("GPU") || Catch::Contains("device"));
  }
  CHECK_THROWS_WITH(gpu::EngineGemm(a, b, nullptr, AccumModelByName("ada-mma-fp8-f16")), Catch::Contains("engine: "));
  // MX rules with scales in another format than UE8M0 run on the CPU's reference, in every engine entry.
  QuantSpec mx_e4m3 = QuantSpecByName("mxfp8");
  mx_e4m3.scale_format = "e4m3";
  CHECK_THAT(gpu::EngineQuantizeSupport(mx_e4m3), Catch::Contains("run on the CPU's reference"));
  MxSpec ms;
  ms.scale_format = fmt::kE4M3;
  const std::vector<float> ones(32, 1.0f);
  std::vector<uint8_t> codes(32), scales(1);
  CHECK_THROWS_WITH(gpu::EngineQuantizeMx(DType::kF32, ones.data(), 32, ms, codes.data(), scales.data()),
                    Catch::Contains("engine: MX scales in e4m3"));
  const QuantizedTensor q = Quantize({DType::kF32, ones.data(), 1, 32}, mx_e4m3);
  CHECK_THROWS_WITH(gpu::EngineDequantizeOnDevice(q, q.codes.data(), q.scales.data(), nullptr, nullptr),
                    Catch::Contains("dequantize on the CPU"));
}

TEST_CASE("gpu engine: every fused model, fp32-seq, exact and block-exact equal qmx::Gemm bit for bit", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::mt19937 rng(44);
  Tally t;
  // Plain codes with NaN and Inf, odd shapes (steps, promotion windows and tiles cut short).
  const Format fmts[] = {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1, fmt::kE3M2, fmt::kE2M3};
  const size_t shapes[][3] = {{5, 7, 96}, {9, 130, 64}, {3, 3, 300}, {1, 1, 1}, {4, 17, 33}, {37, 45, 257}};
  for (const Format& fa : fmts)
    for (const Format& fb : {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1})
      for (const auto& s : shapes) {
        const bool specials = (s[0] + s[1]) % 2 == 0;
        CheckModels(Codes(fa, s[0], s[2], rng, specials), Codes(fb, s[2], s[1], rng, specials), nullptr,
                    std::string(fa.name) + "x" + fb.name, t);
      }
  // C with FP32 subnormals, values the steps truncate, -0, Inf and NaN.
  {
    const GemmOperand a = Codes(fmt::kE4M3, 6, 64, rng), b = Codes(fmt::kE4M3, 64, 10, rng);
    std::vector<float> c(60);
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < c.size(); ++i) c[i] = i % 7 == 0 ? std::ldexp(1.0f, -140) : nd(rng) * std::ldexp(1.0f, int(i % 20) - 10);
    c[3] = -0.0f;
    c[11] = INFINITY;
    c[13] = NAN;
    CheckModels(a, b, c.data(), "e4m3 with C", t);
  }
  // Sparse A (zero steps and groups, row 2 all zero) with C below 1: the zero terms' exponent decides where
  // C is cut; and exact cancellation: B's odd rows are its even rows negated against equal A columns.
  {
    std::vector<uint8_t> sparse = RandomCodes(fmt::kE2M1, 6 * 64, rng, false);
    for (size_t i = 0; i < sparse.size(); ++i)
      if ((i / 8) % 3 != 0 || i / 64 == 2) sparse[i] = 0;
    std::vector<float> c(60, 0.3f);
    CheckModels(OperandFromCodes(fmt::kE2M1, 6, 64, sparse.data()), Codes(fmt::kE2M1, 64, 10, rng), c.data(), "sparse", t);
    std::vector<uint8_t> ac = RandomCodes(fmt::kE4M3, 8 * 64, rng, false), bc = RandomCodes(fmt::kE4M3, 64 * 8, rng, false);
    for (size_t r = 0; r < 8; ++r)
      for (size_t k = 1; k < 64; k += 2) ac[r * 64 + k] = ac[r * 64 + k - 1];
    for (size_t k = 1; k < 64; k += 2)
      for (size_t j = 0; j < 8; ++j) bc[k * 8 + j] = bc[(k - 1) * 8 + j] ^ 0x80;
    CheckModels(OperandFromCodes(fmt::kE4M3, 8, 64, ac.data()), OperandFromCodes(fmt::kE4M3, 64, 8, bc.data()), nullptr,
                "cancellation", t);
  }
  // MX: UE8M0 1x32 along K, ordinary and extreme exponents, and NaN scales (0xFF) in some blocks.
  for (const Format& f : {fmt::kE4M3, fmt::kE2M1, fmt::kE5M2, fmt::kE3M2})
    for (const auto& range : {std::pair<int, int>{-8, 8}, std::pair<int, int>{-127, -100}, std::pair<int, int>{100, 127}}) {
      GemmOperand a = Codes(f, 7, 96, rng), b = Codes(f, 96, 9, rng);
      AddUe8m0(a, true, 32, rng, range.first, range.second);
      AddUe8m0(b, false, 32, rng, range.first, range.second);
      if (range.first == -8) a.scales[4] = NAN;
      CheckModels(a, b, nullptr, std::string("mx ") + f.name, t);
    }
  // NVFP4: 1x16 E4M3 scales (some zero) and tensor scales; TE's alpha rules; row-scaled lines.
  {
    GemmOperand a = Codes(fmt::kE2M1, 5, 64, rng), b = Codes(fmt::kE2M1, 64, 6, rng);
    AddFp32(a, 1, 16, rng, ScaleFormat::kE4m3);
    AddFp32(b, 16, 1, rng, ScaleFormat::kE4m3);
    a.tensor_scale = 0.0123f;
    b.tensor_scale = 3.5f;
    CheckModels(a, b, nullptr, "nvfp4", t);
    a.te_alpha.amax = 5.25f;
    b.te_alpha.amax = 1.0e-3f;
    for (const char* model : {"blackwell-mxf4nvf4", "exact", "block-exact"})
      for (const char* rule : {"te", "te-ref"}) {
        AccumModel m = AccumModelByName(model);
        m.alpha = ParseAlphaRule(rule);
        const std::vector<float> want = Gemm(a, b, nullptr, m), got = gpu::EngineGemm(a, b, nullptr, m);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += FloatBits(got[i]) != FloatBits(want[i]);
        INFO(model << ", alpha " << rule);
        CHECK(bad == 0);
      }
    GemmOperand ar = a, br = b;
    ar.tensor_scale = br.tensor_scale = 1.0f;
    ar.row_scales = {0.5f, 1.5f, 3.0e-5f, 7.0f, 1.0f};
    br.col_scales = {2.0f, 0.25f, 1.0f, 9.0f, 1.0e3f, 0.125f};
    CheckModels(ar, br, nullptr, "nvfp4 row-scaled", t);
  }
  // Blockwise FP8: 1x128 x 128x128 and 1x128 x 128x1 FP32 scales; per-tensor FP32 scales.
  {
    GemmOperand a = Codes(fmt::kE4M3, 6, 384, rng), b = Codes(fmt::kE4M3, 384, 130, rng);
    AddFp32(a, 1, 128, rng);
    AddFp32(b, 128, 128, rng);
    CheckModels(a, b, nullptr, "block 1x128 x 128x128", t);
    GemmOperand b2 = Codes(fmt::kE4M3, 384, 5, rng);
    AddFp32(b2, 128, 1, rng);
    CheckModels(a, b2, nullptr, "block 1x128 x 128x1", t);
    GemmOperand p = Codes(fmt::kE4M3, 4, 200, rng), q = Codes(fmt::kE5M2, 200, 4, rng);
    p.tensor_scale = 1.5f / 448;
    q.tensor_scale = 7.0f;
    CheckModels(p, q, nullptr, "per-tensor", t);
  }
  // Shapes past one tile in every direction and grid rows, for the models a recipe runs.
  {
    GemmOperand a = Codes(fmt::kE2M1, 300, 1024, rng), b = Codes(fmt::kE2M1, 1024, 70, rng);
    AddFp32(a, 1, 16, rng, ScaleFormat::kE4m3);
    AddFp32(b, 16, 1, rng, ScaleFormat::kE4m3);
    CheckModels(a, b, nullptr, "nvfp4 300x70x1024", t);
  }
  INFO("compared " << t.compared << " GEMMs, " << t.outputs << " outputs");
  for (const char* must :
       {"blackwell-mxf4nvf4", "blackwell-mxf8f6f4", "hopper-fp8", "hopper-fp8-fast", "hopper-fp8-vec",
        "hopper-mma-sync", "ada-fp8", "fp32-seq", "blackwell-mxf4nvf4-mmasim", "exact", "block-exact"}) {
    INFO(must);
    CHECK(t.per_model[must] >= 20);
  }
  CHECK(t.outputs > 500000);
  // Every kernel ran, and the FP4 and tensor-core kernels handed steps (NaN scales, unbounded exponent
  // spreads) to the generic step.
  INFO("fp4 " << t.per_kernel["fp4"] << ", dmma " << t.per_kernel["dmma"] << ", generic " << t.per_kernel["generic"]
              << "; fallback steps fp4 " << t.fallback_steps["fp4"] << ", dmma " << t.fallback_steps["dmma"]);
  CHECK(t.per_kernel["fp4"] >= 20);
  CHECK(t.per_kernel["dmma"] >= 300);
  CHECK(t.per_kernel["generic"] >= 150);
  CHECK(t.per_kernel["seq"] >= 20);  // fp32-seq's register-tiled kernel
  CHECK(t.fallback_steps["fp4"] > 0);
  CHECK(t.fallback_steps["dmma"] > 0);
  // exact on the tensor-core kernel both ways: whole sums, and per step (NaN scales, spans past 53 bits).
  INFO("exact on dmma: " << t.dmma_outputs["exact"] << " outputs, " << t.whole_outputs["exact"] << " summed whole");
  CHECK(t.whole_outputs["exact"] > 0);
  CHECK(t.whole_outputs["exact"] < t.dmma_outputs["exact"]);
}

// Tensors as training quantizes them (Gaussian and heavy-tailed values under MXFP8, FP8 per-tensor and
// blockwise recipes, B quantized along its columns), where most steps' bounds prove them exact: the
// tensor-core kernel's fast path and its per-step fallback both run, and every output equals qmx::Gemm's.
TEST_CASE("gpu engine: the tensor-core kernel's fast steps and fallbacks equal qmx::Gemm", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::mt19937 rng(45);
  std::vector<AccumModel> models;
  for (const char* n :
       {"blackwell-mxf8f6f4", "hopper-fp8", "hopper-fp8-fast", "hopper-fp8-vec", "ada-fp8", "hopper-mma-sync",
        "fused:step=16,F=20,bits=24,zero-exp=-133,promote=32,promote-scale=separate", "block-exact", "exact"})
    models.push_back(AccumModelByName(n));
  Tally t, own_kernel;
  const size_t shapes[][3] = {{96, 72, 2048}, {65, 130, 1000}};
  for (const char* recipe : {"mxfp8", "mxfp8_e5m2", "fp8-tensor-current", "fp8-block1x128"})
    for (int heavy = 0; heavy < 2; ++heavy)
      for (const auto& s : shapes) {
        const size_t m = s[0], n = s[1], k = s[2];
        std::vector<float> x(m * k), y(k * n);
        std::normal_distribution<float> nd;
        std::student_t_distribution<float> td(2.5f);
        for (float& v : x) v = heavy ? td(rng) : nd(rng);
        for (float& v : y) v = heavy ? td(rng) : nd(rng);
        QuantSpec sa = QuantSpecByName(recipe), sb = sa;
        sb.axis = Axis::kCol;
        if (std::string(recipe) == "fp8-block1x128") sb = QuantSpecByName("fp8-block128x128");
        const GemmOperand a = OperandFromQuantized(Quantize(TensorView{DType::kF32, x.data(), m, k}, sa));
        const GemmOperand b = OperandFromQuantized(Quantize(TensorView{DType::kF32, y.data(), k, n}, sb));
        CheckModels(a, b, nullptr, std::string(recipe) + (heavy ? " t2.5 " : " normal ") + std::to_string(k), t, models);
        const ScopedDgemm own("0");  // exact's whole sums on the engine's own kernel too
        CheckModels(a, b, nullptr, std::string(recipe) + " own kernel", own_kernel, {AccumModelByName("exact")});
      }
  const uint64_t steps = t.steps["dmma"], fallbacks = t.fallback_steps["dmma"];
  INFO("dmma GEMMs " << t.per_kernel["dmma"] << ", steps " << steps << ", fallback steps " << fallbacks << "; compared "
                     << t.compared << " GEMMs");
  CHECK(t.per_kernel["dmma"] >= 50);
  CHECK(fallbacks > 0);
  CHECK(steps - fallbacks > steps / 2);  // most steps take the fast path
  // exact sums the whole of K at once on most outputs of quantized training tensors.
  INFO("exact on dmma: " << t.dmma_outputs["exact"] << " outputs, " << t.whole_outputs["exact"] << " summed whole");
  CHECK(t.whole_outputs["exact"] > t.dmma_outputs["exact"] / 2);
  // Both homes of the whole sums ran: cuBLASLt's FP64 GEMM by default, the engine's own kernel under
  // QMX_ENGINE_DGEMM=0, with the same blocks summed whole.
  INFO("exact on cuBLASLt " << t.per_kernel["dgemm"] << " GEMMs, on the own kernel " << own_kernel.per_kernel["dmma"]);
  CHECK(t.per_kernel["dgemm"] >= 8);  // (the FP32-scaled blockwise operands' exact runs on the generic kernel)
  CHECK(own_kernel.per_kernel["dmma"] >= 8);
  CHECK(own_kernel.whole_outputs["exact"] == t.whole_outputs["exact"]);
}

// exact's whole sums: only where the line bounds prove the FP64 sum exact. Row 0 of A holds 1, 2^-24 and 2^-55
// (E4M3 1 and 2^-9 under MX scales 1, 2^-15 and 2^-46, one a block) and column 0 of B ones, so the exact sum sits
// just above FP32's midpoint 1 + 2^-24 and rounds up, where an FP64 sum (56 bits) loses 2^-55 and rounds the tie
// to even, down to 1. Its block of 64 rows must take the per-step path; the next block (rows 64 to 127, ordinary
// codes and scales) sums whole.
TEST_CASE("gpu engine: exact sums whole only where its line bounds prove the FP64 sum exact", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::mt19937 rng(46);
  const size_t m = 128, k = 96, n = 8;
  GemmOperand a = Codes(fmt::kE4M3, m, k, rng), b = Codes(fmt::kE4M3, k, n, rng);
  AddUe8m0(a, true, 32, rng, -2, 2);
  AddUe8m0(b, false, 32, rng, 0, 0);
  for (size_t kk = 0; kk < k; ++kk) {
    a.codes[kk] = kk == 0 || kk == 32 || kk == 64 ? (kk == 0 ? 0x38 : 0x01) : 0;  // 1, 2^-9, 2^-9
    b.codes[kk * n] = 0x38;                                                       // ones
  }
  a.scales[0] = 1.0f;
  a.scales[1] = std::ldexp(1.0f, -15);
  a.scales[2] = std::ldexp(1.0f, -46);
  REQUIRE(static_cast<float>(1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -55)) == 1.0f);  // the FP64 sum's result
  const AccumModel exact = AccumModelByName("exact");
  const std::vector<float> want = Gemm(a, b, nullptr, exact);
  CHECK(want[0] == std::nextafter(1.0f, 2.0f));
  // The whole sums on cuBLASLt's FP64 GEMM (the default), then on the engine's own kernel; with C too.
  std::vector<float> c(m * n);
  std::normal_distribution<float> nd;
  for (float& v : c) v = nd(rng);
  const std::vector<float> want_c = Gemm(a, b, c.data(), exact);
  for (const char* dgemm : {"1", "0"}) {
    const ScopedDgemm use(dgemm);
    INFO("QMX_ENGINE_DGEMM=" << dgemm);
    gpu::EngineGemmStats st;
    const std::vector<float> got = gpu::EngineGemm(a, b, nullptr, exact, &st);
    CHECK(st.kernel == (dgemm[0] == '1' ? "dgemm" : "dmma"));
    CHECK(st.whole_outputs == (m - 64) * n);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += FloatBits(got[i]) != FloatBits(want[i]);
    CHECK(bad == 0);
    CHECK(FloatBits(got[0]) == FloatBits(want[0]));
    const std::vector<float> got_c = gpu::EngineGemm(a, b, c.data(), exact, &st);
    bad = 0;
    for (size_t i = 0; i < got_c.size(); ++i) bad += FloatBits(got_c[i]) != FloatBits(want_c[i]);
    CHECK(bad == 0);
  }
  const ScopedDgemm wrong("2");
  CHECK_THROWS_WITH(gpu::EngineGemm(a, b, nullptr, exact), Catch::Contains("QMX_ENGINE_DGEMM is 0"));
}

// fp32-seq on its register-tiled kernel (engine_seq.cu: 128 x 128 outputs a block, K in slices of 8): shapes off
// every tile and slice, C with -0 (a product of -0 keeps it, a zero product of +0 turns it to +0, so a padded k
// would show), NaN and Inf codes, E8M0 and FP32 block scales, alpha; K = 0 and K = 1.
TEST_CASE("gpu engine: fp32-seq's tiled chains equal qmx::Gemm bit for bit", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::mt19937 rng(47);
  Tally t;
  const std::vector<AccumModel> seq = {AccumModelByName("fp32-seq")};
  const size_t shapes[][3] = {{131, 257, 13}, {1, 1, 1}, {128, 128, 8}, {300, 70, 1027}, {7, 200, 0}, {129, 3, 9}};
  for (const auto& sh : shapes) {
    const size_t m = sh[0], n = sh[1], k = sh[2];
    GemmOperand a = Codes(fmt::kE4M3, m, k, rng, true), b = Codes(fmt::kE5M2, k, n, rng, true);
    std::vector<float> c(m * n);
    std::normal_distribution<float> nd;
    for (float& v : c) v = rng() % 5 == 0 ? -0.0f : nd(rng);
    const std::string what = "fp32-seq " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    CheckModels(a, b, c.data(), what, t, seq);
    CheckModels(a, b, nullptr, what + " no C", t, seq);
    if (k >= 32) {
      AddUe8m0(a, true, 32, rng, -20, 20);
      AddFp32(b, 32, 1, rng);
      CheckModels(a, b, c.data(), what + " scaled", t, seq);
      a.tensor_scale = 0.75f;
      CheckModels(a, b, c.data(), what + " alpha", t, seq);
    }
  }
  // -0 kept through a K that is not a multiple of the slice: A's row 0 all -0, B all +1, C = -0.
  GemmOperand a = Codes(fmt::kE4M3, 3, 11, rng), b = Codes(fmt::kE4M3, 11, 5, rng);
  for (size_t kk = 0; kk < 11; ++kk) a.codes[kk] = 0x80;
  for (uint8_t& v : b.codes) v = 0x38;
  std::vector<float> c(3 * 5, -0.0f);
  const std::vector<float> want = Gemm(a, b, c.data(), seq[0]);
  CHECK(FloatBits(want[0]) == 0x80000000u);
  CheckModels(a, b, c.data(), "fp32-seq -0 rows", t, seq);
  CHECK(t.per_kernel["seq"] == t.compared);
  CHECK(t.compared >= 12);
}

// Sums below FP32's smallest subnormal: the fused models cut a nonzero sum to a zero that keeps its sign
// (RoundFused: -0 for a negative one); only an exact zero sum gives +0. One product a row, scales 2^-127 (A)
// and 2^-24 or 2^-23 (B), puts a certified step's sum at a few units of 2^-151 (FastStep); rows 4 and 5 add
// C = +-2^-149, which sets the step's exponent and cuts the product (AccStep). And K = 0: C alone.
TEST_CASE("gpu engine: the tensor-core kernel's tiny sums keep their sign, and K = 0 gives C", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  const std::vector<AccumModel> models = {AccumModelByName("blackwell-mxf8f6f4"), AccumModelByName("ada-fp8")};
  Tally t;
  const size_t m = 8, n = 8, k = 32;
  // E4M3 -1, 1, -1.5, -3, -5.5, -5.5, 2, -0.5 in column 0 of A; 1 in row 0 of B.
  const uint8_t col0[m] = {0xB8, 0x38, 0xBC, 0xC4, 0xCB, 0xCB, 0x40, 0xB0};
  std::vector<uint8_t> ac(m * k, 0), bc(k * n, 0);
  for (size_t i = 0; i < m; ++i) ac[i * k] = col0[i];
  for (size_t j = 0; j < n; ++j) bc[j] = 0x38;
  GemmOperand a = OperandFromCodes(fmt::kE4M3, m, k, ac.data()), b = OperandFromCodes(fmt::kE4M3, k, n, bc.data());
  a.scale_format = b.scale_format = ScaleFormat::kUe8m0;
  a.block_rows = 1, a.block_cols = 32, a.scale_rows = m, a.scale_cols = 1;
  b.block_rows = 32, b.block_cols = 1, b.scale_rows = 1, b.scale_cols = n;
  a.scales.assign(m, std::ldexp(1.0f, -127));
  for (size_t j = 0; j < n; ++j) b.scales.push_back(std::ldexp(1.0f, j % 2 ? -23 : -24));
  std::vector<float> c(m * n, 0.0f);
  for (size_t j = 0; j < n; ++j) c[4 * n + j] = std::ldexp(1.0f, -149), c[5 * n + j] = -std::ldexp(1.0f, -149);
  const std::vector<float> cpu = Gemm(a, b, c.data(), models[0]);
  size_t neg_zero = 0;
  for (float v : cpu) neg_zero += FloatBits(v) == 0x80000000u;
  INFO("CPU outputs that are -0: " << neg_zero << " of " << cpu.size());
  CHECK(neg_zero >= 4);  // the case reaches what it is about
  CheckModels(a, b, c.data(), "tiny sums", t, models);
  std::vector<float> c0(6 * 5);
  std::mt19937 rng(46);
  for (float& v : c0) v = std::ldexp(static_cast<float>(rng() % 200) - 100.0f, -static_cast<int>(rng() % 140));
  c0[3] = -0.0f;
  CheckModels(OperandFromCodes(fmt::kE4M3, 6, 0, nullptr), OperandFromCodes(fmt::kE4M3, 0, 5, nullptr), c0.data(),
              "K = 0", t, models);
  CHECK(t.per_kernel["dmma"] >= 1);
  // block-exact and exact on MX steps (the tensor-core kernel), C = -0: row 0's products are all -0 (the sum stays -0),
  // row 1's +0, row 2's cancel exactly (+0 from nonzero products); the same tiny sums as above.
  std::vector<uint8_t> az(4 * 64, 0), bz(64 * 4, 0x38);
  for (size_t kk = 0; kk < 64; ++kk) az[kk] = 0x80, az[2 * 64 + kk] = kk % 2 ? 0x38 : 0xB8;
  GemmOperand za = OperandFromCodes(fmt::kE4M3, 4, 64, az.data()), zb = OperandFromCodes(fmt::kE4M3, 64, 4, bz.data());
  qmx::test::AddUe8m0(za, true, 32, rng, -3, 3);
  qmx::test::AddUe8m0(zb, false, 32, rng, -3, 3);
  const std::vector<float> cz(16, -0.0f);
  const std::vector<AccumModel> exact_models = {AccumModelByName("block-exact"), AccumModelByName("exact")};
  for (const AccumModel& em : exact_models) {
    const std::vector<float> want = Gemm(za, zb, cz.data(), em);
    CHECK(FloatBits(want[0]) == 0x80000000u);
    CHECK(FloatBits(want[8]) == 0);
  }
  // (exact's whole sums run on cuBLASLt's FP64 GEMM: kernel "dgemm")
  const auto tensor_core = [&] { return t.per_kernel["dmma"] + t.per_kernel["dgemm"]; };
  const size_t dmma_before = tensor_core();
  CheckModels(za, zb, cz.data(), "exact zeros", t, exact_models);
  CheckModels(a, b, c.data(), "exact tiny sums", t, exact_models);
  CHECK(tensor_core() == dmma_before + 4);
  // A step of Inf and zeros in a line (E5M2 -Inf, +Inf; the line's minlsb is then kNoLsb, so the span bound alone
  // would pass it): block-exact gives -Inf and +Inf as the CPU does.
  std::vector<uint8_t> ai(2 * 32, 0), bi(32 * 2, 0x3C);
  ai[0] = 0xFC, ai[32] = 0x7C;
  for (size_t kk = 0; kk < 32; ++kk) bi[kk * 2 + 1] = 0xBC;
  GemmOperand ia = OperandFromCodes(fmt::kE5M2, 2, 32, ai.data()), ib = OperandFromCodes(fmt::kE5M2, 32, 2, bi.data());
  qmx::test::AddUe8m0(ia, true, 32, rng, 0, 0);
  qmx::test::AddUe8m0(ib, false, 32, rng, 0, 0);
  CHECK(FloatBits(Gemm(ia, ib, nullptr, exact_models[0])[0]) == 0xFF800000u);
  CheckModels(ia, ib, nullptr, "Inf and zeros", t, exact_models);
  CHECK(tensor_core() == dmma_before + 6);
}

// NVFP4 and MXFP4 tensors as a recipe quantizes them (Gaussian and heavy-tailed), and the same with rows and
// columns scaled 2^30 apart and with exact cancellations, so that the FP4 kernel's fast steps, its exact
// steps from the tensor core's group sums and FusedStep all run: every output equals qmx::Gemm's.
TEST_CASE("gpu engine: the FP4 kernel's fast and exact steps equal qmx::Gemm", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::mt19937 rng(47);
  std::vector<AccumModel> models;
  for (const char* n : {"blackwell-mxf4nvf4", "blackwell-mxf4nvf4-mmasim"}) models.push_back(AccumModelByName(n));
  Tally t;
  uint64_t plain_steps = 0, plain_fallbacks = 0;
  const size_t shapes[][3] = {{96, 72, 2048}, {130, 65, 1000}};
  for (const char* recipe : {"nvfp4", "mxfp4"})
    for (int kind = 0; kind < 3; ++kind)  // 0 normal, 1 t(2.5), 2 normal with rows and columns 2^30 apart
      for (const auto& s : shapes) {
        const size_t m = s[0], n = s[1], k = s[2];
        std::vector<float> x(m * k), y(k * n);
        std::normal_distribution<float> nd;
        std::student_t_distribution<float> td(2.5f);
        for (float& v : x) v = kind == 1 ? td(rng) : nd(rng);
        for (float& v : y) v = kind == 1 ? td(rng) : nd(rng);
        if (kind == 2) {
          for (size_t i = 0; i < m; ++i)
            for (size_t kk = 0; kk < k; ++kk) x[i * k + kk] *= std::ldexp(1.0f, (i % 3 == 0 ? 30 : 0) - (kk / 64 % 5 == 1 ? 25 : 0));
          for (size_t kk = 0; kk < 64 && kk < k; ++kk)
            for (size_t j = 0; j < n; ++j) y[kk * n + j] = -y[(kk + 64) * n + j];  // the first two steps cancel
        }
        QuantSpec sa = QuantSpecByName(recipe), sb = sa;
        sb.axis = Axis::kCol;
        const GemmOperand a = OperandFromQuantized(Quantize(TensorView{DType::kF32, x.data(), m, k}, sa));
        const GemmOperand b = OperandFromQuantized(Quantize(TensorView{DType::kF32, y.data(), k, n}, sb));
        const uint64_t s0 = t.steps["fp4"], f0 = t.fallback_steps["fp4"];
        CheckModels(a, b, nullptr, std::string(recipe) + " kind " + std::to_string(kind) + " " + std::to_string(k), t, models);
        if (kind < 2) {
          plain_steps += t.steps["fp4"] - s0;
          plain_fallbacks += t.fallback_steps["fp4"] - f0;
        }
      }
  const uint64_t steps = t.steps["fp4"], fallbacks = t.fallback_steps["fp4"];
  INFO("fp4 GEMMs " << t.per_kernel["fp4"] << ", steps " << steps << ", exact steps " << fallbacks
                    << "; on recipe tensors " << plain_fallbacks << " of " << plain_steps);
  CHECK(t.per_kernel["fp4"] == 24);
  CHECK(fallbacks > 0);
  CHECK(plain_fallbacks * 1000 < plain_steps);  // recipe tensors: the fast step almost always
}

TEST_CASE("gpu engine: Hopper models run on a Hopper GPU through cuBLASLt, equal to qmx::Gemm", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  const bool hopper = gpu::Device().major == 9;
  std::mt19937 rng(46);
  std::student_t_distribution<float> td(3.0f);
  struct Case {
    const char* a_spec;
    const char* b_spec;
    const char* model;
    size_t m, n, k;
  };
  // Per-tensor scales (both FP8 pairs cuBLASLt has), K past a promotion window and at 4096; blockwise 1x128 by
  // 128x128 and 1x128 by 128x1.
  const Case cases[] = {{"fp8-tensor-current", "fp8-tensor-current", "hopper-fp8", 64, 48, 512},
                        {"fp8-tensor-current", "fp8-tensor-current", "hopper-fp8", 128, 96, 4096},
                        {"fp8-tensor-current", "fp8-tensor-current", "hopper-fp8-fast", 128, 96, 4096},
                        {"fp8-tensor-current", "fp8-tensor-current:e5m2", "hopper-fp8", 32, 64, 1024},
                        {"fp8-block1x128", "fp8-block128x128", "hopper-fp8", 128, 256, 1024},
                        // K / 128 not a multiple of 4 (cuBLASLt's padded 128 x 128 scale rows), N past 2 blocks
                        {"fp8-block1x128", "fp8-block128x128", "hopper-fp8", 256, 512, 256},
                        {"fp8-block1x128", "fp8-block128x128", "hopper-fp8", 128, 640, 384},
                        {"fp8-block1x128", "fp8-block1x128", "hopper-fp8-vec", 128, 128, 512}};
  for (const Case& c : cases) {
    INFO(c.a_spec << " x " << c.b_spec << " under " << c.model << " at " << c.m << " x " << c.n << " x " << c.k);
    std::vector<float> x(c.m * c.k), y(c.k * c.n);
    for (size_t i = 0; i < x.size(); ++i) x[i] = td(rng) * std::ldexp(1.0f, static_cast<int>(i / c.k % 9) - 4);
    for (float& v : y) v = td(rng);
    const std::string b_name = c.b_spec;
    QuantSpec sa = QuantSpecByName(c.a_spec), sb = QuantSpecByName(b_name.substr(0, b_name.find(':')));
    if (b_name.find(":e5m2") != std::string::npos) sb.elem = fmt::kE5M2;
    sb.axis = Axis::kCol;
    const GemmOperand a = OperandFromQuantized(Quantize(TensorView{DType::kF32, x.data(), c.m, c.k}, sa));
    const GemmOperand b = OperandFromQuantized(Quantize(TensorView{DType::kF32, y.data(), c.k, c.n}, sb));
    const AccumModel model = AccumModelByName(c.model);
    const std::vector<float> want = Gemm(a, b, nullptr, model);
    // cuBLASLt by default (engine_gemm.cc), for blockwise scales not under QMX_ENGINE_CUBLASLT=tensorwise.
    const bool blockwise = sa.block_cols == 128;
    for (const char* env : {"", "blockwise", "tensorwise", "0"}) {
      const std::string use = env;
      if (!use.empty()) setenv("QMX_ENGINE_CUBLASLT", env, 1);
      gpu::EngineGemmStats stats;
      const std::vector<float> got = gpu::EngineGemm(a, b, nullptr, model, &stats);
      unsetenv("QMX_ENGINE_CUBLASLT");
      INFO("kernel " << stats.kernel << " with QMX_ENGINE_CUBLASLT='" << use << "'");
      CHECK((stats.kernel == "cublaslt") == (hopper && use != "0" && (!blockwise || use != "tensorwise")));
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (FloatBits(got[i]) != FloatBits(want[i]) && bad++ < 3)
          UNSCOPED_INFO("output " << i << " engine " << Hex(FloatBits(got[i]), 8) << " cpu " << Hex(FloatBits(want[i]), 8));
      CHECK(bad == 0);
    }
  }
}

// The option sets a conversion test runs per format and rounding: each valid saturation with the library's
// defaults, subnormals flushed, positive NaN with zero for NaN, stochastic rounding with 1 .. 32 random bits,
// and negative inputs by magnitude into an unsigned format.
std::vector<CastOptions> ConvertSets(const Format& dst, Rounding rd) {
  std::vector<CastOptions> sets = qmx::test::OptionSets(dst, {rd}, {std::begin(qmx::test::kAllSat), std::end(qmx::test::kAllSat)},
                                                        true, true);
  if (!dst.is_signed)
    for (size_t i = 0, n = sets.size(); i < n; ++i) {
      CastOptions v = sets[i];
      v.negative_unsigned = NegativeUnsigned::kMagnitude;
      sets.push_back(v);
    }
  return sets;
}

TEST_CASE("gpu engine: conversions refuse what ConvertToCodes refuses, and more than 8 bits", "[gpu]") {
  CastOptions o;
  CHECK_THROWS_WITH(gpu::EngineConvertCheck(DType::kU8, fmt::kE4M3, o), "engine: conversions read fp32, fp64, fp16 or bf16, not u8");
  CHECK_THROWS_WITH(gpu::EngineConvertCheck(DType::kF32, fmt::kFP16, o),
                    "engine: format 'fp16' has 16 bits; the engine writes codes of 8 bits or fewer, one byte each");
  o.saturation = Saturation::kNoSat;
  std::string cpu;
  try {
    ValidateCastOptions(fmt::kE2M1, o);
  } catch (const Error& e) {
    cpu = e.what();
  }
  REQUIRE(!cpu.empty());
  CHECK_THROWS_WITH(gpu::EngineConvertCheck(DType::kF32, fmt::kE2M1, o), cpu);
  o = CastOptions{};
  o.rounding = Rounding::kSrA;
  o.sr_bits = 33;
  CHECK_THROWS_WITH(gpu::EngineConvertCheck(DType::kF32, fmt::kE4M3, o), Catch::Contains("1..32 random bits"));
}

TEST_CASE("gpu engine: conversions equal the reference for every format, rounding, option and source", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::mt19937_64 g(45);
  // FP32: every pattern with its low 12 bits zero (each format's codes, midpoints and thresholds), random
  // patterns, and one odd-sized tail; the stream starts at index 3, off a Philox block.
  std::vector<uint32_t> x32;
  for (uint32_t hi = 0; hi < (1u << 20); ++hi) x32.push_back(hi << 12);
  for (int i = 0; i < 65537; ++i) x32.push_back(static_cast<uint32_t>(g()));
  const size_t n = x32.size();
  const SrSource sr{0xC0FFEEull, 3, nullptr};
  std::vector<uint8_t> got(n), want(n), got_flags(n), got_steps(n);
  size_t sets = 0, compared = 0, flag_checks = 0;
  // The registry's formats (each with its own kernel instance) and user formats (the generic kernel).
  std::vector<Format> dsts;
  for (const RegistryEntry& e : Registry())
    if (IsFastFormat(e.format)) dsts.push_back(e.format);
  for (const char* user : {"binary8p3se", "binary8p4uf", "e3m4", "e4m3:unsigned", "e5m2:special=fn"})
    dsts.push_back(ParseFormat(user));
  for (const Format& dst : dsts) {
    for (Rounding rd : {Rounding::kRne, Rounding::kRna, Rounding::kRz, Rounding::kRu, Rounding::kRd, Rounding::kRo,
                        Rounding::kSrA, Rounding::kSrB, Rounding::kSrC}) {
      for (const CastOptions& c : ConvertSets(dst, rd)) {
        // With flags: the routine per element; without: the step table (deterministic roundings).
        gpu::EngineConvert(DType::kF32, x32.data(), n, dst, c, got.data(), got_flags.data(), sr);
        gpu::EngineConvert(DType::kF32, x32.data(), n, dst, c, got_steps.data(), nullptr, sr);
        ConvertToCodes(DType::kF32, x32.data(), n, dst, c, want.data(), sr, Exec::kParallel);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          if ((got[i] != want[i] || got_steps[i] != want[i]) && bad++ < 3)
            UNSCOPED_INFO(dst.name << " " << RoundingName(rd) << " " << SaturationName(c.saturation) << " sr_bits "
                                   << c.sr_bits << ": input " << Hex(x32[i], 8) << " engine " << Hex(got[i]) << " / "
                                   << Hex(got_steps[i]) << " cpu " << Hex(want[i]));
          // Flags against the reference routine on every 61st input.
          if (i % 61 == 0) {
            const RoundResult ref = Convert(fmt::kFP32, x32[i], dst, c, RandomBitsForElement(sr.seed, sr.first_index + i));
            ++flag_checks;
            if (got_flags[i] != ref.flags && bad++ < 3)
              UNSCOPED_INFO(dst.name << " flags of " << Hex(x32[i], 8) << ": engine " << int{got_flags[i]} << " cpu " << ref.flags);
          }
        }
        CHECK(bad == 0);
        ++sets;
        compared += n;
      }
    }
  }
  INFO(sets << " option sets, " << compared << " conversions, " << flag_checks << " flag checks");
  CHECK(sets >= 400);
  // FP16 and BF16: every pattern, the default options of each rounding and saturation.
  std::vector<uint16_t> x16(1u << 16);
  for (uint32_t i = 0; i < (1u << 16); ++i) x16[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> g16(x16.size()), w16(x16.size());
  for (DType t : {DType::kF16, DType::kBF16})
    for (const RegistryEntry& e : Registry()) {
      if (!IsFastFormat(e.format)) continue;
      for (Rounding rd : {Rounding::kRne, Rounding::kRz, Rounding::kRo, Rounding::kSrA})
        for (const CastOptions& c : ConvertSets(e.format, rd)) {
          gpu::EngineConvert(t, x16.data(), x16.size(), e.format, c, g16.data(), nullptr, sr);
          ConvertToCodes(t, x16.data(), x16.size(), e.format, c, w16.data(), sr);
          INFO(DTypeName(t) << " -> " << e.format.name << " " << RoundingName(rd) << " " << SaturationName(c.saturation));
          CHECK(g16 == w16);
        }
    }
  // FP64 (which the CPU's fast paths do not read): random patterns and values near FP32's range, against
  // the reference routine; and stochastic rounding from explicit random bits.
  std::vector<uint64_t> x64(40000);
  for (size_t i = 0; i < x64.size(); ++i) {
    const uint64_t r = g();
    x64[i] = i % 2 ? r : (r & 0x800FFFFFFFFFFFFFull) | (static_cast<uint64_t>(1023 - 150 + g() % 300) << 52);
  }
  std::vector<uint32_t> bits(x64.size());
  for (uint32_t& b : bits) b = static_cast<uint32_t>(g());
  std::vector<uint8_t> g64(x64.size()), f64(x64.size());
  for (const RegistryEntry& e : Registry()) {
    if (!IsFastFormat(e.format)) continue;
    for (Rounding rd : {Rounding::kRne, Rounding::kRd, Rounding::kSrC})
      for (const CastOptions& c : ConvertSets(e.format, rd)) {
        const SrSource given{0, 0, bits.data()};
        gpu::EngineConvert(DType::kF64, x64.data(), x64.size(), e.format, c, g64.data(), f64.data(), given);
        size_t bad = 0;
        for (size_t i = 0; i < x64.size(); ++i) {
          const RoundResult ref = Convert(fmt::kFP64, x64[i], e.format, c, bits[i]);
          if ((g64[i] != ref.code || f64[i] != ref.flags) && bad++ < 3)
            UNSCOPED_INFO("fp64 " << Hex(x64[i], 16) << " -> " << e.format.name << " " << RoundingName(rd) << ": engine "
                                  << Hex(g64[i]) << "/" << int{f64[i]} << " cpu " << Hex(ref.code) << "/" << ref.flags);
        }
        CHECK(bad == 0);
      }
  }
}

TEST_CASE("gpu engine: MX quantization equals QuantizeMx for every rule, policy, scaling and option", "[gpu]") {
  // Blocks of 32 (and a ragged tail) of normal values, each block at its own power of two across FP32's
  // range, with zero, subnormal, Inf and NaN blocks and ties of every element format.
  std::mt19937_64 g(46);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t n = 32 * 301 + 7;
  std::vector<float> x(n);
  for (size_t b = 0; b * 32 < n; ++b) {
    const int e = static_cast<int>(g() % 270) - 145;
    for (size_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) x[i] = std::ldexp(nd(g), e);
    if (b % 17 == 3) x[b * 32 + 5] = std::nanf("");
    if (b % 19 == 4) x[b * 32 + 9] = -INFINITY;
    if (b % 23 == 5)
      for (size_t i = b * 32; i < b * 32 + 32; ++i) x[i] = 0.0f;
    if (b % 13 == 6) x[b * 32 + 1] = std::ldexp(1.5f, e);  // a tie at the element grid
  }
  if (!qmx::test::GpuPresent()) return;
  std::vector<uint16_t> xb(n);
  for (size_t i = 0; i < n; ++i) xb[i] = static_cast<uint16_t>(FloatBits(x[i]) >> 16);
  size_t specs = 0;
  for (const char* elem : qmx::test::kMxElems)
    for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven, ScaleRule::kMaxFinite})
      for (NanPolicy pol : {NanPolicy::kBlockNan, NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan, NanPolicy::kIgnore})
        for (ElementScaling sc : {ElementScaling::kExact, ElementScaling::kFp32, ElementScaling::kTeRcp})
          for (Rounding rd : {Rounding::kRne, Rounding::kRz, Rounding::kSrA})
            for (bool flush : {false, true}) {
              MxSpec spec;
              spec.elem = GetFormat(elem);
              spec.rule = rule;
              spec.nan = pol;
              spec.scaling = sc;
              spec.cast.rounding = rd;
              if (flush) spec.cast.subnormals = Subnormals::kFlush;
              std::string cpu_error;
              try {
                ValidateMxSpec(spec);
              } catch (const Error& e) {
                cpu_error = e.what();
              }
              std::vector<uint8_t> gc(n), gs(MxScaleCount(n, spec)), wc(n), ws(gs.size());
              if (!cpu_error.empty()) {
                CHECK_THROWS_WITH(gpu::EngineQuantizeMx(DType::kF32, x.data(), n, spec, gc.data(), gs.data()), cpu_error);
                continue;
              }
              const SrSource sr{91, 5, nullptr};
              for (DType t : {DType::kF32, DType::kBF16}) {
                const void* src = t == DType::kF32 ? static_cast<const void*>(x.data()) : xb.data();
                gpu::EngineQuantizeMx(t, src, n, spec, gc.data(), gs.data(), sr);
                QuantizeMx(t, src, n, spec, wc.data(), ws.data(), sr);
                INFO(elem << " rule " << ScaleRuleName(rule) << " policy " << NanPolicyName(pol) << " scaling "
                          << ElementScalingName(sc) << " " << RoundingName(rd) << (flush ? " flush" : "") << " from "
                          << DTypeName(t));
                CHECK(gs == ws);
                CHECK(gc == wc);
                ++specs;
              }
            }
  INFO(specs << " specs");
  CHECK(specs >= 500);
}

TEST_CASE("gpu engine: tensor quantization equals Quantize for every recipe, rule, axis and source", "[gpu]") {
  // Odd shapes (ragged blocks in both directions), rows at powers of two across FP32's range, zero rows,
  // subnormals, ties, NaN and Inf, and values past the elements' range: every path of QuantizeRef.
  // Two shapes: 71 x 200 (NVFP4 1x16: 71 x 13 blocks, an odd count for the half-warp pairs; rows not whole
  // blocks) and 37 x 384 (rows of whole 1x16 ... 1x128 blocks: the row-block kernel's 16-byte loads). A row
  // with 2^120 beside 2^-30 makes MX's V_i / X an FP32 subnormal that the FP32 multiply cannot hold exactly.
  QuantSpec f46 = QuantSpecByName("nvfp4");
  f46.rule = ScaleRule::kNvfp4FourOverSix;
  CHECK(!gpu::EngineQuantizeSupport(f46).empty());
  CHECK(!gpu::EngineQuantizeSupport(QuantSpecByName("fp8-delayed")).empty());
  if (!qmx::test::GpuPresent()) return;
  const std::vector<float> one(16, 1.0f);
  CHECK_THROWS_WITH(gpu::EngineQuantize({DType::kF32, one.data(), 1, 16}, f46), Catch::Contains("engine: "));
  size_t specs = 0, outputs = 0;
  for (const auto& [rows, cols] : {std::pair<size_t, size_t>{71, 200}, std::pair<size_t, size_t>{37, 384}}) {
    std::mt19937_64 g(61);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
      const int e = static_cast<int>(g() % 200) - 110;
      for (size_t c = 0; c < cols; ++c) x[r * cols + c] = r % 29 == 7 ? 0.0f : std::ldexp(nd(g), e);
    }
    x[3 * cols + 17] = std::nanf("");
    x[5 * cols + 40] = -std::nanf("");
    x[11 * cols + 3] = INFINITY;
    x[12 * cols + 150] = -INFINITY;
    x[20 * cols + 60] = 3e38f;
    x[21 * cols + 61] = 0x1p-149f;
    x[22 * cols + 62] = std::ldexp(1.5f, -100);
    x[24 * cols + 0] = 0x1p120f;
    for (size_t c = 1; c < 16; ++c) x[24 * cols + c] = std::ldexp(1.0f + static_cast<float>(c) / 7.0f, -30);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = static_cast<uint16_t>(FloatBits(x[i]) >> 16);
    for (const std::string& name : QuantSpecNames()) {
      const QuantSpec base = QuantSpecByName(name);
      if (!gpu::EngineQuantizeSupport(base).empty()) continue;
      std::vector<QuantSpec> variants;
      for (Axis axis : {Axis::kRow, Axis::kCol})
        for (NanPolicy nan : {NanPolicy::kBlockNan, NanPolicy::kIgnore, NanPolicy::kIgnoreNan, NanPolicy::kTe})
          for (Rounding rd : {Rounding::kRne, Rounding::kSrA}) {
            QuantSpec s = base;
            s.axis = axis;
            s.nan = nan;
            s.cast.rounding = rd;
            s.seed = 77;
            variants.push_back(s);
          }
      if (ScaleFormatOf(base.rule) == ScaleFormat::kE4m3)
        for (ScaleRule rule : {ScaleRule::kNvfp4Div, ScaleRule::kNvfp4Torchao, ScaleRule::kNvfp4TorchaoCuda}) {
          QuantSpec s = base;
          s.rule = rule;
          variants.push_back(s);
        }
      // Every element scaling of the UE8M0 recipes: on the 37 x 384 shape their FP8 ones take the MX row kernel,
      // which checks no V_i / X for exactness (row 24's 2^-30 elements under 2^120 are where it is not).
      if (ScaleFormatOf(base.rule) == ScaleFormat::kUe8m0)
        for (ElementScaling sc : {ElementScaling::kExact, ElementScaling::kFp32, ElementScaling::kTeRcp})
          if (sc != base.scaling) {
            QuantSpec s = base;
            s.scaling = sc;
            variants.push_back(s);
          }
      if (ScaleFormatOf(base.rule) == ScaleFormat::kFp32) {
        QuantSpec s = base;
        s.rule = ScaleRule::kFp32Pow2;
        s.margin = 2;
        variants.push_back(s);
      }
      for (const QuantSpec& s : variants) {
        try {
          ValidateQuantSpec(s);
        } catch (const Error&) {
          continue;  // a NaN policy this scale format cannot carry
        }
        for (DType t : {DType::kF32, DType::kBF16}) {
          const TensorView v{t, t == DType::kF32 ? static_cast<const void*>(x.data()) : xb.data(), rows, cols};
          const QuantizedTensor want = Quantize(v, s);
          const QuantizedTensor got = gpu::EngineQuantize(v, s);
          INFO(DescribeSpec(s) << " from " << DTypeName(t));
          CHECK(got.scales == want.scales);
          CHECK(std::vector<uint8_t>(got.codes.begin(), got.codes.end()) == std::vector<uint8_t>(want.codes.begin(), want.codes.end()));
          CHECK(FloatBits(got.tensor_amax) == FloatBits(want.tensor_amax));
          CHECK(FloatBits(got.tensor_decode) == FloatBits(want.tensor_decode));
          CHECK(got.line_amax == want.line_amax);
          if (!want.spec.row_scaled) {  // the engine's dequantization of the device codes, NaN payloads included
            std::vector<float> back(want.codes.size()), dev_back(want.codes.size());
            Dequantize(want, back.data());
            gpu::DeviceMemory dc(want.codes.size()), ds(want.scales.size() + 1), dout(back.size() * 4);
            dc.Upload(want.codes.data(), want.codes.size());
            ds.Upload(want.scales.data(), want.scales.size());
            gpu::EngineDequantizeOnDevice(want, static_cast<const uint8_t*>(dc.get()), static_cast<const uint8_t*>(ds.get()),
                                          static_cast<float*>(dout.get()), nullptr);
            dout.Download(dev_back.data(), back.size() * 4);
            size_t bad = 0;
            for (size_t i = 0; i < back.size(); ++i)
              if (FloatBits(back[i]) != FloatBits(dev_back[i]) && bad++ < 2)
                UNSCOPED_INFO("dequantized element " << i << ": engine 0x" << std::hex << FloatBits(dev_back[i])
                                                     << " cpu 0x" << FloatBits(back[i]) << std::dec);
            CHECK(bad == 0);
          }
          ++specs;
          outputs += want.codes.size();
        }
      }
    }
  }
  INFO(specs << " specs, " << outputs << " codes");
  CHECK(specs >= 300);
}

}  // namespace engine_test
#endif
