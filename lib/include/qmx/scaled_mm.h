// qmx/scaled_mm.h: torch._scaled_mm as an H100/H200 computes it (cuBLASLt on sm_90), in every mode FP8
// training and inference use, from measurements on an H200 (gpu/README.md "torch._scaled_mm on an H200:
// split-K, row-wise scales, BF16/FP16 output, bias"):
// - accumulation: hopper-fp8 (use_fast_accum off) or hopper-fp8-fast (on) over each split of K;
// - split-K (per-tensor scales only; cuBLASLt's reduction scheme COMPUTE_TYPE): K in 128-element tiles,
//   numSplitsK splits of ceil(tiles / numSplitsK) consecutive tiles each (the last shorter, trailing ones
//   empty), each accumulated from zero, the partial sums added in FP32 in split order;
// - epilogue, each step one FP32 rounding (RN): per-tensor D = acc * fl32(sa * sb); row-wise (A: M x 1,
//   B: 1 x N) D = (acc * sb[j]) * sa[i]; then + bias[j] (BF16 or FP16, the output's type), then one RN
//   rounding to the output type (BF16 and FP16 overflow to Inf, subnormals kept);
// - blockwise FP32 scales (A 1x128 with B 128x128 or 128x1): hopper-fp8 / hopper-fp8-vec with the scales
//   at promotion, FP32 output, no bias (what was measured).
// What the measurements do not cover throws qmx::Error saying so.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qmx/format.h"

namespace qmx {

enum class ScaledMmOut : uint8_t { kF32, kBF16, kF16 };
const char* ScaledMmOutName(ScaledMmOut o);          // float32, bfloat16, float16
ScaledMmOut ParseScaledMmOut(const std::string& s);  // those, or f32 / fp32, bf16, f16 / fp16 / half

struct ScaledMmArgs {
  Format a_format = fmt::kE4M3, b_format = fmt::kE4M3;
  size_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // M x K codes, row-major
  const uint8_t* b = nullptr;  // K x N codes, row-major
  // FP32 scales in torch's shapes: 1 x 1 each (per tensor); M x 1 and 1 x N (row-wise); M x ceil(K/128)
  // with ceil(K/128) x ceil(N/128) or ceil(K/128) x N (blockwise), row-major.
  const float* scale_a = nullptr;
  size_t scale_a_rows = 1, scale_a_cols = 1;
  const float* scale_b = nullptr;
  size_t scale_b_rows = 1, scale_b_cols = 1;
  const uint16_t* bias = nullptr;  // N values in the output's type (BF16 or FP16 bits); null: none
  ScaledMmOut out = ScaledMmOut::kF32;
  bool fast_accum = false;
  // cuBLASLt's numSplitsK. 0: the choice measured for the shape (CublasLtSplitK), refused where unknown.
  int split_k = 0;
  bool reference = false;  // accumulate with GemmRef (the scalar reference) instead of Gemm
};

struct ScaledMmResult {
  std::vector<uint32_t> bits;  // M x N row-major: FP32 bit patterns, or BF16 / FP16 ones in the low 16 bits
  std::string model;           // the accumulation model: hopper-fp8, hopper-fp8-fast or hopper-fp8-vec
  std::string scaling;         // tensorwise, rowwise, blockwise-128x128 or blockwise-128x1
  int split_k = 1;             // the splits used
};

// Throws qmx::Error for shapes, dtypes and combinations torch refuses (a bias with FP32 output, a bias
// whose type is not the output's) and for what was not measured (split-K with row-wise or blockwise
// scales, blockwise with use_fast_accum, a bias or a 16-bit output; an unmeasured split-K choice).
ScaledMmResult ScaledMm(const ScaledMmArgs& args);

// What ScaledMm decides from the shapes, formats, options and which pointers are set, before it reads any
// data: its checks and errors, the scaling, the accumulation model and the splits of K. The CUDA engine's
// scaled_mm (qmx/gpu.h EngineScaledMmOnDevice) runs the same plan on device memory.
struct ScaledMmPlan {
  std::string model;    // as ScaledMmResult
  std::string scaling;  // as ScaledMmResult
  int split_k = 1;
  bool rowwise = false, blockwise = false;
  size_t b_block_cols = 0;                        // blockwise: B's blocks are 128 x b_block_cols (128 or 1)
  std::vector<std::pair<size_t, size_t>> splits;  // [k0, k1) of each split that is not empty, in order
};
ScaledMmPlan PlanScaledMm(const ScaledMmArgs& args);

// numSplitsK cuBLASLt chose for per-tensor e4m3 x e4m3 on the H200 (1 for K <= 4096, every shape
// measured there ran unsplit; the measured grid above that), or 0 where this shape was not measured.
int CublasLtSplitK(size_t m, size_t n, size_t k, ScaledMmOut out);

}  // namespace qmx
