// recipe_internal.h (internal): the helpers the recipe files share: the seed mixer that gives each (seed,
// step, use) its own stream, the transposition of row-major tensors, and an operand's printed name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/recipe.h"

namespace qmx::detail {

inline uint64_t Mix(uint64_t a, uint64_t b) {  // splitmix64 of a combination: independent streams per (seed, step, use)
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t Mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d = 0) { return Mix(Mix(Mix(a, b), c), d); }

// src (rows x cols, row-major) transposed: cols x rows.
std::vector<float> Transpose(const float* src, size_t rows, size_t cols);
// Delayed scaling of a recipe's GEMMs [g0, g1): one FP32 scale per tensor per step (X, W, dY), shared by its
// row- and column-wise copies, from the state's histories (created at a tensor's first delayed use; with
// prime_history, step 0 pushes the tensor's own amax first). EndStep pushes each delayed tensor's amax and
// counts the step. The GPU engine's linear layer shares both.
void SetupDelayed(const TrainingRecipe& recipe, size_t g0, size_t g1, const std::array<float, 3>& amax,
                  RecipeState& state, const RecipeOptions& opt, std::optional<Fp32Scale> (&dscale)[3]);
void EndStep(RecipeState& state, const std::optional<Fp32Scale> (&dscale)[3], const std::array<float, 3>& amax);
// The recipes' error for a tensor (X, W, dY) whose element `index` is `value`, NaN or Inf: the recipes model
// finite training tensors. The CPU's CheckFinite and the GPU engine's check both throw it.
Error NonFiniteTensor(const char* name, size_t index, float value);
// "X", "W^T", "X_q": the tensor, whether it is the forward's QuEST output, whether it is transposed.
std::string OperandName(const OperandPlan& p);

}  // namespace qmx::detail
