// gemm.cc: block-scaled GEMM under the accumulation models (qmx/gemm.h) for Python. A is M x K and B is
// K x N, each a QuantizedTensor (A quantized row-wise, B column-wise, so both blocks run along K) or uint8
// codes with their format; the result is D = A B (+ C), float32 M x N, as the model's hardware computes it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>

#include "arrays.h"
#include "bindings.h"
#include "qmx/error.h"
#include "qmx/gemm.h"

namespace qmx::py {

namespace {

GemmOperand OperandOf(const pyb::object& o, const std::optional<std::string>& fmt, const char* what) {
  if (pyb::isinstance<QuantizedTensor>(o)) {
    if (fmt) throw pyb::type_error(std::string(what) + "_format is for uint8 codes, not a QuantizedTensor");
    const QuantizedTensor& q = o.cast<const QuantizedTensor&>();
    if (q.shape.size() > 2) throw Error(std::string(what) + " must be 2-D for a GEMM");
    return OperandFromQuantized(q);
  }
  if (!pyb::isinstance<pyb::array>(o))
    throw pyb::type_error(std::string(what) + " must be a QuantizedTensor or a uint8 array of codes");
  const InArray c = CodesInput(o.cast<pyb::array>(), what);
  if (c.shape.size() != 2) throw Error(std::string(what) + " codes must be 2-D");
  return OperandFromCodes(ParseFormat(fmt ? *fmt : "e4m3"), c.shape[0], c.shape[1],
                          static_cast<const uint8_t*>(c.data));
}

// An FP32 scale array, C-contiguous, as raw bit patterns for SetBlockScales.
std::vector<uint32_t> ScaleWords(const InArray& s) {
  std::vector<uint32_t> w(s.count);
  if (s.count) std::memcpy(w.data(), s.data, s.count * 4);
  return w;
}

// torch._scaled_mm on Hopper (cuBLASLt), as the models reproduce it: A (M x K) and B (K x N) FP8 codes;
// scales per tensor (one value each), or blockwise FP32 (A 1x128: M x K/128; B 128x128: K/128 x N/128, or
// 128x1: K/128 x N). gpu/README.md has the evidence for each case; what was not measured is refused.
std::vector<float> ScaledMm(const InArray& a, const InArray& b, const InArray& sa, const InArray& sb,
                            const std::string& a_format, const std::string& b_format, bool fast_accum,
                            std::string& model_used) {
  const Format fa = ParseFormat(a_format), fb = ParseFormat(b_format);
  for (const Format* f : {&fa, &fb})
    if (std::string(f->name) != "e4m3" && std::string(f->name) != "e5m2")
      throw Error(std::string("scaled_mm takes FP8 operands (e4m3, e5m2), not ") + f->name);
  if (a.shape.size() != 2 || b.shape.size() != 2) throw Error("scaled_mm: a and b must be 2-D");
  const size_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (b.shape[0] != k) throw Error("scaled_mm: a is " + std::to_string(m) + " x " + std::to_string(k) + " but b has " +
                                   std::to_string(b.shape[0]) + " rows");
  GemmOperand oa = OperandFromCodes(fa, m, k, static_cast<const uint8_t*>(a.data));
  GemmOperand ob = OperandFromCodes(fb, k, n, static_cast<const uint8_t*>(b.data));
  const bool tensorwise = sa.count == 1 && sb.count == 1;
  if (tensorwise) {
    oa.tensor_scale = *static_cast<const float*>(sa.data);
    ob.tensor_scale = *static_cast<const float*>(sb.data);
    model_used = fast_accum ? "hopper-fp8-fast" : "hopper-fp8";
    return Gemm(oa, ob, nullptr, AccumModelByName(model_used));
  }
  const size_t kb = (k + 127) / 128;
  if (sa.shape.size() != 2 || sa.shape[0] != m || sa.shape[1] != kb)
    throw Error("scaled_mm: scale_a must be one value or blockwise " + std::to_string(m) + " x " + std::to_string(kb) +
                " (1x128 blocks); row-wise (M x 1) scaling is not modelled");
  const bool b_blk = sb.shape.size() == 2 && sb.shape[0] == kb && sb.shape[1] == (n + 127) / 128;
  const bool b_vec = sb.shape.size() == 2 && sb.shape[0] == kb && sb.shape[1] == n;
  if (!b_blk && !b_vec)
    throw Error("scaled_mm: with a blockwise scale_a, scale_b must be " + std::to_string(kb) + " x " +
                std::to_string((n + 127) / 128) + " (128x128 blocks) or " + std::to_string(kb) + " x " +
                std::to_string(n) + " (128x1)");
  if (fast_accum)
    throw Error("scaled_mm: blockwise scaling with use_fast_accum was not measured on Hopper; not modelled");
  const std::vector<uint32_t> wa = ScaleWords(sa), wb = ScaleWords(sb);
  SetBlockScales(oa, ScaleFormat::kFp32, 1, 128, wa.data());
  SetBlockScales(ob, ScaleFormat::kFp32, 128, b_blk ? 128 : 1, wb.data());
  model_used = b_blk ? "hopper-fp8" : "hopper-fp8-vec";
  return Gemm(oa, ob, nullptr, AccumModelByName(model_used));
}

}  // namespace

void BindGemm(pyb::module_& m) {
  m.def("gemm_models", &AccumModelNames, "Names of the accumulation models (fused:KEY=V,... describes any other).");
  m.def("describe_model", [](const std::string& name) { return DescribeModel(AccumModelByName(name)); },
        pyb::arg("model"), "One line with every parameter of a model.");
  m.def("gemm", [](const pyb::object& a, const pyb::object& b, const std::string& model,
                   const std::optional<pyb::array>& c, const std::optional<std::string>& a_format,
                   const std::optional<std::string>& b_format, bool reference, const std::string& alpha) {
    const GemmOperand oa = OperandOf(a, a_format, "a"), ob = OperandOf(b, b_format, "b");
    AccumModel am = AccumModelByName(model);
    am.alpha = ParseAlphaRule(alpha);
    const float* cp = nullptr;
    if (c) {
      const InArray ci = F32Input(*c, "c");
      if (ci.shape.size() != 2 || ci.shape[0] != oa.rows || ci.shape[1] != ob.cols)
        throw Error("c must be float32 " + std::to_string(oa.rows) + " x " + std::to_string(ob.cols) + " (M x N)");
      cp = static_cast<const float*>(ci.data);
    }
    std::vector<float> d;
    {
      pyb::gil_scoped_release nogil;
      d = reference ? GemmRef(oa, ob, cp, am) : Gemm(oa, ob, cp, am);
    }
    return ToArray(std::move(d), {oa.rows, ob.cols});
  }, pyb::arg("a"), pyb::arg("b"), pyb::arg("model") = "exact", pyb::arg("c") = std::nullopt,
        pyb::arg("a_format") = std::nullopt, pyb::arg("b_format") = std::nullopt, pyb::arg("reference") = false,
        pyb::arg("alpha") = "decode");

  m.def("scaled_mm", [](const pyb::array& a, const pyb::array& b, const pyb::array& scale_a, const pyb::array& scale_b,
                        const std::string& a_format, const std::string& b_format, bool use_fast_accum) {
    const InArray ai = CodesInput(a, "a"), bi = CodesInput(b, "b");
    const InArray sa = F32Input(scale_a, "scale_a"), sb = F32Input(scale_b, "scale_b");
    std::vector<float> d;
    std::string model;
    {
      pyb::gil_scoped_release nogil;
      d = ScaledMm(ai, bi, sa, sb, a_format, b_format, use_fast_accum, model);
    }
    const size_t m = ai.shape[0], n = bi.shape[1];
    return pyb::make_tuple(ToArray(std::move(d), {m, n}), model);
  }, pyb::arg("a"), pyb::arg("b"), pyb::arg("scale_a"), pyb::arg("scale_b"), pyb::arg("a_format"),
        pyb::arg("b_format"), pyb::arg("use_fast_accum"));
}

}  // namespace qmx::py
