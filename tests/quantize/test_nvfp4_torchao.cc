// test_nvfp4_torchao.cc: the rule nvfp4-torchao against torchao's own NVFP4 quantizer and dequantizer,
// golden/nvfp4-torchao (gpu/scripts/collect_nvfp4_torchao.py: NVFP4Tensor.to_nvfp4 with
// per_tensor_amax_to_scale, torchao at 36027d82, torch 2.11): every scale, code, the per-tensor scale and
// every dequantized value bit for bit, F32 and BF16 inputs; and Transformer Engine's orders do not give
// torchao's scales on the same data (the orders are told apart).
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

NpyArray TorchaoGolden(const std::string& name) { return ReadNpy(std::string(QMX_SOURCE_DIR) + "/golden/nvfp4-torchao/" + name + ".npy"); }

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

}  // namespace

TEST_CASE("quantize: nvfp4-torchao reproduces torchao's NVFP4Tensor.to_nvfp4 and dequantize bit for bit",
          "[quantize][nvfp4][torchao]") {
  size_t te_scale_differences = 0;
  for (const char* name : {"normal", "logmag", "heavy", "rows_bf16"}) {
    INFO(name);
    const NpyArray x = TorchaoGolden(std::string(name) + "_x"), scales = TorchaoGolden(std::string(name) + "_scales"),
                   codes = TorchaoGolden(std::string(name) + "_codes"), pts = TorchaoGolden(std::string(name) + "_pts"),
                   dq = TorchaoGolden(std::string(name) + "_dq");
    TensorView v;
    v.dtype = x.dtype == DType::kU16 ? DType::kBF16 : DType::kF32;
    v.data = x.data.data();
    v.rows = x.shape[0];
    v.cols = x.shape[1];
    for (Exec exec : {Exec::kParallel, Exec::kSequential}) {
      const QuantizedTensor q = Quantize(v, Spec(ScaleRule::kNvfp4Torchao), exec);
      CHECK(DifferFromTorchao(q.scales, scales.data, "scale") == 0);
      CHECK(DifferFromTorchao(qmx::test::PlainCodes(q.codes), codes.data, "code") == 0);
      CHECK(std::memcmp(&q.tensor_decode, pts.data.data(), 4) == 0);
      std::vector<float> out(q.codes.size());
      Dequantize(q, out.data());
      std::vector<uint8_t> got(out.size() * 4);
      std::memcpy(got.data(), out.data(), got.size());
      CHECK(DifferFromTorchao(got, dq.data, "dequantized byte") == 0);
    }
    const QuantizedTensor r = QuantizeRef(v, Spec(ScaleRule::kNvfp4Torchao));
    CHECK(DifferFromTorchao(r.scales, scales.data, "reference scale") == 0);
    CHECK(DifferFromTorchao(qmx::test::PlainCodes(r.codes), codes.data, "reference code") == 0);
    for (ScaleRule te : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
      const QuantizedTensor t = Quantize(v, Spec(te));
      for (size_t i = 0; i < t.scales.size(); ++i) te_scale_differences += t.scales[i] != scales.data[i];
    }
  }
  // TE's orders (no 2^-6 clamp, S_enc = 2688 / amax, a multiply by fl(S_enc / 6)) give other scales on
  // these inputs: the torchao data pins its own order.
  CHECK(te_scale_differences > 100);
}
