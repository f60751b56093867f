// qmx_c.cc: the C ABI (qmx/qmx_c.h) over the C++ library. Each entry point checks its pointers, parses its
// names with the library's own parsers and runs the library's function inside one try block, so no
// exception crosses the ABI; a failure sets this thread's message and returns a status.
#include "qmx/qmx_c.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "qmx/scale.h"

namespace {

thread_local std::string last_error;

qmx_status Fail(qmx_status s, const std::string& message) {
  last_error = message;
  return s;
}

// Runs f, turning every exception into a status and this thread's message.
template <typename F>
qmx_status Guard(F&& f) {
  // clang-format off
  try {
    f();
    return QMX_OK;
  } catch (const qmx::Error& e) {
    return Fail(QMX_ERR_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return Fail(QMX_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return Fail(QMX_ERR_INTERNAL, e.what());
  } catch (...) {
    return Fail(QMX_ERR_INTERNAL, "unknown error");
  }
  // clang-format on
}

// A NULL required pointer: the message names the function and the argument.
struct NullArg : qmx::Error {
  NullArg(const char* fn, const char* arg) : qmx::Error(std::string(fn) + ": " + arg + " is NULL") {}
};
void Need(const void* p, const char* fn, const char* arg) {
  if (p == nullptr) throw NullArg(fn, arg);
}

bool Given(const char* s) { return s != nullptr && s[0] != '\0'; }

float F32Of(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

qmx::CastOptions ToCpp(const qmx_cast_options* o) {
  qmx::CastOptions c;
  if (o == nullptr) return c;
  c.rounding = static_cast<qmx::Rounding>(o->rounding);
  c.saturation = static_cast<qmx::Saturation>(o->saturation);
  c.nan_sign = static_cast<qmx::NanSign>(o->nan_sign);
  c.nan_fallback = static_cast<qmx::NanFallback>(o->nan_fallback);
  c.subnormals = static_cast<qmx::Subnormals>(o->subnormals);
  c.negative_unsigned = static_cast<qmx::NegativeUnsigned>(o->negative);
  c.sr_bits = o->sr_bits;
  c.tininess = static_cast<qmx::Tininess>(o->tininess);
  c.nan_payload = static_cast<qmx::NanPayload>(o->nan_payload);
  // The enums' ranges: a value outside them is an argument error, not undefined behaviour.
  if (o->rounding < 0 || o->rounding > static_cast<int>(qmx::Rounding::kSrC) || o->saturation < 0 ||
      o->saturation > static_cast<int>(qmx::Saturation::kSatPropagate) || o->nan_sign < 0 || o->nan_sign > 1 ||
      o->nan_fallback < 0 || o->nan_fallback > 1 || o->subnormals < 0 || o->subnormals > 1 || o->negative < 0 ||
      o->negative > 1 || o->tininess < 0 || o->tininess > 1 || o->nan_payload < 0 || o->nan_payload > 2)
    throw qmx::Error("qmx_cast_options: a field is outside its enumeration (use qmx_cast_options_set)");
  return c;
}

// A qmx_operand as the library's operand. A NULL's message names fn and the argument: qmx_gemm's "a->codes",
// or the names given (qmx_dot's "a_format", "a", "sa").
qmx::GemmOperand OperandOf(const qmx_operand* o, const char* what, const char* fn = "qmx_gemm",
                           const char* format_arg = nullptr, const char* codes_arg = nullptr,
                           const char* scales_arg = nullptr) {
  const std::string w = what;
  Need(o, fn, what);
  Need(o->format, fn, format_arg ? format_arg : (w + "->format").c_str());
  Need(o->codes, fn, codes_arg ? codes_arg : (w + "->codes").c_str());
  qmx::GemmOperand g = qmx::OperandFromCodes(qmx::ParseFormat(o->format), o->rows, o->cols, o->codes);
  if (Given(o->scale_format)) {
    Need(o->scales, fn, scales_arg ? scales_arg : (w + "->scales").c_str());
    qmx::SetBlockScales(g, qmx::ParseBlockScaleFormat(o->scale_format), o->block_rows, o->block_cols, o->scales);
  }
  g.tensor_scale = o->tensor_scale;
  return g;
}

}  // namespace

extern "C" {

int qmx_abi_version(void) { return QMX_C_ABI_VERSION; }

const char* qmx_last_error(void) { return last_error.c_str(); }

void qmx_cast_options_default(qmx_cast_options* opt) {
  if (opt == nullptr) return;
  const qmx::CastOptions c;
  opt->rounding = static_cast<int>(c.rounding);
  opt->saturation = static_cast<int>(c.saturation);
  opt->nan_sign = static_cast<int>(c.nan_sign);
  opt->nan_fallback = static_cast<int>(c.nan_fallback);
  opt->subnormals = static_cast<int>(c.subnormals);
  opt->negative = static_cast<int>(c.negative_unsigned);
  opt->sr_bits = c.sr_bits;
  opt->tininess = static_cast<int>(c.tininess);
  opt->nan_payload = static_cast<int>(c.nan_payload);
}

qmx_status qmx_cast_options_set(qmx_cast_options* opt, const char* rounding, const char* saturation,
                                const char* nan_sign, const char* nan_fallback, const char* subnormals,
                                const char* negative) {
  return Guard([&] {
    Need(opt, "qmx_cast_options_set", "opt");
    qmx_cast_options o = *opt;  // opt changes only when every name parses
    if (Given(rounding)) o.rounding = static_cast<int>(qmx::ParseRounding(rounding));
    if (Given(saturation)) o.saturation = static_cast<int>(qmx::ParseSaturation(saturation));
    if (Given(nan_sign)) o.nan_sign = static_cast<int>(qmx::ParseNanSign(nan_sign, "nan_sign"));
    if (Given(nan_fallback)) o.nan_fallback = static_cast<int>(qmx::ParseNanFallback(nan_fallback, "nan_fallback"));
    if (Given(subnormals)) o.subnormals = static_cast<int>(qmx::ParseSubnormals(subnormals, "subnormals"));
    if (Given(negative)) o.negative = static_cast<int>(qmx::ParseNegativeUnsigned(negative, "negative"));
    *opt = o;
  });
}

qmx_status qmx_cast_options_set_key(qmx_cast_options* opt, const char* key, const char* value) {
  return Guard([&] {
    Need(opt, "qmx_cast_options_set_key", "opt");
    Need(key, "qmx_cast_options_set_key", "key");
    Need(value, "qmx_cast_options_set_key", "value");
    const std::string k = key, v = value;
    if (k == "round") opt->rounding = static_cast<int>(qmx::ParseRounding(v));
    else if (k == "sat") opt->saturation = static_cast<int>(qmx::ParseSaturation(v));
    else if (k == "nan-sign") opt->nan_sign = static_cast<int>(qmx::ParseNanSign(v, "nan-sign"));
    else if (k == "nan-fallback") opt->nan_fallback = static_cast<int>(qmx::ParseNanFallback(v, "nan-fallback"));
    else if (k == "subnormals") opt->subnormals = static_cast<int>(qmx::ParseSubnormals(v, "subnormals"));
    else if (k == "negative") opt->negative = static_cast<int>(qmx::ParseNegativeUnsigned(v, "negative"));
    else if (k == "tininess") opt->tininess = static_cast<int>(qmx::ParseTininess(v, "tininess"));
    else if (k == "nan-payload") opt->nan_payload = static_cast<int>(qmx::ParseNanPayload(v, "nan-payload"));
    else if (k == "sr-bits") {
      size_t used = 0;
      int bits = 0;
      try {
        bits = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || bits < 1 || bits > 32) throw qmx::Error("sr-bits must be 1..32, not '" + v + "'");
      opt->sr_bits = bits;
    } else {
      throw qmx::Error("unknown cast option key '" + k +
                       "' (round, sat, nan-sign, nan-fallback, subnormals, negative, tininess, nan-payload, sr-bits)");
    }
  });
}

qmx_status qmx_format_info_get(const char* format, qmx_format_info* info) {
  return Guard([&] {
    Need(format, "qmx_format_info_get", "format");
    Need(info, "qmx_format_info_get", "info");
    const qmx::Format f = qmx::ParseFormat(format);
    const qmx::FormatLimits l = qmx::Limits(f);
    qmx_format_info r{};
    r.bits = f.Bits();
    r.exp_bits = f.exp_bits;
    r.man_bits = f.man_bits;
    r.bias = f.bias;
    r.is_signed = f.is_signed;
    r.has_inf = f.HasInf();
    r.has_nan = f.HasNan();
    r.has_negative_zero = f.HasNegativeZero();
    r.has_subnormals = f.HasSubnormals();
    r.max_finite_code = f.MaxFiniteCode();
    r.canonical_nan_code = f.CanonicalNan();
    r.max_finite = l.max_finite;
    r.min_normal = l.min_normal;
    r.min_subnormal = l.min_subnormal;
    *info = r;
  });
}

qmx_status qmx_convert(const char* src_format, uint64_t x_bits, const char* dst_format, const qmx_cast_options* opt,
                       uint32_t random_bits, uint64_t* code, uint32_t* flags) {
  return Guard([&] {
    Need(src_format, "qmx_convert", "src_format");
    Need(dst_format, "qmx_convert", "dst_format");
    Need(code, "qmx_convert", "code");
    const qmx::Format src = qmx::ParseFormat(src_format), dst = qmx::ParseFormat(dst_format);
    const qmx::RoundResult r = qmx::Convert(src, x_bits, dst, ToCpp(opt), random_bits);  // checks the options
    *code = r.code;
    if (flags) *flags = r.flags;
  });
}

qmx_status qmx_convert_named(const char* src_format, uint64_t x_bits, const char* dst_format, const char* rounding,
                             const char* saturation, const char* nan_sign, const char* nan_fallback,
                             const char* subnormals, uint32_t random_bits, uint64_t* code, uint32_t* flags) {
  qmx_cast_options o;
  qmx_cast_options_default(&o);
  const qmx_status s = qmx_cast_options_set(&o, rounding, saturation, nan_sign, nan_fallback, subnormals, nullptr);
  if (s != QMX_OK) return s;
  return qmx_convert(src_format, x_bits, dst_format, &o, random_bits, code, flags);
}

qmx_status qmx_convert_keys(const char* src_format, uint64_t x_bits, const char* dst_format, const char* options,
                            uint32_t random_bits, uint64_t* code, uint32_t* flags) {
  qmx_cast_options o;
  qmx_cast_options_default(&o);
  if (Given(options)) {
    const qmx_status s = Guard([&] {
      std::istringstream in(options);
      std::string pair;
      while (in >> pair) {
        if (pair == "#") continue;  // a golden header line as $fgets reads it
        const size_t eq = pair.find('=');
        if (eq == std::string::npos || eq == 0)
          throw qmx::Error("qmx_convert_keys: '" + pair + "' is not key=value (e.g. \"round=rne tininess=after\")");
        const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
        if (key == "generator") break;  // a golden header's last key, whose value holds a space
        if (key == "op" || key == "src" || key == "dst" || key == "spec" || key == "level" || key == "seed") continue;
        if (qmx_cast_options_set_key(&o, key.c_str(), value.c_str()) != QMX_OK) throw qmx::Error(last_error);
      }
    });
    if (s != QMX_OK) return s;
  }
  return qmx_convert(src_format, x_bits, dst_format, &o, random_bits, code, flags);
}

qmx_status qmx_convert_f32(const float* x, size_t n, const char* dst_format, const qmx_cast_options* opt, uint64_t seed,
                           uint64_t first_index, uint8_t* codes, uint8_t* flags) {
  return Guard([&] {
    Need(dst_format, "qmx_convert_f32", "dst_format");
    if (n == 0) return;
    Need(x, "qmx_convert_f32", "x");
    Need(codes, "qmx_convert_f32", "codes");
    const qmx::Format dst = qmx::ParseFormat(dst_format);
    const qmx::CastOptions c = ToCpp(opt);
    const qmx::SrSource sr{seed, first_index, nullptr};
    if (flags == nullptr) qmx::ConvertToCodes(qmx::DType::kF32, x, n, dst, c, codes, sr);
    else qmx::ConvertToCodesRef(qmx::DType::kF32, x, n, dst, c, codes, sr, qmx::Exec::kSequential, flags);
  });
}

qmx_status qmx_decode(const char* format, uint64_t code, double* value) {
  return Guard([&] {
    Need(format, "qmx_decode", "format");
    Need(value, "qmx_decode", "value");
    const qmx::Format f = qmx::ParseFormat(format);
    if (f.Bits() < 64 && (code >> f.Bits()) != 0)
      throw qmx::Error("qmx_decode: code " + std::to_string(code) + " does not fit " + f.name + "'s " +
                       std::to_string(f.Bits()) + " bits");
    *value = qmx::DecodeToDouble(f, code);
  });
}

qmx_status qmx_ue8m0_scale_bits(uint32_t amax_bits, const char* elem, const char* rule, uint8_t* scale) {
  return qmx_ue8m0_scale(F32Of(amax_bits), elem, rule, scale);
}

qmx_status qmx_ue8m0_scale(float amax, const char* elem, const char* rule, uint8_t* scale) {
  return Guard([&] {
    Need(elem, "qmx_ue8m0_scale", "elem");
    Need(rule, "qmx_ue8m0_scale", "rule");
    Need(scale, "qmx_ue8m0_scale", "scale");
    *scale = qmx::Ue8m0ScaleFromAmax(amax, qmx::ParseFormat(elem), qmx::ParseScaleRule(rule));
  });
}

qmx_status qmx_mx_blocks(const float* x, size_t n, const char* elem, const char* rule, const char* nan_policy,
                         const char* scaling, size_t block, const qmx_cast_options* opt, uint8_t* codes,
                         uint8_t* scales) {
  return Guard([&] {
    Need(elem, "qmx_mx_blocks", "elem");
    qmx::MxSpec spec;
    spec.elem = qmx::ParseFormat(elem);
    if (Given(rule)) spec.rule = qmx::ParseScaleRule(rule);
    if (Given(nan_policy)) spec.nan = qmx::ParseNanPolicy(nan_policy);
    if (Given(scaling)) spec.scaling = qmx::ParseElementScaling(scaling);
    if (block == 0 || block > (size_t{1} << 30)) throw qmx::Error("qmx_mx_blocks: block must be 1..2^30");
    spec.block = static_cast<int>(block);
    spec.cast = ToCpp(opt);
    qmx::ValidateMxSpec(spec);
    if (n == 0) return;
    Need(x, "qmx_mx_blocks", "x");
    Need(codes, "qmx_mx_blocks", "codes");
    Need(scales, "qmx_mx_blocks", "scales");
    qmx::QuantizeMx(qmx::DType::kF32, x, n, spec, codes, scales);
  });
}

qmx_status qmx_nvfp4_blocks_bits(const uint32_t* x_bits, size_t rows, size_t cols, uint32_t tensor_amax_bits,
                                 const char* rule, size_t block, const qmx_cast_options* opt, uint8_t* codes,
                                 uint8_t* scales, uint32_t* tensor_decode_bits) {
  std::vector<float> x;
  const qmx_status copied = Guard([&] {
    Need(x_bits, "qmx_nvfp4_blocks_bits", "x_bits");
    if (cols != 0 && rows > SIZE_MAX / sizeof(float) / cols) throw qmx::Error("qmx_nvfp4_blocks_bits: rows * cols overflows");
    x.resize(rows * cols);
    if (!x.empty()) std::memcpy(x.data(), x_bits, x.size() * sizeof(float));
  });
  if (copied != QMX_OK) return copied;
  float decode = 0;
  const qmx_status st =
      qmx_nvfp4_blocks(x.data(), rows, cols, F32Of(tensor_amax_bits), rule, block, opt, codes, scales, &decode);
  if (st == QMX_OK && tensor_decode_bits != nullptr) std::memcpy(tensor_decode_bits, &decode, 4);
  return st;
}

qmx_status qmx_nvfp4_blocks(const float* x, size_t rows, size_t cols, float tensor_amax, const char* rule, size_t block,
                            const qmx_cast_options* opt, uint8_t* codes, uint8_t* scales, float* tensor_decode) {
  return Guard([&] {
    Need(x, "qmx_nvfp4_blocks", "x");
    Need(codes, "qmx_nvfp4_blocks", "codes");
    Need(scales, "qmx_nvfp4_blocks", "scales");
    qmx::QuantSpec spec = qmx::QuantSpecByName("nvfp4");
    if (Given(rule)) spec.rule = qmx::ParseScaleRule(rule);
    if (block == 0 || block > 4096) throw qmx::Error("qmx_nvfp4_blocks: block must be 1..4096");
    spec.block_cols = block;
    spec.cast = ToCpp(opt);
    const qmx::QuantizedTensor q =  // checks the spec (an NVFP4 rule, valid options)
        qmx::QuantizeNvfp4WithAmax(qmx::TensorView{qmx::DType::kF32, x, rows, cols}, spec, tensor_amax);
    std::memcpy(codes, q.codes.data(), q.codes.size());
    std::memcpy(scales, q.scales.data(), q.scales.size());
    if (tensor_decode) *tensor_decode = q.tensor_decode;
  });
}

qmx_status qmx_quantize(const char* spec, const float* x, size_t rows, size_t cols, uint64_t seed, uint8_t* codes,
                        uint8_t* scales, size_t scales_capacity, size_t* scales_written, float* tensor_scale) {
  return Guard([&] {
    Need(spec, "qmx_quantize", "spec");
    Need(x, "qmx_quantize", "x");
    Need(codes, "qmx_quantize", "codes");
    Need(scales_written, "qmx_quantize", "scales_written");
    qmx::QuantSpec s = qmx::QuantSpecByName(spec);
    s.seed = seed;
    const qmx::QuantizedTensor q = qmx::Quantize(qmx::TensorView{qmx::DType::kF32, x, rows, cols}, s);
    if (q.scales.size() > scales_capacity)
      throw qmx::Error("qmx_quantize: the scales need " + std::to_string(q.scales.size()) + " bytes (" +
                       std::to_string(q.scale_rows) + " x " + std::to_string(q.scale_cols) +
                       " words), scales_capacity is " + std::to_string(scales_capacity));
    if (!q.scales.empty()) Need(scales, "qmx_quantize", "scales");
    std::memcpy(codes, q.codes.data(), q.codes.size());
    if (!q.scales.empty()) std::memcpy(scales, q.scales.data(), q.scales.size());
    *scales_written = q.scales.size();
    if (tensor_scale) *tensor_scale = q.tensor_decode;
  });
}

qmx_status qmx_gemm(const char* model, const qmx_operand* a, const qmx_operand* b, const float* c, float* d) {
  return Guard([&] {
    Need(model, "qmx_gemm", "model");
    Need(d, "qmx_gemm", "d");
    const qmx::GemmOperand ga = OperandOf(a, "a"), gb = OperandOf(b, "b");
    qmx::GemmInto(ga, gb, c, qmx::AccumModelByName(model), d);
  });
}

qmx_status qmx_dot(const char* model, const char* a_format, const uint8_t* a, const char* b_format, const uint8_t* b,
                   size_t k, const char* scale_format, const uint32_t* sa, const uint32_t* sb, size_t block,
                   uint32_t tensor_a_bits, uint32_t tensor_b_bits, int has_c, uint32_t c_bits, uint32_t* d_bits) {
  return Guard([&] {
    Need(model, "qmx_dot", "model");
    Need(d_bits, "qmx_dot", "d_bits");
    if (k == 0 || k > (size_t{1} << 20)) throw qmx::Error("qmx_dot: k must be 1..2^20, not " + std::to_string(k));
    const bool scaled = Given(scale_format) && std::strcmp(scale_format, "none") != 0;
    if (scaled && (block == 0 || k % block != 0))
      throw qmx::Error("qmx_dot: block must divide k (" + std::to_string(k) + "), not " + std::to_string(block));
    // The operands as qmx_gemm takes them: A one row of k, B one column of k, the scales one per block.
    const qmx_operand oa{a_format, a, 1, k, scaled ? scale_format : nullptr, sa, 1, block, F32Of(tensor_a_bits)};
    const qmx_operand ob{b_format, b, k, 1, scaled ? scale_format : nullptr, sb, block, 1, F32Of(tensor_b_bits)};
    const float c = F32Of(c_bits);
    const std::vector<float> d =
        qmx::Gemm(OperandOf(&oa, "a", "qmx_dot", "a_format", "a", "sa"), OperandOf(&ob, "b", "qmx_dot", "b_format", "b", "sb"),
                  has_c ? &c : nullptr, qmx::AccumModelByName(model));
    std::memcpy(d_bits, d.data(), 4);
  });
}

}  // extern "C"
