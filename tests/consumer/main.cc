// A user's program against the installed library: a few conversions whose codes the OCP OFP8 spec fixes
// (table 1: 448 is E4M3's max 0x7E, 1 is 0x38, the smallest subnormal 2^-9 is 0x01) and an MXFP8 round trip
// of values that MXFP8 holds exactly. Exit 0 only when every value is right.
#include <cstdio>
#include <vector>

#include "qmx/qmx.h"

int main() {
  int bad = 0;
  const float x[] = {448.0f, 1.0f, 0.001953125f, -2.0f, 1000.0f};
  const uint8_t want[] = {0x7E, 0x38, 0x01, 0xC0, 0x7E};  // 1000 saturates to 448 under satfinite
  uint8_t codes[5];
  qmx::ConvertToCodes(qmx::DType::kF32, x, 5, qmx::GetFormat("e4m3"), qmx::CastOptions{}, codes);
  for (int i = 0; i < 5; ++i)
    if (codes[i] != want[i]) std::printf("e4m3(%g): got 0x%02X, want 0x%02X\n", x[i], codes[i], want[i]), ++bad;

  std::vector<float> t(64);
  for (size_t i = 0; i < t.size(); ++i)  // (1 + j/8) 2^e: four significant bits, which E4M3 holds
    t[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + static_cast<float>(i % 8) / 8.0f) * static_cast<float>(1 << (i % 5));
  const qmx::TensorView v{qmx::DType::kF32, t.data(), 2, 32};
  const qmx::QuantizedTensor q = qmx::Quantize(v, qmx::QuantSpecByName("mxfp8"));
  std::vector<float> back(t.size());
  qmx::Dequantize(q, back.data());
  for (size_t i = 0; i < t.size(); ++i)
    if (back[i] != t[i]) std::printf("mxfp8 round trip [%zu]: %g -> %g\n", i, t[i], back[i]), ++bad;

  std::printf("qmx %s consumer: %s\n", QMX_VERSION, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
