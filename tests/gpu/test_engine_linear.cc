// test_engine_linear.cc: the engine's linear layer (gpu/src/engine_linear.cc) against qmx::LinearForward and
// LinearBackward, bit for bit, over several steps of every recipe (the step's SR streams and Hadamard signs,
// delayed scaling's histories, Quartet's QuEST values and masks kept from forward to backward, the state's step
// count), odd token counts, outlier channels, and the device GEMM on quantized device operands against
// qmx::Gemm. Without a GPU only the support messages are checked.
#if defined(QMX_HAVE_CUDA)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "support/gpu.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/gpu.h"
#include "qmx/quantize.h"
#include "qmx/recipe.h"

namespace engine_linear_test {

using namespace qmx;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The outputs that differ from the CPU's by bits (the first three logged).
size_t Differ(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (Bits(got[i]) != Bits(want[i]) && bad++ < 3)
      UNSCOPED_INFO(what << ": element " << i << " engine " << got[i] << " cpu " << want[i]);
  return bad + (got.size() != want.size() ? 1 : 0);
}

using Dev = qmx::test::DeviceArray<float>;

TEST_CASE("gpu engine: the linear layer runs every recipe and names the models it does not", "[gpu]") {
  const RecipeOptions opt;
  for (const std::string& r : TrainingRecipeNames()) CHECK(gpu::EngineLinearSupport(TrainingRecipeByName(r), opt).empty());
  RecipeOptions exact = opt;
  exact.accum = "exact";
  CHECK(gpu::EngineLinearSupport(TrainingRecipeByName("mxfp8"), exact).empty());
  exact.accum = "fused:step=32,F=13,bits=11,acc=fp16,scale=products";  // the engine's accumulators are FP32
  CHECK_THAT(gpu::EngineLinearSupport(TrainingRecipeByName("mxfp8"), exact), Catch::Contains("runs on the CPU"));
  if (!qmx::test::GpuPresent()) return;
  RecipeState state;
  LinearSaved saved;
  Dev x(std::vector<float>(32 * 64, 1.0f)), w(std::vector<float>(32 * 64, 1.0f)), y(32 * 32);
  CHECK_THROWS_WITH(gpu::EngineLinearForward(TrainingRecipeByName("mxfp8"), x.get(), w.get(), 32, 32, 64, state, exact,
                                             saved, y.get(), nullptr),
                    Catch::StartsWith("engine: mxfp8 fprop: 'fused:"));
  // A NaN in X is named as the CPU names it.
  std::vector<float> bad(32 * 64, 1.0f);
  bad[100] = std::nanf("");
  Dev xb(bad);
  CHECK_THROWS_WITH(gpu::EngineLinearForward(TrainingRecipeByName("mxfp8"), xb.get(), w.get(), 32, 32, 64, state, opt,
                                             saved, y.get(), nullptr),
                    "recipe: X holds NaN at element 100; the recipes model finite training tensors");
  CHECK(state.step == 0);
}

TEST_CASE("gpu engine: the linear layer equals LinearForward and LinearBackward over steps", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  // Tokens 96 (NVFP4's RHT-16 on WGRAD needs m % 16 == 0), out 160, in 256: ragged 128x128 weight blocks.
  const size_t m = 96, n = 160, k = 256;
  const LinearTensors t = GenerateLinearLayer(DefaultLayerGen(), 7, m, n, k);
  Dev x(t.x), w(t.w), dy(t.dy), y(m * n), dx(m * k), dw(n * k), db(n);
  size_t layers = 0;
  for (const char* recipe :
       {"bf16", "fp8-delayed", "fp8-current", "fp8-blockwise", "mxfp8", "mxfp8-ocp", "mxfp8-e5m2-grads", "nvfp4", "quartet"}) {
    for (const char* rule : {"decode", "te"}) {
      const std::string name = recipe, alpha = rule;
      if (alpha == "te" && name != "nvfp4") continue;
      const TrainingRecipe r = TrainingRecipeByName(name);
      RecipeOptions opt;
      opt.seed = 11;
      opt.prime_history = false;
      opt.alpha = ParseAlphaRule(alpha);
      RecipeState cpu_state, gpu_state;
      for (int step = 0; step < 3; ++step) {
        const std::string what = name + " alpha=" + alpha + " step " + std::to_string(step);
        INFO(what);
        LinearSaved cs, gs;
        const std::vector<float> want_y = LinearForward(r, t.x.data(), t.w.data(), m, n, k, cpu_state, opt, cs);
        gpu::EngineLinearForward(r, x.get(), w.get(), m, n, k, gpu_state, opt, gs, y.get(), nullptr);
        CHECK(Differ(y.Host(m * n), want_y, what + " Y") == 0);
        std::vector<float> want_dx(m * k), want_dw(n * k);
        LinearBackward(r, t.x.data(), t.w.data(), t.dy.data(), cpu_state, opt, cs, want_dx.data(), want_dw.data());
        gpu::EngineLinearBackward(r, x.get(), w.get(), dy.get(), gpu_state, opt, gs, dx.get(), dw.get(), nullptr);
        CHECK(Differ(dx.Host(m * k), want_dx, what + " dX") == 0);
        CHECK(Differ(dw.Host(n * k), want_dw, what + " dW") == 0);
        CHECK(gpu_state.step == cpu_state.step);
        // A second backward of the same step is refused, as on the CPU.
        CHECK_THROWS_WITH(gpu::EngineLinearBackward(r, x.get(), w.get(), dy.get(), gpu_state, opt, gs, dx.get(), dw.get(), nullptr),
                          Catch::Contains("LinearForward of the same step"));
      }
      ++layers;
    }
  }
  CHECK(layers == 10);
  std::vector<float> want_db(n);
  BiasGradient(t.dy.data(), m, n, want_db.data());
  gpu::EngineBiasGradient(dy.get(), m, n, db.get(), nullptr);
  CHECK(Differ(db.Host(n), want_db, "bias gradient") == 0);
}

TEST_CASE("gpu engine: GEMMs of quantized device operands equal qmx::Gemm", "[gpu]") {
  if (!qmx::test::GpuPresent()) return;
  // A (M x K) row-wise along K, B (K x N) column-wise along K, as qmx.gemm takes them.
  const size_t m = 70, n = 90, k = 512;
  const LinearTensors t = GenerateLinearLayer(DefaultLayerGen(), 3, m, n, k);
  std::vector<float> bkn(k * n);  // W^T: K x N
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < k; ++c) bkn[c * n + r] = t.w[r * k + c];
  for (const auto& [spec_name, model_name] : std::vector<std::pair<std::string, std::string>>{
           {"mxfp8", "blackwell-mxf8f6f4"}, {"nvfp4", "blackwell-mxf4nvf4"}, {"mxfp4", "blackwell-mxf4nvf4"},
           {"fp8-tensor-current", "hopper-fp8"}, {"fp8-block1x128", "hopper-fp8-vec"}, {"mxfp8", "fp32-seq"}}) {
    INFO(spec_name << " under " << model_name);
    const QuantSpec sa = QuantSpecByName(spec_name);
    QuantSpec sb = sa;
    sb.axis = Axis::kCol;
    const QuantizedTensor qa = Quantize({DType::kF32, t.x.data(), m, k}, sa), qb = Quantize({DType::kF32, bkn.data(), k, n}, sb);
    const GemmOperand ha = OperandFromQuantized(qa), hb = OperandFromQuantized(qb);
    const AccumModel model = AccumModelByName(model_name);
    const std::vector<float> want = Gemm(ha, hb, nullptr, model);
    // The device operands: codes and decoded scales uploaded, meta without them.
    auto device = [](const GemmOperand& h, gpu::DeviceMemory& codes, gpu::DeviceMemory& scales) {
      gpu::DeviceGemmOperand d;
      d.meta = h;
      d.meta.codes.clear();
      d.meta.scales.clear();
      codes.Upload(h.codes.data(), h.codes.size());
      d.codes = static_cast<const uint8_t*>(codes.get());
      if (h.block_rows != 0) {
        scales.Upload(h.scales.data(), h.scales.size() * 4);
        d.scales = static_cast<const float*>(scales.get());
      }
      return d;
    };
    gpu::DeviceMemory ca(ha.codes.size()), sa_mem(ha.scales.size() * 4 + 4), cb(hb.codes.size()), sb_mem(hb.scales.size() * 4 + 4);
    const gpu::DeviceGemmOperand da = device(ha, ca, sa_mem), db = device(hb, cb, sb_mem);
    Dev out(m * n);
    gpu::EngineGemmStats stats;
    gpu::EngineGemmOnDevice(da, db, model, out.get(), nullptr, &stats);
    CHECK(Differ(out.Host(m * n), want, spec_name + " " + model_name) == 0);
    CHECK(!stats.kernel.empty());
    // Device operands carry no host codes, and a shape mismatch is the CPU's message.
    gpu::DeviceGemmOperand wrong = da;
    wrong.meta.codes.assign(1, 0);
    CHECK_THROWS_WITH(gpu::EngineGemmOnDevice(wrong, db, model, out.get(), nullptr), Catch::Contains("device pointers"));
    gpu::DeviceGemmOperand bt = db;
    bt.meta.rows = k + 1;
    CHECK_THROWS_WITH(gpu::EngineGemmOnDevice(da, bt, model, out.get(), nullptr), Catch::Contains("(K) differ"));
  }
}

}  // namespace engine_linear_test
#endif
