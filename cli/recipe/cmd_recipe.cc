// cmd_recipe.cc: `qmx-sim recipe`: a linear layer's FPROP, DGRAD and WGRAD under training recipes (bf16,
// per-tensor FP8 delayed/current, blockwise FP8, MXFP8 variants, NVFP4, Quartet), measured against FP64
// GEMMs, on given tensors (.npy / .safetensors) or generated ones; `--steps N` runs a sequence of drifting
// tensors with outlier spikes and writes one CSV row per step, recipe and GEMM.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "common/outputs.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/metrics.h"
#include "qmx/recipe.h"
#include "common/study_output.h"
#include "common/tensor_inputs.h"

namespace qmx::cli {
namespace {

struct RecipeArgs {
  std::vector<std::string> recipes = {"all"};
  std::string x_file, w_file, dy_file;
  std::string x_dist, w_dist, dy_dist;
  size_t m = 256, n = 512, k = 512;
  uint64_t seed = 1;
  std::string accum = "auto";
  std::string alpha = "decode";
  int steps = 0;
  SequenceGen seq;
  int amax_history = 1024, margin = 0;
  std::string amax_algo = "max";
  bool no_prime = false;
  std::string csv, json;
  bool list = false, quiet = false;
  int threads = 0;
};

// One tensor from a file: a 2-D view of the expected shape (rows: all but the last dimension).
Input LoadOne(const std::string& file, const std::string& option) {
  std::vector<Input> v = LoadTensorFile(file, option);
  if (v.size() != 1)
    throw Error(option + " '" + file + "' holds " + std::to_string(v.size()) +
                " float tensors; name one as FILE.safetensors:NAME");
  return std::move(v[0]);
}

struct Layer {
  std::vector<float> x, w, dy;
  size_t m = 0, n = 0, k = 0;
  std::string origin;
};

LayerGen MakeGen(const RecipeArgs& a) {
  LayerGen g = DefaultLayerGen();
  g.x = WithDistribution(g.x, a.x_dist);
  g.w = WithDistribution(g.w, a.w_dist);
  g.dy = WithDistribution(g.dy, a.dy_dist);
  return g;
}

Layer LoadLayer(const RecipeArgs& a) {
  Layer l;
  const int given = !a.x_file.empty() + !a.w_file.empty() + !a.dy_file.empty();
  if (given != 0 && given != 3) throw Error("give all three of --x, --w and --dy, or none (then they are generated)");
  if (given == 3) {
    Input x = LoadOne(a.x_file, "--x"), w = LoadOne(a.w_file, "--w"), dy = LoadOne(a.dy_file, "--dy");
    if (w.cols != x.cols)
      throw Error("--x is " + std::to_string(x.rows) + " x " + std::to_string(x.cols) + " (m x k) but --w is " +
                  std::to_string(w.rows) + " x " + std::to_string(w.cols) + ": W must be n x k");
    if (dy.rows != x.rows || dy.cols != w.rows)
      throw Error("--dy is " + std::to_string(dy.rows) + " x " + std::to_string(dy.cols) + " but must be m x n = " +
                  std::to_string(x.rows) + " x " + std::to_string(w.rows));
    l.m = x.rows;
    l.k = x.cols;
    l.n = w.rows;
    l.x = std::move(x.data);
    l.w = std::move(w.data);
    l.dy = std::move(dy.data);
    l.origin = "files " + a.x_file + ", " + a.w_file + ", " + a.dy_file;
    return l;
  }
  LinearTensors t = GenerateLinearLayer(MakeGen(a), a.seed, a.m, a.n, a.k);
  l.m = t.m;
  l.n = t.n;
  l.k = t.k;
  l.x = std::move(t.x);
  l.w = std::move(t.w);
  l.dy = std::move(t.dy);
  l.origin = "generated (seed " + std::to_string(a.seed) + ")";
  return l;
}

void CheckShape(const RecipeArgs& a) {
  for (size_t v : {a.m, a.n, a.k})
    if (v == 0 || v > (1u << 16)) throw Error("--m, --n and --k must lie in 1..65536");
  if (a.m * a.k > (size_t{1} << 28) || a.n * a.k > (size_t{1} << 28) || a.m * a.n > (size_t{1} << 28))
    throw Error("each tensor may hold at most 2^28 elements");
  // X, W, dY and the three products in FP32 and FP64, plus each recipe's quantized copies.
  CheckMemoryCeiling(uint64_t{40} * (a.m * a.k + a.n * a.k + a.m * a.n), "--m x --n x --k");
}

double Db(double x) { return std::isfinite(x) ? x : (x > 0 ? 999.0 : -999.0); }

ordered_json GemmRecord(const TrainingRecipe& r, const RecipeGemmResult& g) {
  ordered_json j;
  j["recipe"] = r.name;
  j["gemm"] = LinearGemmName(g.which);
  j["accum"] = g.accum;
  j["a"] = g.a.name;
  j["b"] = g.b.name;
  for (const RecipeGemmField& f : RecipeGemmFields(g)) {
    if (f.count) j[f.name] = static_cast<uint64_t>(f.value);
    else if (f.name.find("sqnr_db") != std::string::npos) j[f.name] = Db(f.value);  // JSON has no Inf
    else j[f.name] = f.value;
  }
  return j;
}

RecipeOptions MakeOptions(const RecipeArgs& a) {
  RecipeOptions o;
  o.accum = a.accum;
  if (a.accum != "auto") (void)AccumModelByName(a.accum);  // a misspelled model stops before any work
  o.alpha = ParseAlphaRule(a.alpha);
  o.seed = a.seed;
  if (a.amax_history < 1 || a.amax_history > (1 << 20)) throw Error("--amax-history must lie in 1..1048576");
  if (a.margin < -64 || a.margin > 64) throw Error("--margin must lie in -64..64");
  o.amax_history = a.amax_history;
  o.margin = a.margin;
  o.amax_algo = ParseAmaxAlgo(a.amax_algo);
  o.prime_history = !a.no_prime;
  return o;
}

ordered_json PlansJson(const std::vector<TrainingRecipe>& rs) {
  ordered_json plans = ordered_json::array();
  for (const TrainingRecipe& r : rs) {
    ordered_json p;
    p["name"] = r.name;
    p["summary"] = r.summary;
    p["source"] = r.source;
    for (const RecipeGemm& g : r.gemms) {
      ordered_json gj;
      gj["accum"] = g.accum;
      gj["a"] = DescribeOperand(g.a);
      gj["b"] = DescribeOperand(g.b);
      if (g.quest_backward) gj["then"] = "x QuEST trust mask, inverse Hadamard along k";
      p[LinearGemmName(g.which)] = gj;
    }
    plans.push_back(p);
  }
  return plans;
}

// The JSON holds the records, or, for a sequence written as CSV too, the per-recipe summary (the per-step
// records stay in the CSV: a long sequence would otherwise be stored twice).
void WriteOutputs(const RecipeArgs& a, const std::vector<TrainingRecipe>& rs, const Layer& shape,
                  const std::vector<ordered_json>& records, const char* mode,
                  const std::vector<ordered_json>* summary = nullptr) {
  const bool summarize = summary && !a.csv.empty();
  ordered_json j = StudyJson(std::string("recipe-") + mode, a.seed, summarize ? *summary : records);
  if (summarize) j["records_csv"] = a.csv;
  j["shape"] = {{"m", shape.m}, {"n", shape.n}, {"k", shape.k}};
  j["inputs"] = shape.origin;
  j["accum"] = a.accum;
  if (a.alpha != "decode") j["alpha"] = a.alpha;
  j["recipes"] = PlansJson(rs);
  AtomicFileSet set;  // both files or neither
  if (!a.csv.empty()) set.Add(a.csv, ToCsv(records));
  if (!a.json.empty()) set.Add(a.json, j.dump(1) + "\n");
  set.Commit();
}

void RunSingle(const RecipeArgs& a, const std::vector<TrainingRecipe>& rs) {
  const RecipeOptions opt = MakeOptions(a);
  Layer l = LoadLayer(a);
  LinearInputs in{l.x.data(), l.w.data(), l.dy.data(), l.m, l.n, l.k};
  const LinearReference ref = ComputeLinearReference(in);
  std::printf("linear layer m=%zu n=%zu k=%zu, %s; errors against FP64 GEMMs of the unquantized tensors\n", l.m, l.n,
              l.k, l.origin.c_str());
  std::vector<ordered_json> records;
  Progress progress(rs.size(), a.quiet);
  for (const TrainingRecipe& r : rs) {
    ThrowIfInterrupted();
    progress.Step(r.name);
    RecipeState state;
    const RecipeStepResult res = RunRecipeStep(r, in, ref, state, opt);
    for (const RecipeGemmResult& g : res.gemms) records.push_back(GemmRecord(r, g));
  }
  PrintTable({{"recipe", "recipe", "%s"},
              {"gemm", "gemm", "%s"},
              {"accum", "accumulation", "%s"},
              {"sqnr_db", "SQNR dB", "%.2f"},
              {"nmse", "NMSE", "%.3e"},
              {"cosine", "cosine", "%.6f"},
              {"mean_rel_err", "mean rel", "%.3e"},
              {"a_sqnr_db", "A dB", "%.1f"},
              {"b_sqnr_db", "B dB", "%.1f"},
              {"a_saturated", "A sat", "%s"},
              {"b_saturated", "B sat", "%s"}},
             records);
  WriteOutputs(a, rs, l, records, "single");
}

void RunSequence(const RecipeArgs& a, const std::vector<TrainingRecipe>& rs) {
  if (!a.x_file.empty() || !a.w_file.empty() || !a.dy_file.empty())
    throw Error("--steps generates its tensors; --x, --w and --dy are for single steps");
  if (a.steps < 1 || a.steps > 100000) throw Error("--steps must lie in 1..100000");
  RecipeOptions opt = MakeOptions(a);
  opt.prime_history = false;  // a sequence shows delayed scaling from its real start (scale 1)
  LayerSequence seq(MakeGen(a), a.seq, a.seed, a.m, a.n, a.k);
  std::vector<RecipeState> states(rs.size());
  std::vector<ordered_json> records;
  Progress progress(static_cast<size_t>(a.steps), a.quiet);
  const std::vector<double> taus = {10.0};
  // Per recipe and GEMM: the mean and the worst SQNR over the steps, and the step of the worst.
  struct Summary {
    double sum = 0, worst = INFINITY;
    int worst_step = -1;
  };
  std::vector<std::array<Summary, 3>> sums(rs.size());
  int spikes = 0;
  for (int s = 0; s < a.steps; ++s) {
    ThrowIfInterrupted();
    progress.Step("step " + std::to_string(s));
    const LinearInputs in = seq.Next();
    spikes += seq.spiked();
    const LinearReference ref = ComputeLinearReference(in);
    const KurtosisStats kx = RowKurtosis(in.x, in.m, in.k, taus), kw = RowKurtosis(in.w, in.n, in.k, taus),
                        kdy = RowKurtosis(in.dy, in.m, in.n, taus);
    for (size_t ri = 0; ri < rs.size(); ++ri) {
      const RecipeStepResult res = RunRecipeStep(rs[ri], in, ref, states[ri], opt);
      for (size_t gi = 0; gi < 3; ++gi) {
        const RecipeGemmResult& g = res.gemms[gi];
        ordered_json j;
        j["step"] = s;
        j["spike"] = seq.spiked() ? 1 : 0;
        const ordered_json rec = GemmRecord(rs[ri], g);
        for (auto it = rec.begin(); it != rec.end(); ++it) j[it.key()] = it.value();
        j["amax_x"] = res.amax[0];
        j["amax_w"] = res.amax[1];
        j["amax_dy"] = res.amax[2];
        j["kurt_x"] = kx.mean_kurtosis;
        j["kurt_w"] = kw.mean_kurtosis;
        j["kurt_dy"] = kdy.mean_kurtosis;
        j["max_kurt_x"] = kx.max_kurtosis;
        j["max_kurt_dy"] = kdy.max_kurtosis;
        j["outliers10_x"] = kx.outliers[0];
        j["outliers10_dy"] = kdy.outliers[0];
        j["delayed_scale_x"] = res.delayed_decode_x;
        j["delayed_scale_w"] = res.delayed_decode_w;
        j["delayed_scale_dy"] = res.delayed_decode_dy;
        records.push_back(j);
        const double db = Db(g.error.SqnrDb());
        Summary& su = sums[ri][gi];
        su.sum += db;
        if (db < su.worst) {
          su.worst = db;
          su.worst_step = s;
        }
      }
    }
  }
  std::printf("sequence of %d steps, m=%zu n=%zu k=%zu, seed %llu: %d spike step(s); drift %g, weight drift %g, "
              "gradient decay %g per step\n",
              a.steps, a.m, a.n, a.k, static_cast<unsigned long long>(a.seed), spikes, a.seq.drift, a.seq.weight_drift,
              a.seq.grad_decay);
  std::vector<ordered_json> table;
  for (size_t ri = 0; ri < rs.size(); ++ri)
    for (size_t gi = 0; gi < 3; ++gi) {
      ordered_json t;
      t["recipe"] = rs[ri].name;
      t["gemm"] = LinearGemmName(kLinearGemms[gi]);
      t["mean"] = sums[ri][gi].sum / a.steps;
      t["worst"] = sums[ri][gi].worst;
      t["worst_step"] = sums[ri][gi].worst_step;
      table.push_back(t);
    }
  PrintTable({{"recipe", "recipe", "%s"},
              {"gemm", "gemm", "%s"},
              {"mean", "mean SQNR dB", "%.2f"},
              {"worst", "worst SQNR dB", "%.2f"},
              {"worst_step", "at step", "%s"}},
             table);
  Layer shape;
  shape.m = a.m;
  shape.n = a.n;
  shape.k = a.k;
  shape.origin = "generated sequence";
  WriteOutputs(a, rs, shape, records, "sequence", &table);
}

}  // namespace

void AddRecipeCommand(CLI::App& app) {
  auto a = std::make_shared<RecipeArgs>();
  CLI::App* c = app.add_subcommand(
      "recipe", "a linear layer's FPROP, DGRAD and WGRAD under training recipes, against FP64 GEMMs");
  c->add_option("--recipe", a->recipes,
                "recipes: all, bf16, fp8-delayed, fp8-current, fp8-blockwise, mxfp8, mxfp8-ocp, mxfp8-e5m2-grads, "
                "nvfp4, quartet")
      ->capture_default_str();
  c->add_flag("--list", a->list, "print what each recipe quantizes (tensor, axis, format, rule, transform) and exit");
  c->add_option("--x", a->x_file, "activations X (m x k): .npy, FILE.safetensors[:NAME]");
  c->add_option("--w", a->w_file, "weights W (n x k)");
  c->add_option("--dy", a->dy_file, "output gradients dY (m x n)");
  c->add_option("--m", a->m, "generated tensors: tokens")->capture_default_str();
  c->add_option("--n", a->n, "generated tensors: output features")->capture_default_str();
  c->add_option("--k", a->k, "generated tensors: input features")->capture_default_str();
  c->add_option("--x-dist", a->x_dist,
                "distribution of generated X (default: student-t:5 with 1/128 of the channels x 32)");
  c->add_option("--w-dist", a->w_dist, "distribution of generated W, times 0.02 (default: normal)");
  c->add_option("--dy-dist", a->dy_dist,
                "distribution of generated dY, times 1e-3 (default: laplace with lognormal row norms, sigma 1)");
  c->add_option("--seed", a->seed, "tensors, stochastic rounding and random Hadamard signs")->capture_default_str();
  c->add_option("--accum", a->accum, "auto (each GEMM on the hardware its recipe targets) or one model for all")
      ->capture_default_str();
  c->add_option("--alpha", a->alpha,
                "NVFP4 GEMMs' factor after accumulation: decode (the decode scales' product), te (Transformer "
                "Engine's cuBLASLt alpha from the amax), te-ref (TE's reference GEMM)")
      ->check(CLI::IsMember({"decode", "te", "te-ref"}))
      ->capture_default_str();
  c->add_option("--steps", a->steps, "sequence mode: this many steps of drifting tensors with spikes")->check(CLI::Range(1, 100000));
  c->add_option("--drift", a->seq.drift, "sequence: fraction of the X and dY elements redrawn per step")->capture_default_str();
  c->add_option("--weight-drift", a->seq.weight_drift, "sequence: fraction of the W elements redrawn per step")->capture_default_str();
  c->add_option("--grad-decay", a->seq.grad_decay, "sequence: dY scale factor per step")->capture_default_str();
  c->add_option("--spike-rate", a->seq.spike_rate, "sequence: probability of a spike step")->capture_default_str();
  c->add_option("--spike-gain", a->seq.spike_gain, "sequence: spike factor on a token's X and dY")->capture_default_str();
  c->add_option("--spike-rows", a->seq.spike_rows, "sequence: tokens per spike")->capture_default_str();
  c->add_option("--amax-history", a->amax_history, "fp8-delayed: amax history length")->capture_default_str();
  c->add_option("--margin", a->margin, "fp8-delayed: scale margin (powers of two)")->capture_default_str();
  c->add_option("--amax-algo", a->amax_algo, "fp8-delayed: max or most-recent")->capture_default_str();
  c->add_flag("--no-prime", a->no_prime,
              "single step: start fp8-delayed from an empty history (scale 1) instead of the tensors' own amax");
  c->add_option("--csv", a->csv, "write the records as CSV");
  c->add_option("--json", a->json, "write the records, the recipes' plans and the command as JSON");
  c->add_option("--threads", a->threads, "OpenMP threads (results do not depend on it)")->check(CLI::Range(1, 1024));
  c->add_flag("--quiet", a->quiet, "no progress bar");
  c->callback([a] {
    const std::vector<TrainingRecipe> rs = TrainingRecipesByNames(a->recipes);
    if (a->list) {
      for (const TrainingRecipe& r : rs) std::printf("%s\n", DescribeTrainingRecipe(r).c_str());
      return;
    }
    CheckShape(*a);
    CheckOutputs({{"--csv", a->csv}, {"--json", a->json}}, {a->x_file, a->w_file, a->dy_file});
    if (a->threads > 0) omp_set_num_threads(a->threads);
    InterruptGuard guard;
    if (a->steps > 0) RunSequence(*a, rs);
    else RunSingle(*a, rs);
  });
}

}  // namespace qmx::cli
