// golden_ops.cc: the operations a golden file can hold, each computed by the scalar references
// (cpu-ref, with flags) or by the fast paths (cpu-simd). golden/README.md documents every field.
#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>

#include "golden/golden_internal.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "qmx/scale.h"

namespace qmx::golden::detail {
namespace {

constexpr const char* kNoFlags = "--";

DType SourceType(const std::string& s) {
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  throw Error("src must be f32, f16 or bf16, not '" + s + "'");
}


std::string CheckWidth(const Fields& in, size_t i, int digits, const char* what) {
  uint64_t v;
  if (!ParseHex(in[i], digits, v))
    return std::string(what) + " '" + in[i] + "' is not " + std::to_string(digits) + " hex digits";
  return "";
}

uint64_t FieldValue(const std::string& s) { return std::stoull(s, nullptr, 16); }

bool SplitCodes(const std::string& s, size_t count, int digits, std::vector<uint32_t>& out) {
  if (s.size() != count * digits) return false;
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t v;
    if (!ParseHex(s.substr(i * digits, digits), digits, v)) return false;
    out[i] = static_cast<uint32_t>(v);
  }
  return true;
}

// ------------------------------------------------------------------ convert: one input -> one code
class ConvertOp : public Op {
 public:
  explicit ConvertOp(const Header& h)
      : src_(SourceType(h.Get("src"))), dst_(ElementFormat(h.Get("dst"))), opt_(CastOptionsOf(h.keys)) {
    if (IsStochastic(opt_.rounding)) throw Error("op=convert does not take stochastic rounding (see op=sr)");
    ValidateCastOptions(dst_, opt_);
  }
  size_t InputFields() const override { return 1; }
  size_t OutputFields() const override { return 2; }
  std::string FieldsComment() const override {
    return std::string("# fields: input (") + DTypeName(src_) + " bits) | output (" + dst_.name + " code) | flags";
  }
  std::string CheckInputs(const Fields& in) const override {
    return CheckWidth(in, 0, static_cast<int>(DTypeSize(src_) * 2), "input");
  }
  void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    const size_t n = ins.size(), sz = DTypeSize(src_);
    outs.assign(n, Fields(2));
    if (b == Backend::kCpuRef) {
      const Format& sf = FormatOfSource(src_);
      for (size_t i = 0; i < n; ++i) {
        const RoundResult r = Convert(sf, FieldValue(ins[i][0]), dst_, opt_);
        outs[i] = {Hex(r.code, 2), Hex(r.flags, 2)};
      }
      return;
    }
    std::vector<uint8_t> buf(n * sz), codes(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t v = FieldValue(ins[i][0]);
      std::memcpy(&buf[i * sz], &v, sz);  // little-endian hosts (the library assumes them throughout)
    }
    ConvertToCodes(src_, buf.data(), n, dst_, opt_, codes.data(), {}, Exec::kParallel);
    for (size_t i = 0; i < n; ++i) outs[i] = {Hex(codes[i], 2), kNoFlags};
  }

 private:
  DType src_;
  Format dst_;
  CastOptions opt_;
};

// ------------------------------------------------------------------ decode: code -> FP32 value
class DecodeOp : public Op {
 public:
  explicit DecodeOp(const Header& h) : f_(ElementFormat(h.Get("fmt"))) {}
  size_t InputFields() const override { return 1; }
  size_t OutputFields() const override { return 2; }
  std::string FieldsComment() const override {
    return "# fields: code (" + std::string(f_.name) + ") | value (f32 bits; NaN codes give a quiet NaN with the code's sign) | flags (00)";
  }
  std::string CheckInputs(const Fields& in) const override {
    uint64_t v;
    if (!ParseHex(in[0], 2, v) || v > f_.CodeMask()) return "code '" + in[0] + "' is not a " + f_.name + " code";
    return "";
  }
  void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    const size_t n = ins.size();
    outs.assign(n, Fields(2));
    std::vector<uint8_t> codes(n);
    for (size_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(FieldValue(ins[i][0]));
    std::vector<float> v(n);
    if (b == Backend::kCpuRef) {
      for (size_t i = 0; i < n; ++i) v[i] = DecodeToFloat(f_, codes[i]);
    } else {
      DecodeToF32(codes.data(), n, f_, v.data(), Exec::kParallel);
    }
    for (size_t i = 0; i < n; ++i) outs[i] = {Hex(F32Bits(v[i]), 8), b == Backend::kCpuRef ? "00" : kNoFlags};
  }

 private:
  Format f_;
};

// ------------------------------------------------------------------ ue8m0: amax -> scale byte
class Ue8m0Op : public Op {
 public:
  explicit Ue8m0Op(const Header& h) : elem_(ElementFormat(h.Get("elem"))), rule_(ParseScaleRule(h.Get("rule"))) {
    if (!IsPow2Rule(rule_)) throw Error(std::string("rule ") + ScaleRuleName(rule_) + " does not give UE8M0 scales");
  }
  size_t InputFields() const override { return 1; }
  size_t OutputFields() const override { return 2; }
  std::string FieldsComment() const override {
    return "# fields: amax (f32 bits, finite, >= 0) | scale (ue8m0 byte, X = 2^(byte - 127)) | flags (00)";
  }
  std::string CheckInputs(const Fields& in) const override {
    uint64_t v;
    if (!ParseHex(in[0], 8, v)) return "amax '" + in[0] + "' is not 8 hex digits";
    const float a = F32FromBits(static_cast<uint32_t>(v));
    if (!std::isfinite(a) || std::signbit(a)) return "amax " + in[0] + " is not a finite value >= 0";
    return "";
  }
  void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    outs.assign(ins.size(), Fields(2));
    for (size_t i = 0; i < ins.size(); ++i) {
      const float a = F32FromBits(static_cast<uint32_t>(FieldValue(ins[i][0])));
      const uint8_t s = b == Backend::kCpuRef ? Ue8m0ScaleFromAmaxRef(a, elem_, rule_) : Ue8m0ScaleFromAmax(a, elem_, rule_);
      outs[i] = {Hex(s, 2), b == Backend::kCpuRef ? "00" : kNoFlags};
    }
  }

 private:
  Format elem_;
  ScaleRule rule_;
};

// The flags of one element rounded from x (FP32 bits) divided by 2^k, by the reference routine; 0 and
// no check when the code differs (the element was not converted that way, e.g. a NaN block's fill).
uint32_t ElementFlags(uint32_t x_bits, int k, const Format& elem, const CastOptions& cast, uint8_t code) {
  ExactValue v = ReadExact(fmt::kFP32, x_bits);
  if (v.kind == ExactValue::Kind::kFinite) v.exp -= k;
  const RoundResult r = RoundExact(v, elem, cast);
  return r.code == code ? r.flags : 0;
}

// ------------------------------------------------------------------ mx-block: block -> scale + codes
class MxBlockOp : public Op {
 public:
  explicit MxBlockOp(const Header& h) : spec_(MxSpecOf(h.keys)) {
    if (IsStochastic(spec_.cast.rounding)) throw Error("op=mx-block takes a deterministic rounding");
  }
  size_t InputFields() const override { return spec_.block; }
  size_t OutputFields() const override { return 3; }
  std::string FieldsComment() const override {
    return "# fields: x[0] .. x[" + std::to_string(spec_.block - 1) + "] (f32 bits) | scale (ue8m0 byte) | codes (" +
           std::to_string(spec_.block) + " " + spec_.elem.name +
           " codes, 2 hex digits each, element 0 first) | flags (OR over the elements; 10 when the scale is NaN)";
  }
  std::string CheckInputs(const Fields& in) const override {
    for (size_t i = 0; i < in.size(); ++i)
      if (std::string e = CheckWidth(in, i, 8, "x"); !e.empty()) return e;
    return "";
  }
  void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    const size_t n = ins.size(), bl = spec_.block;
    std::vector<uint32_t> x(n * bl);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < bl; ++j) x[i * bl + j] = static_cast<uint32_t>(FieldValue(ins[i][j]));
    std::vector<uint8_t> codes(n * bl), scales(n);
    if (b == Backend::kCpuRef) {
      for (size_t i = 0; i < n; ++i) QuantizeMxRef(DType::kF32, &x[i * bl], bl, spec_, &codes[i * bl], &scales[i]);
    } else {
      QuantizeMx(DType::kF32, x.data(), n * bl, spec_, codes.data(), scales.data(), {}, Exec::kParallel);
    }
    outs.assign(n, Fields(3));
    for (size_t i = 0; i < n; ++i) {
      std::string flags = kNoFlags;
      if (b == Backend::kCpuRef) {
        uint32_t f = scales[i] == 0xFF ? uint32_t{kFlagInvalid} : 0u;
        if (scales[i] != 0xFF)
          for (size_t j = 0; j < bl; ++j)
            f |= ElementFlags(x[i * bl + j], scales[i] - 127, spec_.elem, spec_.cast, codes[i * bl + j]);
        flags = Hex(f, 2);
      }
      outs[i] = {Hex(scales[i], 2), JoinCodes(&codes[i * bl], bl, 2), flags};
    }
  }

 private:
  MxSpec spec_;
};

// ------------------------------------------------------------------ nvfp4-block: tensor amax + block
class Nvfp4BlockOp : public Op {
 public:
  explicit Nvfp4BlockOp(const Header& h) {
    spec_ = QuantSpecByName("nvfp4");
    spec_.rule = ParseScaleRule(h.Get("rule"));
    spec_.cast = CastOptionsOf(h.keys);
    block_ = std::stoi(h.Get("block"));
    if (block_ < 1 || block_ > 4096) throw Error("block must be 1..4096");
    spec_.block_cols = block_;
    CheckNvfp4Spec(spec_);
    ValidateQuantSpec(spec_);
    if (IsStochastic(spec_.cast.rounding)) throw Error("op=nvfp4-block takes a deterministic rounding");
  }
  size_t InputFields() const override { return 1 + block_; }
  size_t OutputFields() const override { return 4; }
  std::string FieldsComment() const override {
    return "# fields: tensor amax (f32 bits) | x[0] .. x[" + std::to_string(block_ - 1) +
           "] (f32 bits) | tensor decode scale (f32 bits, fl32(1 / S_enc)) | block scale (e4m3 byte) | codes (" +
           std::to_string(block_) + " e2m1 codes, 1 hex digit each, element 0 first) | flags (OR over the elements)";
  }
  std::string CheckInputs(const Fields& in) const override {
    for (size_t i = 0; i < in.size(); ++i)
      if (std::string e = CheckWidth(in, i, 8, i == 0 ? "tensor amax" : "x"); !e.empty()) return e;
    return "";
  }
  void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    outs.assign(ins.size(), Fields(4));
    std::vector<uint32_t> x(block_);
    for (size_t i = 0; i < ins.size(); ++i) {
      const float amax = F32FromBits(static_cast<uint32_t>(FieldValue(ins[i][0])));
      for (int j = 0; j < block_; ++j) x[j] = static_cast<uint32_t>(FieldValue(ins[i][1 + j]));
      const TensorView v{DType::kF32, x.data(), 1, static_cast<size_t>(block_)};
      const QuantizedTensor q = b == Backend::kCpuRef ? QuantizeNvfp4WithAmaxRef(v, spec_, amax)
                                                      : QuantizeNvfp4WithAmax(v, spec_, amax, Exec::kSequential);
      std::string flags = kNoFlags;
      if (b == Backend::kCpuRef) {
        // The elements are rounded from fl32(x * multiplier) (qmx/scale.h).
        const float s_enc = Nvfp4TensorEncodeScale(amax);
        const float mult = Nvfp4EncodeFactor(q.scales[0], s_enc, spec_.rule);
        uint32_t f = 0;
        for (int j = 0; j < block_; ++j) {
          const float y = static_cast<float>(static_cast<double>(F32FromBits(x[j])) * mult);
          const RoundResult r = Convert(fmt::kFP32, F32Bits(y), spec_.elem, spec_.cast);
          if (r.code == q.codes[j]) f |= r.flags;
        }
        flags = Hex(f, 2);
      }
      outs[i] = {Hex(F32Bits(q.tensor_decode), 8), Hex(q.scales[0], 2), JoinCodes(q.codes.data(), block_, 1), flags};
    }
  }

 private:
  QuantSpec spec_;
  int block_ = 16;
};

// ------------------------------------------------------------------ sr: stochastic rounding, explicit bits
// layout=ptx-cvt-rs-x4 is PTX `cvt.rs.satfinite.{e4m3x4,e5m2x4,e2m3x4,e3m2x4,e2m1x4}.f32 d, {a, b, e, f},
// rbits` (golden/README.md "sr"): d holds a in its top byte (nibble for e2m1x4) down to f in its bottom
// one; each element takes 8 bits of rbits: a [31:24], b [23:16], e [15:8], f [7:0] for the 8-bit and
// 6-bit results (sm_100a as probed on B200), a [31:24], b [15:8], e [23:16], f [7:0] for e2m1x4 (the
// ISA's halves). layout=element is one input, its random bits R (the low sr-bits bits of a 32-bit word)
// and one code, for every SR variant and bit count.
class SrOp : public Op {
 public:
  explicit SrOp(const Header& h) : dst_(ElementFormat(h.Get("dst"))), opt_(CastOptionsOf(h.keys)) {
    const std::string layout = h.Get("layout");
    if (layout != "ptx-cvt-rs-x4" && layout != "element") throw Error("op=sr layout must be ptx-cvt-rs-x4 or element");
    x4_ = layout == "ptx-cvt-rs-x4";
    if (!IsStochastic(opt_.rounding)) throw Error("op=sr takes a stochastic rounding (sr-a, sr-b, sr-c)");
    if (x4_ && (opt_.sr_bits != 8 || dst_.Bits() < 4 || dst_.Bits() == 5 || dst_.Bits() == 7))
      throw Error("layout=ptx-cvt-rs-x4 takes sr-bits=8 and an 8-, 6- or 4-bit format");
    ValidateCastOptions(dst_, opt_);
  }
  size_t Lanes() const { return x4_ ? 4 : 1; }
  size_t InputFields() const override { return Lanes() + 1; }
  size_t OutputFields() const override { return 2; }
  std::string FieldsComment() const override {
    if (!x4_)
      return "# fields: input (f32 bits) | R (32 bits, the low " + std::to_string(opt_.sr_bits) + " used) | output (" +
             std::string(dst_.name) + " code) | flags";
    return std::string("# fields: a b e f (f32 bits) | rbits (b32) | d (") + (dst_.Bits() == 4 ? "b16" : "b32") +
           ", " + dst_.name + " codes of a, b, e, f from the top down) | flags (OR over the four elements)";
  }
  std::string CheckInputs(const Fields& in) const override {
    for (size_t i = 0; i < in.size(); ++i)
      if (std::string e = CheckWidth(in, i, 8, i < Lanes() ? "input" : "random bits"); !e.empty()) return e;
    if (!x4_ && opt_.sr_bits < 32 && (FieldValue(in[1]) >> opt_.sr_bits) != 0)
      return "R " + in[1] + " has bits above the low " + std::to_string(opt_.sr_bits);
    return "";
  }
  // Shift of element j's random byte in rbits and of its code in d.
  int RbitsShift(size_t j) const { return SrRbitsShift(dst_.Bits(), j); }
  int CodeShift(size_t j) const { return static_cast<int>(3 - j) * (dst_.Bits() == 4 ? 4 : 8); }
  void Run(Backend b, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    const size_t n = ins.size(), lanes = Lanes();
    std::vector<float> x(lanes * n);
    std::vector<uint32_t> bits(lanes * n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t rb = static_cast<uint32_t>(FieldValue(ins[i][lanes]));
      for (size_t j = 0; j < lanes; ++j) {
        x[lanes * i + j] = F32FromBits(static_cast<uint32_t>(FieldValue(ins[i][j])));
        bits[lanes * i + j] = x4_ ? (rb >> RbitsShift(j)) & 0xFF : rb;
      }
    }
    std::vector<uint8_t> codes(lanes * n);
    std::vector<uint32_t> flags(n, 0);
    if (b == Backend::kCpuRef) {
      for (size_t t = 0; t < lanes * n; ++t) {
        const RoundResult r = Convert(fmt::kFP32, F32Bits(x[t]), dst_, opt_, bits[t]);
        codes[t] = static_cast<uint8_t>(r.code);
        flags[t / lanes] |= r.flags;
      }
    } else {
      ConvertToCodes(DType::kF32, x.data(), lanes * n, dst_, opt_, codes.data(), {0, 0, bits.data()}, Exec::kParallel);
    }
    outs.assign(n, Fields(2));
    for (size_t i = 0; i < n; ++i) {
      std::string d;
      if (x4_) {
        uint32_t packed = 0;
        for (size_t j = 0; j < 4; ++j) packed |= uint32_t{codes[4 * i + j]} << CodeShift(j);
        d = Hex(packed, dst_.Bits() == 4 ? 4 : 8);
      } else {
        d = Hex(codes[i], 2);
      }
      outs[i] = {d, b == Backend::kCpuRef ? Hex(flags[i], 2) : kNoFlags};
    }
  }

 private:
  Format dst_;
  CastOptions opt_;
  bool x4_ = true;
};

// ------------------------------------------------------------------ dot: block dot product + C -> D
class DotOp : public Op {
 public:
  explicit DotOp(const Header& h)
      : a_(ElementFormat(h.Get("a"))), b_(ElementFormat(h.Get("b"))), model_(AccumModelByName(h.Get("model"))) {
    k_ = std::stoul(h.Get("k"));
    if (k_ < 1 || k_ > (1u << 20)) throw Error("k must be 1..2^20");
    const std::string s = h.Get("scale");
    has_scales_ = s != "none";
    if (has_scales_) {
      try {
        sf_ = ParseBlockScaleFormat(s);
      } catch (const Error& e) {
        throw Error("scale must be none, ue8m0, e4m3, fp32 or a format of 8 bits or fewer, not '" + s + "': " + e.what());
      }
      block_ = std::stoul(h.Get("block"));
      if (block_ < 1 || k_ % block_ != 0) throw Error("block must divide k");
    }
    // Per-tensor FP32 scales applied after accumulation (cuBLAS scaleA * scaleB), as f32 bits.
    for (int side = 0; side < 2; ++side) {
      const char* key = side == 0 ? "tensor-a" : "tensor-b";
      if (!h.Has(key)) continue;
      uint64_t v;
      if (!ParseHex(h.Get(key), 8, v)) throw Error(std::string(key) + " must be 8 hex digits (f32 bits)");
      (side == 0 ? ta_ : tb_) = F32FromBits(static_cast<uint32_t>(v));
    }
  }
  size_t InputFields() const override { return 5; }
  size_t OutputFields() const override { return 2; }
  size_t ScaleCount() const { return has_scales_ ? k_ / block_ : 0; }
  int ScaleDigits() const { return sf_.kind == ScaleFormat::kFp32 ? 8 : 2; }
  std::string FieldsComment() const override {
    std::string s = "# fields: a (" + std::to_string(k_) + " " + std::string(a_.name) +
                    " codes, 2 hex digits each, k = 0 first) | b (" + std::to_string(k_) + " " + std::string(b_.name) + " codes) | ";
    s += has_scales_ ? "sa sb (" + std::to_string(ScaleCount()) + " block scales each, " + std::to_string(ScaleDigits()) +
                           " hex digits each, in K order) | "
                     : "sa sb (- : no block scales) | ";
    return s + "c (f32 bits, - for no C operand) | d (f32 bits) | flags (10 NaN result, 04 infinite from finite inputs)";
  }
  std::string CheckInputs(const Fields& in) const override {
    std::vector<uint32_t> v;
    if (!SplitCodes(in[0], k_, 2, v)) return "a must be " + std::to_string(2 * k_) + " hex digits";
    for (uint32_t c : v) if (c > a_.CodeMask()) return "a holds a code beyond " + std::string(a_.name);
    if (!SplitCodes(in[1], k_, 2, v)) return "b must be " + std::to_string(2 * k_) + " hex digits";
    for (uint32_t c : v) if (c > b_.CodeMask()) return "b holds a code beyond " + std::string(b_.name);
    for (int s = 2; s < 4; ++s) {
      if (!has_scales_ && in[s] != "-") return "this file has no block scales: sa and sb must be -";
      if (has_scales_ && !SplitCodes(in[s], ScaleCount(), ScaleDigits(), v))
        return std::string(s == 2 ? "sa" : "sb") + " must be " + std::to_string(ScaleCount() * ScaleDigits()) + " hex digits";
      if (has_scales_ && sf_.kind == ScaleFormat::kCode)
        for (uint32_t c : v)
          if (c > sf_.code.CodeMask() || std::signbit(DecodeToFloat(sf_.code, c)))
            return std::string(s == 2 ? "sa" : "sb") + " holds " + (c > sf_.code.CodeMask() ? "a code beyond " : "a negative scale in ") +
                   sf_.name;
    }
    if (in[4] != "-" && (ta_ != 1.0f || tb_ != 1.0f)) return "c must be - in a file with tensor scales";
    if (in[4] != "-") return CheckWidth(in, 4, 8, "c");
    return "";
  }
  void Run(Backend bk, const std::vector<Fields>& ins, std::vector<Fields>& outs) const override {
    outs.assign(ins.size(), Fields(2));
    for (size_t i = 0; i < ins.size(); ++i) {
      std::vector<uint32_t> ac, bc, sa, sb;
      SplitCodes(ins[i][0], k_, 2, ac);
      SplitCodes(ins[i][1], k_, 2, bc);
      std::vector<uint8_t> a8(ac.begin(), ac.end()), b8(bc.begin(), bc.end());
      GemmOperand a = OperandFromCodes(a_, 1, k_, a8.data()), b = OperandFromCodes(b_, k_, 1, b8.data());
      a.tensor_scale = ta_;
      b.tensor_scale = tb_;
      bool finite = std::isfinite(ta_) && std::isfinite(tb_);
      if (has_scales_) {
        SplitCodes(ins[i][2], ScaleCount(), ScaleDigits(), sa);
        SplitCodes(ins[i][3], ScaleCount(), ScaleDigits(), sb);
        SetBlockScales(a, sf_, 1, block_, sa.data());
        SetBlockScales(b, sf_, block_, 1, sb.data());
        for (float s : a.scales) finite &= std::isfinite(s);
        for (float s : b.scales) finite &= std::isfinite(s);
      }
      for (uint8_t c : a8) finite &= std::isfinite(DecodeToFloat(a_, c));
      for (uint8_t c : b8) finite &= std::isfinite(DecodeToFloat(b_, c));
      float c = 0;
      const bool has_c = ins[i][4] != "-";
      if (has_c) {
        c = F32FromBits(static_cast<uint32_t>(FieldValue(ins[i][4])));
        finite &= std::isfinite(c);
      }
      const std::vector<float> d =
          bk == Backend::kCpuRef ? GemmRef(a, b, has_c ? &c : nullptr, model_) : Gemm(a, b, has_c ? &c : nullptr, model_, Exec::kSequential);
      const uint32_t f = std::isnan(d[0]) ? uint32_t{kFlagInvalid} : (std::isinf(d[0]) && finite ? uint32_t{kFlagOverflow} : 0u);
      outs[i] = {Hex(F32Bits(d[0]), 8), bk == Backend::kCpuRef ? Hex(f, 2) : kNoFlags};
    }
  }

 private:
  Format a_, b_;
  AccumModel model_;
  size_t k_ = 0, block_ = 0;
  bool has_scales_ = false;
  float ta_ = 1.0f, tb_ = 1.0f;
  BlockScaleFormat sf_;
};

}  // namespace

Format ElementFormat(const std::string& name) {
  const Format f = ParseFormat(name);
  if (f.Bits() > 8) throw Error("'" + name + "' is not a format of 8 bits or fewer");
  return f;
}

int SrRbitsShift(int bits, size_t j) {
  static const int kF8[4] = {24, 16, 8, 0}, kF4[4] = {24, 8, 16, 0};
  return bits == 4 ? kF4[j] : kF8[j];
}

std::unique_ptr<Op> MakeOp(const Header& h) {
  if (h.op == "convert") return std::make_unique<ConvertOp>(h);
  if (h.op == "decode") return std::make_unique<DecodeOp>(h);
  if (h.op == "ue8m0") return std::make_unique<Ue8m0Op>(h);
  if (h.op == "mx-block") return std::make_unique<MxBlockOp>(h);
  if (h.op == "nvfp4-block") return std::make_unique<Nvfp4BlockOp>(h);
  if (h.op == "sr") return std::make_unique<SrOp>(h);
  if (h.op == "dot") return std::make_unique<DotOp>(h);
  throw Error("unknown op '" + h.op + "' (known: convert, decode, ue8m0, mx-block, nvfp4-block, sr, dot)");
}

}  // namespace qmx::golden::detail

namespace qmx::golden {

CastOptions CastOptionsOf(const HeaderKeys& k) {
  CastOptions c;
  c.rounding = ParseRounding(KeyValue(k, "round"));
  c.saturation = ParseSaturation(KeyValue(k, "sat"));
  if (HasKey(k, "nan-sign")) c.nan_sign = ParseNanSign(KeyValue(k, "nan-sign"), "nan-sign");
  if (HasKey(k, "nan-fallback")) c.nan_fallback = ParseNanFallback(KeyValue(k, "nan-fallback"), "nan-fallback");
  if (HasKey(k, "subnormals")) c.subnormals = ParseSubnormals(KeyValue(k, "subnormals"), "subnormals");
  if (HasKey(k, "sr-bits")) c.sr_bits = std::stoi(KeyValue(k, "sr-bits"));
  if (HasKey(k, "tininess")) c.tininess = ParseTininess(KeyValue(k, "tininess"), "tininess");
  if (HasKey(k, "nan-payload")) c.nan_payload = ParseNanPayload(KeyValue(k, "nan-payload"), "nan-payload");
  return c;
}

MxSpec MxSpecOf(const HeaderKeys& k) {
  MxSpec s;
  s.elem = detail::ElementFormat(KeyValue(k, "elem"));
  s.rule = ParseScaleRule(KeyValue(k, "rule"));
  s.nan = ParseNanPolicy(KeyValue(k, "nan"));
  s.scaling = ParseElementScaling(KeyValue(k, "scaling"));
  s.cast = CastOptionsOf(k);
  s.block = std::stoi(KeyValue(k, "block"));
  ValidateMxSpec(s);
  return s;
}

}  // namespace qmx::golden
