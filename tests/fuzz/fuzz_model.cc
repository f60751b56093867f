// libFuzzer target for accumulation model strings (qmx::AccumModelByName: named models and
// "fused:step=32,F=13,term=rz,..."). The input is the model string, then optionally a newline and bytes that
// fill the operands. Any string must either throw qmx::Error or give a model that, on two small block-scaled
// operands (MXFP8, MXFP4 or NVFP4 with their scales, with or without a C operand; NVFP4 also with tensor
// scales from an amax, per-row scales, and each alpha rule) the fast GEMM and the scalar reference GemmRef must
// both throw qmx::Error or give the same bits.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/gemm.h"

namespace {

// The operand bytes: the input's tail, repeated, or a fixed pattern when the tail is empty.
struct Bytes {
  const uint8_t* p;
  size_t n, i = 0;
  uint8_t Next() {
    if (n == 0) return static_cast<uint8_t>(i++ * 37 + 11);
    return p[i++ % n];
  }
};

qmx::GemmOperand Operand(qmx::Format elem, qmx::ScaleFormat sf, size_t block, size_t rows, size_t cols, bool along_cols,
                         Bytes& in) {
  qmx::GemmOperand o;
  o.elem = elem;
  o.rows = rows;
  o.cols = cols;
  const unsigned mask = (1u << elem.Bits()) - 1;
  for (size_t i = 0; i < rows * cols; ++i) o.codes.push_back(static_cast<uint8_t>(in.Next() & mask));
  const size_t br = along_cols ? 1 : block, bc = along_cols ? block : 1;
  std::vector<uint32_t> raw(((rows + br - 1) / br) * ((cols + bc - 1) / bc));
  for (auto& w : raw) {
    const uint8_t b = in.Next();
    // UE8M0 near 2^0 mostly (0x7F +- 31), sometimes anything (NaN 0xFF, 2^-127); E4M3 any positive code.
    w = sf == qmx::ScaleFormat::kUe8m0 ? ((b & 0x80) ? in.Next() : 0x60u + (b & 0x3F)) : (b & 0x7F);
  }
  qmx::SetBlockScales(o, sf, br, bc, raw.data());
  return o;
}

bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nl = static_cast<const uint8_t*>(std::memchr(data, '\n', size));
  const std::string name(reinterpret_cast<const char*>(data), nl ? static_cast<size_t>(nl - data) : size);
  qmx::AccumModel m;
  try {
    m = qmx::AccumModelByName(name);
  } catch (const qmx::Error&) {
    return 0;
  }
  if (qmx::DescribeModel(m).empty()) std::abort();
  Bytes in{nl ? nl + 1 : data, nl ? size - static_cast<size_t>(nl + 1 - data) : 0};
  const uint8_t kind = in.Next();
  const size_t M = 2, N = 3, K = 64 + 64 * (kind >> 7);
  qmx::Format elem = qmx::fmt::kE4M3;
  qmx::ScaleFormat sf = qmx::ScaleFormat::kUe8m0;
  size_t block = 32;
  switch (kind & 3) {
    case 1: elem = qmx::fmt::kE5M2; break;
    case 2: elem = qmx::fmt::kE2M1; break;
    case 3: elem = qmx::fmt::kE2M1, sf = qmx::ScaleFormat::kE4m3, block = 16; break;
    default: break;
  }
  qmx::GemmOperand a = Operand(elem, sf, block, M, K, true, in);
  qmx::GemmOperand b = Operand(elem, sf, block, K, N, false, in);
  auto f32 = [&] {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w = w << 8 | in.Next();
    float v;
    std::memcpy(&v, &w, 4);
    return v;
  };
  if ((kind & 3) == 3) {  // NVFP4: second-level scales from an amax (any bits), per tensor or per row of A
    const uint8_t extra = in.Next();
    m.alpha = static_cast<qmx::AlphaRule>(extra % 3);
    for (qmx::GemmOperand* o : {&a, &b}) {
      o->te_alpha.amax = f32();
      o->te_alpha.bound = (extra & 8) ? 256.0f : 448.0f;
      o->tensor_scale = 1.0f / qmx::Nvfp4TensorEncodeScale(std::fabs(o->te_alpha.amax));
    }
    if (extra & 16) {
      for (size_t r = 0; r < M; ++r) {
        a.te_alpha.row_amax.push_back(f32());
        a.row_scales.push_back(1.0f / qmx::Nvfp4TensorEncodeScale(std::fabs(a.te_alpha.row_amax.back())));
      }
      a.tensor_scale = 1.0f;
    }
  }
  std::vector<float> c(M * N);
  for (auto& v : c) v = f32();
  const float* c_in = (kind & 4) ? c.data() : nullptr;
  std::vector<float> fast, ref;
  bool fast_error = false, ref_error = false;
  try {
    fast = qmx::Gemm(a, b, c_in, m, qmx::Exec::kSequential);
  } catch (const qmx::Error&) {
    fast_error = true;
  }
  try {
    ref = qmx::GemmRef(a, b, c_in, m);
  } catch (const qmx::Error&) {
    ref_error = true;
  }
  if (fast_error != ref_error || !SameBits(fast, ref)) std::abort();
  return 0;
}
