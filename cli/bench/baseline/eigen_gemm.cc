// eigen_gemm.cc: the Eigen SGEMM / DGEMM baselines of `qmx-sim bench`. cli/CMakeLists.txt compiles this
// file once per x86 level (baseline, AVX2+FMA, AVX-512), each with Eigen's namespace renamed
// (-DEigen=...) so the copies cannot replace one another at link time; bench calls the best copy the
// CPU runs (eigen_gemm.h), so the baseline is Eigen at its fastest on the machine.
#include <Eigen/Core>

#include "bench/baseline/eigen_gemm.h"

namespace qmx::cli::QMX_EIGEN_LEVEL {

void Sgemm(const float* a, const float* b, float* c, long m, long n, long k) {
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const M> ma(a, m, k), mb(b, k, n);
  Eigen::Map<M> mc(c, m, n);
  mc.noalias() = ma * mb;
}

void Dgemm(const double* a, const double* b, double* c, long m, long n, long k) {
  using M = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const M> ma(a, m, k), mb(b, k, n);
  Eigen::Map<M> mc(c, m, n);
  mc.noalias() = ma * mb;
}

}  // namespace qmx::cli::QMX_EIGEN_LEVEL
