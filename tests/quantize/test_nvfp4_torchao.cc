// test_nvfp4_torchao.cc: the rules nvfp4-torchao and nvfp4-torchao-cuda against torchao's own NVFP4
// quantizer and dequantizer on CPU tensors (golden/nvfp4-torchao) and on CUDA tensors on an H200
// (golden/nvfp4-torchao-cuda), both written by gpu/scripts/collect_nvfp4_torchao.py (NVFP4Tensor.to_nvfp4
// with per_tensor_amax_to_scale, torchao at 36027d82, torch 2.11): every scale, code, the per-tensor scale
// and every dequantized value bit for bit, F32 and BF16 inputs. Transformer Engine's orders do not give
// torchao's scales on the same data, and each torchao rule misses the other device's outputs (the orders
// are told apart).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/io.h"
#include "qmx/quantize.h"
#include "support/codes.h"
#include "support/hex.h"

using namespace qmx;

namespace {

NpyArray TorchaoGolden(const std::string& name, const std::string& dir = "nvfp4-torchao") {
  return ReadNpy(std::string(QMX_SOURCE_DIR) + "/golden/" + dir + "/" + name + ".npy");
}

QuantSpec Spec(ScaleRule rule) {
  QuantSpec s = QuantSpecByName("nvfp4");
  s.rule = rule;
  return s;
}

size_t DifferFromTorchao(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && ++bad <= 4) UNSCOPED_INFO(what << " " << i << ": qmx " << test::Hex(a[i]) << ", torchao " << test::Hex(b[i]));
  return bad;
}

// Elements of `rule`'s quantization of case `name` of golden `dir` that differ from torchao's there: scales,
// codes, the per-tensor scale (0 or 1), dequantized bytes. With `expect_equal`, each must be 0, on both
// Exec modes and the reference quantizer.
struct Differences {
  size_t scales = 0, codes = 0, pts = 0, dq = 0;
};
Differences CompareWithTorchao(const std::string& dir, const std::string& name, ScaleRule rule, bool expect_equal) {
  const NpyArray x = TorchaoGolden(name + "_x", dir), scales = TorchaoGolden(name + "_scales", dir),
                 codes = TorchaoGolden(name + "_codes", dir), pts = TorchaoGolden(name + "_pts", dir),
                 dq = TorchaoGolden(name + "_dq", dir);
  TensorView v;
  v.dtype = x.dtype == DType::kU16 ? DType::kBF16 : DType::kF32;
  v.data = x.data.data();
  v.rows = x.shape[0];
  v.cols = x.shape[1];
  Differences d;
  const auto count = [](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    REQUIRE(a.size() == b.size());
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
    return n;
  };
  for (Exec exec : {Exec::kParallel, Exec::kSequential}) {
    const QuantizedTensor q = Quantize(v, Spec(rule), exec);
    std::vector<float> out(q.codes.size());
    Dequantize(q, out.data());
    std::vector<uint8_t> got(out.size() * 4);
    std::memcpy(got.data(), out.data(), got.size());
    if (expect_equal) {
      CHECK(DifferFromTorchao(q.scales, scales.data, "scale") == 0);
      CHECK(DifferFromTorchao(qmx::test::PlainCodes(q.codes), codes.data, "code") == 0);
      CHECK(std::memcmp(&q.tensor_decode, pts.data.data(), 4) == 0);
      CHECK(DifferFromTorchao(got, dq.data, "dequantized byte") == 0);
    }
    d.scales = count(q.scales, scales.data);
    d.codes = count(qmx::test::PlainCodes(q.codes), codes.data);
    d.pts = std::memcmp(&q.tensor_decode, pts.data.data(), 4) != 0;
    d.dq = count(got, dq.data);
  }
  if (expect_equal) {
    const QuantizedTensor r = QuantizeRef(v, Spec(rule));
    CHECK(DifferFromTorchao(r.scales, scales.data, "reference scale") == 0);
    CHECK(DifferFromTorchao(qmx::test::PlainCodes(r.codes), codes.data, "reference code") == 0);
  }
  return d;
}

}  // namespace

TEST_CASE("quantize: nvfp4-torchao reproduces torchao's NVFP4Tensor.to_nvfp4 and dequantize bit for bit",
          "[quantize][nvfp4][torchao]") {
  size_t te_scale_differences = 0;
  for (const char* name : {"normal", "logmag", "heavy", "rows_bf16"}) {
    INFO(name);
    CompareWithTorchao("nvfp4-torchao", name, ScaleRule::kNvfp4Torchao, true);
    const NpyArray x = TorchaoGolden(std::string(name) + "_x"), scales = TorchaoGolden(std::string(name) + "_scales");
    TensorView v;
    v.dtype = x.dtype == DType::kU16 ? DType::kBF16 : DType::kF32;
    v.data = x.data.data();
    v.rows = x.shape[0];
    v.cols = x.shape[1];
    for (ScaleRule te : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
      const QuantizedTensor t = Quantize(v, Spec(te));
      for (size_t i = 0; i < t.scales.size(); ++i) te_scale_differences += t.scales[i] != scales.data[i];
    }
  }
  // TE's orders (no 2^-6 clamp, S_enc = 2688 / amax, a multiply by fl(S_enc / 6)) give other scales on
  // these inputs: the torchao data pins its own order.
  CHECK(te_scale_differences > 100);
}

TEST_CASE("quantize: nvfp4-torchao-cuda reproduces torchao on CUDA tensors, and the two devices differ",
          "[quantize][nvfp4][torchao]") {
  // On CUDA, torchao's `max_abs / 6` and `amax / 2688` are multiplies by FP32 reciprocals. cuda_scales holds
  // blocks whose E4M3 scale that moves, cuda_codes a tensor amax whose s_g it moves, with elements at the FP4
  // boundaries the two multipliers then split.
  Differences cpu_rule_on_cuda, cuda_rule_on_cpu;
  for (const char* name : {"normal", "logmag", "heavy", "rows_bf16", "cuda_scales", "cuda_codes"}) {
    INFO(name);
    CompareWithTorchao("nvfp4-torchao-cuda", name, ScaleRule::kNvfp4TorchaoCuda, true);
    const Differences d = CompareWithTorchao("nvfp4-torchao-cuda", name, ScaleRule::kNvfp4Torchao, false);
    cpu_rule_on_cuda.scales += d.scales, cpu_rule_on_cuda.codes += d.codes, cpu_rule_on_cuda.pts += d.pts;
    if (std::string(name).rfind("cuda_", 0) != 0) {
      const Differences e = CompareWithTorchao("nvfp4-torchao", name, ScaleRule::kNvfp4TorchaoCuda, false);
      cuda_rule_on_cpu.pts += e.pts, cuda_rule_on_cpu.dq += e.dq;
    }
  }
  // The CPU order misses the CUDA data: the s_g of three of the four shared cases (one ulp), the
  // adversarial blocks' scales and codes; and the CUDA order misses the CPU data the same way.
  CHECK(cpu_rule_on_cuda.pts >= 3);
  CHECK(cpu_rule_on_cuda.scales >= 10);
  CHECK(cpu_rule_on_cuda.codes >= 100);
  CHECK(cuda_rule_on_cpu.pts >= 3);
  CHECK(cuda_rule_on_cpu.dq > 0);
}
