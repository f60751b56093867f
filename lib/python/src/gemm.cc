// gemm.cc: block-scaled GEMM under the accumulation models (qmx/gemm.h) for Python. A is M x K and B is
// K x N, each a QuantizedTensor (A quantized row-wise, B column-wise, so both blocks run along K) or uint8
// codes with their format; the result is D = A B (+ C), float32 M x N, as the model's hardware computes it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "arrays.h"
#include "bindings.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/scaled_mm.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

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

}  // namespace

void BindGemm(pyb::module_& m) {
  m.def("gemm_models", &AccumModelNames, "Names of the accumulation models (fused:KEY=V,... describes any other).");
  m.def("describe_model", [](const std::string& name) { return DescribeModel(AccumModelByName(name)); },
        pyb::arg("model"), "One line with every parameter of a model.");
  m.def("model_accumulates_fp16", [](const std::string& name) {
    const AccumModel am = AccumModelByName(name);
    return am.kind == AccumKind::kFused && am.fused.acc_fp16;
  }, pyb::arg("model"), "Whether a model's accumulator and output are FP16 (the FP16-output mma and wgmma).");
  m.def("gemm", [](const pyb::object& a, const pyb::object& b, const std::string& model,
                   const std::optional<pyb::array>& c, const std::optional<std::string>& a_format,
                   const std::optional<std::string>& b_format, bool reference, const std::string& alpha,
                   const std::optional<pyb::array>& out) -> pyb::object {
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
    if (out) {  // D into the caller's array (GemmInto: D may be C itself)
      pyb::array dst = *out;
      const InArray oi = F32Input(dst, "out");
      if (oi.shape != std::vector<size_t>{oa.rows, ob.cols})
        throw pyb::value_error("out must be float32 " + std::to_string(oa.rows) + " x " + std::to_string(ob.cols) +
                               " (M x N)");
      if (!dst.writeable()) throw pyb::value_error("out is read-only");
      float* o = static_cast<float*>(dst.mutable_data());
      {
        pyb::gil_scoped_release nogil;
        if (reference) {
          const std::vector<float> d = GemmRef(oa, ob, cp, am);
          std::copy(d.begin(), d.end(), o);
        } else {
          GemmInto(oa, ob, cp, am, o);
        }
      }
      return dst;
    }
    std::vector<float> d;
    {
      pyb::gil_scoped_release nogil;
      d = reference ? GemmRef(oa, ob, cp, am) : Gemm(oa, ob, cp, am);
    }
    return ToArray(std::move(d), {oa.rows, ob.cols});
  }, pyb::arg("a"), pyb::arg("b"), pyb::arg("model") = "exact", pyb::arg("c") = std::nullopt,
        pyb::arg("a_format") = std::nullopt, pyb::arg("b_format") = std::nullopt, pyb::arg("reference") = false,
        pyb::arg("alpha") = "decode", pyb::arg("out") = std::nullopt);

  m.def("scaled_mm_split_k", [](size_t m, size_t n, size_t k, const std::string& out_dtype) -> pyb::object {
    const int s = CublasLtSplitK(m, n, k, ParseScaledMmOut(out_dtype));
    return s == 0 ? pyb::none() : pyb::object(pyb::int_(s));
  }, pyb::arg("m"), pyb::arg("n"), pyb::arg("k"), pyb::arg("out_dtype") = "float32",
        "cuBLASLt's numSplitsK for per-tensor e4m3 x e4m3 M x K x N on the H200 where measured, else None.");
  m.def(
      "scaled_mm_cuda",
      [](uintptr_t a, uintptr_t b, size_t m, size_t k, size_t n, uintptr_t scale_a, size_t sa_rows, size_t sa_cols,
         uintptr_t scale_b, size_t sb_rows, size_t sb_cols, const std::string& a_format, const std::string& b_format,
         bool use_fast_accum, const std::string& out_dtype, uintptr_t bias, int split_k, uintptr_t out,
         uintptr_t stream) {
        ScaledMmArgs x;
        x.a_format = ParseFormat(a_format);
        x.b_format = ParseFormat(b_format);
        x.m = m;
        x.k = k;
        x.n = n;
        x.a = reinterpret_cast<const uint8_t*>(a);
        x.b = reinterpret_cast<const uint8_t*>(b);
        x.scale_a = reinterpret_cast<const float*>(scale_a);
        x.scale_a_rows = sa_rows;
        x.scale_a_cols = sa_cols;
        x.scale_b = reinterpret_cast<const float*>(scale_b);
        x.scale_b_rows = sb_rows;
        x.scale_b_cols = sb_cols;
        x.bias = reinterpret_cast<const uint16_t*>(bias);
        x.out = ParseScaledMmOut(out_dtype);
        x.fast_accum = use_fast_accum;
        x.split_k = split_k;
#if defined(QMX_HAVE_CUDA)
        ScaledMmResult r;
        {
          pyb::gil_scoped_release nogil;
          r = gpu::EngineScaledMmOnDevice(x, reinterpret_cast<void*>(out), reinterpret_cast<void*>(stream));
        }
        return pyb::make_tuple(r.model, r.scaling, r.split_k);
#else
        (void)x, (void)out, (void)stream;
        throw Error(kNoCuda);
#endif
      },
      pyb::arg("a"), pyb::arg("b"), pyb::arg("m"), pyb::arg("k"), pyb::arg("n"), pyb::arg("scale_a"),
      pyb::arg("sa_rows"), pyb::arg("sa_cols"), pyb::arg("scale_b"), pyb::arg("sb_rows"), pyb::arg("sb_cols"),
      pyb::arg("a_format"), pyb::arg("b_format"), pyb::arg("use_fast_accum"), pyb::arg("out_dtype"), pyb::arg("bias"),
      pyb::arg("split_k"), pyb::arg("out"), pyb::arg("stream"),
      "qmx::gpu::EngineScaledMmOnDevice: scaled_mm of device codes a (m x k) and b (k x n) with device FP32 scales\n"
      "(and a device bias, 0 for none) into the device buffer out on CUDA stream `stream`; returns (model,\n"
      "scaling, split_k).");
  m.def("scaled_mm", [](const pyb::array& a, const pyb::array& b, const pyb::array& scale_a, const pyb::array& scale_b,
                        const std::string& a_format, const std::string& b_format, bool use_fast_accum,
                        const std::string& out_dtype, const std::optional<pyb::array>& bias, int split_k,
                        bool reference) {
    const InArray ai = CodesInput(a, "a"), bi = CodesInput(b, "b");
    const InArray sa = F32Input(scale_a, "scale_a"), sb = F32Input(scale_b, "scale_b");
    if (ai.shape.size() != 2 || bi.shape.size() != 2) throw Error("scaled_mm: a and b must be 2-D");
    ScaledMmArgs x;
    x.a_format = ParseFormat(a_format);
    x.b_format = ParseFormat(b_format);
    x.m = ai.shape[0];
    x.k = ai.shape[1];
    x.n = bi.shape[1];
    if (bi.shape[0] != x.k)
      throw Error("scaled_mm: a is " + std::to_string(x.m) + " x " + std::to_string(x.k) + " but b has " +
                  std::to_string(bi.shape[0]) + " rows");
    x.a = static_cast<const uint8_t*>(ai.data);
    x.b = static_cast<const uint8_t*>(bi.data);
    const auto dims = [](const InArray& s, size_t* r, size_t* c) {
      if (s.shape.size() > 2) throw Error("scaled_mm: a scale has at most 2 dimensions");
      *r = s.shape.size() == 2 ? s.shape[0] : 1;
      *c = s.shape.empty() ? 1 : s.shape.back();
    };
    dims(sa, &x.scale_a_rows, &x.scale_a_cols);
    dims(sb, &x.scale_b_rows, &x.scale_b_cols);
    x.scale_a = static_cast<const float*>(sa.data);
    x.scale_b = static_cast<const float*>(sb.data);
    x.out = ParseScaledMmOut(out_dtype);
    x.fast_accum = use_fast_accum;
    x.split_k = split_k;
    x.reference = reference;
    pyb::array_t<uint16_t, pyb::array::c_style | pyb::array::forcecast> bias_bits;
    if (bias) {
      bias_bits = pyb::array_t<uint16_t, pyb::array::c_style | pyb::array::forcecast>::ensure(*bias);
      if (!bias_bits || bias_bits.ndim() != 1 || static_cast<size_t>(bias_bits.shape(0)) != x.n)
        throw Error("scaled_mm: bias must hold N = " + std::to_string(x.n) + " values");
      x.bias = bias_bits.data();
    }
    ScaledMmResult r;
    {
      pyb::gil_scoped_release nogil;
      r = ScaledMm(x);
    }
    pyb::object d;
    if (x.out == ScaledMmOut::kF32) {
      pyb::array_t<float> o({x.m, x.n});
      std::memcpy(o.mutable_data(), r.bits.data(), r.bits.size() * 4);
      d = o;
    } else {
      pyb::array_t<uint16_t> o({x.m, x.n});
      for (size_t i = 0; i < r.bits.size(); ++i) o.mutable_data()[i] = static_cast<uint16_t>(r.bits[i]);
      d = o;
    }
    return pyb::make_tuple(d, r.model, r.scaling, r.split_k);
  }, pyb::arg("a"), pyb::arg("b"), pyb::arg("scale_a"), pyb::arg("scale_b"), pyb::arg("a_format"),
        pyb::arg("b_format"), pyb::arg("use_fast_accum"), pyb::arg("out_dtype") = "float32",
        pyb::arg("bias") = std::nullopt, pyb::arg("split_k") = 0, pyb::arg("reference") = false);
}

}  // namespace qmx::py
