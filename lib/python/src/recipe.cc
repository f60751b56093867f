// recipe.cc: training recipes (qmx/recipe.h) for Python: a linear layer's forward (FPROP) and backward
// (DGRAD, WGRAD) under a recipe, step by step with its state, as qmx.torch.Linear drives them, and one
// whole step as the CLI's `qmx-sim recipe` runs it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "arrays.h"
#include "bindings.h"
#include "qmx/error.h"
#include "qmx/recipe.h"

#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::py {

namespace {

// A recipe, its options and the state a training loop carries from step to step.
struct LinearSteps {
  TrainingRecipe recipe;
  RecipeOptions opt;
  RecipeState state;
};

RecipeOptions Options(const std::string& accum, uint64_t seed, int amax_history, int margin, const std::string& algo,
                      bool prime_history, const std::string& alpha) {
  RecipeOptions o;
  o.alpha = ParseAlphaRule(alpha);
  if (accum != "auto") (void)AccumModelByName(accum);
  o.accum = accum;
  o.seed = seed;
  if (amax_history < 1 || amax_history > (1 << 20)) throw Error("amax_history must lie in 1..1048576");
  if (margin < -64 || margin > 64) throw Error("margin must lie in -64..64");
  o.amax_history = amax_history;
  o.margin = margin;
  o.amax_algo = ParseAmaxAlgo(algo);
  o.prime_history = prime_history;
  return o;
}

// A 2-D float32 matrix with the given column count (rows any), read in place.
InArray Matrix(const pyb::array& a, const char* what, size_t cols) {
  InArray in = F32Input(a, what);
  if (in.shape.size() != 2) throw pyb::value_error(std::string(what) + " must be 2-D");
  if (cols != 0 && in.shape[1] != cols)
    throw pyb::value_error(std::string(what) + " has " + std::to_string(in.shape[1]) + " columns, not " + std::to_string(cols));
  return in;
}

}  // namespace

void BindRecipe(pyb::module_& m) {
  m.def("recipe_names", &TrainingRecipeNames, "The training recipes: bf16, fp8-delayed, ..., nvfp4, quartet.");
  m.def("describe_recipe", [](const std::string& name) { return DescribeTrainingRecipe(TrainingRecipeByName(name)); },
        pyb::arg("recipe"));
  m.def(
      "recipe_shape_rules",
      [](const std::string& name) {
        pyb::list out;
        for (const RecipeShapeRule& r : RecipeShapeRules(TrainingRecipeByName(name)))
          out.append(pyb::make_tuple(std::string(1, r.dim), r.multiple, r.why));
        return out;
      },
      pyb::arg("recipe"),
      "The sizes a linear layer must be multiples of under the recipe: (dim, multiple, why) with dim 'k' "
      "(in_features), 'n' (out_features) or 'm' (the tokens, rows of X).");
  m.def(
      "check_recipe_shape",
      [](const std::string& name, size_t tokens, size_t out_features, size_t in_features, const std::string& what) {
        CheckRecipeShape(TrainingRecipeByName(name), tokens, out_features, in_features, what);
      },
      pyb::arg("recipe"), pyb::arg("tokens"), pyb::arg("out_features"), pyb::arg("in_features"), pyb::arg("what"),
      "ValueError naming `what`, the size and the multiple for the first size rule broken (0: not known yet).");

  pyb::class_<LinearSaved, std::shared_ptr<LinearSaved>>(m, "LinearSaved",
                                                         "What a step's backward needs from its forward.");
  pyb::class_<LinearSteps>(m, "LinearSteps",
                           "A linear layer's GEMMs under a training recipe, one step (forward, then backward) at a time.")
      .def(pyb::init([](const std::string& recipe, const std::string& accum, uint64_t seed, int amax_history, int margin,
                        const std::string& algo, bool prime_history, const std::string& alpha) {
             LinearSteps s;
             s.recipe = TrainingRecipeByName(recipe);
             s.opt = Options(accum, seed, amax_history, margin, algo, prime_history, alpha);
             return s;
           }),
           pyb::arg("recipe"), pyb::arg("accum") = "auto", pyb::arg("seed") = 0, pyb::arg("amax_history") = 1024,
           pyb::arg("margin") = 0, pyb::arg("amax_algo") = "max", pyb::arg("prime_history") = false,
           pyb::arg("alpha") = "decode")
      .def_property_readonly("step", [](const LinearSteps& s) { return s.state.step; })
      .def_property_readonly("recipe", [](const LinearSteps& s) { return s.recipe.name; })
      .def("forward", [](LinearSteps& s, const pyb::array& x, const pyb::array& w) {
        const InArray wi = Matrix(w, "weight", 0);
        const InArray xi = Matrix(x, "x", wi.shape[1]);
        const size_t m = xi.shape[0], n = wi.shape[0], k = wi.shape[1];
        std::vector<float> y;
        auto saved = std::make_shared<LinearSaved>();
        {
          pyb::gil_scoped_release nogil;
          y = LinearForward(s.recipe, static_cast<const float*>(xi.data), static_cast<const float*>(wi.data), m, n, k,
                            s.state, s.opt, *saved);
        }
        return pyb::make_tuple(ToArray(std::move(y), {m, n}), saved);
      }, pyb::arg("x"), pyb::arg("weight"),
           "(Y, saved): Y = FPROP(X (m x k), W (n x k)), m x n float32; saved goes to this step's backward.")
      .def("backward", [](LinearSteps& s, const pyb::array& x, const pyb::array& w, const pyb::array& dy,
                          LinearSaved& saved) {
        const InArray wi = Matrix(w, "weight", 0);
        const InArray xi = Matrix(x, "x", wi.shape[1]);
        const InArray di = Matrix(dy, "grad_output", wi.shape[0]);
        const size_t m = xi.shape[0], n = wi.shape[0], k = wi.shape[1];
        if (di.shape[0] != m || saved.m != m || saved.n != n || saved.k != k)
          throw pyb::value_error("backward's shapes differ from the forward's");
        pyb::array_t<float> dx = NewArray<float>({m, k}), dw = NewArray<float>({n, k});
        float* dxp = dx.mutable_data();
        float* dwp = dw.mutable_data();
        {
          pyb::gil_scoped_release nogil;
          LinearBackward(s.recipe, static_cast<const float*>(xi.data), static_cast<const float*>(wi.data),
                         static_cast<const float*>(di.data), s.state, s.opt, saved, dxp, dwp);
        }
        return pyb::make_tuple(dx, dw);
      }, pyb::arg("x"), pyb::arg("weight"), pyb::arg("grad_output"), pyb::arg("saved"),
           "(dX (m x k), dW (n x k)) = (DGRAD, WGRAD) from dY (m x n) and the forward's saved; ends the step.")
      .def("cuda_support", [](const LinearSteps& s) -> std::string {
#if defined(QMX_HAVE_CUDA)
        return gpu::EngineLinearSupport(s.recipe, s.opt);
#else
        (void)s;
        return kNoCuda;
#endif
      }, "'' when the engine runs this recipe and these options on CUDA tensors, else why not.")
      .def("forward_cuda", [](LinearSteps& s, uintptr_t x, uintptr_t w, size_t m, size_t n, size_t k, uintptr_t y,
                              uintptr_t stream) {
        auto saved = std::make_shared<LinearSaved>();
#if defined(QMX_HAVE_CUDA)
        pyb::gil_scoped_release nogil;
        gpu::EngineLinearForward(s.recipe, reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(w), m, n, k,
                                 s.state, s.opt, *saved, reinterpret_cast<float*>(y), reinterpret_cast<void*>(stream));
#else
        (void)s, (void)x, (void)w, (void)m, (void)n, (void)k, (void)y, (void)stream;
        throw Error(kNoCuda);
#endif
        return saved;
      }, pyb::arg("x"), pyb::arg("weight"), pyb::arg("m"), pyb::arg("n"), pyb::arg("k"), pyb::arg("y"), pyb::arg("stream"),
           "forward on device addresses (float32, row-major: X m x k, W n x k, Y m x n) on CUDA stream `stream`\n"
           "(qmx::gpu::EngineLinearForward); returns saved.")
      .def("backward_cuda", [](LinearSteps& s, uintptr_t x, uintptr_t w, uintptr_t dy, LinearSaved& saved, uintptr_t dx,
                               uintptr_t dw, uintptr_t stream) {
#if defined(QMX_HAVE_CUDA)
        pyb::gil_scoped_release nogil;
        gpu::EngineLinearBackward(s.recipe, reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(w),
                                  reinterpret_cast<const float*>(dy), s.state, s.opt, saved, reinterpret_cast<float*>(dx),
                                  reinterpret_cast<float*>(dw), reinterpret_cast<void*>(stream));
#else
        (void)s, (void)x, (void)w, (void)dy, (void)saved, (void)dx, (void)dw, (void)stream;
        throw Error(kNoCuda);
#endif
      }, pyb::arg("x"), pyb::arg("weight"), pyb::arg("grad_output"), pyb::arg("saved"), pyb::arg("dx"), pyb::arg("dw"),
           pyb::arg("stream"), "backward on device addresses (dY m x n, dX m x k, dW n x k); ends the step.");

  m.def("bias_grad", [](const pyb::array& dy) {
    const InArray di = Matrix(dy, "grad_output", 0);
    const size_t rows = di.shape[0], cols = di.shape[1];
    pyb::array_t<float> db = NewArray<float>({cols});
    float* out = db.mutable_data();
    {
      pyb::gil_scoped_release nogil;
      BiasGradient(static_cast<const float*>(di.data), rows, cols, out);
    }
    return db;
  }, pyb::arg("grad_output"), "qmx::BiasGradient: the column sums of dY (float32, rows ascending).");
  m.def("bias_grad_cuda", [](uintptr_t dy, size_t rows, size_t cols, uintptr_t db, uintptr_t stream) {
#if defined(QMX_HAVE_CUDA)
    pyb::gil_scoped_release nogil;
    gpu::EngineBiasGradient(reinterpret_cast<const float*>(dy), rows, cols, reinterpret_cast<float*>(db),
                            reinterpret_cast<void*>(stream));
#else
    (void)dy, (void)rows, (void)cols, (void)db, (void)stream;
    throw Error(kNoCuda);
#endif
  }, pyb::arg("grad_output"), pyb::arg("m"), pyb::arg("n"), pyb::arg("db"), pyb::arg("stream"),
        "bias_grad on device addresses (dY m x n float32, db n) on CUDA stream `stream`.");
  m.def("recipe_step", [](const std::string& recipe, const pyb::array& x, const pyb::array& w, const pyb::array& dy,
                          const std::string& accum, uint64_t seed, uint64_t step, const std::string& alpha) {
    const InArray wi = Matrix(w, "weight", 0);
    const InArray xi = Matrix(x, "x", wi.shape[1]);
    const InArray di = Matrix(dy, "grad_output", wi.shape[0]);
    const size_t m = xi.shape[0], n = wi.shape[0], k = wi.shape[1];
    if (di.shape[0] != m) throw pyb::value_error("grad_output must be m x n");
    const TrainingRecipe r = TrainingRecipeByName(recipe);
    RecipeOptions o = Options(accum, seed, 1024, 0, "max", true, alpha);
    o.keep_values = true;
    RecipeState state;
    state.step = step;
    RecipeStepResult res;
    {
      pyb::gil_scoped_release nogil;
      const LinearInputs in{static_cast<const float*>(xi.data), static_cast<const float*>(wi.data),
                            static_cast<const float*>(di.data), m, n, k};
      res = RunRecipeStep(r, in, ComputeLinearReference(in), state, o);
    }
    pyb::dict d;
    for (const RecipeGemmResult& g : res.gemms) {
      const size_t rows = g.which == LinearGemm::kWgrad ? n : m;
      const size_t cols = g.which == LinearGemm::kFprop ? n : k;
      std::vector<float> v = g.out;
      pyb::dict gd;
      gd["out"] = ToArray(std::move(v), {rows, cols});
      gd["accum"] = g.accum;
      for (const RecipeGemmField& f : RecipeGemmFields(g)) {
        if (f.count) gd[f.name.c_str()] = static_cast<uint64_t>(f.value);
        else gd[f.name.c_str()] = f.value;
      }
      d[LinearGemmName(g.which)] = gd;
    }
    return d;
  }, pyb::arg("recipe"), pyb::arg("x"), pyb::arg("weight"), pyb::arg("grad_output"), pyb::arg("accum") = "auto",
        pyb::arg("seed") = 0, pyb::arg("step") = 0, pyb::arg("alpha") = "decode",
        "One whole step of `qmx-sim recipe` on given tensors (fresh delayed-scaling histories primed with the\n"
        "tensors' amaxes): {'fprop'|'dgrad'|'wgrad': {'out', 'accum', and the CLI's recipe fields: sqnr_db, nmse,\n"
        "cosine, mean_rel_err, max_abs_err, bias, out_nonfinite, a_/b_sqnr_db, a_/b_saturated, a_/b_flushed}}\n"
        "against FP64 GEMMs.");
}

}  // namespace qmx::py
