// bench.cc: the library's own kernels timed inside the Python process (qmx.bench), so a binding's cost
// is its time beside these, measured in one run on the same arrays.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "arrays.h"
#include "bindings.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/quantize.h"

namespace qmx::py {

namespace {

template <typename F>
double MedianSeconds(int reps, F&& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

void BindBench(pyb::module_& m) {
  m.def("kernel_seconds", [](const std::string& op, const pyb::array& x, const std::string& what, int reps) {
    if (reps < 1) throw pyb::value_error("reps must be positive");
    const InArray in = F32Input(x, "x");
    pyb::gil_scoped_release nogil;
    if (op == "convert") {
      const Format f = ParseFormat(what);
      std::vector<uint8_t> out(in.count);
      return MedianSeconds(reps, [&] {
        ConvertToCodes(DType::kF32, in.data, in.count, f, CastOptions{}, out.data(), {}, Exec::kParallel);
      });
    }
    if (op == "convert-new") {  // a fresh, uninitialized output per call, as a binding returning a new array has
      const Format f = ParseFormat(what);
      return MedianSeconds(reps, [&] {
        std::unique_ptr<uint8_t[]> out(new uint8_t[in.count]);
        ConvertToCodes(DType::kF32, in.data, in.count, f, CastOptions{}, out.get(), {}, Exec::kParallel);
      });
    }
    if (op == "quantize") {
      const QuantSpec s = QuantSpecByName(what);
      TensorView v{DType::kF32, in.data, 0, 0};
      RowsCols(in.shape, v.rows, v.cols);
      return MedianSeconds(reps, [&] { (void)Quantize(v, s); });
    }
    throw Error("kernel_seconds: op is convert, convert-new or quantize, not '" + op + "'");
  }, pyb::arg("op"), pyb::arg("x"), pyb::arg("what"), pyb::arg("reps"),
        "Median seconds of the C++ call itself (convert: ConvertToCodes into a reused buffer; convert-new: into a\n"
        "fresh allocation per call; quantize: Quantize).");
}

}  // namespace qmx::py
