// eigen_gemm.h: Eigen's SGEMM and DGEMM (row-major C = A * B, OpenMP threads as set), one copy per x86
// level, and the choice of the best copy this CPU runs.
#pragma once

#include <string>

namespace qmx::cli {

#define QMX_EIGEN_DECLARE(level)                                                  \
  namespace level {                                                               \
  void Sgemm(const float* a, const float* b, float* c, long m, long n, long k);   \
  void Dgemm(const double* a, const double* b, double* c, long m, long n, long k); \
  }
QMX_EIGEN_DECLARE(eigen_base)
#if defined(QMX_EIGEN_X86_LEVELS)
QMX_EIGEN_DECLARE(eigen_avx2)
QMX_EIGEN_DECLARE(eigen_avx512)
#endif
#undef QMX_EIGEN_DECLARE

struct EigenGemm {
  std::string level;  // "AVX-512", "AVX2+FMA" or "baseline"
  void (*sgemm)(const float*, const float*, float*, long, long, long);
  void (*dgemm)(const double*, const double*, double*, long, long, long);
};

inline EigenGemm BestEigenGemm() {
#if defined(QMX_EIGEN_X86_LEVELS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return {"AVX-512", eigen_avx512::Sgemm, eigen_avx512::Dgemm};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {"AVX2+FMA", eigen_avx2::Sgemm, eigen_avx2::Dgemm};
#endif
  return {"baseline", eigen_base::Sgemm, eigen_base::Dgemm};
}

}  // namespace qmx::cli
