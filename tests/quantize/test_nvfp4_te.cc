// test_nvfp4_te.cc: the rules nvfp4 (TE's default order) and nvfp4-4over6 / nvfp4-4over6-mse (TE's
// 4over6, E4M3 bound 256) against Transformer Engine's own reference quantizer, golden/nvfp4-te
// (gpu/scripts/collect_te_nvfp4.py: NVFP4QuantizerRef._quantize_blockwise_reference of TE d0067d0d on
// torch 2.11): every block scale and every code of 4 cases, on the fast path and the reference, per-tensor and
// row-scaled (row_scaled_nvfp4, rule `nvfp4-row`), and of 2 crafted cases whose rows separate TE's op orders
// (S_enc = fl(6 * bound / T), the 4over6 base, map-to-4 scale and error) from plausible other orders, so that
// each of those orders fails here when replaced (tests/mutation/orders.py). 4over6 must pick map-to-4 for some blocks and map-to-6 for
// others, MAE and MSE must disagree somewhere, and row scaling must change some codes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "support/codes.h"
#include "support/hex.h"

using namespace qmx;

namespace {

NpyArray TeGolden(const std::string& name) { return ReadNpy(std::string(QMX_SOURCE_DIR) + "/golden/nvfp4-te/" + name + ".npy"); }

size_t DifferFromTe(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && ++bad <= 4) UNSCOPED_INFO(what << " " << i << ": qmx " << test::Hex(a[i]) << ", TE " << test::Hex(b[i]));
  return bad;
}

}  // namespace

TEST_CASE("quantize: nvfp4 and nvfp4-4over6 reproduce Transformer Engine's reference quantizer",
          "[quantize][nvfp4][te]") {
  struct Mode {
    const char* name;
    ScaleRule rule;
  };
  const Mode modes[] = {{"default", ScaleRule::kNvfp4},
                        {"4over6-mae", ScaleRule::kNvfp4FourOverSix},
                        {"4over6-mse", ScaleRule::kNvfp4FourOverSixMse}};
  size_t mae_mse_differ = 0, map4 = 0, map6 = 0, row_vs_tensor = 0;
  // Per-tensor (files NAME_MODE_*) and row-scaled (NAME_row-MODE_*: row_scaled_nvfp4=True, each row's amax as
  // its global amax; rowmag's rows lie 2^-24 .. 2^21 apart, so row and tensor scaling differ there).
  for (const bool row : {false, true})
    for (const char* name : {"normal", "logmag", "heavy", "rowmag", "orders-default", "orders-4over6"}) {
      const NpyArray x = TeGolden(std::string(name) + "_x");
      const TensorView v{DType::kF32, x.data.data(), x.shape[0], x.shape[1]};
      for (const Mode& m : modes) {
        const std::string file = std::string(name) + (row ? "_row-" : "_") + m.name;
        INFO(file);
        const NpyArray scales = TeGolden(file + "_scales"), codes = TeGolden(file + "_codes");
        QuantSpec spec = QuantSpecByName(row ? "nvfp4-row" : "nvfp4");
        spec.rule = m.rule;
        const QuantizedTensor q = Quantize(v, spec), r = QuantizeRef(v, spec);
        CHECK(DifferFromTe(q.scales, scales.data, "scale") == 0);
        CHECK(DifferFromTe(qmx::test::PlainCodes(q.codes), codes.data, "code") == 0);
        CHECK(DifferFromTe(r.scales, scales.data, "reference scale") == 0);
        CHECK(DifferFromTe(qmx::test::PlainCodes(r.codes), codes.data, "reference code") == 0);
        if (row) {
          const NpyArray tensor = TeGolden(std::string(name) + "_" + m.name + "_codes");
          for (size_t i = 0; i < tensor.data.size(); ++i) row_vs_tensor += tensor.data[i] != codes.data[i];
        } else if (m.rule == ScaleRule::kNvfp4FourOverSix) {
          // Map-to-4 or map-to-6: which candidate's byte each block holds.
          const float s_enc = Nvfp4TensorScale(q.tensor_amax, m.rule);
          for (size_t b = 0; b < q.scales.size(); ++b) {
            float amax = 0;
            for (size_t i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(reinterpret_cast<const float*>(x.data.data())[b * 16 + i]));
            const uint8_t s6 = static_cast<uint8_t>(ConvertF32((amax / 6.0f) * s_enc, fmt::kE4M3, CastOptions{}));  // map-to-6
            (q.scales[b] == s6 ? map6 : map4) += 1;
          }
          const NpyArray mse = TeGolden(std::string(name) + "_4over6-mse_scales");
          for (size_t b = 0; b < q.scales.size(); ++b) mae_mse_differ += mse.data[b] != scales.data[b];
        }
      }
    }
  CHECK(row_vs_tensor > 0);
  QuantSpec bad = QuantSpecByName("nvfp4-2d");
  bad.rule = ScaleRule::kNvfp4FourOverSix;
  CHECK_THROWS_WITH(ValidateQuantSpec(bad), Catch::Matchers::Contains("TE's 4over6 on 1x16 blocks with RNE elements"));
  CHECK(map4 > 0);
  CHECK(map6 > 0);
  CHECK(mae_mse_differ > 0);
}
