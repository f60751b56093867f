// scaled_mm.cc: torch._scaled_mm on Hopper (qmx/scaled_mm.h): the accumulation through Gemm under the
// Hopper models, cuBLASLt's split-K reduction and its epilogues. Built with -ffp-contract=off
// (lib/CMakeLists.txt): every epilogue step is its own FP32 rounding, as measured.
#include "qmx/scaled_mm.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <tuple>

#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/round.h"
#include "float_bits.h"
#include "gemm/scaled_mm_core.h"

namespace qmx {
namespace {

struct SplitKEntry {
  uint32_t k, n, m;
  uint8_t f32, bf16;
};
constexpr SplitKEntry kSplitK[] = {
#include "cublaslt_splitk_h200.inc"
};

std::string Dims(size_t r, size_t c) { return std::to_string(r) + " x " + std::to_string(c); }

// Columns [k0, k1) of a row-major rows x cols code matrix (A's K range), or rows [k0, k1) (B's).
GemmOperand SliceA(const ScaledMmArgs& x, size_t k0, size_t k1) {
  if (k0 == 0 && k1 == x.k) return OperandFromCodes(x.a_format, x.m, x.k, x.a);  // unsplit: no gathered copy
  std::vector<uint8_t> c(x.m * (k1 - k0));
  for (size_t i = 0; i < x.m; ++i) std::memcpy(c.data() + i * (k1 - k0), x.a + i * x.k + k0, k1 - k0);
  return OperandFromCodes(x.a_format, x.m, k1 - k0, c.data());
}
GemmOperand SliceB(const ScaledMmArgs& x, size_t k0, size_t k1) {
  return OperandFromCodes(x.b_format, k1 - k0, x.n, x.b + k0 * x.n);
}

std::vector<float> Accumulate(const GemmOperand& a, const GemmOperand& b, const AccumModel& model, bool reference) {
  return reference ? GemmRef(a, b, nullptr, model) : Gemm(a, b, nullptr, model);
}

void CheckArgs(const ScaledMmArgs& x) {
  for (const Format* f : {&x.a_format, &x.b_format})
    if (*f != fmt::kE4M3 && *f != fmt::kE5M2)
      throw Error(std::string("scaled_mm takes FP8 operands (e4m3, e5m2), not ") + f->name);
  if (x.a_format == fmt::kE5M2 && x.b_format == fmt::kE5M2)
    throw Error("scaled_mm: e5m2 x e5m2 is not an FP8 GEMM cuBLASLt runs (torch refuses it); one side must be e4m3");
  if (x.scale_a == nullptr || x.scale_b == nullptr) throw Error("scaled_mm: scale_a and scale_b are required");
  if (x.split_k < 0) throw Error("scaled_mm: split_k must be 0 (the measured choice) or a positive count");
  if (x.bias != nullptr && x.out == ScaledMmOut::kF32)
    throw Error("scaled_mm: a bias needs a BF16 or FP16 output (torch: bias is not supported when out_dtype is "
                "float32)");
}

}  // namespace

const char* ScaledMmOutName(ScaledMmOut o) {
  switch (o) {
    case ScaledMmOut::kF32: return "float32";
    case ScaledMmOut::kBF16: return "bfloat16";
    case ScaledMmOut::kF16: return "float16";
  }
  return "?";
}

ScaledMmOut ParseScaledMmOut(const std::string& s) {
  if (s == "float32" || s == "f32" || s == "fp32") return ScaledMmOut::kF32;
  if (s == "bfloat16" || s == "bf16") return ScaledMmOut::kBF16;
  if (s == "float16" || s == "f16" || s == "fp16" || s == "half") return ScaledMmOut::kF16;
  throw Error("unknown scaled_mm output type '" + s + "' (float32, bfloat16, float16)");
}

int CublasLtSplitK(size_t m, size_t n, size_t k, ScaledMmOut out) {
  if (k <= 4096) return 1;
  if (out == ScaledMmOut::kF16) return 0;
  const auto want = std::make_tuple(static_cast<uint64_t>(k), static_cast<uint64_t>(n), static_cast<uint64_t>(m));
  const SplitKEntry* end = std::end(kSplitK);
  const SplitKEntry* it = std::lower_bound(std::begin(kSplitK), end, want, [](const SplitKEntry& e, const auto& w) {
    return std::make_tuple(uint64_t{e.k}, uint64_t{e.n}, uint64_t{e.m}) < w;
  });
  if (it == end || it->k != k || it->n != n || it->m != m) return 0;
  return out == ScaledMmOut::kF32 ? it->f32 : it->bf16;
}

ScaledMmPlan PlanScaledMm(const ScaledMmArgs& x) {
  CheckArgs(x);
  const size_t kb = (x.k + 127) / 128;
  const bool tensorwise = x.scale_a_rows * x.scale_a_cols == 1 && x.scale_b_rows * x.scale_b_cols == 1;
  // Row-wise before blockwise: with K <= 128, M x 1 and 1 x N are also one 1x128 block per row and a
  // 128x1 block per column, and torch (like the measurement at K = 128) takes them as row-wise.
  const bool rowwise = !tensorwise && x.scale_a_rows == x.m && x.scale_a_cols == 1 && x.scale_b_rows == 1 &&
                       x.scale_b_cols == x.n;
  ScaledMmPlan p;
  p.model = x.fast_accum ? "hopper-fp8-fast" : "hopper-fp8";
  if (!tensorwise && !rowwise) {
    // Blockwise: A's 1x128 blocks with B's 128x128 or 128x1.
    const bool a_blk = x.scale_a_rows == x.m && x.scale_a_cols == kb;
    const bool b_blk = x.scale_b_rows == kb && x.scale_b_cols == (x.n + 127) / 128;
    const bool b_vec = x.scale_b_rows == kb && x.scale_b_cols == x.n;
    if (!a_blk || (!b_blk && !b_vec))
      throw Error("scaled_mm: scales " + Dims(x.scale_a_rows, x.scale_a_cols) + " and " +
                  Dims(x.scale_b_rows, x.scale_b_cols) + " for " + Dims(x.m, x.k) + " x " + Dims(x.k, x.n) +
                  " are none of per-tensor (1 x 1 each), row-wise (" + Dims(x.m, 1) + " and " + Dims(1, x.n) +
                  ") or blockwise (" + Dims(x.m, kb) + " with " + Dims(kb, (x.n + 127) / 128) + " or " +
                  Dims(kb, x.n) + ")");
    if (x.fast_accum) throw Error("scaled_mm: blockwise scaling with use_fast_accum was not measured on Hopper");
    if (x.bias != nullptr || x.out != ScaledMmOut::kF32)
      throw Error("scaled_mm: blockwise scaling was measured with FP32 output and no bias only");
    if (x.split_k > 1) throw Error("scaled_mm: split-K with blockwise scales was not measured");
    p.blockwise = true;
    p.b_block_cols = b_blk ? 128 : 1;
    p.model = b_blk ? "hopper-fp8" : "hopper-fp8-vec";
    p.scaling = b_blk ? "blockwise-128x128" : "blockwise-128x1";
    if (x.k > 0) p.splits.emplace_back(0, x.k);
    return p;
  }

  // Split-K: given, or cuBLASLt's measured choice. Row-wise scaling never split in the measurements.
  int splits = x.split_k;
  if (rowwise) {
    if (splits > 1) throw Error("scaled_mm: split-K with row-wise scales was not measured (cuBLASLt never chose it)");
    splits = 1;
  } else if (splits == 0) {
    const bool e4m3 = x.a_format == fmt::kE4M3 && x.b_format == fmt::kE4M3;
    splits = x.k <= 4096 ? 1 : e4m3 ? CublasLtSplitK(x.m, x.n, x.k, x.out) : 0;
    if (splits == 0)
      throw Error("scaled_mm: cuBLASLt picks a split-K kernel for K > 4096 by a heuristic of M, N, K and the "
                  "GPU, and its choice for " + Dims(x.m, x.k) + " x " + Dims(x.k, x.n) + " (" + x.a_format.name +
                  " x " + x.b_format.name + ", " + ScaledMmOutName(x.out) + " output) was not measured on the "
                  "H200: pass split_k (numSplitsK in cuBLASLt's log under CUBLASLT_LOG_LEVEL=2; 1 for an "
                  "unsplit kernel)");
  }
  p.split_k = splits;
  p.rowwise = rowwise;
  p.scaling = rowwise ? "rowwise" : "tensorwise";
  // K in 128-element tiles, each split ceil(tiles / splits) consecutive tiles; trailing splits past K are empty.
  const size_t tiles = (x.k + 127) / 128;
  const size_t per = (tiles + static_cast<size_t>(splits) - 1) / static_cast<size_t>(splits);
  for (int s = 0; s < splits; ++s) {
    const size_t k0 = std::min(x.k, s * per * 128), k1 = std::min(x.k, (s + 1) * per * 128);
    if (k0 < k1) p.splits.emplace_back(k0, k1);
  }
  return p;
}

ScaledMmResult ScaledMm(const ScaledMmArgs& x) {
  const ScaledMmPlan p = PlanScaledMm(x);
  ScaledMmResult r;
  r.model = p.model;
  r.scaling = p.scaling;
  r.split_k = p.split_k;
  if (p.blockwise) {
    GemmOperand a = OperandFromCodes(x.a_format, x.m, x.k, x.a), b = OperandFromCodes(x.b_format, x.k, x.n, x.b);
    std::vector<uint32_t> wa(x.scale_a_rows * x.scale_a_cols), wb(x.scale_b_rows * x.scale_b_cols);
    std::memcpy(wa.data(), x.scale_a, wa.size() * 4);
    std::memcpy(wb.data(), x.scale_b, wb.size() * 4);
    SetBlockScales(a, ScaleFormat::kFp32, 1, 128, wa.data());
    SetBlockScales(b, ScaleFormat::kFp32, 128, p.b_block_cols, wb.data());
    const std::vector<float> d = Accumulate(a, b, AccumModelByName(p.model), x.reference);
    r.bits.resize(d.size());
    for (size_t i = 0; i < d.size(); ++i) r.bits[i] = detail::F32Bits(d[i]);
    return r;
  }
  // The FP32 accumulator of every output (scales 1): one Gemm per split of K, added in split order.
  const AccumModel model = AccumModelByName(p.model);
  std::vector<float> acc;
  for (const auto& [k0, k1] : p.splits) {
    const std::vector<float> part = Accumulate(SliceA(x, k0, k1), SliceB(x, k0, k1), model, x.reference);
    if (acc.empty()) {
      acc = part;
      continue;
    }
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = detail::AddF32(acc[i], part[i]);
  }
  if (acc.empty()) acc.assign(x.m * x.n, 0.0f);  // K = 0
  const detail::ScaledMmEpilogue e = detail::EpilogueOf(x, p);
  r.bits.resize(x.m * x.n);
  for (size_t i = 0; i < x.m; ++i)
    for (size_t j = 0; j < x.n; ++j)
      r.bits[i * x.n + j] = detail::ScaledMmOutput(e, acc[i * x.n + j], x.scale_a[p.rowwise ? i : 0],
                                                   x.scale_b[p.rowwise ? j : 0], e.has_bias ? x.bias[j] : 0);
  return r;
}

}  // namespace qmx
