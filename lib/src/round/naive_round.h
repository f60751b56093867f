// naive_round.h (internal): a deliberately simple, independent rounding oracle for formats of 8 bits or fewer,
// for the tests (tests/support/naive_round.h) and `qmx-sim prove`.
// It searches the decoded value table for the two neighbours of x and applies each mode's tie rule
// by comparing exact doubles, so it shares no rounding logic with lib/src/round/round_pack_ref.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/format.h"

namespace qmx::detail {

class NaiveRounder {
 public:
  explicit NaiveRounder(const Format& f) : f_(f) {
    // Non-negative finite values and their codes, ascending (codes of 8-bit formats decode exactly).
    const std::vector<double> table = DecodeTable(f);
    for (uint64_t c = 0; c < table.size(); ++c) {
      const double v = table[c];
      if (!std::isfinite(v) || std::signbit(v)) continue;
      if (f.IsInt() && (c >> (f.Bits() - 1))) continue;
      values_.push_back(v);
      codes_.push_back(c);
    }
    std::vector<size_t> order(values_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values_[a] < values_[b]; });
    std::vector<double> v;
    std::vector<uint64_t> c;
    for (size_t i : order) {
      v.push_back(values_[i]);
      c.push_back(codes_[i]);
    }
    values_ = v;
    codes_ = c;
    max_ = values_.back();
    max_code_ = codes_.back();
    // The first value past max on the same grid: one more quantum, or the next power of two for a
    // format whose binades hold a single value.
    const double prev = values_[values_.size() - 2];
    next_ = (f.man_bits == 0 && !f.IsInt()) ? 2 * max_ : 2 * max_ - prev;
  }

  // Returns the code for x (an exact double) under opt, with random bits r for stochastic modes.
  uint64_t Round(double x, const CastOptions& opt, uint32_t r) const {
    const bool neg = std::signbit(x);
    if (std::isnan(x)) {
      if (!f_.HasNan()) return opt.nan_fallback == NanFallback::kMaxPositive ? max_code_ : 0;
      return Nan(neg && opt.nan_sign == NanSign::kKeep, opt.nan_payload);
    }
    const double a = std::fabs(x);
    if (!f_.is_signed && neg && a != 0) {
      // P3109 (report v4.0 Saturate): SatFinite / SatPropagate clamp to 0; under SatNone -Inf is NaN, a
      // finite negative rounds first (to 0: 0), then RZ / RU give 0 and the other modes NaN.
      if (!P3109()) return f_.CanonicalNan();
      if (opt.saturation != Saturation::kNoSat) return 0;
      if (std::isinf(x)) return f_.CanonicalNan();
      CastOptions mag = opt;
      if (opt.rounding == Rounding::kRu) mag.rounding = Rounding::kRz;  // toward +Inf: toward zero here
      if (opt.rounding == Rounding::kRd) mag.rounding = Rounding::kRu;  // toward -Inf: away from zero
      if (Round(a, mag, r) == 0) return 0;
      return opt.rounding == Rounding::kRz || opt.rounding == Rounding::kRu ? 0 : f_.CanonicalNan();
    }
    if (std::isinf(x)) {
      if (opt.saturation == Saturation::kSatFinite) return Signed(max_code_, neg);
      if (f_.HasInf()) return Signed(f_.PositiveInfCode(), neg);
      if (P3109()) return Signed(max_code_, neg);
      return Nan(neg);
    }
    if (a == 0) return f_.HasZero() ? Signed(0, neg) : codes_.front();

    // Neighbours lo <= a < hi. hi may be the virtual value past max (an overflow), or "beyond" when a
    // is past even that. In a format without zero, lo may be a virtual zero.
    double lo, hi;
    bool lo_virtual_zero = false, hi_virtual = false, beyond = false;
    int64_t lo_code, hi_code;  // codes for parity; virtual ones continue the sequence
    if (a >= next_) {
      beyond = true;
      lo = max_;
      hi = next_;
      lo_code = static_cast<int64_t>(max_code_);
      hi_code = lo_code + 1;
    } else if (a > max_) {
      lo = max_;
      hi = next_;
      hi_virtual = true;
      lo_code = static_cast<int64_t>(max_code_);
      hi_code = lo_code + 1;
    } else if (a < values_.front()) {
      lo = 0;
      hi = values_.front();
      lo_virtual_zero = true;
      lo_code = -1;
      hi_code = static_cast<int64_t>(codes_.front());
    } else {
      const size_t k = std::upper_bound(values_.begin(), values_.end(), a) - values_.begin() - 1;
      lo = values_[k];
      lo_code = static_cast<int64_t>(codes_[k]);
      if (a == lo) return Finish(lo_code, neg, opt);
      hi = values_[k + 1];
      hi_code = static_cast<int64_t>(codes_[k + 1]);
    }

    bool pick_hi = false;
    const double mid = (lo + hi) / 2;  // exact: both are short binary fractions
    const bool lo_even = (lo_code & 1) == 0;
    const double nu = (a - lo) / (hi - lo);  // exact below "beyond": a - lo is exact, hi - lo a power of 2
    const double two_n = std::ldexp(1.0, opt.sr_bits);
    const double rr = static_cast<double>(opt.sr_bits >= 32 ? r : (r & ((1u << opt.sr_bits) - 1)));
    switch (opt.rounding) {
      case Rounding::kRne: pick_hi = a > mid || (a == mid && !lo_even); break;
      case Rounding::kRna: pick_hi = a >= mid; break;
      case Rounding::kRz: pick_hi = false; break;
      case Rounding::kRu: pick_hi = !neg; break;
      case Rounding::kRd: pick_hi = neg; break;
      case Rounding::kRo: pick_hi = lo_even; break;
      case Rounding::kSrA: pick_hi = std::floor(nu * two_n) + rr >= two_n; break;
      case Rounding::kSrB: pick_hi = std::floor(nu * 2 * two_n) + 2 * rr + 1 >= 2 * two_n; break;
      case Rounding::kSrC: pick_hi = std::nearbyint(nu * two_n) + rr >= two_n; break;
    }
    if (beyond) {
      // Past the virtual value: every mode overflows; only the direction decides Inf versus max.
      return Overflow(neg, opt);
    }
    if (pick_hi && hi_virtual) return Overflow(neg, opt);
    if (!pick_hi && lo_virtual_zero) return codes_.front();  // no zero: the smallest value
    return Finish(pick_hi ? hi_code : lo_code, neg, opt);
  }

 private:
  // NaN inputs follow opt.nan_sign (decided by the caller); NaNs from overflow or Inf keep the sign. An
  // IEEE format's payload under opt.nan_payload: the mantissa field 100...0 (quiet) or 111...1 (all-ones).
  uint64_t Nan(bool neg, NanPayload payload = NanPayload::kDefault) const {
    const bool has_signed_nan = f_.encoding == Encoding::kIeee || f_.encoding == Encoding::kFnNan;
    uint64_t code = f_.CanonicalNan();
    if (f_.encoding == Encoding::kIeee && payload != NanPayload::kDefault) {
      const uint64_t top = f_.CodeMask() >> 1;  // every bit but the sign
      const uint64_t exp_field = top & ~((uint64_t{1} << f_.man_bits) - 1);
      code = exp_field | (payload == NanPayload::kAllOnes ? (uint64_t{1} << f_.man_bits) - 1 : uint64_t{1} << (f_.man_bits - 1));
    }
    return code | (has_signed_nan && neg ? f_.SignBit() : 0);
  }
  uint64_t Signed(uint64_t mag, bool neg) const {
    if (!neg || (mag == 0 && !f_.HasNegativeZero())) return mag;
    if (f_.IsInt()) return ((1ull << f_.Bits()) - mag) & f_.CodeMask();
    return mag | f_.SignBit();
  }
  bool P3109() const { return f_.encoding == Encoding::kP3109Extended || f_.encoding == Encoding::kP3109Finite; }
  uint64_t Overflow(bool neg, const CastOptions& opt) const {
    if (opt.saturation != Saturation::kNoSat) return Signed(max_code_, neg);
    // Round-to-odd clamps as toward-zero does (IEEE-style formats); P3109 keeps Inf for it except in an
    // unsigned extended format, whose Inf code is even.
    const bool odd_clamps = !P3109() || (!f_.is_signed && f_.HasInf());
    const bool toward_zero = opt.rounding == Rounding::kRz || (opt.rounding == Rounding::kRo && odd_clamps) ||
                             (opt.rounding == Rounding::kRu && neg) || (opt.rounding == Rounding::kRd && !neg);
    if (toward_zero) return Signed(max_code_, neg);
    if (f_.HasInf()) return Signed(f_.PositiveInfCode(), neg);
    if (P3109()) return Signed(max_code_, neg);
    return Nan(neg);
  }
  uint64_t Finish(int64_t code, bool neg, const CastOptions& opt) const {
    uint64_t c = static_cast<uint64_t>(code);
    if (opt.subnormals == Subnormals::kFlush && ClassifyCode(f_, c) == CodeClass::kSubnormal) c = 0;
    return Signed(c, neg);
  }

  Format f_;
  std::vector<double> values_;
  std::vector<uint64_t> codes_;
  double max_, next_;
  uint64_t max_code_;
};

}  // namespace qmx::detail
