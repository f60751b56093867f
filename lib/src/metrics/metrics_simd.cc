// metrics_simd.cc: the error statistics as a Highway kernel, compiled for every target and chosen at run
// time. Eight FP64 lanes (one AVX-512 vector, or several narrower ones) each perform detail::AddElement's
// operations in its order on the elements i % 8 == lane, so the bits do not depend on the target. A group
// of eight with a NaN or an Inf goes through AddElement itself.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "metrics/metrics_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "metrics/metrics_internal.h"
#include "metrics/metrics_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> LoadRef(D d, const double* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRef(D d, const float* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<float, D>(), p));
}

// The partial sums of the eight lanes, field by field. Counts are exact integers, so which lane holds
// them does not matter: the kernel keeps them in lane 0.
enum Field { kSq, kErr, kSqRef, kSqOut, kDot, kRel, kMaxAbs, kMaxRel, kFields };

struct Counts {
  uint64_t finite = 0, rel = 0, zero_ref = 0;  // elements added, of them ref != 0, ref == 0 != out
};

// Adds groups of eight from i on, two at a time, while every pair is finite, the sums in registers from
// and back to buf; returns where it stopped (n, a pair of groups holding a NaN or an Inf, or a last lone
// group): the caller takes the group there through the scalar step, which gives the same bits.
template <typename Ref>
HWY_NOINLINE size_t FiniteRun(const Ref* ref, const float* out, size_t i, size_t n,
                              double (*buf)[detail::kErrorLanes], Counts& c) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> df;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t N = hn::MaxLanes(d);
  static_assert(N <= detail::kErrorLanes && detail::kErrorLanes % N == 0, "the lanes fill whole vectors");
  constexpr size_t kV = detail::kErrorLanes / N;
  V acc[kFields][kV];
  for (int f = 0; f < kFields; ++f)
    for (size_t v = 0; v < kV; ++v) acc[f][v] = hn::Load(d, buf[f] + v * N);
  const V zero = hn::Zero(d);
  size_t rel = 0, zero_ref = 0;
  const size_t start = i;
  constexpr size_t kPrefetch = 1024;  // elements ahead (4 KB of floats)
  // Two groups of kErrorLanes per iteration (one check of both), each lane adding its two elements in
  // index order: the same operations in the same order as one group at a time.
  constexpr size_t kG = 2;
  for (; i + kG * detail::kErrorLanes <= n; i += kG * detail::kErrorLanes) {
    // out - ref is finite exactly where both are: NaN and Inf propagate, and no difference of finite
    // values overflows in double (|out| < 2^128 is far below half an ulp of DBL_MAX).
    // Two streams with little work per byte: the hardware prefetcher alone leaves the loads waiting.
    if (i + kPrefetch < n) {
      hwy::Prefetch(ref + i + kPrefetch);
      hwy::Prefetch(out + i + kPrefetch);
    }
    V rd[kG * kV], od[kG * kV], ev[kG * kV];
    auto finite = hn::FirstN(d, N);
    for (size_t v = 0; v < kG * kV; ++v) {
      rd[v] = LoadRef(d, ref + i + v * N);
      od[v] = hn::PromoteTo(d, hn::LoadU(df, out + i + v * N));
      ev[v] = hn::Sub(od[v], rd[v]);
      finite = hn::And(finite, hn::IsFinite(ev[v]));
    }
    if (HWY_UNLIKELY(!hn::AllTrue(d, finite))) break;
    for (size_t w = 0; w < kG * kV; ++w) {
      const size_t v = w % kV;
      const V r = rd[w], o = od[w], e = ev[w];
      acc[kSq][v] = hn::Add(acc[kSq][v], hn::Mul(e, e));
      acc[kErr][v] = hn::Add(acc[kErr][v], e);
      acc[kSqRef][v] = hn::Add(acc[kSqRef][v], hn::Mul(r, r));
      acc[kSqOut][v] = hn::Add(acc[kSqOut][v], hn::Mul(o, o));
      acc[kDot][v] = hn::Add(acc[kDot][v], hn::Mul(r, o));
      const V ae = hn::Abs(e);
      acc[kMaxAbs][v] = hn::Max(acc[kMaxAbs][v], ae);
      // Where ref is 0 the quotient is discarded: adding +0 to a sum of non-negative terms and taking
      // the maximum with +0 leave both unchanged, as the scalar step's skip does.
      const auto nz = hn::Ne(r, zero);
      const V q = hn::IfThenElseZero(nz, hn::Div(ae, hn::Abs(r)));
      acc[kMaxRel][v] = hn::Max(acc[kMaxRel][v], q);
      acc[kRel][v] = hn::Add(acc[kRel][v], q);
      rel += hn::CountTrue(d, nz);
      zero_ref += hn::CountTrue(d, hn::AndNot(nz, hn::Ne(o, zero)));
    }
  }
  for (int f = 0; f < kFields; ++f)
    for (size_t v = 0; v < kV; ++v) hn::Store(acc[f][v], d, buf[f] + v * N);
  c.finite += i - start;
  c.rel += rel;
  c.zero_ref += zero_ref;
  return i;
}

template <typename Ref>
void ErrorLanesT(const Ref* ref, const float* out, size_t n, ErrorStats* lanes) {
  using detail::kErrorLanes;
  HWY_ALIGN double buf[kFields][kErrorLanes];
  Counts c;
  auto from_lanes = [&] {
    for (size_t l = 0; l < kErrorLanes; ++l) {
      const ErrorStats& s = lanes[l];
      buf[kSq][l] = s.sum_sq_err, buf[kErr][l] = s.sum_err, buf[kSqRef][l] = s.sum_sq_ref;
      buf[kSqOut][l] = s.sum_sq_out, buf[kDot][l] = s.sum_dot, buf[kRel][l] = s.sum_rel_err;
      buf[kMaxAbs][l] = s.max_abs_err, buf[kMaxRel][l] = s.max_rel_err;
    }
  };
  auto to_lanes = [&] {
    for (size_t l = 0; l < kErrorLanes; ++l) {
      ErrorStats& s = lanes[l];
      s.sum_sq_err = buf[kSq][l], s.sum_err = buf[kErr][l], s.sum_sq_ref = buf[kSqRef][l];
      s.sum_sq_out = buf[kSqOut][l], s.sum_dot = buf[kDot][l], s.sum_rel_err = buf[kRel][l];
      s.max_abs_err = buf[kMaxAbs][l], s.max_rel_err = buf[kMaxRel][l];
    }
    lanes[0].count += c.finite;
    lanes[0].rel_count += c.rel;
    lanes[0].zero_ref_err += c.zero_ref;
    c = Counts{};
  };
  from_lanes();
  for (size_t i = 0; i < n;) {
    i = FiniteRun(ref, out, i, n, buf, c);
    if (i == n) break;
    // A group with a NaN or an Inf: element by element through the scalar step.
    to_lanes();
    for (size_t l = 0; l < kErrorLanes; ++l) detail::AddElement(lanes[l], ref[i + l], out[i + l]);
    from_lanes();
    i += kErrorLanes;
  }
  to_lanes();
}

void ErrorLanesF32(const float* ref, const float* out, size_t n, ErrorStats* lanes) {
  ErrorLanesT(ref, out, n, lanes);
}
void ErrorLanesF64(const double* ref, const float* out, size_t n, ErrorStats* lanes) {
  ErrorLanesT(ref, out, n, lanes);
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
HWY_EXPORT(ErrorLanesF32);
HWY_EXPORT(ErrorLanesF64);

void ErrorLanes(const float* ref, const float* out, size_t n, ErrorStats* lanes) {
  HWY_DYNAMIC_DISPATCH(ErrorLanesF32)(ref, out, n, lanes);
}
void ErrorLanes(const double* ref, const float* out, size_t n, ErrorStats* lanes) {
  HWY_DYNAMIC_DISPATCH(ErrorLanesF64)(ref, out, n, lanes);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
