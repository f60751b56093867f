// module.cc: the _qmx extension module behind the Python package qmx (lib/python/qmx): library errors
// become ValueError with the library's message (file errors OSError / FileNotFoundError as well), OpenMP
// threads and the SIMD target are exposed, and each layer's bindings are registered.
#include <omp.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cstring>

#include "bindings.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/testing.h"
#include "qmx/threads.h"
#include "qmx/version.h"

namespace pyb = pybind11;

PYBIND11_MODULE(_qmx, m) {
  m.doc() = "qmx: bit-exact emulation of OCP FP8/FP6/FP4, MX and NVFP4 numerics (the C++ library libqmx)";
  m.attr("__version__") = QMX_VERSION;
  // File errors are OSError (FileNotFoundError for a missing file) and, as every library error has been,
  // ValueError too, so that both `except OSError` and older `except ValueError` code catch them.
  static PyObject* const io_error = PyErr_NewException("qmx.QmxIOError", PyTuple_Pack(2, PyExc_OSError, PyExc_ValueError), nullptr);
  static PyObject* const not_found =
      PyErr_NewException("qmx.QmxFileNotFoundError", PyTuple_Pack(2, PyExc_FileNotFoundError, PyExc_ValueError), nullptr);
  m.attr("QmxIOError") = pyb::handle(io_error);
  m.attr("QmxFileNotFoundError") = pyb::handle(not_found);
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const qmx::IoError& e) {
      const bool missing = std::strstr(e.what(), std::strerror(ENOENT)) != nullptr;
      PyErr_SetString(missing ? not_found : io_error, e.what());
    } catch (const qmx::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("set_num_threads", [](int n) {
    if (n < 1 || n > 1024) throw pyb::value_error("set_num_threads: n must be 1..1024, not " + std::to_string(n));
    qmx::SetNumThreads(n);
  }, pyb::arg("n"),
        "Sets the OpenMP threads every parallel call uses (results never depend on the count). A fork() child of a "
        "process that ran threads stays on one (ValueError for more).");
  m.def("get_num_threads", [] { return omp_get_max_threads(); }, "The OpenMP threads parallel calls use.");
  m.def("simd_target", &qmx::SimdTargetName,
        "The SIMD target the kernels run on (AVX3_FP16, AVX3_VNNI, AVX3, AVX2, SSE4, ...).");
  m.def("simd_targets", &qmx::SimdTargets, "Every compiled SIMD target this CPU runs, best first.");
  m.def("force_simd_target", &qmx::ForceSimdTarget, pyb::arg("name"),
        "Runs the kernels on one of simd_targets() ('' restores the best); results are the same on every target.");
  qmx::py::BindFormats(m);
  qmx::py::BindQuantize(m);
  qmx::py::BindGemm(m);
  qmx::py::BindAnalysis(m);
  qmx::py::BindRecipe(m);
  qmx::py::BindBench(m);
  qmx::py::BindIo(m);
}
