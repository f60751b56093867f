// engine_linear.cu: the device kernels of the engine's linear layer (engine_linear.cc): transposition of the
// FP32 sources and of the quantized codes and scales, block-scale decoding, the block Hadamard transform as
// lib/src/transform/transform.cc computes it, max |x| with the first non-finite element, RNE to BF16, and the
// fp32-seq GEMM of the bf16 recipe, and Quartet's quantizers (QuEST forward, SR backward) with the trust mask.
// Compiled with -fmad=false: every double and float operation rounds where the library's does.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine_internal.h"
#include "gpu_internal.h"
#include "qmx/host_device.h"
#include "qmx/rng.h"
#include "round/round_core.h"

namespace qmx::gpu::detail {
namespace {

constexpr int kTile = 32;

// dst (cols x rows) = src (rows x cols)^T through a 32 x 33 shared tile (8 rows of threads per tile).
template <typename T>
__global__ void TransposeKernel(const T* __restrict__ src, size_t rows, size_t cols, T* __restrict__ dst) {
  __shared__ T tile[kTile][kTile + 1];
  const size_t c0 = static_cast<size_t>(blockIdx.x) * kTile, r0 = static_cast<size_t>(blockIdx.y) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const size_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const size_t c = c0 + i, r = r0 + threadIdx.x;  // dst row c, column r
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

template <typename T>
void Transpose(const T* src, size_t rows, size_t cols, T* dst, void* stream) {
  if (rows == 0 || cols == 0) return;
  if (Blocks(rows, kTile) > 65535) throw Error("engine transpose: more than 2,097,120 rows");
  const dim3 grid(Blocks(cols, kTile), Blocks(rows, kTile)), threads(kTile, 8);
  TransposeKernel<T><<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(src, rows, cols, dst);
  Check(cudaGetLastError(), "engine transpose");
}

__global__ void DecodeScalesKernel(const uint8_t* __restrict__ raw, size_t count, int bytes,
                                   const float* __restrict__ table, float* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (bytes == 4) {
      uint32_t u = raw[4 * i] | (raw[4 * i + 1] << 8) | (raw[4 * i + 2] << 16) | (static_cast<uint32_t>(raw[4 * i + 3]) << 24);
      out[i] = __uint_as_float(u);
    } else {
      out[i] = table[raw[i]];
    }
  }
}

// transform.cc's ApplyScalar on one block per thread: forward y = H D x, inverse x = D H y, butterflies in
// double, one multiplication by norm, one rounding to FP32.
__global__ void HadamardKernel(float* __restrict__ x, size_t blocks, int n, const double* __restrict__ sign,
                               double norm, bool inverse) {
  double v[256];
  for (size_t b = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float* p = x + b * n;
    for (int j = 0; j < n; ++j) v[j] = inverse ? static_cast<double>(p[j]) : static_cast<double>(p[j]) * sign[j];
    for (int h = 1; h < n; h *= 2)
      for (int i = 0; i < n; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const double a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
    for (int j = 0; j < n; ++j) {
      const double y = v[j] * norm;
      p[j] = static_cast<float>(inverse ? y * sign[j] : y);
    }
  }
}

// The same for blocks of n <= 32: a warp takes 32 / n blocks, lane j % n holding element j of its block in a
// register (the kernel above keeps its block in local memory, 500 us per 2^24 values). Each butterfly stage
// is one exchange with the lane h apart; the lower index of a pair takes a + c and the upper a - c (a the
// lower's value, c the upper's), in double as Fwht's loops compute them, so every value is the same
// operation on the same operands.
__global__ void HadamardWarpKernel(float* __restrict__ x, size_t blocks, int n, const double* __restrict__ sign,
                                   double norm, bool inverse) {
  const int lane = threadIdx.x & 31, j = lane & (n - 1);
  const size_t per_warp = static_cast<size_t>(32 / n);
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  for (size_t w = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32; w * per_warp < blocks; w += warps) {
    const size_t b = w * per_warp + lane / n;
    const bool in = b < blocks;  // the warp's last blocks may run past the tensor; their lanes still exchange
    float* p = x + (in ? b * n : 0);
    double v = !in ? 0.0 : inverse ? static_cast<double>(p[j]) : static_cast<double>(p[j]) * sign[j];
    for (int h = 1; h < n; h *= 2) {
      const double o = __shfl_xor_sync(0xFFFFFFFFu, v, h);
      v = (j & h) ? o - v : v + o;
    }
    if (in) {
      const double y = v * norm;
      p[j] = static_cast<float>(inverse ? y * sign[j] : y);
    }
  }
}

// max |x| as FP32 bits (non-negative floats order as their bits) and the first non-finite index.
__global__ void AmaxFiniteKernel(const float* __restrict__ x, size_t count, unsigned* amax_bits,
                                 unsigned long long* first_bad) {
  unsigned m = 0;
  unsigned long long bad = ~0ull;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const unsigned u = __float_as_uint(x[i]) & 0x7FFFFFFFu;
    if (u >= 0x7F800000u) bad = bad < i ? bad : i;
    else m = m > u ? m : u;
  }
  for (int off = 16; off > 0; off /= 2) {
    const unsigned om = __shfl_down_sync(0xFFFFFFFFu, m, off);
    const unsigned long long ob = __shfl_down_sync(0xFFFFFFFFu, bad, off);
    m = m > om ? m : om;
    bad = bad < ob ? bad : ob;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(amax_bits, m);
    if (bad != ~0ull) atomicMin(first_bad, bad);
  }
}

__global__ void Bf16RoundKernel(const float* __restrict__ src, size_t count, float* __restrict__ dst) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t b = __float_as_uint(src[i]);
    dst[i] = __uint_as_float((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);  // recipe_step.cc's Bf16Round
  }
}

// One thread per column, rows in ascending order from +0; 16 rows' loads issued ahead of their adds (the
// sum's order is the library's; only the memory latency overlaps).
__global__ void ColumnSumsKernel(const float* __restrict__ x, size_t m, size_t n, float* __restrict__ out) {
  const size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  constexpr int kAhead = 16;
  float acc = 0.0f;
  size_t i = 0;
  for (; i + kAhead <= m; i += kAhead) {
    float v[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) v[u] = x[(i + u) * n + j];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) acc += v[u];
  }
  for (; i < m; ++i) acc += x[i * n + j];
  out[j] = acc;
}

// fl32(v * s) as quantize.cc's Dequantize gets it on x86-64, where a NaN keeps its payload: a NaN operand
// propagates quieted (v's first, mulsd's first source), the narrowing keeps the payload's top bits, and a NaN
// the product makes (Inf x 0) is the default NaN, negative. The GPU's own multiply would return its canonical
// NaN 0x7FFFFFFF instead. `scale_nan_wins`: UE8M0's NaN scale byte gives +NaN whatever the code, as
// Dequantize's branch for it does.
__device__ __forceinline__ float HostProductF32(double v, double s, bool scale_nan_wins) {
  const auto narrow_nan = [](double d) {
    const uint64_t b = static_cast<uint64_t>(__double_as_longlong(d));
    return __uint_as_float(static_cast<uint32_t>(b >> 32 & 0x80000000u) | 0x7FC00000u |
                           static_cast<uint32_t>(b >> 29 & 0x003FFFFFu));
  };
  if (scale_nan_wins && s != s) return __uint_as_float(0x7FC00000u);
  if (v != v) return narrow_nan(v);
  if (s != s) return narrow_nan(s);
  const double p = v * s;
  return p != p ? __uint_as_float(0xFFC00000u) : static_cast<float>(p);
}

// FlushSubnormal of quantize_internal.h: below 2^-126 in magnitude, a zero of x's sign (NaN passes).
__device__ __forceinline__ double FlushSubnormalDev(double x) {
  return x != 0 && fabs(x) < 0x1p-126 ? copysign(0.0, x) : x;
}

// Dequantize of quantize.cc per element: f = fl32(value(code) * S) in double, S the block's decode scale
// (1-byte scales: scale_table[byte], already flushed under ftz; FP32: the scale itself), and under ftz the
// FP32 scale and the result flushed as DequantizeRows flushes them.
__global__ void DequantizeKernel(const uint8_t* __restrict__ codes, size_t rows, size_t cols,
                                 const uint8_t* __restrict__ scales, size_t block_rows, size_t block_cols,
                                 size_t scale_cols, int bytes, bool ue8m0, bool ftz, const float* __restrict__ code_table,
                                 const double* __restrict__ scale_table, float* __restrict__ out) {
  const size_t n = rows * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t b = ScaleIndex(i / cols, i % cols, block_rows, block_cols, scale_cols);
    double s;
    if (bytes == 4) {
      const uint32_t u = scales[4 * b] | (scales[4 * b + 1] << 8) | (scales[4 * b + 2] << 16) |
                         (static_cast<uint32_t>(scales[4 * b + 3]) << 24);
      s = static_cast<double>(__uint_as_float(u));
      if (ftz) s = FlushSubnormalDev(s);
    } else {
      s = scale_table[scales[b]];
    }
    const float f = HostProductF32(static_cast<double>(code_table[codes[i]]), s, ue8m0);
    out[i] = ftz ? static_cast<float>(FlushSubnormalDev(f)) : f;
  }
}

// QuestQuantize of transform.cc, one group of a.group elements per thread (the sums in double in index order,
// as the CPU forms them): the group's statistic, its scale (floored or rounded to a power of two, or exact),
// then per element v = fl32(x / scale), the trust mask |v| < elem max, the code by the library's conversion
// routine (SR bits from element r * cols + c of the seed's stream) and the value decode(code) * scale.
__global__ void QuestKernel(const float* __restrict__ x, size_t groups, QuestArgs a, uint8_t* __restrict__ codes,
                            float* __restrict__ scales, float* __restrict__ dequant, uint8_t* __restrict__ mask) {
  constexpr Format kF32 = fmt::kFP32;
  const bool stochastic = qmx::detail::IsStochasticCore(a.cast.rounding);
  const double g = static_cast<double>(a.group);
  for (size_t gi = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; gi < groups;
       gi += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t base = gi * a.group;
    const float* xg = x + base;
    double sum = 0, sq = 0;
    bool finite = true;
    for (int i = 0; i < a.group; ++i) {
      const float v = xg[i];
      finite = finite && isfinite(v);
      sum += v;
      sq += static_cast<double>(v) * v;
    }
    double stat;
    if (a.rms) {
      stat = sqrt(sq / g);
    } else {
      const double mean = sum / g;
      double var = 0;
      for (int i = 0; i < a.group; ++i) var += (xg[i] - mean) * (xg[i] - mean);
      stat = sqrt(var / g);
    }
    float scale = static_cast<float>(stat * a.ratio + 1e-8);
    if (!finite || !isfinite(scale)) scale = __uint_as_float(0x7FC00000u);
    if (isfinite(scale) && a.scale_rounding != 2) {
      uint32_t bits = __float_as_uint(scale);
      const bool up = a.scale_rounding == 1 && (bits & 0x7FFFFFu) >= 0x3504F4u;
      bits &= 0x7F800000u;
      if (up) bits += 0x800000u;
      scale = __uint_as_float(bits);
    }
    scales[gi] = scale;
    for (int i = 0; i < a.group; ++i) {
      const float v = xg[i] / scale;
      mask[base + i] = fabsf(v) < a.emax ? 1 : 0;
      const uint32_t r = stochastic ? RandomBitsForElement(a.seed, base + i) : 0u;
      const uint8_t c = static_cast<uint8_t>(qmx::detail::ConvertCore(kF32, __float_as_uint(v), a.elem, a.cast, r).code);
      codes[base + i] = c;
      dequant[base + i] = scale != scale ? scale : a.decode[c] * scale;
    }
  }
}

// Quartet's backward quantizer (recipe_step.cc's QuartetSr), one block of 32 per thread: the block's amax,
// X = 2^(byte - 127) of the OCP floor rule for E2M1, s = fl32(X * fl32(4/3)), each element SR(fl32(x / s)).
__global__ void QuartetSrKernel(const float* __restrict__ x, size_t blocks, QuartetSrArgs a,
                                uint8_t* __restrict__ codes, float* __restrict__ scales) {
  constexpr Format kF32 = fmt::kFP32;
  constexpr Format kE2m1 = fmt::kE2M1;
  const bool stochastic = qmx::detail::IsStochasticCore(a.cast.rounding);
  for (size_t b = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t base = b * 32;
    uint32_t amax = 0;
    for (int i = 0; i < 32; ++i) {
      const uint32_t m = __float_as_uint(x[base + i]) & 0x7FFFFFFFu;
      if (m <= 0x7F800000u && m > amax) amax = m;
    }
    const uint8_t byte = hd::ScaleByteFromAmaxBits(amax, a.rule, a.destmax, a.emax, a.man_bits);
    const float X = byte == 255 ? __uint_as_float(0x7FC00000u)
                    : byte == 0 ? __uint_as_float(0x00400000u)
                                : __uint_as_float(static_cast<uint32_t>(byte) << 23);
    scales[b] = X;
    const float s = X * a.four_thirds;
    for (int i = 0; i < 32; ++i) {
      const float v = x[base + i] / s;
      const uint32_t r = stochastic ? RandomBitsForElement(a.seed, base + i) : 0u;
      codes[base + i] = static_cast<uint8_t>(qmx::detail::ConvertCore(kF32, __float_as_uint(v), kE2m1, a.cast, r).code);
    }
  }
}

__global__ void MaskKernel(float* __restrict__ x, const uint8_t* __restrict__ mask, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    if (!mask[i]) x[i] = 0.0f;
}

}  // namespace

void LaunchTransposeF32(const float* src, size_t rows, size_t cols, float* dst, void* stream) {
  Transpose(src, rows, cols, dst, stream);
}
void LaunchTransposeU8(const uint8_t* src, size_t rows, size_t cols, uint8_t* dst, void* stream) {
  Transpose(src, rows, cols, dst, stream);
}

void LaunchDecodeScales(const uint8_t* raw, size_t count, int bytes, const float* table, float* out, void* stream) {
  if (count == 0) return;
  DecodeScalesKernel<<<GridFor(count, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(raw, count, bytes, table, out);
  Check(cudaGetLastError(), "engine scale decoding");
}

void LaunchHadamard(float* x, size_t blocks, int n, const double* sign, double norm, bool inverse, void* stream) {
  if (blocks == 0) return;
  if (n <= 32)
    HadamardWarpKernel<<<GridFor((blocks + 32 / n - 1) / (32 / n) * 32, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        x, blocks, n, sign, norm, inverse);
  else
    HadamardKernel<<<GridFor(blocks, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(x, blocks, n, sign, norm, inverse);
  Check(cudaGetLastError(), "engine Hadamard transform");
}

void LaunchAmaxFinite(const float* x, size_t count, unsigned* amax_bits, unsigned long long* first_bad, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  Check(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), st), "cudaMemsetAsync");
  Check(cudaMemsetAsync(first_bad, 0xFF, sizeof(unsigned long long), st), "cudaMemsetAsync");
  if (count == 0) return;
  AmaxFiniteKernel<<<GridFor(count, 256) < 4096 ? GridFor(count, 256) : 4096, 256, 0, st>>>(x, count, amax_bits,
                                                                                          first_bad);
  Check(cudaGetLastError(), "engine amax");
}

void LaunchBf16Round(const float* src, size_t count, float* dst, void* stream) {
  if (count == 0) return;
  Bf16RoundKernel<<<GridFor(count, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(src, count, dst);
  Check(cudaGetLastError(), "engine BF16 rounding");
}

void LaunchColumnSums(const float* x, size_t m, size_t n, float* out, void* stream) {
  if (n == 0) return;
  ColumnSumsKernel<<<Blocks(n, 32), 32, 0, static_cast<cudaStream_t>(stream)>>>(x, m, n, out);
  Check(cudaGetLastError(), "engine column sums");
}

void LaunchDequantize(const uint8_t* codes, size_t rows, size_t cols, const uint8_t* scales, size_t block_rows,
                      size_t block_cols, size_t scale_cols, int bytes, bool ue8m0, bool ftz, const float* code_table,
                      const double* scale_table, float* out, void* stream) {
  if (rows * cols == 0) return;
  DequantizeKernel<<<GridFor(rows * cols, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      codes, rows, cols, scales, block_rows, block_cols, scale_cols, bytes, ue8m0, ftz, code_table, scale_table, out);
  Check(cudaGetLastError(), "engine dequantization");
}

void LaunchQuest(const float* x, size_t rows, size_t cols, const QuestArgs& a, uint8_t* codes, float* scales,
                 float* dequant, uint8_t* mask, void* stream) {
  const size_t groups = rows * cols / static_cast<size_t>(a.group);
  if (groups == 0) return;
  QuestKernel<<<GridFor(groups, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(x, groups, a, codes, scales, dequant,
                                                                                   mask);
  Check(cudaGetLastError(), "engine QuEST quantizer");
}

void LaunchQuartetSr(const float* x, size_t rows, size_t cols, const QuartetSrArgs& a, uint8_t* codes, float* scales,
                     void* stream) {
  const size_t blocks = rows * cols / 32;
  if (blocks == 0) return;
  QuartetSrKernel<<<GridFor(blocks, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(x, blocks, a, codes, scales);
  Check(cudaGetLastError(), "engine Quartet backward quantizer");
}

void LaunchMask(float* x, const uint8_t* mask, size_t count, void* stream) {
  if (count == 0) return;
  MaskKernel<<<GridFor(count, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, mask, count);
  Check(cudaGetLastError(), "engine QuEST mask");
}

}  // namespace qmx::gpu::detail
