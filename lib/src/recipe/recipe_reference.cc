// recipe_reference.cc: the FP64 references of a linear layer's three GEMMs (ComputeLinearReference): exact
// products summed in double in K order. Compiled with -ffp-contract=off (lib/CMakeLists.txt) so the sums
// keep their order of operations under any -march.
#include "qmx/recipe.h"

#include <omp.h>

#include <algorithm>

#include "recipe/recipe_internal.h"

namespace qmx {

using detail::Transpose;

// ------------------------------------------------------------------ FP64 references

std::vector<double> GemmF64(const float* a, const float* bt, size_t rows, size_t cols, size_t k, Exec exec) {
  const std::vector<float> b = Transpose(bt, cols, k);  // k x cols
  std::vector<double> out(rows * cols, 0.0);
  constexpr size_t kR = 8;
  const long blocks = static_cast<long>((rows + kR - 1) / kR);
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (long blk = 0; blk < blocks; ++blk) {
    const size_t i0 = static_cast<size_t>(blk) * kR, i1 = std::min(rows, i0 + kR);
    for (size_t kk = 0; kk < k; ++kk) {
      const float* brow = b.data() + kk * cols;
      for (size_t i = i0; i < i1; ++i) {
        const double av = a[i * k + kk];
        double* o = out.data() + i * cols;
        for (size_t j = 0; j < cols; ++j) o[j] += av * static_cast<double>(brow[j]);  // exact product, k ascending
      }
    }
  }
  return out;
}

LinearReference ComputeLinearReference(const LinearInputs& in, Exec exec) {
  LinearReference r;
  const std::vector<float> wt = Transpose(in.w, in.n, in.k), dyt = Transpose(in.dy, in.m, in.n),
                           xt = Transpose(in.x, in.m, in.k);
  r.y = GemmF64(in.x, in.w, in.m, in.n, in.k, exec);
  r.dx = GemmF64(in.dy, wt.data(), in.m, in.k, in.n, exec);
  r.dw = GemmF64(dyt.data(), xt.data(), in.n, in.k, in.m, exec);
  return r;
}

}  // namespace qmx
