// linear_layer.cc: choosing recipes by name and generating one linear layer's X, W and dY for a single
// recipe step (qmx/recipe.h), as `qmx-sim recipe` and the Python package do.
#include "qmx/error.h"
#include "qmx/recipe.h"

namespace qmx {

std::vector<TrainingRecipe> TrainingRecipesByNames(const std::vector<std::string>& names) {
  std::vector<TrainingRecipe> out;
  for (const std::string& n : names) {
    if (n == "all") {
      for (const std::string& a : TrainingRecipeNames()) out.push_back(TrainingRecipeByName(a));
    } else {
      out.push_back(TrainingRecipeByName(n));
    }
  }
  return out;
}

TensorGen WithDistribution(TensorGen g, const std::string& dist) {
  if (!dist.empty()) {
    g.dist = ParseDist(dist);
    g.channel_rate = 0;
    g.row_sigma = 0;
  }
  return g;
}

LinearTensors GenerateLinearLayer(const LayerGen& g, uint64_t seed, size_t m, size_t n, size_t k) {
  LinearTensors l;
  l.m = m;
  l.n = n;
  l.k = k;
  l.x.resize(m * k);
  l.w.resize(n * k);
  l.dy.resize(m * n);
  GenerateTensor(g.x, seed * 3 + 0, m, k, l.x.data());
  GenerateTensor(g.w, seed * 3 + 1, n, k, l.w.data());
  GenerateTensor(g.dy, seed * 3 + 2, m, n, l.dy.data());
  return l;
}

}  // namespace qmx
