// recipe_sequence.cc: the synthetic layers of qmx/recipe.h: tensors drawn from distributions with outlier
// channels and row gains (GenerateTensor), and the sequence mode's drifting tensors, decaying gradients and
// activation spikes (LayerSequence).
#include "qmx/recipe.h"

#include <omp.h>

#include <cmath>

#include "qmx/error.h"
#include "qmx/rng.h"
#include "recipe/recipe_internal.h"

namespace qmx {

using detail::Mix;

// ------------------------------------------------------------------ synthetic layers

LayerGen DefaultLayerGen() {
  LayerGen g;
  g.x.dist = ParseDist("student-t:5");
  g.x.channel_rate = 1.0 / 128;
  g.x.channel_gain = 32;
  g.w.dist = ParseDist("normal");
  g.w.scale = 0.02;
  g.dy.dist = ParseDist("laplace");
  g.dy.scale = 1e-3;
  g.dy.row_sigma = 1.0;
  return g;
}

void GenerateTensor(const TensorGen& g, uint64_t seed, size_t rows, size_t cols, float* out, Exec exec) {
  GenerateTensor(g, seed, seed, rows, cols, out, exec);
}

void GenerateTensor(const TensorGen& g, uint64_t seed, uint64_t structure_seed, size_t rows, size_t cols, float* out,
                    Exec exec) {
  const size_t n = rows * cols;
  GenerateDist(g.dist, seed, out, n, 0, exec);
  std::vector<float> col(cols, static_cast<float>(g.scale)), row(rows, 1.0f);
  if (g.channel_rate > 0) {
    const uint64_t s = Mix(structure_seed, 0xC4A);
    const double thr = g.channel_rate * 4294967296.0;
    for (size_t c = 0; c < cols; ++c)
      if (static_cast<double>(RandomBitsForElement(s, c)) < thr) col[c] = static_cast<float>(g.scale * g.channel_gain);
  }
  if (g.row_sigma > 0) {
    std::vector<float> z(rows);
    GenerateDist(DistSpec{}, Mix(structure_seed, 0x70E), z.data(), rows, 0, Exec::kSequential);
    for (size_t r = 0; r < rows; ++r)
      row[r] = static_cast<float>(std::exp(g.row_sigma * z[r] - g.row_sigma * g.row_sigma / 2));
  }
#pragma omp parallel for schedule(static) if (exec == Exec::kParallel && n >= (1u << 16))
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) out[r * cols + c] = out[r * cols + c] * col[c] * row[r];
}

LayerSequence::LayerSequence(const LayerGen& gen, const SequenceGen& seq, uint64_t seed, size_t m, size_t n, size_t k)
    : gen_(gen), seq_(seq), seed_(seed), m_(m), n_(n), k_(k) {
  if (m == 0 || n == 0 || k == 0) throw Error("sequence: m, n and k must be positive");
  if (!(seq.drift >= 0 && seq.drift <= 1) || !(seq.weight_drift >= 0 && seq.weight_drift <= 1))
    throw Error("sequence: the drifts must lie in [0, 1]");
  if (!(seq.spike_rate >= 0 && seq.spike_rate <= 1)) throw Error("sequence: the spike rate must lie in [0, 1]");
  if (!(seq.grad_decay > 0) || !std::isfinite(seq.grad_decay) || !(seq.spike_gain > 0) || !std::isfinite(seq.spike_gain))
    throw Error("sequence: the gradient decay and the spike gain must be positive and finite");
  if (seq.spike_rows > m) throw Error("sequence: more spike rows than tokens (m)");
}

LinearInputs LayerSequence::Next() {
  const std::array<size_t, 3> rows = {m_, n_, m_}, cols = {k_, k_, n_};
  std::vector<float>* base[3] = {&base_x_, &base_w_, &base_dy_};
  const TensorGen* gens[3] = {&gen_.x, &gen_.w, &gen_.dy};
  if (!started_) {
    started_ = true;
    step_ = 0;
    for (int t = 0; t < 3; ++t) {
      base[t]->resize(rows[t] * cols[t]);
      GenerateTensor(*gens[t], Mix(seed_, 0, t + 1), Mix(seed_, 0, t + 1), rows[t], cols[t], base[t]->data());
    }
  } else {
    ++step_;
    std::vector<float> z;
    for (int t = 0; t < 3; ++t) {
      const double d = t == 1 ? seq_.weight_drift : seq_.drift;
      if (d == 0) continue;
      z.resize(base[t]->size());
      GenerateTensor(*gens[t], Mix(seed_, step_, t + 1), Mix(seed_, 0, t + 1), rows[t], cols[t], z.data());
      const uint64_t pick = Mix(seed_, step_, t + 1, 0xD81F7);
      const double thr = d * 4294967296.0;
      std::vector<float>& v = *base[t];
      for (size_t i = 0; i < v.size(); ++i)
        if (static_cast<double>(RandomBitsForElement(pick, i)) < thr) v[i] = z[i];
    }
  }
  x_ = base_x_;
  w_ = base_w_;
  dy_ = base_dy_;
  if (seq_.grad_decay != 1.0) {
    const float f = static_cast<float>(std::pow(seq_.grad_decay, static_cast<double>(step_)));
    for (float& v : dy_) v *= f;
  }
  const uint64_t ss = Mix(seed_, step_, 0x591CE);
  spiked_ = seq_.spike_rows > 0 && static_cast<double>(RandomBitsForElement(ss, 0)) < seq_.spike_rate * 4294967296.0;
  if (spiked_) {
    const float gain = static_cast<float>(seq_.spike_gain);
    for (size_t i = 0; i < seq_.spike_rows; ++i) {
      const size_t r = RandomBitsForElement(ss, 1 + i) % m_;
      for (size_t c = 0; c < k_; ++c) x_[r * k_ + c] *= gain;
      for (size_t c = 0; c < n_; ++c) dy_[r * n_ + c] *= gain;
    }
  }
  LinearInputs in;
  in.x = x_.data();
  in.w = w_.data();
  in.dy = dy_.data();
  in.m = m_;
  in.n = n_;
  in.k = k_;
  return in;
}

}  // namespace qmx
