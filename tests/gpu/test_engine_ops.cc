// test_engine_ops.cc: the engine's tensor operations on device memory (qmx/gpu.h "Tensor operations")
// against the CPU library, bit for bit: torch._scaled_mm's model (ScaledMm) in each scaling, split and output
// type, with NaN codes, overflowing outputs and K = 0; the error statistics (CompareTensors) over several
// chunks with non-finite and zero elements; the Hadamard transforms. Without a GPU only the plan's errors are
// checked.
#if defined(QMX_HAVE_CUDA)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/gpu.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/metrics.h"
#include "qmx/scaled_mm.h"
#include "qmx/transform.h"

namespace engine_ops_test {

using namespace qmx;

template <typename T>
using Dev = qmx::test::DeviceArray<T>;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Codes of an FP8 format: mostly moderate magnitudes, some of every code (NaN ones where nan is set).
std::vector<uint8_t> Codes(size_t n, std::mt19937& g, bool nan) {
  std::vector<uint8_t> c(n);
  for (uint8_t& v : c) {
    v = static_cast<uint8_t>(g() % 256 < 200 ? 0x20 + g() % 0x30 + (g() % 2) * 0x80 : g() % 256);
    if (!nan && (v & 0x7F) >= 0x7C) v &= 0x3F;  // no NaN and no E5M2 Inf
  }
  return c;
}

struct Case {
  std::string what;
  Format fa = fmt::kE4M3, fb = fmt::kE4M3;
  size_t m, n, k;
  int scaling;  // 0 tensorwise, 1 rowwise, 2 blockwise 128x128, 3 blockwise 128x1
  ScaledMmOut out = ScaledMmOut::kF32;
  bool bias = false, fast = false, nan = false;
  int split_k = 0;
};

TEST_CASE("gpu engine: scaled_mm equals ScaledMm in every scaling, split and output", "[gpu]") {
  {
    ScaledMmArgs x;
    x.m = x.n = x.k = 4;
    float one = 1.0f;
    x.scale_a = x.scale_b = &one;
    x.out = ScaledMmOut::kF32;
    uint16_t bias[4] = {};
    x.bias = bias;
    CHECK_THROWS_WITH(gpu::EngineScaledMmOnDevice(x, nullptr, nullptr), Catch::Contains("a bias needs a BF16 or FP16"));
  }
  if (!qmx::test::GpuPresent()) return;
  const std::vector<Case> cases = {
      {"tensorwise", fmt::kE4M3, fmt::kE4M3, 37, 45, 300, 0},
      {"tensorwise fast, e5m2 x e4m3, NaN codes", fmt::kE5M2, fmt::kE4M3, 33, 17, 200, 0, ScaledMmOut::kF32, false,
       true, true},
      {"tensorwise split 3", fmt::kE4M3, fmt::kE4M3, 40, 24, 1000, 0, ScaledMmOut::kF32, false, false, false, 3},
      {"tensorwise split 2, bf16 + bias", fmt::kE4M3, fmt::kE5M2, 20, 30, 513, 0, ScaledMmOut::kBF16, true, false,
       false, 2},
      {"rowwise bf16 + bias", fmt::kE4M3, fmt::kE4M3, 50, 70, 384, 1, ScaledMmOut::kBF16, true},
      {"rowwise fp16 + bias, overflow, NaN", fmt::kE4M3, fmt::kE4M3, 19, 23, 256, 1, ScaledMmOut::kF16, true, true,
       true},
      {"blockwise 128x128", fmt::kE4M3, fmt::kE4M3, 130, 200, 400, 2},
      {"blockwise 128x1", fmt::kE4M3, fmt::kE4M3, 70, 90, 260, 3},
      {"tensorwise K = 0, fp16 + bias", fmt::kE4M3, fmt::kE4M3, 5, 6, 0, 0, ScaledMmOut::kF16, true},
  };
  std::mt19937 g(11);
  for (const Case& c : cases) {
    INFO(c.what);
    const std::vector<uint8_t> a = Codes(c.m * c.k, g, c.nan), b = Codes(c.k * c.n, g, c.nan);
    const size_t kb = (c.k + 127) / 128;
    size_t sar = 1, sac = 1, sbr = 1, sbc = 1;
    if (c.scaling == 1) sar = c.m, sbc = c.n;
    if (c.scaling >= 2) sar = c.m, sac = kb, sbr = kb, sbc = c.scaling == 2 ? (c.n + 127) / 128 : c.n;
    std::vector<float> sa(sar * sac), sb(sbr * sbc);
    // Scales spread over binades; the fp16 case's large ones overflow some outputs to Inf.
    const float big = c.out == ScaledMmOut::kF16 ? 64.0f : 1.0f;
    for (float& s : sa) s = std::ldexp(1.0f + (g() % 1000) / 1000.0f, static_cast<int>(g() % 12) - 8) * big;
    for (float& s : sb) s = std::ldexp(1.0f + (g() % 1000) / 1000.0f, static_cast<int>(g() % 12) - 6);
    std::vector<uint16_t> bias(c.n);
    for (uint16_t& v : bias)
      v = static_cast<uint16_t>(c.out == ScaledMmOut::kBF16 ? 0x3F80 + g() % 0x200 - 0x100
                                                            : 0x3C00 + g() % 0x400 - 0x200);
    if (c.bias && c.nan) bias[1] = 0xFE00;  // an FP16 NaN with its sign set
    ScaledMmArgs x;
    x.a_format = c.fa;
    x.b_format = c.fb;
    x.m = c.m, x.n = c.n, x.k = c.k;
    x.a = a.data(), x.b = b.data();
    x.scale_a = sa.data(), x.scale_a_rows = sar, x.scale_a_cols = sac;
    x.scale_b = sb.data(), x.scale_b_rows = sbr, x.scale_b_cols = sbc;
    x.bias = c.bias ? bias.data() : nullptr;
    x.out = c.out;
    x.fast_accum = c.fast;
    x.split_k = c.split_k;
    const ScaledMmResult want = ScaledMm(x);
    Dev<uint8_t> da(a), db(b);
    Dev<float> dsa(sa), dsb(sb);
    Dev<uint16_t> dbias(bias);
    const size_t width = c.out == ScaledMmOut::kF32 ? 4 : 2;
    gpu::DeviceMemory dout(c.m * c.n * width);
    ScaledMmArgs d = x;
    d.a = da.get(), d.b = db.get(), d.scale_a = dsa.get(), d.scale_b = dsb.get();
    d.bias = c.bias ? dbias.get() : nullptr;
    const ScaledMmResult got = gpu::EngineScaledMmOnDevice(d, dout.get(), nullptr);
    CHECK(got.model == want.model);
    CHECK(got.scaling == want.scaling);
    CHECK(got.split_k == want.split_k);
    std::vector<uint32_t> out(c.m * c.n);
    if (width == 4) {
      dout.Download(out.data(), out.size() * 4);
    } else {
      std::vector<uint16_t> h(out.size());
      dout.Download(h.data(), h.size() * 2);
      for (size_t i = 0; i < h.size(); ++i) out[i] = h[i];
    }
    size_t bad = 0, nans = 0, infs = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] != want.bits[i] && bad++ < 3)
        UNSCOPED_INFO("output " << i << ": engine " << std::hex << out[i] << " cpu " << want.bits[i] << std::dec);
      const uint32_t mag = width == 4 ? want.bits[i] & 0x7FFFFFFFu : want.bits[i] & 0x7FFFu;
      const uint32_t inf = width == 4 ? 0x7F800000u : c.out == ScaledMmOut::kBF16 ? 0x7F80u : 0x7C00u;
      nans += mag > inf;
      infs += mag == inf;
    }
    CHECK(bad == 0);
    if (c.nan) CHECK(nans > 0);  // the NaN paths were taken
    if (c.what.find("overflow") != std::string::npos) CHECK(infs > 0);
  }
}

TEST_CASE("gpu engine: scaled_mm refuses what ScaledMm refuses", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  std::vector<uint8_t> a(8 * 256, 0x38);
  std::vector<float> sa(8 * 2, 1.0f), sb(2 * 1, 1.0f);
  Dev<uint8_t> da(a);
  Dev<float> dsa(sa), dsb(sb);
  gpu::DeviceMemory out(8 * 8 * 4);
  ScaledMmArgs x;
  x.m = 8, x.n = 8, x.k = 256;
  x.a = x.b = da.get();
  x.scale_a = dsa.get(), x.scale_a_rows = 8, x.scale_a_cols = 2;
  x.scale_b = dsb.get(), x.scale_b_rows = 2, x.scale_b_cols = 1;
  x.fast_accum = true;
  CHECK_THROWS_WITH(gpu::EngineScaledMmOnDevice(x, out.get(), nullptr),
                    "scaled_mm: blockwise scaling with use_fast_accum was not measured on Hopper");
  x.fast_accum = false;
  x.k = 8192;
  x.scale_a_rows = x.scale_a_cols = x.scale_b_rows = x.scale_b_cols = 1;
  CHECK_THROWS_WITH(gpu::EngineScaledMmOnDevice(x, out.get(), nullptr),
                    Catch::Contains("was not measured on the H200"));
}

TEST_CASE("gpu engine: error statistics equal CompareTensors over chunks, NaN, Inf and zeros", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  for (const size_t n : {size_t{1}, size_t{7}, size_t{65536}, size_t{3 * 65536 + 1001}}) {
    INFO("n = " << n);
    std::mt19937 g(static_cast<unsigned>(n));
    std::normal_distribution<float> nd;
    std::vector<float> ref(n), out(n);
    for (size_t i = 0; i < n; ++i) {
      ref[i] = nd(g) * std::ldexp(1.0f, static_cast<int>(g() % 40) - 20);
      out[i] = ref[i] * (1.0f + nd(g) * 0.01f);
      switch (g() % 64) {
        case 0: ref[i] = 0.0f; break;
        case 1: ref[i] = std::numeric_limits<float>::quiet_NaN(); break;
        case 2: out[i] = std::numeric_limits<float>::infinity(); break;
        case 3: out[i] = -0.0f; break;
        case 4: ref[i] = out[i] = 0.0f; break;
        default: break;
      }
    }
    const ErrorStats want = CompareTensors(ref.data(), out.data(), n);
    Dev<float> dr(ref), dout(out);
    const ErrorStats got = gpu::EngineErrorStatsOnDevice(dr.get(), dout.get(), n, nullptr);
    CHECK(got.count == want.count);
    CHECK(got.nonfinite == want.nonfinite);
    CHECK(got.out_nonfinite == want.out_nonfinite);
    CHECK(got.zero_ref_err == want.zero_ref_err);
    CHECK(got.rel_count == want.rel_count);
    const std::vector<std::pair<double, double>> sums = {
        {got.sum_sq_err, want.sum_sq_err},   {got.sum_err, want.sum_err},        {got.sum_sq_ref, want.sum_sq_ref},
        {got.sum_sq_out, want.sum_sq_out},   {got.sum_dot, want.sum_dot},        {got.max_abs_err, want.max_abs_err},
        {got.max_rel_err, want.max_rel_err}, {got.sum_rel_err, want.sum_rel_err}};
    for (const auto& [engine, cpu] : sums) CHECK(Bits(engine) == Bits(cpu));
    if (n > 1000) CHECK(want.nonfinite > 0);
  }
  CHECK(gpu::EngineErrorStatsOnDevice(nullptr, nullptr, 0, nullptr).count == 0);
}

TEST_CASE("gpu engine: Hadamard transforms equal HadamardForward and HadamardInverse", "[gpu]") {
  CHECK_THROWS_AS(gpu::EngineHadamardOnDevice(ParseHadamard("hadamard:32"), nullptr, 2, 48, false, nullptr), Error);
  if (!qmx::test::GpuPresent()) return;
  std::mt19937 g(5);
  std::normal_distribution<float> nd;
  for (const char* spec : {"hadamard:16", "hadamard:32", "rht:32:7", "hadamard:64", "rht:128:3", "hadamard:256"}) {
    const HadamardSpec h = ParseHadamard(spec);
    for (const bool inverse : {false, true}) {
      INFO(spec << (inverse ? " inverse" : ""));
      const size_t rows = 37, cols = 512;
      std::vector<float> x(rows * cols), want(rows * cols);
      for (float& v : x) v = nd(g) * std::ldexp(1.0f, static_cast<int>(g() % 60) - 30);
      if (inverse) {
        HadamardInverse(h, x.data(), want.data(), rows, cols);
      } else {
        HadamardForward(h, x.data(), want.data(), rows, cols);
      }
      Dev<float> d(x);
      gpu::EngineHadamardOnDevice(h, d.get(), rows, cols, inverse, nullptr);
      const std::vector<float> got = d.Host(rows * cols);
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) bad += Bits(got[i]) != Bits(want[i]);
      CHECK(bad == 0);
    }
  }
}

}  // namespace engine_ops_test
#endif
