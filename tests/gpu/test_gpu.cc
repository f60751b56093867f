// test_gpu.cc: the CUDA backend (gpu/) against the CPU library, bit for bit. Built only with the backend;
// without a GPU each test says so and checks only what needs no device (support messages, skips).
#if defined(QMX_HAVE_CUDA)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/gpu.h"
#include "qmx/quantize.h"
#include "qmx/scaled_mm.h"
#include "support/gpu.h"
#include "support/hex.h"

namespace {

using namespace qmx;
using qmx::test::FloatBits;
using qmx::test::Hex;

CastOptions DeviceCast() {
  CastOptions c;
  c.nan_sign = NanSign::kPositive;  // cvt and the header functions give +NaN for every NaN
  return c;
}

TEST_CASE("gpu: support checks name what is missing", "[gpu]") {
  const CastOptions rne{};
  // FP8 cvt.rn exists only with satfinite; the header path covers nosat.
  CastOptions nosat = rne;
  nosat.saturation = Saturation::kNoSat;
  CHECK(gpu::ConvertSupport(fmt::kE4M3, nosat, gpu::ConvertPath::kPtx).find("satfinite") != std::string::npos);
  CastOptions rz = rne;
  rz.rounding = Rounding::kRz;
  CHECK(gpu::ConvertSupport(fmt::kE4M3, rz, gpu::ConvertPath::kHeader).find("nearest even") != std::string::npos);
  CHECK(gpu::ConvertSupport(fmt::kInt8, rne, gpu::ConvertPath::kPtx).find("no conversion") != std::string::npos);
  const gpu::DeviceInfo& d = gpu::Device();
  if (!d.available) {
    // Without a device every supported combination still says why it cannot run.
    CHECK(gpu::ConvertSupport(fmt::kE4M3, rne, gpu::ConvertPath::kPtx).find(d.reason) != std::string::npos);
    CHECK_THROWS_WITH(gpu::GemmMmaSync(OperandFromCodes(fmt::kE4M3, 16, 32, std::vector<uint8_t>(512).data()),
                                       OperandFromCodes(fmt::kE4M3, 32, 8, std::vector<uint8_t>(256).data()), nullptr),
                      Catch::Contains("mma.sync"));
  } else if (!d.sm100a_code) {
    CHECK(gpu::ConvertSupport(fmt::kE2M1, rne, gpu::ConvertPath::kPtx).find("sm_100a") != std::string::npos);
  }
}

TEST_CASE("gpu: golden files without a device are skipped with the reason", "[gpu]") {
  if (gpu::Device().available) return;  // covered by the replay test below
  golden::VerifyOptions o;
  o.external = gpu::GoldenRunner();
  o.only = "conversions/f32_e4m3_rne_satfinite_nanpos";
  const auto r = golden::Verify(std::string(QMX_SOURCE_DIR) + "/golden/level1", o);
  REQUIRE(r.size() == 1);
  CHECK(r[0].cases == 0);
  CHECK(r[0].skipped == gpu::Device().reason);
  CHECK(r[0].ok());
}

TEST_CASE("gpu: FP32 -> FP8/FP6/FP4 on the device equals ConvertToCodes", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::vector<uint32_t> bits;
  for (uint32_t b = 0x3A000000u; b < 0x3A000000u + (1u << 20); ++b) bits.push_back(b);  // e4m3 subnormals..
  for (uint32_t b = 0x43000000u; b < 0x43000000u + (1u << 20); b += 3) bits.push_back(b | 0x80000000u);
  for (uint32_t b : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0u, 0x80000000u, 0x7F7FFFFFu}) bits.push_back(b);
  const char* const f = GENERATE(values<const char*>({"e4m3", "e5m2", "e2m1", "e2m3", "e3m2"}));
  CAPTURE(f);
  const Format& dst = GetFormat(f);
  for (auto path : {gpu::ConvertPath::kPtx, gpu::ConvertPath::kHeader}) {
    if (!gpu::ConvertSupport(dst, DeviceCast(), path).empty()) continue;
    std::vector<uint8_t> g(bits.size()), c(bits.size());
    gpu::ConvertF32(reinterpret_cast<const float*>(bits.data()), bits.size(), dst, DeviceCast(), path, g.data());
    ConvertToCodes(DType::kF32, bits.data(), bits.size(), dst, DeviceCast(), c.data());
    for (size_t i = 0; i < bits.size(); ++i)
      if (g[i] != c[i]) FAIL(f << " " << gpu::ConvertPathName(path) << ": " << Hex(bits[i], 8) << " gpu " << int(g[i]) << " cpu " << int(c[i]));
  }
}

TEST_CASE("gpu: MX and NVFP4 quantization on the device equal the library", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::vector<float> x(1 << 14);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(std::sin(0.37 * i) * 3.0, static_cast<int>(i / 32 % 40) - 20);
  x[5] = INFINITY;
  x[100] = -NAN;
  for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp}) {
    MxSpec s;
    s.rule = rule;
    s.cast = DeviceCast();
    for (const char* e : {"e4m3", "e5m2", "e2m1"}) {
      s.elem = GetFormat(e);
      const size_t nb = x.size() / 32;
      std::vector<uint8_t> gc(x.size()), gs(nb), cc(x.size()), cs(nb);
      gpu::QuantizeMx(x.data(), x.size(), s, gc.data(), gs.data());
      QuantizeMx(DType::kF32, x.data(), x.size(), s, cc.data(), cs.data());
      CHECK(gs == cs);
      CHECK(gc == cc);
    }
  }
  QuantSpec q = QuantSpecByName("nvfp4");
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::isfinite(x[i]) ? x[i] : 1.0f;
  std::vector<uint8_t> gc(y.size()), gs(y.size() / 16);
  float dec = 0;
  gpu::QuantizeNvfp4(y.data(), y.size(), 16, 100.0f, ScaleRule::kNvfp4, gc.data(), gs.data(), &dec);
  const QuantizedTensor c = QuantizeNvfp4WithAmax(TensorView{DType::kF32, y.data(), y.size() / 16, 16}, q, 100.0f);
  CHECK(FloatBits(dec) == FloatBits(c.tensor_decode));
  CHECK(gs == c.scales);
  CHECK(gc == c.codes);
}

// E4M3 codes from a 32-bit LCG (state s, carried on): finite magnitudes 0..0x7D with a random sign.
void FillE4m3Codes(std::vector<uint8_t>& codes, uint32_t& s) {
  for (auto& v : codes) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint8_t>((s >> 24) % 0x7E) | ((s >> 8) & 0x80);
  }
}

TEST_CASE("gpu: cuBLASLt FP8 GEMMs equal the Hopper models", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  const size_t m = 128, n = 128, k = 512;
  std::vector<uint8_t> a(m * k), b(k * n);
  uint32_t s = 12345;
  FillE4m3Codes(a, s);
  FillE4m3Codes(b, s);
  const GemmOperand ga = OperandFromCodes(fmt::kE4M3, m, k, a.data()), gb = OperandFromCodes(fmt::kE4M3, k, n, b.data());
  for (auto mode : {gpu::CublasMode::kTensorwise, gpu::CublasMode::kTensorwiseFast}) {
    const std::string why = gpu::CublasSupport(mode, ga, gb);
    const std::string model = gpu::CublasModeModel(mode, gpu::Device());
    if (!why.empty() || model.empty()) {
      WARN("skipped " << gpu::CublasModeName(mode) << ": " << (why.empty() ? "no model for this device" : why));
      continue;
    }
    const std::vector<float> d = gpu::GemmCublasLt(ga, gb, mode), e = Gemm(ga, gb, nullptr, AccumModelByName(model));
    size_t bad = 0;
    for (size_t i = 0; i < d.size(); ++i) bad += FloatBits(d[i]) != FloatBits(e[i]);
    CHECK(bad == 0);
  }
}

TEST_CASE("gpu: cuBLASLt split-K equals scaled_mm's split-K model", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  const size_t m = 32, n = 128, k = 8224;  // 64 whole 128-element tiles and a part one
  std::vector<uint8_t> a(m * k), b(k * n);
  uint32_t s = 777;
  FillE4m3Codes(a, s);
  FillE4m3Codes(b, s);
  const GemmOperand ga = OperandFromCodes(fmt::kE4M3, m, k, a.data()), gb = OperandFromCodes(fmt::kE4M3, k, n, b.data());
  for (auto mode : {gpu::CublasMode::kTensorwise, gpu::CublasMode::kTensorwiseFast}) {
    const std::string why = gpu::CublasSupport(mode, ga, gb);
    if (!why.empty() || gpu::CublasModeModel(mode, gpu::Device()).empty()) {
      WARN("skipped " << gpu::CublasModeName(mode) << ": " << (why.empty() ? "no model for this device" : why));
      continue;
    }
    for (const int splits : {1, 3, 7}) {
      gpu::CublasAlgo algo;
      const std::vector<float> d = gpu::GemmCublasLt(ga, gb, mode, &algo, splits);
      REQUIRE(algo.split_k == splits);
      const float one = 1.0f;
      ScaledMmArgs x;
      x.m = m, x.n = n, x.k = k, x.a = a.data(), x.b = b.data(), x.scale_a = &one, x.scale_b = &one;
      x.fast_accum = mode == gpu::CublasMode::kTensorwiseFast;
      x.split_k = splits;
      const ScaledMmResult e = ScaledMm(x);
      size_t bad = 0;
      for (size_t i = 0; i < d.size(); ++i) bad += FloatBits(d[i]) != e.bits[i];
      INFO(gpu::CublasModeName(mode) << " numSplitsK " << splits);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("gpu: golden/level1 replays on the device with no mismatch", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  golden::VerifyOptions o;
  o.external = gpu::GoldenRunner();
  o.max_errors = 0;
  uint64_t cases = 0;
  for (const auto& r : golden::Verify(std::string(QMX_SOURCE_DIR) + "/golden/level1", o)) {
    INFO(r.path << (r.first.empty() ? std::string() : ": " + r.first[0].text));
    CHECK(r.ok());
    cases += r.cases;
  }
  CHECK(cases > 10000);
}

}  // namespace
#endif
