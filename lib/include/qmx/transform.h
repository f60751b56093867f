// qmx/transform.h: block Hadamard transforms (normalized Walsh-Hadamard, sizes 16..256), the randomized
// Hadamard transform with seeded sign flips (Quartet; TE's NVFP4 wgrad RHT), their inverses, and
// QuEST's forward quantizer: Hadamard, then RMS-based clipping to the element grid, with its trust mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/quantize.h"

namespace qmx {

// The transform applied to each run of `block` consecutive elements of a row (the last dimension).
// H is the Sylvester Hadamard matrix, H[i][j] = (-1)^popcount(i & j), scaled by 1/sqrt(block), so it is
// symmetric and orthogonal. The randomized form multiplies by a diagonal of signs first: y = H D x, with
// D[j] = -1 when bit 0 of RandomBitsForElement(seed, j) is set, one sign vector for every block of the
// tensor. The inverse is x = D H y.
struct HadamardSpec {
  int block = 32;  // 16, 32, 64, 128 or 256
  bool randomized = false;
  uint64_t seed = 0;
};
// "hadamard:32", "rht:32" (seed 0) or "rht:32:7" (seed 7). Throws qmx::Error naming the problem.
HadamardSpec ParseHadamard(const std::string& s);
std::string DescribeHadamard(const HadamardSpec& h);  // the same spelling
// Throws qmx::Error when the block is not a supported power of two or does not divide cols.
void ValidateHadamard(const HadamardSpec& h, size_t cols);
// The diagonal D (+1 / -1 per position of a block); all +1 when not randomized.
std::vector<float> HadamardSigns(const HadamardSpec& h);

// Fast Walsh-Hadamard butterflies in double on each block, one multiplication by 1/sqrt(block), one
// rounding to FP32 per output. in and out may alias. rows x cols, row-major.
void HadamardForward(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols,
                     Exec exec = Exec::kParallel);
void HadamardInverse(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols,
                     Exec exec = Exec::kParallel);
// The fast paths' reference twin: the same butterflies, one block at a time in scalar code (the Highway
// kernel performs these operations lane by lane, so the two agree bit for bit on every target).
void HadamardButterfliesRef(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols,
                            bool inverse = false);
// The reference: each output as an explicit row of H (entries +-1 from the popcount rule) times the
// block, summed in double in index order, times 1/sqrt(block), rounded once. It equals the fast path
// bit for bit whenever the block's sums are exact in double (always when its nonzero elements span at
// most 21 binades); otherwise the two differ only in double rounding of the sums.
void HadamardForwardRef(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols);

// QuEST (Panferov et al. 2025, arXiv 2502.05003) as Quartet's forward pass runs it for MXFP4 (IST-DASLab
// Quartet mxfp4_triton.py, qutlass epilogue_quant.h): per group of the spec's row-wise 1xK block,
//   scale = fl32(stat(group) * alpha / elem_max + 1e-8), stat the population standard deviation (Quartet's
//   kernels) or the RMS (QuEST's HadamardTrustQuantizer); then floored to a power of two (the E8M0 of
//   Quartet's kernels: exponent bits kept, mantissa cleared), rounded to the nearest power of two, or kept
//   exact in FP32;
//   element = round(fl32(x / scale)) under spec.cast with saturation to +-max (the clipping);
//   trust mask = |fl32(x / scale)| < elem_max (Quartet's clip_mask: these elements pass the gradient).
enum class QuestStat : uint8_t { kStd, kRms };
enum class QuestScaleRounding : uint8_t { kFloor, kNearest, kExact };
const char* QuestStatName(QuestStat s);                // "std", "rms"
const char* QuestScaleRoundingName(QuestScaleRounding r);  // "floor", "nearest", "exact"
QuestStat ParseQuestStat(const std::string& s);
QuestScaleRounding ParseQuestScaleRounding(const std::string& s);
struct QuestOptions {
  double clip_ratio = 0;  // alpha, in units of the group's statistic; 0 = QuestDefaultClip(elem)
  QuestStat stat = QuestStat::kStd;
  QuestScaleRounding scale_rounding = QuestScaleRounding::kFloor;
};
// alpha for an element format: 2.92247856 for e2m1, QuEST's and Quartet's MXFP4 constant (6 x 0.48707948,
// the MSE-optimal scale of the E2M1 grid for a unit Gaussian); other formats: QuestOptimalClip(elem).
double QuestDefaultClip(const Format& elem);
// The alpha minimizing E[(g - s Q(g / s))^2] for a unit Gaussian g, s = alpha / elem_max, Q round to
// nearest with saturation on the element's finite grid: closed-form Gaussian integrals between the
// decision midpoints, minimized by a scan and golden-section search. QuestGaussianMse is that expectation for a given alpha.
double QuestOptimalClip(const Format& elem);
double QuestGaussianMse(const Format& elem, double alpha);

struct QuestResult {
  std::vector<float> dequant;  // rows x cols: the quantized values in the transformed domain
  std::vector<uint8_t> codes;  // rows x cols element codes: dequant = decode(code) * its group's scale
  std::vector<uint8_t> mask;   // rows x cols: 1 where the gradient is trusted
  std::vector<float> scales;   // one per group, the decoded scale
  uint64_t clipped = 0;        // elements outside the trust region
};
// x is already in the transformed domain (apply HadamardForward first). cols must be a multiple of the
// spec's block; the spec must be row-wise 1xK with a UE8M0 or FP32 scale.
QuestResult QuestQuantize(const float* x, size_t rows, size_t cols, const QuantSpec& spec,
                          const QuestOptions& opt = {}, Exec exec = Exec::kParallel);

}  // namespace qmx
