// cmd_convert.cc: `qmx-sim convert`: round FP32/FP16/BF16/FP64 values (a .npy file or command-line
// values) into any format with the reference routine, writing codes (or decoded FP32) atomically.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "common/tensor_inputs.h"
#include "qmx/cast_profiles.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::cli {
namespace {

struct ConvertArgs {
  std::string to = "e4m3";
  std::string from;  // fp32 fp16 bf16 fp64; default: from the .npy dtype, fp64 for decimal values
  std::string round = "rne";
  std::string sat = "satfinite";
  std::string nan_sign = "keep";
  std::string nan_fallback = "max";
  std::string subnormals = "keep";
  std::string negative = "invalid";
  std::string tininess = "before";
  std::string nan_payload = "default";
  int sr_bits = 8;
  uint64_t seed = 0;
  std::string in, out, flags_out, profile;
  std::string device = "cpu";
  bool decode = false;
  std::vector<std::string> values;
};

CastOptions BuildOptions(const ConvertArgs& a, const Format& dst) {
  CastOptions o;
  o.rounding = ParseRounding(a.round);
  o.saturation = ParseSaturation(a.sat);
  o.nan_sign = ParseNanSign(a.nan_sign);
  o.nan_fallback = ParseNanFallback(a.nan_fallback);
  o.subnormals = ParseSubnormals(a.subnormals);
  o.negative_unsigned = ParseNegativeUnsigned(a.negative);
  o.tininess = ParseTininess(a.tininess);
  o.nan_payload = ParseNanPayload(a.nan_payload);
  o.sr_bits = a.sr_bits;
  ValidateCastOptions(dst, o);
  return o;
}

// Input formats a conversion reads from.
const Format& SourceFormat(const std::string& name) {
  if (name == "fp32" || name == "f32") return fmt::kFP32;
  if (name == "fp16" || name == "f16") return fmt::kFP16;
  if (name == "bf16") return fmt::kBF16;
  if (name == "fp64" || name == "f64") return fmt::kFP64;
  throw Error("--from must be fp32, fp16, bf16 or fp64, not '" + name + "'");
}

struct Counts {
  uint64_t inexact = 0, saturated = 0, overflow = 0, underflow = 0, invalid = 0;
  void Add(uint32_t f) {
    inexact += (f & kFlagInexact) != 0;
    saturated += (f & kFlagSaturated) != 0;
    overflow += (f & kFlagOverflow) != 0;
    underflow += (f & kFlagUnderflow) != 0;
    invalid += (f & kFlagInvalid) != 0;
  }
};

std::string FlagText(uint32_t f) {
  std::string s;
  const struct { uint32_t bit; const char* name; } kNames[] = {{kFlagInexact, "inexact"},   {kFlagUnderflow, "underflow"},
                                                              {kFlagOverflow, "overflow"}, {kFlagInvalid, "invalid"},
                                                              {kFlagSaturated, "saturated"}};
  for (const auto& n : kNames)
    if (f & n.bit) s += (s.empty() ? "" : ",") + std::string(n.name);
  return s.empty() ? "exact" : s;
}

// One command-line value: "0x..." is a bit pattern of --from (default fp32); anything else is read
// as a decimal (or C99 hex-float) number into FP64 and, with --from, rounded RNE into that format.
void ConvertValues(const ConvertArgs& a, const Format& dst, const CastOptions& opt) {
  const Format& src = SourceFormat(a.from.empty() ? "fp64" : a.from);
  std::printf("%-24s %-20s %-8s %-22s %s\n", "input", (std::string(src.name) + " bits").c_str(),
              (std::string(dst.name) + "").c_str(), "value", "flags");
  uint64_t index = 0;
  for (const std::string& tok : a.values) {
    uint64_t src_bits;
    const Format* in_fmt = &src;
    if (tok.size() > 2 && tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X') && tok.find('.') == std::string::npos &&
        tok.find('p') == std::string::npos) {
      in_fmt = a.from.empty() ? &fmt::kFP32 : &src;
      char* end = nullptr;
      errno = 0;
      src_bits = std::strtoull(tok.c_str(), &end, 16);
      if (*end != '\0' || errno != 0 || (in_fmt->Bits() < 64 && (src_bits >> in_fmt->Bits()) != 0))
        throw Error("'" + tok + "' is not a " + std::to_string(in_fmt->Bits()) + "-bit hex pattern of " + in_fmt->name);
    } else {
      char* end = nullptr;
      const double v = std::strtod(tok.c_str(), &end);
      if (end == tok.c_str() || *end != '\0') throw Error("'" + tok + "' is not a number");
      uint64_t dbits;
      std::memcpy(&dbits, &v, 8);
      // Round the FP64 reading into the input format with RNE (exact for fp64 itself).
      CastOptions to_src;
      to_src.saturation = Saturation::kNoSat;
      src_bits = src.Bits() == 64 ? dbits : Convert(fmt::kFP64, dbits, src, to_src).code;
    }
    const uint32_t r = RandomBitsForElement(a.seed, index++);
    const RoundResult res = Convert(*in_fmt, src_bits, dst, opt, r);
    char bits_txt[32], code_txt[32];
    std::snprintf(bits_txt, sizeof bits_txt, "0x%0*llX", (in_fmt->Bits() + 3) / 4, static_cast<unsigned long long>(src_bits));
    std::snprintf(code_txt, sizeof code_txt, "0x%0*llX", (dst.Bits() + 3) / 4, static_cast<unsigned long long>(res.code));
    std::printf("%-24s %-20s %-8s %-22.17g %s\n", tok.c_str(), bits_txt, code_txt, DecodeToDouble(dst, res.code),
                FlagText(res.flags).c_str());
  }
}

void ConvertFile(const ConvertArgs& a, const Format& dst, const CastOptions& opt) {
  if (a.out.empty()) throw Error("--in needs --out (the file to write)");
  if (a.flags_out.empty()) CheckOutputs({{"--out", a.out}}, {a.in});
  else CheckOutputs({{"--out", a.out}, {"--flags-out", a.flags_out}}, {a.in});
  const NpyArray in = ReadNpy(a.in);
  const Format* src = nullptr;
  switch (in.dtype) {
    case DType::kF32: src = &fmt::kFP32; break;
    case DType::kF64: src = &fmt::kFP64; break;
    case DType::kF16: src = &fmt::kFP16; break;
    case DType::kBF16: src = &fmt::kBF16; break;
    case DType::kU16:
      if (a.from == "bf16" || a.from == "fp16") {
        src = &SourceFormat(a.from);
        break;
      }
      throw Error(a.in + ": dtype <u2 holds raw bits; say --from bf16 or --from fp16");
    default:
      throw Error(a.in + ": dtype " + DTypeName(in.dtype) + " is not an input the converter reads (f32, f64, f16, bf16)");
  }
  if (!a.from.empty() && in.dtype != DType::kU16 && &SourceFormat(a.from) != src)
    throw Error(a.in + ": --from " + a.from + " does not match the file's dtype " + DTypeName(in.dtype));
  if (!a.decode && dst.Bits() > 16 && dst.Bits() != 32)
    throw Error(std::string("codes of ") + dst.name + " have no .npy dtype; use --decode");

  const size_t n = in.count();
  const size_t in_size = DTypeSize(in.dtype);
  NpyArray out;
  out.shape = in.shape;
  if (a.decode) out.dtype = DType::kF32;
  else if (dst.Bits() <= 8) out.dtype = DType::kU8;
  else if (dst.Bits() <= 16) out.dtype = dst.name == std::string("fp16") ? DType::kF16 : dst.name == std::string("bf16") ? DType::kBF16 : DType::kU16;
  else out.dtype = DType::kF32;
  const size_t out_size = DTypeSize(out.dtype);
  out.data.resize(n * out_size);
  std::vector<uint32_t> flags(n);
  if (a.device == "cuda") {
    // The engine runs the same routine per element on the GPU (gpu/README.md "The emulation engine").
#if defined(QMX_HAVE_CUDA)
    const DType src_type = src == &fmt::kFP32   ? DType::kF32
                           : src == &fmt::kFP64 ? DType::kF64
                           : src == &fmt::kFP16 ? DType::kF16
                                                : DType::kBF16;
    std::vector<uint8_t> codes(n), code_flags(n);
    gpu::EngineConvert(src_type, in.data.data(), n, dst, opt, codes.data(), code_flags.data(), SrSource{a.seed, 0, nullptr});
    for (size_t k = 0; k < n; ++k) {
      flags[k] = code_flags[k];
      if (a.decode) {
        const float v = DecodeToFloat(dst, codes[k]);
        std::memcpy(out.data.data() + k * 4, &v, 4);
      } else {
        out.data[k] = codes[k];
      }
    }
#else
    throw Error("--device cuda: this qmx-sim was built without the CUDA backend (gpu/README.md)");
#endif
  } else {
    // Element-wise and independent: any thread count gives the same bytes.
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < n; ++k) {
      uint64_t bits = 0;
      std::memcpy(&bits, in.data.data() + k * in_size, in_size);
      const RoundResult res = Convert(*src, bits, dst, opt, RandomBitsForElement(a.seed, k));
      flags[k] = res.flags;
      if (a.decode) {
        const float v = DecodeToFloat(dst, res.code);
        std::memcpy(out.data.data() + k * 4, &v, 4);
      } else {
        std::memcpy(out.data.data() + k * out_size, &res.code, out_size);
      }
    }
  }
  Counts c;
  for (uint32_t f : flags) c.Add(f);
  WriteNpy(a.out, out);
  if (!a.flags_out.empty()) {
    // Each element's flags (qmx/cast_options.h Flag bits: TestFloat's numbering and 0x20 saturated).
    NpyArray fl;
    fl.shape = in.shape;
    fl.dtype = DType::kU8;
    fl.data.resize(n);
    for (size_t k = 0; k < n; ++k) fl.data[k] = static_cast<uint8_t>(flags[k]);
    WriteNpy(a.flags_out, fl);
  }
  std::printf("%s -> %s: %zu elements %s -> %s (%s, %s); inexact %llu, saturated %llu, overflow %llu, underflow %llu, invalid %llu\n",
              a.in.c_str(), a.out.c_str(), n, src->name, a.decode ? (std::string(dst.name) + " decoded to f32").c_str() : dst.name,
              RoundingName(opt.rounding), SaturationName(opt.saturation), static_cast<unsigned long long>(c.inexact),
              static_cast<unsigned long long>(c.saturated), static_cast<unsigned long long>(c.overflow),
              static_cast<unsigned long long>(c.underflow), static_cast<unsigned long long>(c.invalid));
}

// --profile: another library's cast (qmx/cast_profiles.h) of FP32 inputs. Values are read as FP64 and
// rounded to FP32 first (the libraries' casts take float), 0x patterns as FP32 bits.
void ConvertWithCastProfile(const ConvertArgs& a, const CastProfile& p) {
  if (!a.from.empty() && a.from != "fp32" && a.from != "f32" && a.in.empty())
    throw Error("--profile casts FP32 values: 0x patterns are FP32 bits, --from applies to files only");
  if (a.in.empty()) {
    std::printf("%-24s %-12s %-8s %-22s\n", "input", "fp32 bits", p.format().name, "value");
    for (const std::string& tok : a.values) {
      float x;
      if (tok.size() > 2 && tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X') && tok.find('.') == std::string::npos &&
          tok.find('p') == std::string::npos) {
        char* end = nullptr;
        errno = 0;
        const unsigned long long b = std::strtoull(tok.c_str(), &end, 16);
        if (*end != '\0' || errno != 0 || b > 0xFFFFFFFFull) throw Error("'" + tok + "' is not a 32-bit hex pattern of fp32");
        const uint32_t b32 = static_cast<uint32_t>(b);
        std::memcpy(&x, &b32, 4);
      } else {
        char* end = nullptr;
        const double v = std::strtod(tok.c_str(), &end);
        if (end == tok.c_str() || *end != '\0') throw Error("'" + tok + "' is not a number");
        x = static_cast<float>(v);
      }
      uint32_t xb;
      std::memcpy(&xb, &x, 4);
      const uint8_t code = p(x);
      std::printf("%-24s 0x%08X   0x%02X     %-22.17g\n", tok.c_str(), xb, code, DecodeToDouble(p.format(), code));
    }
    return;
  }
  if (a.out.empty()) throw Error("--in needs --out (the file to write)");
  CheckOutputs({{"--out", a.out}}, {a.in});
  const NpyArray in = ReadNpy(a.in);
  if (in.dtype != DType::kF32 && in.dtype != DType::kF16 && in.dtype != DType::kBF16)
    throw Error(a.in + ": --profile casts f32 (or f16 / bf16, exact in f32) inputs, not " + DTypeName(in.dtype));
  const size_t n = in.count();
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = SourceValueF32(in.dtype, in.data.data(), i);
  std::vector<uint8_t> codes(n);
  CastWithProfile(p, x.data(), n, codes.data());
  NpyArray out;
  out.shape = in.shape;
  out.dtype = a.decode ? DType::kF32 : DType::kU8;
  if (a.decode) {
    out.data.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
      const float v = DecodeToFloat(p.format(), codes[i]);
      std::memcpy(out.data.data() + 4 * i, &v, 4);
    }
  } else {
    out.data = std::move(codes);
  }
  WriteNpy(a.out, out);
  std::printf("%s -> %s: %zu elements -> %s under profile %s\n", a.in.c_str(), a.out.c_str(), n, p.format().name,
              p.name().c_str());
}

}  // namespace

void AddConvertCommand(CLI::App& app) {
  static ConvertArgs a;
  auto* cmd = app.add_subcommand("convert", "Round values into a format with the bit-exact reference routine");
  cmd->add_option("--to", a.to, "Destination format (registry name or description)")->capture_default_str();
  cmd->add_option("--from", a.from, "Input format: fp32, fp16, bf16, fp64 (default: the .npy dtype; fp64 for values)");
  cmd->add_option("--round", a.round, "rne, rna, rz, ru, rd, ro, sr (= sr-a), sr-b, sr-c")->capture_default_str();
  cmd->add_option("--sat", a.sat, "satfinite, nosat, satpropagate")->capture_default_str();
  cmd->add_option("--nan-sign", a.nan_sign, "NaN results: keep the input sign, or positive")->capture_default_str();
  cmd->add_option("--nan-fallback", a.nan_fallback, "NaN into a format without NaN: max (+max, as PTX) or zero")
      ->capture_default_str();
  cmd->add_option("--subnormals", a.subnormals, "keep, or flush (inputs and results)")->capture_default_str();
  cmd->add_option("--negative", a.negative,
                  "Negative inputs to an unsigned format (ue8m0): invalid (NaN code), or magnitude (|x|, as CUDA's "
                  "__nv_cvt_float_to_e8m0)")->capture_default_str();
  cmd->add_option("--tininess", a.tininess,
                  "Underflow flag: tininess detected before rounding, or after (IEEE 754-2019 7.5; RISC-V, x86 SSE)")
      ->capture_default_str();
  cmd->add_option("--nan-payload", a.nan_payload,
                  "NaN results in IEEE-style formats (e5m2, fp16, bf16): default (the library's), quiet (the quiet bit "
                  "alone: RISC-V's canonical NaN with --nan-sign positive) or all-ones (CUDA's 0x7FFF for fp16/bf16)")
      ->capture_default_str();
  cmd->add_option("--sr-bits", a.sr_bits, "Random bits per element for stochastic rounding (1..32)")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Philox seed for stochastic rounding (element i uses stream index i)")
      ->capture_default_str();
  cmd->add_option("--in", a.in, "Input .npy (<f4, <f8, <f2, bf16 as |V2, or <u2 with --from)");
  cmd->add_option("--out", a.out, "Output .npy: codes (|u1 for 8 bits or fewer), or f32 with --decode");
  cmd->add_option("--flags-out", a.flags_out,
                  "Also write each element's exception flags as |u1 .npy (1 inexact, 2 underflow, 4 overflow, 16 invalid, "
                  "32 saturated)");
  cmd->add_flag("--decode", a.decode, "Write the decoded FP32 value of each result instead of its code");
  cmd->add_option("--device", a.device,
                  "cpu (default) or cuda: the same routine on the GPU, the same bits (files of 8-bit-or-narrower formats)")
      ->capture_default_str();
  std::string profiles;
  for (const auto& n : CastProfileNames()) profiles += (profiles.empty() ? "" : ", ") + n;
  cmd->add_option("--profile", a.profile,
                  "Cast FP32 as another library does, bit for bit (" + profiles + "); excludes the cast options");
  cmd->add_option("values", a.values, "Values to convert: decimal numbers, nan, inf, or 0x bit patterns of --from");
  cmd->callback([cmd] {
    const Format dst = ParseFormat(a.to);
    if (a.device != "cpu" && a.device != "cuda") throw Error("--device must be cpu or cuda, not '" + a.device + "'");
    if (a.device == "cuda" && !a.profile.empty()) throw Error("--profile casts on the CPU; drop --device cuda");
    if (!a.profile.empty()) {
      for (const char* o : {"--round", "--sat", "--nan-sign", "--nan-fallback", "--subnormals", "--negative", "--sr-bits", "--seed",
                            "--tininess", "--nan-payload", "--flags-out"})
        if (cmd->count(o) > 0) throw Error(std::string("--profile sets the whole cast; drop ") + o);
      if (!a.in.empty() && !a.values.empty()) throw Error("give either --in FILE or values, not both");
      if (a.in.empty() && a.values.empty()) throw Error("nothing to convert: give --in FILE --out FILE, or values");
      if (a.in.empty() && (!a.out.empty() || a.decode)) throw Error("--out and --decode need --in FILE");
      ConvertWithCastProfile(a, CastProfile(a.profile, dst));
      return;
    }
    const CastOptions opt = BuildOptions(a, dst);
    if (a.device == "cuda" && a.in.empty()) throw Error("--device cuda converts files (--in FILE --out FILE); values are converted on the CPU");
    if (a.device == "cuda" && dst.Bits() > 8)
      throw Error(std::string("--device cuda writes codes of 8 bits or fewer; '") + dst.name + "' has " + std::to_string(dst.Bits()));
    if (!a.in.empty() && !a.values.empty()) throw Error("give either --in FILE or values, not both");
    if (a.in.empty() && a.values.empty()) throw Error("nothing to convert: give --in FILE --out FILE, or values");
    // --out and --decode only apply to files; ignoring them would exit 0 without writing what was asked for.
    if (a.in.empty() && !a.out.empty()) throw Error("--out needs --in FILE (values are printed, not written)");
    if (a.in.empty() && !a.flags_out.empty()) throw Error("--flags-out needs --in FILE (values print their flags)");
    if (a.in.empty() && a.decode) throw Error("--decode needs --in FILE and --out FILE (values print their decoded value)");
    if (!a.in.empty()) ConvertFile(a, dst, opt);
    else ConvertValues(a, dst, opt);
  });
}

}  // namespace qmx::cli
