// arrays.h: small NpyArrays for tests that write .npy / .safetensors files: U8 bytes, FP32 values, and a
// seeded Gaussian FP32 tensor (std::mt19937 with std::normal_distribution<float>).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "qmx/io.h"

namespace qmx::test {

inline NpyArray U8Array(std::vector<size_t> shape, std::vector<uint8_t> bytes) {
  NpyArray a;
  a.dtype = DType::kU8;
  a.shape = std::move(shape);
  a.data = std::move(bytes);
  return a;
}

inline NpyArray F32Array(std::vector<size_t> shape, const std::vector<float>& values) {
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = std::move(shape);
  a.data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

inline NpyArray RandomF32(std::vector<size_t> shape, uint32_t seed) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (float& x : v) x = nd(rng);
  return F32Array(std::move(shape), v);
}

}  // namespace qmx::test
