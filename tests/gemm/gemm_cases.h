// gemm_cases.h: operands for the GEMM tests (random codes, UE8M0 / FP32 / E4M3 block scales), the float32
// arrays of the golden GEMM folders, and bit-for-bit comparisons of outputs.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "qmx/convert.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/testing.h"
#include "support/hex.h"
#include "support/modes.h"

namespace qmx::test {

// Every named model and four fused: strings that set the parameters the named ones leave alone (RNE terms
// and output, 11-bit output, a zero exponent, promotion with separate scales, groups of 8 and of 4).
inline std::vector<AccumModel> ModelsUnderTest() {
  std::vector<AccumModel> m;
  for (const std::string& n : AccumModelNames()) m.push_back(AccumModelByName(n));
  m.push_back(AccumModelByName("fused:step=8,F=6,term=rne,out=rne,bits=11,zero-exp=-20,promote=16"));
  m.push_back(AccumModelByName("fused:step=16,F=20,bits=24,zero-exp=-133,promote=32,promote-scale=separate"));
  m.push_back(AccumModelByName("fused:step=32,F=25,group=8,scale=products"));
  m.push_back(AccumModelByName("fused:step=8,F=4,group=4,zero-exp=-20"));
  return m;
}

// Random codes of a format: mostly values of a Gaussian-like spread, some zeros, some extremes.
inline std::vector<uint8_t> RandomCodes(const Format& f, size_t n, std::mt19937& rng, bool specials) {
  std::uniform_int_distribution<int> any(0, static_cast<int>(f.CodeMask()));
  std::vector<uint8_t> c(n);
  for (size_t i = 0; i < n; ++i) {
    uint8_t v = static_cast<uint8_t>(any(rng));
    const CodeClass cl = ClassifyCode(f, v);
    if (!specials && (cl == CodeClass::kNan || cl == CodeClass::kInf)) v = 0;
    if (rng() % 9 == 0) v = 0;
    c[i] = v;
  }
  return c;
}

inline GemmOperand Codes(const Format& f, size_t r, size_t c, std::mt19937& rng, bool specials = false) {
  const std::vector<uint8_t> codes = RandomCodes(f, r * c, rng, specials);
  return OperandFromCodes(f, r, c, codes.data());
}

inline void AddUe8m0(GemmOperand& o, bool is_a, size_t block, std::mt19937& rng, int lo, int hi) {
  o.scale_format = ScaleFormat::kUe8m0;
  o.block_rows = is_a ? 1 : block;
  o.block_cols = is_a ? block : 1;
  o.scale_rows = (o.rows + o.block_rows - 1) / o.block_rows;
  o.scale_cols = (o.cols + o.block_cols - 1) / o.block_cols;
  std::uniform_int_distribution<int> e(lo, hi);
  o.scales.resize(o.scale_rows * o.scale_cols);
  for (float& s : o.scales) s = std::ldexp(1.0f, e(rng));
}

inline void AddFp32(GemmOperand& o, size_t br, size_t bc, std::mt19937& rng, ScaleFormat sf = ScaleFormat::kFp32) {
  o.scale_format = sf;
  o.block_rows = br;
  o.block_cols = bc;
  o.scale_rows = (o.rows + br - 1) / br;
  o.scale_cols = (o.cols + bc - 1) / bc;
  std::uniform_real_distribution<float> u(0.5f, 3.0f);
  o.scales.resize(o.scale_rows * o.scale_cols);
  for (float& s : o.scales) {
    s = u(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
    if (sf == ScaleFormat::kE4m3) s = DecodeToFloat(fmt::kE4M3, rng() % 0x7F);  // finite, may be 0
  }
}

// A float32 .npy array's values (C, D and FP32 scales in the golden GEMM folders).
inline std::vector<float> FloatsOf(const NpyArray& x) {
  std::vector<float> v(x.data.size() / 4);
  std::memcpy(v.data(), x.data.data(), v.size() * 4);
  return v;
}

// How many outputs differ in their bits (NaNs too), skipping those where `keep` (if given) is 0.
inline size_t BitsDiffer(const std::vector<float>& got, const std::vector<float>& want,
                         const std::vector<uint8_t>* keep = nullptr) {
  REQUIRE(got.size() == want.size());
  size_t n = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (keep == nullptr || keep->empty() || (*keep)[i] != 0) n += FloatBits(got[i]) != FloatBits(want[i]);
  return n;
}

inline void RequireSame(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = FloatBits(got[i]) == FloatBits(want[i]) || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same && bad++ < 3)
      UNSCOPED_INFO(what << ": output " << i << " got " << Hex(FloatBits(got[i])) << " want " << Hex(FloatBits(want[i])));
  }
  CHECK(bad == 0);
}

// The fast Gemm against GemmRef on every SIMD target (2 threads) and on 1 thread.
inline void CheckEverywhere(const GemmOperand& a, const GemmOperand& b, const std::vector<float>& c, const AccumModel& m,
                            const std::string& what) {
  const float* cp = c.empty() ? nullptr : c.data();
  const std::vector<float> ref = GemmRef(a, b, cp, m);
  TargetGuard guard;
  for (const std::string& target : SimdTargets()) {
    ForceSimdTarget(target);
    omp_set_num_threads(2);
    RequireSame(Gemm(a, b, cp, m), ref, what + " / " + m.name + " / " + target);
  }
  ForceSimdTarget("");
  omp_set_num_threads(1);
  RequireSame(Gemm(a, b, cp, m), ref, what + " / " + m.name + " / 1 thread");
}

}  // namespace qmx::test
