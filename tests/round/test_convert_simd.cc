// test_convert_simd.cc: every compiled SIMD target against the scalar reference, bit for bit: FP32 grid,
// boundary and random inputs in every mode; all 2^16 BF16 and FP16 inputs; decoding of every code; the
// random stream under splits and explicit bits; thread-count independence.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "qmx/convert.h"
#include "qmx/mx.h"
#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "support/grid.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::Hex;
using qmx::test::TargetGuard;
using qmx::test::OptionSets;

namespace {

// Registry formats of 8 bits or fewer plus user formats that exercise other encodings and biases.
const char* kFormats[] = {"e4m3",        "e5m2",        "e3m2",        "e2m3",         "e2m1", "int8", "ue8m0",
                          "binary8p3se", "binary8p4sf", "binary8p3ue", "binary6p1sf", "e3m4", "e2m2:special=finite",
                          "e5m2:bias=1", "e4m3:bias=-2"};

// Restores the default target when a test ends, also on failure.
std::string Describe(const Format& f, const CastOptions& o) {
  return std::string(f.name) + " " + RoundingName(o.rounding) + " " + SaturationName(o.saturation) +
         (o.subnormals == Subnormals::kFlush ? " flush" : "") + (o.nan_sign == NanSign::kPositive ? " nan+" : "") +
         " N=" + std::to_string(o.sr_bits);
}

// Compares fast and reference codes; reports the first mismatches in hex.
template <typename In>
void ExpectSame(const std::vector<In>& in, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++bad <= 5) {
      INFO(what << ": input " << Hex(in[i], sizeof(In) * 2) << " (element " << i << ") -> got " << Hex(got[i])
                << " want " << Hex(want[i]));
      CHECK(got[i] == want[i]);
    }
  }
  INFO(what << ": " << bad << " mismatches of " << in.size());
  CHECK(bad == 0);
}

std::vector<uint32_t> Fp32Inputs(const Format& f) {
  std::vector<uint32_t> v;
  for (float x : qmx::test::GridInputs(f)) v.push_back(qmx::test::FloatBits(x));
  // Every exponent with the mantissa patterns that decide roundings: 0, 1, halves, all ones, walking ones.
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t m : {0u, 1u, 2u, 3u, 0x400000u, 0x400001u, 0x3FFFFFu, 0x7FFFFFu, 0x200000u, 0x600000u, 0x080000u,
                       0x0FFFFFu, 0x100000u, 0x180000u, 0x7FFFFEu, 0x555555u, 0x2AAAAAu}) {
      v.push_back(e << 23 | m);
      v.push_back(0x80000000u | e << 23 | m);
    }
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 4096; ++i) v.push_back(static_cast<uint32_t>(rng()));
  return v;
}

}  // namespace

TEST_CASE("round: SIMD FP32 conversion equals the reference on every target, every format and mode", "[round][simd]") {
  TargetGuard guard;
  const std::vector<std::string> targets = SimdTargets();
  REQUIRE(!targets.empty());
  for (const char* name : kFormats) {
    const Format f = ParseFormat(name);
    const std::vector<uint32_t> in = Fp32Inputs(f);
    for (const CastOptions& o : OptionSets(f, true, true)) {
      const SrSource sr{0xC0FFEEull, 7, nullptr};  // an offset that is not a multiple of 4
      std::vector<uint8_t> want(in.size());
      ConvertToCodesRef(DType::kF32, in.data(), in.size(), f, o, want.data(), sr);
      for (const std::string& t : targets) {
        ForceSimdTarget(t);
        std::vector<uint8_t> got(in.size(), 0xAA);
        ConvertToCodes(DType::kF32, in.data(), in.size(), f, o, got.data(), sr);
        ExpectSame(in, got, want, t + " " + Describe(f, o));
      }
    }
  }
}

TEST_CASE("round: SIMD BF16 and FP16 conversion: all 2^16 inputs on every target", "[round][simd]") {
  TargetGuard guard;
  std::vector<uint16_t> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  const char* const name = GENERATE(values<const char*>({"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8", "ue8m0", "binary8p3se"}));
  CAPTURE(name);
  const Format f = ParseFormat(name);
  for (DType src : {DType::kBF16, DType::kF16}) {
    for (const CastOptions& o : OptionSets(f, false, false)) {
      for (bool flush : {false, true}) {
        CastOptions oo = o;
        if (flush) oo.subnormals = Subnormals::kFlush;
        std::vector<uint8_t> want(in.size());
        ConvertToCodesRef(src, in.data(), in.size(), f, oo, want.data(), SrSource{99, 0, nullptr});
        for (const std::string& t : SimdTargets()) {
          ForceSimdTarget(t);
          std::vector<uint8_t> got(in.size(), 0xAA);
          ConvertToCodes(src, in.data(), in.size(), f, oo, got.data(), SrSource{99, 0, nullptr});
          ExpectSame(in, got, want, t + " " + DTypeName(src) + " " + Describe(f, oo));
        }
      }
    }
  }
}

TEST_CASE("round: SIMD decoding of every code equals DecodeToFloat on every target", "[round][simd]") {
  TargetGuard guard;
  std::vector<uint8_t> codes(256 * 3 + 5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 + 3);
  const char* const name = GENERATE(from_range(std::begin(kFormats), std::end(kFormats)));
  CAPTURE(name);
  const Format f = ParseFormat(name);
  for (const std::string& t : SimdTargets()) {
    ForceSimdTarget(t);
    std::vector<float> out(codes.size());
    DecodeToF32(codes.data(), codes.size(), f, out.data());
    for (size_t i = 0; i < codes.size(); ++i) {
      const float want = DecodeToFloat(f, codes[i]);
      INFO(t << " " << name << " code " << Hex(codes[i]) << " got " << out[i] << " want " << want);
      if (std::isnan(want)) {
        CHECK(std::isnan(out[i]));
        CHECK(std::signbit(out[i]) == std::signbit(want));
      } else {
        CHECK(qmx::test::FloatBits(out[i]) == qmx::test::FloatBits(want));
      }
    }
  }
}

TEST_CASE("round: Stochastic rounding: split calls, explicit bits and the Philox stream agree", "[round][simd]") {
  const Format& f = fmt::kE2M1;
  CastOptions o;
  o.rounding = Rounding::kSrA;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(10007);
  for (float& v : x) v = nd(rng);
  const uint64_t seed = 0x1234567890ABCDEFull, first = 1000003;
  std::vector<uint8_t> whole(x.size());
  ConvertToCodes(DType::kF32, x.data(), x.size(), f, o, whole.data(), SrSource{seed, first, nullptr});
  // Split at odd points: each piece starts at its own element index.
  std::vector<uint8_t> split(x.size());
  for (size_t a = 0, b; a < x.size(); a = b) {
    b = std::min(x.size(), a + 1 + (a * 37) % 301);
    ConvertToCodes(DType::kF32, x.data() + a, b - a, f, o, split.data() + a, SrSource{seed, first + a, nullptr});
  }
  CHECK(split == whole);
  // Explicit bits equal to the stream give the same codes.
  std::vector<uint32_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = RandomBitsForElement(seed, first + i);
  std::vector<uint8_t> explicit_bits(x.size());
  ConvertToCodes(DType::kF32, x.data(), x.size(), f, o, explicit_bits.data(), SrSource{0, 0, bits.data()});
  CHECK(explicit_bits == whole);
  // Another seed changes some codes (the stream is used at all).
  std::vector<uint8_t> other(x.size());
  ConvertToCodes(DType::kF32, x.data(), x.size(), f, o, other.data(), SrSource{seed + 1, first, nullptr});
  CHECK(other != whole);
}

TEST_CASE("round: SIMD stochastic rounding where the Philox counter's high word changes mid-call, on every target",
          "[round][simd]") {
  // Element index 2^34 is counter {0, 1, 0, 0}: the vector Philox keeps counter lanes as 64-bit sums, so
  // the carry into the second counter word must reach the lanes past it in the same batch.
  TargetGuard guard;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(4099);
  for (float& v : x) v = nd(rng);
  std::vector<uint32_t> in(x.size());
  std::memcpy(in.data(), x.data(), 4 * x.size());
  CastOptions o;
  o.rounding = Rounding::kSrA;
  for (const uint64_t first : {(uint64_t{1} << 34) - 1000, (uint64_t{1} << 34) - 1, (uint64_t{7} << 34) - 2052}) {
    const SrSource sr{0xFEEDFACECAFEBEEFull, first, nullptr};
    for (const Format& f : {fmt::kE4M3, fmt::kE2M1}) {
      std::vector<uint8_t> want(x.size());
      ConvertToCodesRef(DType::kF32, x.data(), x.size(), f, o, want.data(), sr);
      for (const std::string& t : SimdTargets()) {
        ForceSimdTarget(t);
        std::vector<uint8_t> got(x.size(), 0xAA);
        ConvertToCodes(DType::kF32, x.data(), x.size(), f, o, got.data(), sr);
        ExpectSame(in, got, want, t + " first index " + std::to_string(first) + " " + Describe(f, o));
      }
    }
  }
}

TEST_CASE("round: parallel conversion and decoding are independent of the thread count", "[round][simd]") {
  std::mt19937 rng(3);
  std::vector<uint32_t> in(300001);
  for (auto& v : in) v = static_cast<uint32_t>(rng());
  CastOptions o;
  o.rounding = Rounding::kSrC;
  std::vector<uint8_t> seq(in.size());
  ConvertToCodes(DType::kF32, in.data(), in.size(), fmt::kE4M3, o, seq.data(), SrSource{5, 11, nullptr});
  std::vector<float> dec_seq(in.size());
  DecodeToF32(seq.data(), seq.size(), fmt::kE4M3, dec_seq.data());
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    std::vector<uint8_t> par(in.size());
    ConvertToCodes(DType::kF32, in.data(), in.size(), fmt::kE4M3, o, par.data(), SrSource{5, 11, nullptr}, Exec::kParallel);
    CHECK(par == seq);
    std::vector<float> dec(in.size());
    DecodeToF32(par.data(), par.size(), fmt::kE4M3, dec.data(), Exec::kParallel);
    CHECK(std::memcmp(dec.data(), dec_seq.data(), dec.size() * 4) == 0);
  }
  omp_set_num_threads(saved);
}

#if defined(__x86_64__) || defined(__i386__)
TEST_CASE("round: conversion and MX kernels give the reference's bits under a caller's FTZ, DAZ and directed rounding",
          "[round][simd][mx]") {
  // The fused tier rounds lanes below dst's normal binades in the FPU, and the MX scale rules divide in it:
  // the kernels must run in the default environment whatever the caller set. The data puts many lanes
  // there (|x| around 2^-8 .. 2^-2 for e4m3, below 1 for e2m1), plus FP32 subnormals.
  TargetGuard guard;
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(4096 + 37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 11) - 9);
  for (size_t i = 0; i < x.size(); i += 97) x[i] = nd(rng) * 1e-40f;
  CastOptions sr;
  sr.rounding = Rounding::kSrA;
  const SrSource stream{31, 4, nullptr};
  struct Want {
    Format f;
    CastOptions o;
    std::vector<uint8_t> codes;
  };
  std::vector<Want> wants;
  for (const Format& f : {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1}) {
    for (const CastOptions& o : {CastOptions{}, sr}) {
      std::vector<uint8_t> want(x.size());
      ConvertToCodesRef(DType::kF32, x.data(), x.size(), f, o, want.data(), stream);
      wants.push_back({f, o, want});
    }
  }
  MxSpec mx4;
  mx4.elem = fmt::kE2M1;
  MxSpec mx8;  // e4m3, round-up: fl32(amax / 448) divides in the FPU
  std::vector<uint8_t> mx_want_c[2], mx_want_s[2];
  std::vector<float> mx_want_dq[2];
  const MxSpec* specs[2] = {&mx8, &mx4};
  for (int m = 0; m < 2; ++m) {
    mx_want_c[m].resize(x.size());
    mx_want_s[m].resize(MxScaleCount(x.size(), *specs[m]));
    mx_want_dq[m].resize(x.size());
    QuantizeMxRef(DType::kF32, x.data(), x.size(), *specs[m], mx_want_c[m].data(), mx_want_s[m].data());
    DequantizeMxRef(mx_want_c[m].data(), mx_want_s[m].data(), x.size(), *specs[m], mx_want_dq[m].data());
  }
  const unsigned saved = _mm_getcsr();
  // Toward zero with FTZ and DAZ; upward.
  for (unsigned mode : {0x6000u | 0x8000u | 0x0040u, 0x4000u}) {
    for (const std::string& t : SimdTargets()) {
      ForceSimdTarget(t);
      _mm_setcsr((saved & ~0xE040u) | mode);
      std::vector<std::vector<uint8_t>> got;
      for (const Want& w : wants) {
        got.emplace_back(x.size());
        ConvertToCodes(DType::kF32, x.data(), x.size(), w.f, w.o, got.back().data(), stream);
      }
      std::vector<uint8_t> mc[2], ms[2];
      std::vector<float> mdq[2];
      for (int m = 0; m < 2; ++m) {
        mc[m].resize(x.size());
        ms[m].resize(mx_want_s[m].size());
        mdq[m].resize(x.size());
        QuantizeMx(DType::kF32, x.data(), x.size(), *specs[m], mc[m].data(), ms[m].data());
        DequantizeMx(mc[m].data(), ms[m].data(), x.size(), *specs[m], mdq[m].data());
      }
      const unsigned after = _mm_getcsr();
      _mm_setcsr(saved);
      CHECK((after & 0xE040u) == mode);  // the caller's modes come back
      for (size_t i = 0; i < wants.size(); ++i)
        ExpectSame(x, got[i], wants[i].codes, t + " " + Describe(wants[i].f, wants[i].o) + " MXCSR modes " + Hex(mode, 4));
      for (int m = 0; m < 2; ++m) {
        INFO(t << " MX " << specs[m]->elem.name << " MXCSR modes " << Hex(mode, 4));
        CHECK(mc[m] == mx_want_c[m]);
        CHECK(ms[m] == mx_want_s[m]);
        CHECK(std::memcmp(mdq[m].data(), mx_want_dq[m].data(), x.size() * 4) == 0);
      }
    }
  }
}
#endif

TEST_CASE("round: fast conversion refuses what it cannot do, with a clear message", "[round][simd]") {
  std::vector<float> x(4, 1.0f);
  std::vector<uint8_t> out(4);
  CHECK_THROWS_WITH(ConvertToCodes(DType::kF32, x.data(), 4, fmt::kBF16, CastOptions{}, out.data()),
                    Catch::Contains("8 bits or fewer"));
  CHECK_THROWS_WITH(ConvertToCodes(DType::kF64, x.data(), 2, fmt::kE4M3, CastOptions{}, out.data()),
                    Catch::Contains("fp32, bf16 or fp16"));
  CastOptions nosat;
  nosat.saturation = Saturation::kNoSat;
  CHECK_THROWS_WITH(ConvertToCodes(DType::kF32, x.data(), 4, fmt::kE2M1, nosat, out.data()),
                    Catch::Contains("no Inf or NaN"));
  CHECK_THROWS_WITH(ForceSimdTarget("AVX9000"), Catch::Contains("not compiled in"));
}

TEST_CASE("round: sr_bits outside 1..32 is ignored by non-stochastic roundings (found by fuzz_spec: a shift past 63)",
          "[round]") {
  // Stochastic rounding checks its bit count; every other rounding must not read it (the sanitizer build
  // reported 1 << 72 in the reference and the SIMD parameters before the fix).
  std::mt19937 rng(5);
  std::vector<float> x(4096);
  for (auto& v : x) {
    const uint32_t w = rng();
    std::memcpy(&v, &w, 4);
  }
  CastOptions plain;
  for (int bits : {0, -3, 33, 72}) {
    CastOptions odd = plain;
    odd.sr_bits = bits;
    for (const Format* f : {&fmt::kE4M3, &fmt::kE2M1}) {
      std::vector<uint8_t> want(x.size()), got(x.size());
      ConvertToCodes(DType::kF32, x.data(), x.size(), *f, plain, want.data());
      ConvertToCodes(DType::kF32, x.data(), x.size(), *f, odd, got.data());
      CHECK(want == got);
      for (size_t i = 0; i < 64; ++i) CHECK(ConvertF32(x[i], *f, odd, 0) == ConvertF32(x[i], *f, plain, 0));
    }
    odd.rounding = Rounding::kSrA;
    CHECK_THROWS_AS(ConvertF32(1.0f, fmt::kE4M3, odd, 0), Error);
  }
}

TEST_CASE("round: the SIMD target hooks may be called from several threads at once", "[round][simd]") {
  // qmx/testing.h: SimdTargets, ForceSimdTarget and SimdTargetName are serialised with each other (no
  // computation runs meanwhile here). Every thread's calls succeed, and the state afterwards is whole.
  qmx::test::TargetGuard guard;
  const std::vector<std::string> targets = qmx::SimdTargets();
  REQUIRE(!targets.empty());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        try {
          qmx::ForceSimdTarget(targets[static_cast<size_t>(t + i) % targets.size()]);
          const std::string now = qmx::SimdTargetName();
          if (std::find(targets.begin(), targets.end(), now) == targets.end()) ++failures;
          if (qmx::SimdTargets() != targets) ++failures;
        } catch (...) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(failures == 0);
  qmx::ForceSimdTarget("");
  CHECK(qmx::SimdTargetName() == targets.front());
  qmx::ForceSimdTarget(targets.back());
  CHECK(qmx::SimdTargetName() == targets.back());
}
