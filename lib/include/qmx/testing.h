// qmx/testing.h: hooks for tests and benchmarks, kept out of the API a program uses to compute. They
// choose which SIMD target the kernels dispatch to, so that the targets can be compared bit for bit, and
// report which path a kernel took. Results never depend on them: every target gives the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qmx {

// Every SIMD target compiled into this binary that this CPU can run, best first ("AVX3", "AVX2", ...; a
// "_FP16" suffix marks the fused GEMM's FP16-product lanes where the CPU has AVX512-FP16, "_VNNI" the CDNA3
// kernel's VPDPWSSD sums where it has AVX512-VNNI but not FP16).
std::vector<std::string> SimdTargets();

// Restricts dispatch to one of SimdTargets(); "" restores the default. Throws qmx::Error naming the
// available targets for an unknown or unsupported one.
// Process-wide and not for concurrent use: calls of SimdTargets, ForceSimdTarget and SimdTargetName are
// serialised with each other, but a kernel running on another thread while the target changes may run on
// either target. Call it between computations, from one thread (as the tests and the bench do).
void ForceSimdTarget(const std::string& name);

// Steps of the fused kernel (AccumKind::kFused with FP32 terms, on an AVX-512 target) since the program
// started: those that formed their products in FP16 lanes (CPUs with AVX512-FP16; docs/gemm.md "GEMM
// fast paths") and those of such a GEMM that fell back to FP32 lanes (an output's exponent gap past the
// bound).
struct FusedStepCounts {
  uint64_t fp16 = 0, fp32_fallback = 0;
};
FusedStepCounts GemmFusedStepCounts();

// cdna3-fp8's Highway kernel since the program started (docs/gemm.md "GEMM fast paths"): tile steps whose sums
// took the 2^8 h + l split of A's or B's elements (some row or column too wide for an int16), and output steps
// that the kernel's checks sent on: their FP64 tail (`fp64`), among them those whose int32 sum was formed again
// in int64 (`int64`), and the exact step (`exact`: a product below the step's cut, or a line too wide to split).
struct Cdna3StepCounts {
  uint64_t split_a = 0, split_b = 0, fp64 = 0, int64 = 0, exact = 0;
};
Cdna3StepCounts GemmCdna3StepCounts();

}  // namespace qmx
