// formats.cc: the format registry and the element conversions (qmx/format.h, qmx/convert.h) for Python.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "arrays.h"
#include "bindings.h"
#include "qmx/cast_options.h"
#include "qmx/cast_profiles.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#endif

namespace qmx::py {

namespace {

const char* EncodingText(Encoding e) {
  switch (e) {
    case Encoding::kIeee: return "ieee";
    case Encoding::kFnNan: return "fn";
    case Encoding::kFinite: return "finite";
    case Encoding::kP3109Extended: return "p3109-extended";
    case Encoding::kP3109Finite: return "p3109-finite";
    case Encoding::kFnuz: return "fnuz";
    case Encoding::kExponentOnly: return "exponent-only";
    case Encoding::kInt: return "int";
  }
  return "?";
}

pyb::dict FormatInfo(const std::string& name) {
  const Format f = ParseFormat(name);
  const FormatLimits l = Limits(f);
  pyb::dict d;
  d["name"] = std::string(f.name);
  d["bits"] = f.Bits();
  d["exp_bits"] = f.exp_bits;
  d["man_bits"] = f.man_bits;
  d["bias"] = f.bias;
  d["signed"] = f.is_signed;
  d["encoding"] = EncodingText(f.encoding);
  d["has_inf"] = f.HasInf();
  d["has_nan"] = f.HasNan();
  d["has_subnormals"] = f.HasSubnormals();
  d["max"] = l.max_finite;
  d["min_normal"] = l.min_normal;
  d["min_subnormal"] = l.min_subnormal;
  d["emax"] = l.emax;
  d["emin"] = f.Emin();
  d["binades"] = l.binades;
  d["normal_binades"] = l.normal_binades;
  d["decimal_digits"] = l.decimal_digits;
  d["max_code"] = f.MaxFiniteCode();
  if (f.Bits() <= 8) d["finite_codes"] = FiniteCodeCount(f);
  return d;
}

CastOptions MakeCast(const std::string& rounding, const std::string& saturation, const std::string& nan_sign,
                     const std::string& nan_fallback, const std::string& subnormals, int sr_bits,
                     const std::string& nan_payload = "default") {
  CastOptions o;
  o.nan_payload = ParseNanPayload(nan_payload, "nan_payload");
  o.rounding = ParseRounding(rounding);
  o.saturation = ParseSaturation(saturation);
  o.nan_sign = ParseNanSign(nan_sign, "nan_sign");
  o.nan_fallback = ParseNanFallback(nan_fallback, "nan_fallback");
  o.subnormals = ParseSubnormals(subnormals, "subnormals");
  if (sr_bits < 1 || sr_bits > 32) throw Error("sr_bits must be 1..32, not " + std::to_string(sr_bits));
  o.sr_bits = sr_bits;
  return o;
}

// qmx.convert's random_bits: one uint32 per element, C-contiguous, or none.
const uint32_t* RandomBitsOf(const std::optional<pyb::array>& random_bits, size_t count) {
  if (!random_bits) return nullptr;
  const pyb::array& rb = *random_bits;
  if (!rb.dtype().is(pyb::dtype::of<uint32_t>()) || !(rb.flags() & pyb::array::c_style))
    throw pyb::type_error("random_bits must be a C-contiguous uint32 array");
  if (static_cast<size_t>(rb.size()) != count)
    throw pyb::value_error("random_bits holds " + std::to_string(rb.size()) + " values for " + std::to_string(count) +
                           " elements");
  return static_cast<const uint32_t*>(rb.data());
}

// qmx.convert(..., flags=True): codes and each element's exception flags, by the reference routine per
// element (qmx::Convert: the fast paths compute no flags), its stochastic bits as ConvertToCodes draws them.
pyb::tuple ConvertWithFlags(const pyb::array& x, const std::string& fmt, const std::string& rounding,
                            const std::string& saturation, const std::string& nan_sign, const std::string& nan_fallback,
                            const std::string& subnormals, int sr_bits, uint64_t seed, uint64_t first_index,
                            const std::optional<pyb::array>& random_bits, const std::string& src,
                            const std::string& tininess, const std::string& nan_payload) {
  const InArray in = FloatInput(x, src, "x");
  const Format f = ParseFormat(fmt);
  if (f.Bits() > 8) throw Error(std::string("flags=True writes codes of 8 bits or fewer, not ") + f.name);
  CastOptions opt = MakeCast(rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits, nan_payload);
  opt.tininess = ParseTininess(tininess, "tininess");
  ValidateCastOptions(f, opt);
  const uint32_t* bits = RandomBitsOf(random_bits, in.count);
  pyb::array codes = NewArray<uint8_t>(in.shape), flags = NewArray<uint8_t>(in.shape);
  uint8_t* c = static_cast<uint8_t*>(codes.mutable_data());
  uint8_t* fl = static_cast<uint8_t*>(flags.mutable_data());
  {
    pyb::gil_scoped_release nogil;
    ConvertToCodesRef(in.dtype, in.data, in.count, f, opt, c, SrSource{seed, first_index, bits}, Exec::kParallel, fl);
  }
  return pyb::make_tuple(codes, flags);
}

pyb::array Convert(const pyb::array& x, const std::string& fmt, const std::string& rounding,
                              const std::string& saturation, const std::string& nan_sign,
                              const std::string& nan_fallback, const std::string& subnormals, int sr_bits,
                              uint64_t seed, uint64_t first_index, const std::optional<pyb::array>& random_bits,
                              const std::string& src, bool reference, const std::optional<pyb::array>& out_arg,
                              const std::string& nan_payload) {
  const InArray in = FloatInput(x, src, "x");
  const Format f = ParseFormat(fmt);
  const CastOptions opt = MakeCast(rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits, nan_payload);
  SrSource sr;
  sr.seed = seed;
  sr.first_index = first_index;
  sr.bits = RandomBitsOf(random_bits, in.count);
  pyb::array out = out_arg ? *out_arg : pyb::array(NewArray<uint8_t>(in.shape));
  if (out_arg) {
    const InArray oi = CodesInput(out, "out");
    if (oi.shape != in.shape) throw pyb::value_error("out must have x's shape");
    if (!out.writeable()) throw pyb::value_error("out is read-only");
    // The kernels read x (and random_bits) while writing out in chunks on several threads: a shared byte
    // would be read after it was overwritten, depending on the thread count.
    if (MemoryOverlaps(out.data(), in.count, in.data, in.count * DTypeSize(in.dtype)))
      throw pyb::value_error("out shares memory with x: write the codes to a separate array");
    if (sr.bits != nullptr && MemoryOverlaps(out.data(), in.count, sr.bits, in.count * 4))
      throw pyb::value_error("out shares memory with random_bits: write the codes to a separate array");
  }
  uint8_t* o = static_cast<uint8_t*>(out.mutable_data());
  {
    pyb::gil_scoped_release nogil;
    if (reference) {
      ConvertToCodesRef(in.dtype, in.data, in.count, f, opt, o, sr, Exec::kParallel);
    } else {
      ConvertToCodes(in.dtype, in.data, in.count, f, opt, o, sr, Exec::kParallel);
    }
  }
  return out;
}

// The emulation engine's conversion of a CUDA tensor (qmx/__init__.py passes its device address and torch's
// current stream): the kernel is queued on that stream and nothing reaches the host.
void ConvertCuda(uintptr_t x, size_t n, const std::string& dtype, const std::string& fmt, const std::string& rounding,
                 const std::string& saturation, const std::string& nan_sign, const std::string& nan_fallback,
                 const std::string& subnormals, int sr_bits, uint64_t seed, uint64_t first_index, uintptr_t random_bits,
                 uintptr_t out, uintptr_t stream, const std::string& nan_payload) {
  DType t;
  if (dtype == "float32") t = DType::kF32;
  else if (dtype == "float64") t = DType::kF64;
  else if (dtype == "float16") t = DType::kF16;
  else if (dtype == "bfloat16") t = DType::kBF16;
  else throw pyb::type_error("the engine converts float32, float64, float16 or bfloat16 tensors, not " + dtype);
  const Format f = ParseFormat(fmt);
  const CastOptions opt = MakeCast(rounding, saturation, nan_sign, nan_fallback, subnormals, sr_bits, nan_payload);
#if defined(QMX_HAVE_CUDA)
  const SrSource sr{seed, first_index, reinterpret_cast<const uint32_t*>(random_bits)};
  pyb::gil_scoped_release nogil;
  gpu::EngineConvertOnDevice(t, reinterpret_cast<const void*>(x), n, f, opt, reinterpret_cast<uint8_t*>(out), nullptr,
                             sr, reinterpret_cast<void*>(stream));
#else
  (void)x, (void)n, (void)t, (void)f, (void)opt, (void)seed, (void)first_index, (void)random_bits, (void)out, (void)stream;
  throw Error(kNoCuda);
#endif
}

pyb::array_t<float> Decode(const pyb::array& codes, const std::string& fmt) {
  const InArray in = CodesInput(codes, "codes");
  const Format f = ParseFormat(fmt);
  if (f.Bits() > 8) throw Error(std::string("decode reads formats of 8 bits or fewer, not ") + f.name);
  pyb::array_t<float> out = NewArray<float>(in.shape);
  float* o = out.mutable_data();
  {
    pyb::gil_scoped_release nogil;
    DecodeToF32(static_cast<const uint8_t*>(in.data), in.count, f, o, Exec::kParallel);
  }
  return out;
}

// Another library's cast (qmx/cast_profiles.h) of float32 (or float16 / bfloat16, exact in float32).
pyb::array CastProfileCodes(const pyb::array& x, const std::string& fmt, const std::string& profile, const std::string& src) {
  const InArray in = FloatInput(x, src, "x");
  const CastProfile p(profile, ParseFormat(fmt));
  pyb::array out = NewArray<uint8_t>(in.shape);
  uint8_t* o = static_cast<uint8_t*>(out.mutable_data());
  {
    pyb::gil_scoped_release nogil;
    std::vector<float> f(in.count);
    for (size_t i = 0; i < in.count; ++i) f[i] = SourceValueF32(in.dtype, in.data, i);
    CastWithProfile(p, f.data(), in.count, o);
  }
  return out;
}

}  // namespace

void BindFormats(pyb::module_& m) {
  m.def("cast_profile", &CastProfileCodes, pyb::arg("x"), pyb::arg("fmt"), pyb::arg("profile"), pyb::arg("src") = "",
        "Element codes (uint8) of x as another library casts it, bit for bit: profile ml-dtypes, pytorch, onnx,\n"
        "onnx-nosat, onnx-nearest, onnx-down, ocp-sat or ocp-nosat (qmx-sim convert --profile).");
  m.def("cast_profile_names", &CastProfileNames, "The cast profiles' names.");
  m.def("formats", [] {
    std::vector<std::string> names;
    for (const auto& e : Registry()) names.push_back(e.format.name);
    return names;
  }, "Names of the registry's formats (user formats eXmY[:...] and P3109 binaryKpP names are accepted too).");
  m.def("format_info", &FormatInfo, pyb::arg("name"),
        "A format's descriptor and limits as a dict: bits, exp_bits, man_bits, bias, signed, encoding, has_inf,\n"
        "has_nan, max, min_normal, min_subnormal, emax, emin, binades, normal_binades, decimal_digits, max_code\n"
        "and (8 bits or fewer) finite_codes. Takes registry names, eXmY[:bias=B][:special=...][:unsigned] and\n"
        "P3109 binaryKpP{s,u}{e,f}.");
  m.def("format_values", [](const std::string& name) {
    const Format f = ParseFormat(name);
    return DecodeTable(f);
  }, pyb::arg("name"), "The value of every code, in code order (formats of 8 bits or fewer), as float64.");
  m.def("convert", &Convert, pyb::arg("x"), pyb::arg("fmt"), pyb::arg("rounding") = "rne",
        pyb::arg("saturation") = "satfinite", pyb::arg("nan_sign") = "keep", pyb::arg("nan_fallback") = "max",
        pyb::arg("subnormals") = "keep", pyb::arg("sr_bits") = 8, pyb::arg("seed") = 0, pyb::arg("first_index") = 0,
        pyb::arg("random_bits") = std::nullopt, pyb::arg("src") = "", pyb::arg("reference") = false,
        pyb::arg("out") = std::nullopt, pyb::arg("nan_payload") = "default",
        "Element codes (uint8, x's shape) of x in format fmt. x is read in place: float32, float16, or\n"
        "bfloat16 (ml_dtypes.bfloat16, or uint16 bits with src='bf16').\n"
        "rounding: rne rna rz ru rd ro sr (= sr-a) sr-a sr-b sr-c; saturation: satfinite nosat satpropagate;\n"
        "nan_sign: keep positive; nan_fallback (NaN into FP6/FP4/INT8): max zero; subnormals: keep flush;\n"
        "stochastic rounding takes sr_bits random bits per element, element i from Philox(seed,\n"
        "first_index + i), or from random_bits (uint32, one per element) when given.\n"
        "reference=True runs the scalar reference routine (slow; equal bit for bit). out: a uint8 array of x's\n"
        "shape to write into instead of a new one.");
  m.def("convert_flags", &ConvertWithFlags, pyb::arg("x"), pyb::arg("fmt"), pyb::arg("rounding"),
        pyb::arg("saturation"), pyb::arg("nan_sign"), pyb::arg("nan_fallback"), pyb::arg("subnormals"),
        pyb::arg("sr_bits"), pyb::arg("seed"), pyb::arg("first_index"), pyb::arg("random_bits"), pyb::arg("src"),
        pyb::arg("tininess"), pyb::arg("nan_payload") = "default",
        "(codes, flags): uint8 arrays of x's shape, by the reference routine per element (qmx.convert's\n"
        "flags=True path). flags: 1 inexact, 2 underflow, 4 overflow, 16 invalid, 32 saturated.");
  m.def("cuda_engine", []() -> std::string {
#if defined(QMX_HAVE_CUDA)
    const gpu::DeviceInfo& d = gpu::Device();
    return d.available ? "" : d.reason;
#else
    return kNoCuda;
#endif
  }, "'' when this build has the emulation engine and a CUDA device, else why not.");
  m.def("convert_cuda", &ConvertCuda, pyb::arg("x"), pyb::arg("n"), pyb::arg("dtype"), pyb::arg("fmt"), pyb::arg("rounding"),
        pyb::arg("saturation"), pyb::arg("nan_sign"), pyb::arg("nan_fallback"), pyb::arg("subnormals"), pyb::arg("sr_bits"),
        pyb::arg("seed"), pyb::arg("first_index"), pyb::arg("random_bits"), pyb::arg("out"), pyb::arg("stream"),
        pyb::arg("nan_payload") = "default",
        "Queues the engine's conversion of n values at device address x into n codes at out on CUDA stream\n"
        "`stream` (qmx.convert's path for CUDA tensors).");
  m.def("decode", &Decode, pyb::arg("codes"), pyb::arg("fmt"),
        "The exact values (float32, the codes' shape) of uint8 codes of format fmt.");
}

}  // namespace qmx::py
