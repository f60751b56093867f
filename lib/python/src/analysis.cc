// analysis.cc: what a study measures with, for Python: Hadamard transforms (qmx/transform.h), the error,
// misalignment and kurtosis statistics (qmx/metrics.h), and golden vectors (qmx/golden.h).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "arrays.h"
#include "bindings.h"
#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/golden.h"
#include "qmx/metrics.h"
#include "qmx/transform.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::py {

namespace {

pyb::dict ErrorDict(const ErrorStats& e) {
  pyb::dict d;
  d["count"] = e.count;
  d["nonfinite"] = e.nonfinite;
  d["out_nonfinite"] = e.out_nonfinite;
  for (const auto& [name, value] : ErrorMetrics(e)) d[name.c_str()] = value;
  d["sum_sq_err"] = e.sum_sq_err;
  d["sum_sq_ref"] = e.sum_sq_ref;
  return d;
}

void SameShape(const InArray& a, const InArray& b) {
  if (a.shape != b.shape) throw Error("the two arrays differ in shape");
}

pyb::array_t<float> Hadamard(const pyb::array& x, const std::string& transform, bool inverse) {
  const InArray in = F32Input(x, "x");
  size_t rows = 0, cols = 0;
  RowsCols(in.shape, rows, cols);
  const HadamardSpec h = ParseHadamard(transform);
  ValidateHadamard(h, cols);
  pyb::array_t<float> out = NewArray<float>(in.shape);
  float* o = out.mutable_data();
  {
    pyb::gil_scoped_release nogil;
    const auto* src = static_cast<const float*>(in.data);
    if (inverse) {
      HadamardInverse(h, src, o, rows, cols);
    } else {
      HadamardForward(h, src, o, rows, cols);
    }
  }
  return out;
}

pyb::dict FileDict(const golden::FileResult& r) {
  pyb::dict d;
  d["path"] = r.path;
  d["op"] = r.op;
  d["cases"] = r.cases;
  d["mismatches"] = r.mismatches;
  d["flags_checked"] = r.flags_checked;
  d["ok"] = r.ok();
  pyb::list first;
  for (const auto& mm : r.first) first.append(pyb::make_tuple(mm.line, mm.text));
  d["first"] = first;
  d["errors"] = r.errors;
  return d;
}

// Transforms, metrics and the studies' distributions.
void BindStudies(pyb::module_& m) {
  m.def("hadamard", &Hadamard, pyb::arg("x"), pyb::arg("transform") = "hadamard:32", pyb::arg("inverse") = false,
        "The normalized block Hadamard transform of each row of float32 x along its last dimension:\n"
        "'hadamard:N' (N = 16..256), or the randomized 'rht:N[:SEED]'; inverse=True undoes it.");
  m.def("error_stats", [](const pyb::array& ref, const pyb::array& out) {
    const InArray r = F32Input(ref, "ref"), o = F32Input(out, "out");
    SameShape(r, o);
    ErrorStats e;
    {
      pyb::gil_scoped_release nogil;
      e = CompareTensors(static_cast<const float*>(r.data), static_cast<const float*>(o.data), r.count);
    }
    return ErrorDict(e);
  }, pyb::arg("ref"), pyb::arg("out"),
        "Error of out against ref (float32, same shape) over the elements where both are finite: mse, rmse,\n"
        "nmse, sqnr_db, max_abs_err, max_rel_err, mean_rel_err, bias, cosine and the counts.");
  m.def(
      "error_stats_cuda",
      [](uintptr_t ref, uintptr_t out, size_t n, uintptr_t stream) {
#if defined(QMX_HAVE_CUDA)
        ErrorStats e;
        {
          pyb::gil_scoped_release nogil;
          e = gpu::EngineErrorStatsOnDevice(reinterpret_cast<const float*>(ref), reinterpret_cast<const float*>(out), n,
                                            reinterpret_cast<void*>(stream));
        }
        return ErrorDict(e);
#else
        (void)ref, (void)out, (void)n, (void)stream;
        throw Error(kNoCuda);
#endif
      },
      pyb::arg("ref"), pyb::arg("out"), pyb::arg("n"), pyb::arg("stream"),
      "error_stats of n float32 values at device addresses ref and out (qmx::gpu::EngineErrorStatsOnDevice, on\n"
      "CUDA stream `stream`): the same dict, bit for bit.");
  m.def(
      "hadamard_cuda",
      [](uintptr_t x, size_t rows, size_t cols, const std::string& transform, bool inverse, uintptr_t stream) {
        const HadamardSpec h = ParseHadamard(transform);
#if defined(QMX_HAVE_CUDA)
        pyb::gil_scoped_release nogil;
        gpu::EngineHadamardOnDevice(h, reinterpret_cast<float*>(x), rows, cols, inverse,
                                    reinterpret_cast<void*>(stream));
#else
        (void)h, (void)x, (void)rows, (void)cols, (void)inverse, (void)stream;
        throw Error(kNoCuda);
#endif
      },
      pyb::arg("x"), pyb::arg("rows"), pyb::arg("cols"), pyb::arg("transform"), pyb::arg("inverse"), pyb::arg("stream"),
      "hadamard in place on rows x cols float32 values at device address x (qmx::gpu::EngineHadamardOnDevice).");
  m.def("misalignment", [](const pyb::array& x, const pyb::array& q, size_t group) {
    const InArray xi = F32Input(x, "x"), qi = F32Input(q, "q");
    SameShape(xi, qi);
    size_t rows = 0, cols = 0;
    RowsCols(xi.shape, rows, cols);
    MisalignmentStats s;
    {
      pyb::gil_scoped_release nogil;
      s = ProjectionMisalignment(static_cast<const float*>(xi.data), static_cast<const float*>(qi.data), rows, cols,
                                 group);
    }
    pyb::dict d;
    d["misalignment"] = s.Misalignment();
    d["stderr"] = s.StdErr();
    d["mean_inv_s"] = s.MeanInvS();
    d["groups"] = s.groups;
    d["skipped"] = s.skipped;
    return d;
  }, pyb::arg("x"), pyb::arg("q"), pyb::arg("group") = 32,
        "Quartet's projection misalignment 1 - E[<x,q>/<x,x>] over groups of `group` elements along rows.");
  m.def("distribution", [](const std::string& dist, const std::vector<size_t>& shape, uint64_t seed, uint64_t first) {
    const DistSpec d = ParseDist(dist);
    size_t n = 1;
    for (const size_t e : shape) {
      if (e != 0 && n > (size_t{1} << 40) / e) throw Error("distribution: the shape holds more than 2^40 elements");
      n *= e;
    }
    std::vector<float> v(n);
    {
      pyb::gil_scoped_release nogil;
      GenerateDist(d, seed, v.data(), n, first);
    }
    return ToArray(std::move(v), shape);
  }, pyb::arg("dist"), pyb::arg("shape"), pyb::arg("seed") = 1, pyb::arg("first") = 0,
        "float32 samples of a named distribution, the study's --dist (normal, laplace, student-t:NU, lognormal:SIGMA,\n"
        "uniform, each with an optional +tauT[:RATE] outliers suffix), unit RMS; element i depends only on (seed,\n"
        "first + i), so the values equal `qmx-sim study --dist` inputs on any thread count.");
  m.def("distribution_names", &DistSyntax, "The accepted spellings of `distribution`, one line per form.");

  m.def("kurtosis", [](const pyb::array& x, const std::vector<double>& taus) {
    const InArray xi = F32Input(x, "x");
    size_t rows = 0, cols = 0;
    RowsCols(xi.shape, rows, cols);
    KurtosisStats k;
    {
      pyb::gil_scoped_release nogil;
      k = RowKurtosis(static_cast<const float*>(xi.data), rows, cols, taus);
    }
    pyb::dict d;
    d["rows"] = k.rows;
    d["skipped_rows"] = k.skipped_rows;
    d["mean_kurtosis"] = k.mean_kurtosis;
    d["max_kurtosis"] = k.max_kurtosis;
    d["taus"] = k.taus;
    d["outliers"] = k.outliers;
    return d;
  }, pyb::arg("x"), pyb::arg("taus") = std::vector<double>{},
        "Per-row kurtosis mean(x^4)/mean(x^2)^2 (mean and max over rows) and, per tau, the elements with\n"
        "|x| >= tau * rms(row).");
}

// Golden vectors: the suites, generation and verification.
void BindGolden(pyb::module_& m) {
  m.def("golden_suites", [] {
    std::vector<std::string> names;
    for (const auto& s : golden::Suites()) names.push_back(s.name);
    return names;
  });
  m.def("golden_hopper_dir", &golden::ResolveHopperDir, pyb::arg("suites"), pyb::arg("given") = "");
  m.def("golden_generate", [](const std::string& out, const std::vector<std::string>& suites, int level,
                              uint64_t seed, bool exhaustive, const std::string& hopper_dir, bool memh,
                              uint64_t min_per_class, const std::vector<std::string>& units) {
    golden::GenOptions o;
    o.memh = memh;
    o.min_per_class = min_per_class;
    o.units = units;
    o.suites = suites;
    o.level = level;
    o.seed = seed;
    o.exhaustive = exhaustive;
    o.hopper_dir = hopper_dir;
    std::vector<golden::ManifestEntry> entries;
    {
      pyb::gil_scoped_release nogil;
      entries = golden::Generate(o, out);
    }
    pyb::list l;
    for (const auto& e : entries) {
      pyb::dict d;
      d["path"] = e.path;
      d["suite"] = e.suite;
      d["op"] = e.op;
      d["cases"] = e.cases;
      d["sha256"] = e.sha256;
      l.append(d);
    }
    return l;
  }, pyb::arg("out"), pyb::arg("suites"), pyb::arg("level"), pyb::arg("seed"), pyb::arg("exhaustive"),
        pyb::arg("hopper_dir"), pyb::arg("memh") = false, pyb::arg("min_per_class") = 0,
        pyb::arg("units") = std::vector<std::string>{});
  m.def("golden_memh_fields", [](const std::string& text) { return golden::MemhFields(text); }, pyb::arg("text"),
        "The hex fields of each case of a $readmemh image written by golden gen --layout memh.");
  m.def("golden_verify", [](const std::string& dir, const std::string& backend, uint64_t max_errors,
                            const std::string& only) {
    golden::VerifyOptions o;
    o.backend = golden::ParseBackend(backend);
    o.max_errors = max_errors;
    o.only = only;
    std::vector<golden::FileResult> results;
    {
      pyb::gil_scoped_release nogil;
      results = golden::Verify(dir, o);
    }
    pyb::list l;
    for (const auto& r : results) l.append(FileDict(r));
    return l;
  }, pyb::arg("dir"), pyb::arg("backend"), pyb::arg("max_errors"), pyb::arg("only"));
  // golden coverage: one dict per file (file, op, header, cases, modelled, classes: {name: hits}, missed).
  const auto coverage_dict = [](const golden::CoverageReport& r) {
    pyb::dict d, classes;
    pyb::list missed;
    for (const auto& c : r.classes) {
      classes[pyb::str(c.name)] = c.hits;
      if (c.hits == 0) missed.append(c.name);
    }
    d["file"] = r.file;
    d["op"] = r.op;
    d["header"] = r.header;
    d["cases"] = r.cases;
    d["modelled"] = r.modelled;
    d["classes"] = classes;
    d["missed"] = missed;
    return d;
  };
  m.def("golden_coverage", [coverage_dict](const std::vector<std::string>& paths) {
    std::vector<golden::CoverageReport> reps;
    {
      pyb::gil_scoped_release nogil;
      reps = golden::Coverage(paths);
    }
    pyb::list l;
    for (const auto& r : reps) l.append(coverage_dict(r));
    return l;
  }, pyb::arg("paths"));
  m.def("golden_coverage_log", [coverage_dict](const std::string& like, const std::string& log) {
    return coverage_dict(golden::CoverageOfLog(like, log));
  }, pyb::arg("like"), pyb::arg("log"));
}

}  // namespace

void BindAnalysis(pyb::module_& m) {
  BindStudies(m);
  BindGolden(m);
}

}  // namespace qmx::py
