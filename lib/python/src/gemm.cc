// gemm.cc: block-scaled GEMM under the accumulation models (qmx/gemm.h) for Python. A is M x K and B is
// K x N, each a QuantizedTensor (A quantized row-wise, B column-wise, so both blocks run along K) or uint8
// codes with their format; the result is D = A B (+ C), float32 M x N, as the model's hardware computes it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

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

}  // namespace

void BindGemm(pyb::module_& m) {
  m.def("gemm_models", &AccumModelNames, "Names of the accumulation models (fused:KEY=V,... describes any other).");
  m.def("describe_model", [](const std::string& name) { return DescribeModel(AccumModelByName(name)); },
        pyb::arg("model"), "One line with every parameter of a model.");
  m.def("gemm", [](const pyb::object& a, const pyb::object& b, const std::string& model,
                   const std::optional<pyb::array>& c, const std::optional<std::string>& a_format,
                   const std::optional<std::string>& b_format, bool reference) {
    const GemmOperand oa = OperandOf(a, a_format, "a"), ob = OperandOf(b, b_format, "b");
    const AccumModel am = AccumModelByName(model);
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
        pyb::arg("a_format") = std::nullopt, pyb::arg("b_format") = std::nullopt, pyb::arg("reference") = false);
}

}  // namespace qmx::py
