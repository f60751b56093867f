// quantize.cc: tensor quantization (qmx/quantize.h) for Python: QuantizedTensor (codes and scales as
// NumPy arrays that view the tensor's own memory), quantize under a recipe name with the CLI's overrides,
// dequantize, fake_quantize and delayed scaling.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "arrays.h"
#include "bindings.h"
#include "qmx/error.h"
#include "qmx/quantize.h"
#include "qmx/scale.h"
#include "qmx/transform.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::py {

namespace {

using QPtr = std::shared_ptr<QuantizedTensor>;

std::vector<size_t> ShapeOf(const QuantizedTensor& q) {
  return q.shape.empty() ? std::vector<size_t>{q.rows, q.cols} : q.shape;
}

// A spec from a name plus text overrides by their Python keywords (SpecOverrideFields), None keeping the
// recipe's own setting.
QuantSpec SpecOf(const std::string& spec, const pyb::dict& overrides, int sr_bits, uint64_t seed, int margin,
                 bool row_scaled) {
  SpecOverrides o;
  for (const auto& [key, value] : overrides) {
    if (value.is_none()) continue;
    SetSpecOverride(o, pyb::str(key).cast<std::string>(), pyb::str(value).cast<std::string>());
  }
  o.sr_bits = sr_bits;
  o.seed = seed;
  o.margin = margin;
  o.row_scaled = row_scaled;
  return BuildQuantSpec(spec, o);
}

// A spec given as a dict or JSON text (QuantizedTensor.spec), or a recipe name.
QuantSpec SpecFromObject(const pyb::object& spec) {
  if (pyb::isinstance<pyb::dict>(spec)) {
    const std::string text = pyb::module_::import("json").attr("dumps")(spec).cast<std::string>();
    return QuantSpecFromJson(text);
  }
  const std::string s = spec.cast<std::string>();
  if (!s.empty() && s[0] == '{') return QuantSpecFromJson(s);
  return QuantSpecByName(s);
}

TensorView ViewOf(const InArray& in) {
  TensorView v;
  v.dtype = in.dtype;
  v.data = in.data;
  RowsCols(in.shape, v.rows, v.cols);
  return v;
}

pyb::array_t<float> DequantizeTo(const QuantizedTensor& q, bool reference, const std::string& order_name, bool ftz) {
  const DequantOrder order = ParseDequantOrder(order_name);
  pyb::array_t<float> out = NewArray<float>(ShapeOf(q));
  float* o = out.mutable_data();
  pyb::gil_scoped_release nogil;
  if (reference) {
    DequantizeRef(q, o, order, ftz);
  } else {
    Dequantize(q, o, order, ftz);
  }
  return out;
}

// The classes: DelayedScaling and QuantizedTensor.
void BindQuantizeTypes(pyb::module_& m) {
  pyb::class_<DelayedScaling>(m, "DelayedScaling",
                              "Transformer Engine's per-tensor delayed scaling: quantize with the current scale,\n"
                              "then push the tensor's amax; the next scale comes from the history.")
      .def(pyb::init([](const std::string& elem, int history_len, int margin, const std::string& algo) {
             if (history_len < 1 || history_len > (1 << 20)) throw Error("history_len must be 1..1048576");
             return DelayedScaling(ParseFormat(elem), history_len, margin, ParseAmaxAlgo(algo));
           }),
           pyb::arg("elem") = "e4m3", pyb::arg("history_len") = 1024, pyb::arg("margin") = 0,
           pyb::arg("algo") = "max")
      .def("push", &DelayedScaling::Push, pyb::arg("amax"), "Records an amax and updates the scale.")
      .def_property_readonly("scale", [](const DelayedScaling& d) { return d.scale().encode; },
                             "The encode scale the next tensor is multiplied by.")
      .def_property_readonly("decode_scale", [](const DelayedScaling& d) { return d.scale().decode; })
      .def_property_readonly("history", &DelayedScaling::history, "Amaxes, newest first.");

  pyb::class_<QuantizedTensor, QPtr>(m, "QuantizedTensor",
                                     "Codes and block scales of a quantized tensor, with the spec that made them.")
      .def_property_readonly("codes", [](pyb::object self) {
        const QuantizedTensor& q = self.cast<const QuantizedTensor&>();
        const std::vector<size_t> shape = ShapeOf(q);
        return pyb::array(pyb::dtype::of<uint8_t>(), std::vector<pyb::ssize_t>(shape.begin(), shape.end()), {},
                          q.codes.data(), self);
      }, "Element codes, one per byte, in the source's shape (a view of the tensor's memory).")
      .def_property_readonly("scales", [](pyb::object self) {
        const QuantizedTensor& q = self.cast<const QuantizedTensor&>();
        const std::vector<pyb::ssize_t> shape = {static_cast<pyb::ssize_t>(q.scale_rows),
                                                 static_cast<pyb::ssize_t>(q.scale_cols)};
        if (ScaleFormatOf(q.spec.rule) == ScaleFormat::kFp32)
          return pyb::array(pyb::dtype::of<float>(), shape, {}, q.scales.data(), self);
        return pyb::array(pyb::dtype::of<uint8_t>(), shape, {}, q.scales.data(), self);
      }, "Block scales over the scale grid: uint8 (UE8M0 bytes, or E4M3 codes for NVFP4) or float32 decode scales.")
      .def_property_readonly("shape", [](const QuantizedTensor& q) { return pyb::tuple(pyb::cast(ShapeOf(q))); })
      .def_property_readonly("scale_grid", [](const QuantizedTensor& q) { return pyb::make_tuple(q.scale_rows, q.scale_cols); })
      .def_property_readonly("spec", [](const QuantizedTensor& q) {
        return pyb::module_::import("json").attr("loads")(QuantSpecToJson(q.spec));
      }, "Every field of the spec, as a dict (the qmx.spec metadata of qmx-sim quantize).")
      .def_property_readonly("spec_text", [](const QuantizedTensor& q) { return DescribeSpec(q.spec); })
      .def_property_readonly("tensor_amax", [](const QuantizedTensor& q) { return q.tensor_amax; })
      .def_property_readonly("tensor_decode", [](const QuantizedTensor& q) { return q.tensor_decode; },
                             "NVFP4's second-level decode scale fl32(1 / S_enc); 1 otherwise (and when row-scaled).")
      .def_property_readonly("line_amax", [](pyb::object self) -> pyb::object {
        const QuantizedTensor& q = self.cast<const QuantizedTensor&>();
        if (!q.spec.row_scaled) return pyb::none();
        return pyb::array(pyb::dtype::of<float>(), {static_cast<pyb::ssize_t>(q.line_amax.size())}, {}, q.line_amax.data(), self);
      }, "Row-scaled NVFP4: each line's amax (a row's, or a column's for axis col), float32; None otherwise.")
      .def("dequantize", [](const QuantizedTensor& q, bool reference, const std::string& order, bool ftz) {
             return DequantizeTo(q, reference, order, ftz);
           }, pyb::arg("reference") = false, pyb::arg("order") = "rule", pyb::arg("ftz") = false,
           "The tensor's FP32 values, in its shape. order: how NVFP4's block and tensor scales meet (\"rule\", \"te\",\n"
           "\"global-div\", \"global-recip\"; qmx.testing.variants(\"dequantizer\")). ftz: as a kernel built with\n"
           "flush-to-zero computes it (a decode scale or result below 2^-126 read or written as a signed zero).")
      .def("pack", [](const QuantizedTensor& q) {
        const int bits = q.spec.elem.Bits();
        std::vector<uint8_t> p = PackCodes(q.codes.data(), q.codes.size(), bits == 8 ? 8 : bits);
        const size_t n = p.size();
        return ToArray(std::move(p), {n});
      }, "The codes packed: FP4 two per byte (element 2i in the low nibble), FP6 four per three bytes.")
      .def("cublas_scales", [](const QuantizedTensor& q) -> pyb::array {
        if (ScaleFormatOf(q.spec.rule) == ScaleFormat::kFp32) {
          std::vector<float> s = ScalesToCublasBlockwise(q);
          const size_t n = s.size();
          return ToArray(std::move(s), {n});
        }
        std::vector<uint8_t> s = ScalesToCublasTiled(q);
        const size_t n = s.size();
        return ToArray(std::move(s), {n});
      }, "The scales in the layout cuBLASLt reads: 128x4 tiles for MX 1x32 and NVFP4 1x16 (VEC32_UE8M0,\n"
         "VEC16_UE4M3), or Hopper's blockwise FP32 layouts for 1x128 and 128x128 (lib/include/qmx/quantize.h).")
      .def("__repr__", [](const QuantizedTensor& q) {
        std::string s;
        for (size_t d : ShapeOf(q)) s += (s.empty() ? "" : "x") + std::to_string(d);
        return "QuantizedTensor(" + s + ", " + DescribeSpec(q.spec) + ")";
      });
}

// Specs by name, their overrides and descriptions.
void BindSpecs(pyb::module_& m) {
  m.def("spec_names", &QuantSpecNames, "The recipes' spec names (mxfp8, nvfp4, fp8-block1x128, ...).");
  m.def("profile_names", &ProfileNames, "Library profiles (microxcaling, torchao-rceil, transformer-engine, ...).");
  m.def("make_spec", [](const std::string& spec, const pyb::dict& overrides, int sr_bits, uint64_t seed, int margin,
                        bool row_scaled) {
    return QuantSpecToJson(SpecOf(spec, overrides, sr_bits, seed, margin, row_scaled));
  }, pyb::arg("spec"), pyb::arg("overrides") = pyb::dict(), pyb::arg("sr_bits") = 8, pyb::arg("seed") = 0,
        pyb::arg("margin") = 0, pyb::arg("row_scaled") = false,
        "The JSON text of a spec built as quantize builds it; overrides: {keyword: text} (spec_override_names()).");
  m.def("spec_override_names", [] {
    std::vector<std::string> names;
    for (const auto& f : SpecOverrideFields()) names.push_back(f.name);
    return names;
  }, "The text overrides of a spec by their keywords (rule, rounding, ...), in the CLI's order.");
  m.def("describe_spec", [](const pyb::object& spec) { return DescribeSpec(SpecFromObject(spec)); },
        pyb::arg("spec"), "One line describing a spec (a name, a dict or JSON text).");
}

// The engine's tensor quantizer on CUDA memory (qmx.quantize of a CUDA tensor): the scale grid first, so that
// A quantized CUDA tensor's description (qmx.CudaQuantizedTensor, as a dict): its spec, shape and amaxes.
QuantizedTensor CudaShell(const pyb::dict& d, const char* what) {
  QuantizedTensor q;
  q.spec = SpecFromObject(d["spec"]);
  q.rows = d["rows"].cast<size_t>();
  q.cols = d["cols"].cast<size_t>();
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  q.scale_rows = q.rows == 0 || q.cols == 0 ? 0 : (q.rows + be.rows - 1) / be.rows;
  q.scale_cols = q.rows == 0 || q.cols == 0 ? 0 : (q.cols + be.cols - 1) / be.cols;
  q.tensor_amax = d["tensor_amax"].cast<float>();
  q.tensor_decode = d["tensor_decode"].cast<float>();
  q.line_amax = d["line_amax"].cast<std::vector<float>>();
  q.shape = {q.rows, q.cols};
  if (q.spec.row_scaled && q.line_amax.size() != (q.spec.axis == Axis::kCol ? q.cols : q.rows))
    throw Error(std::string(what) + ": its line amaxes do not match its shape");
  return q;
}

// Python can allocate the outputs on the tensor's device, then the run on torch's stream.
void BindQuantizeCuda(pyb::module_& m) {
  m.def("quantize_layout", [](const pyb::object& spec, size_t rows, size_t cols) {
    const QuantSpec s = SpecFromObject(spec);
    const BlockExtent be = ResolveBlock(s, rows, cols);
    pyb::dict d;
    d["scale_rows"] = rows == 0 || cols == 0 ? 0 : (rows + be.rows - 1) / be.rows;
    d["scale_cols"] = rows == 0 || cols == 0 ? 0 : (cols + be.cols - 1) / be.cols;
    d["scale_format"] = s.scale_format.empty() ? std::string(ScaleFormatName(ScaleFormatOf(s.rule))) : s.scale_format;
    return d;
  }, pyb::arg("spec"), pyb::arg("rows"), pyb::arg("cols"), "The scale grid and scale format of a rows x cols tensor.");
  m.def("quantize_cuda", [](uintptr_t x, const std::string& dtype, size_t rows, size_t cols, const pyb::object& spec,
                            uintptr_t codes, uintptr_t scales, uintptr_t stream) {
    TensorView v;
    if (dtype == "float32") v.dtype = DType::kF32;
    else if (dtype == "float16") v.dtype = DType::kF16;
    else if (dtype == "bfloat16") v.dtype = DType::kBF16;
    else throw pyb::type_error("the engine quantizes float32, float16 or bfloat16 tensors, not " + dtype);
    v.data = reinterpret_cast<const void*>(x);
    v.rows = rows;
    v.cols = cols;
    const QuantSpec s = SpecFromObject(spec);
#if defined(QMX_HAVE_CUDA)
    QuantizedTensor q;
    {
      pyb::gil_scoped_release nogil;
      q = gpu::EngineQuantizeOnDevice(v, s, reinterpret_cast<uint8_t*>(codes), reinterpret_cast<uint8_t*>(scales),
                                      reinterpret_cast<void*>(stream));
    }
    pyb::dict d;
    d["spec"] = QuantSpecToJson(q.spec);
    d["tensor_amax"] = q.tensor_amax;
    d["tensor_decode"] = q.tensor_decode;
    d["line_amax"] = q.line_amax;
    return d;
#else
    (void)v, (void)s, (void)codes, (void)scales, (void)stream;
    throw Error(kNoCuda);
#endif
  }, pyb::arg("x"), pyb::arg("dtype"), pyb::arg("rows"), pyb::arg("cols"), pyb::arg("spec"), pyb::arg("codes"),
        pyb::arg("scales"), pyb::arg("stream"),
        "Runs qmx::gpu::EngineQuantizeOnDevice on device address x (rows x cols of dtype) into the device buffers\n"
        "codes and scales on CUDA stream `stream`; returns the spec's JSON, tensor_amax, tensor_decode, line_amax.");
  m.def("gemm_cuda", [](const pyb::dict& a, const pyb::dict& b, const std::string& model, const std::string& alpha,
                        uintptr_t out, uintptr_t stream) {
    QuantizedTensor qa = CudaShell(a, "a"), qb = CudaShell(b, "b");
    AccumModel am = AccumModelByName(model);
    am.alpha = ParseAlphaRule(alpha);
#if defined(QMX_HAVE_CUDA)
    gpu::EngineGemmStats st;
    const auto ptr = [](const pyb::dict& d, const char* key) { return reinterpret_cast<const uint8_t*>(d[key].cast<uintptr_t>()); };
    const uint8_t *ca = ptr(a, "codes"), *sa_raw = ptr(a, "scales"), *cb = ptr(b, "codes"), *sb_raw = ptr(b, "scales");
    {
      pyb::gil_scoped_release nogil;
      std::unique_ptr<gpu::DeviceMemory> sa, sb;
      void* const cs = reinterpret_cast<void*>(stream);
      const gpu::DeviceGemmOperand da = gpu::DeviceOperandFromQuantized(qa, ca, sa_raw, sa, cs);
      const gpu::DeviceGemmOperand db = gpu::DeviceOperandFromQuantized(qb, cb, sb_raw, sb, cs);
      gpu::EngineGemmOnDevice(da, db, am, reinterpret_cast<float*>(out), cs, &st);
    }
    pyb::dict r;
    r["kernel"] = st.kernel;
    r["steps"] = st.steps;
    r["fallback_steps"] = st.fallback_steps;
    r["whole_outputs"] = st.whole_outputs;
    r["kernel_seconds"] = st.kernel_seconds;
    return r;
#else
    (void)qa, (void)qb, (void)am, (void)out, (void)stream;
    throw Error(kNoCuda);
#endif
  }, pyb::arg("a"), pyb::arg("b"), pyb::arg("model"), pyb::arg("alpha"), pyb::arg("out"), pyb::arg("stream"),
        "qmx::gpu::EngineGemmOnDevice of two quantized CUDA tensors, each a dict of spec, rows, cols, tensor_amax,\n"
        "tensor_decode, line_amax and the device addresses codes and scales, into the M x N float32 device buffer\n"
        "out on CUDA stream `stream`; returns the kernel that ran and its step counts.");
  m.def("dequantize_cuda", [](const pyb::dict& q, uintptr_t out, uintptr_t stream, const std::string& order_name,
                              bool ftz) {
    const QuantizedTensor shell = CudaShell(q, "dequantize");
    const DequantOrder order = ParseDequantOrder(order_name);
    const auto codes = reinterpret_cast<const uint8_t*>(q["codes"].cast<uintptr_t>());
    const auto scales = reinterpret_cast<const uint8_t*>(q["scales"].cast<uintptr_t>());
#if defined(QMX_HAVE_CUDA)
    pyb::gil_scoped_release nogil;
    gpu::EngineDequantizeOnDevice(shell, codes, scales, reinterpret_cast<float*>(out), reinterpret_cast<void*>(stream),
                                  order, ftz);
#else
    (void)shell, (void)order, (void)codes, (void)scales, (void)out, (void)stream, (void)ftz;
    throw Error(kNoCuda);
#endif
  }, pyb::arg("q"), pyb::arg("out"), pyb::arg("stream"), pyb::arg("order") = "rule", pyb::arg("ftz") = false,
        "qmx::gpu::EngineDequantizeOnDevice of a quantized CUDA tensor (gemm_cuda's dict) into the float32 device\n"
        "buffer out (rows x cols) on CUDA stream `stream`, NVFP4's scales met in `order`, flushed under ftz.");
}

// The quantizers and what goes with them (statistics, amax, QuEST, reassembly).
void BindQuantizers(pyb::module_& m) {
  m.def("quantize_stats", [](const pyb::array& x, const QuantizedTensor& q, const std::string& src) {
    const InArray in = FloatInput(x, src, "x");
    const TensorView v = ViewOf(in);
    if (v.rows * v.cols != q.codes.size())
      throw Error("quantize_stats: x has " + std::to_string(v.rows * v.cols) + " elements and the quantized tensor " +
                  std::to_string(q.codes.size()));
    QuantStats st;
    {
      pyb::gil_scoped_release nogil;
      st = ComputeStats(v, q);
    }
    pyb::dict d;
    for (const auto& [name, count] : QuantStatsCounts(st)) d[name.c_str()] = count;
    std::vector<uint64_t> h = st.scale_histogram;
    const size_t n = h.size();
    d["scale_histogram"] = ToArray(std::move(h), {n});
    return d;
  }, pyb::arg("x"), pyb::arg("q"), pyb::arg("src") = "",
        "What quantizing x into q did (the CLI's quantize summary): elements, nan_inputs, inf_inputs, saturated\n"
        "(finite inputs past the element's max after scaling), flushed_to_zero (nonzero finite inputs that became a\n"
        "zero code), nan_blocks, and the 256-bin scale_histogram.");

  m.def("quantize", [](const pyb::array& x, const pyb::object& spec, DelayedScaling* state,
                       const std::optional<float>& tensor_amax, const std::string& src, bool reference) {
    const InArray in = FloatInput(x, src, "x");
    const QuantSpec s = SpecFromObject(spec);
    const TensorView v = ViewOf(in);
    auto q = std::make_shared<QuantizedTensor>();
    if (s.delayed && state == nullptr) throw Error("spec '" + s.name + "' is delayed: pass state=qmx.DelayedScaling(...)");
    if (!s.delayed && state != nullptr) throw Error("state is for delayed-scaling specs (fp8-delayed)");
    {
      pyb::gil_scoped_release nogil;
      if (state != nullptr) {
        *q = QuantizeDelayed(v, s, *state);
      } else if (tensor_amax) {
        CheckGivenAmax(v, s, *tensor_amax);
        *q = reference ? QuantizeNvfp4WithAmaxRef(v, s, *tensor_amax) : QuantizeNvfp4WithAmax(v, s, *tensor_amax);
      } else {
        *q = reference ? QuantizeRef(v, s) : Quantize(v, s);
      }
    }
    q->shape = in.shape;
    return q;
  }, pyb::arg("x"), pyb::arg("spec"), pyb::arg("state") = nullptr, pyb::arg("tensor_amax") = std::nullopt,
        pyb::arg("src") = "", pyb::arg("reference") = false);

  m.def("tensor_amax", [](const pyb::array& x, const std::string& nan_policy, const std::string& src, bool reference) {
    const InArray in = FloatInput(x, src, "x");
    const NanPolicy policy = ParseNanPolicy(nan_policy);
    const TensorView v = ViewOf(in);
    float r;
    {
      pyb::gil_scoped_release nogil;
      r = reference ? TensorAmaxRef(v, policy) : TensorAmax(v, policy);
    }
    return r;
  }, pyb::arg("x"), pyb::arg("nan_policy") = "block-nan", pyb::arg("src") = "", pyb::arg("reference") = false,
        "The tensor amax a per-tensor spec measures (NVFP4's S_enc, FP8 current scaling): max |x|, NaN skipped, "
        "Inf counted except under block-nan and ignore. The default policy is the nvfp4 spec's.");

  m.def("fake_quantize", [](const pyb::array& x, const pyb::object& spec, const std::string& src) {
    const InArray in = FloatInput(x, src, "x");
    const QuantSpec s = SpecFromObject(spec);
    pyb::array_t<float> out = NewArray<float>(in.shape);
    float* o = out.mutable_data();
    {
      pyb::gil_scoped_release nogil;
      FakeQuantize(ViewOf(in), s, o);
    }
    return out;
  }, pyb::arg("x"), pyb::arg("spec"), pyb::arg("src") = "");

  m.def("quest", [](const pyb::array& x, const pyb::object& spec, double clip_ratio, const std::string& stat,
                    const std::string& scale_rounding) {
    const InArray in = F32Input(x, "x");
    size_t rows = 0, cols = 0;
    RowsCols(in.shape, rows, cols);
    const QuantSpec s = SpecFromObject(spec);
    QuestOptions o;
    o.clip_ratio = clip_ratio;
    o.stat = ParseQuestStat(stat);
    o.scale_rounding = ParseQuestScaleRounding(scale_rounding);
    QuestResult r;
    {
      pyb::gil_scoped_release nogil;
      r = QuestQuantize(static_cast<const float*>(in.data), rows, cols, s, o);
    }
    const size_t groups = r.scales.size();
    pyb::dict d;
    d["dequant"] = ToArray(std::move(r.dequant), in.shape);
    d["codes"] = ToArray(std::move(r.codes), in.shape);
    d["mask"] = ToArray(std::move(r.mask), in.shape);
    d["scales"] = ToArray(std::move(r.scales), {groups});
    d["clipped"] = r.clipped;
    return d;
  }, pyb::arg("x"), pyb::arg("spec") = "mxfp4", pyb::arg("clip_ratio") = 0.0, pyb::arg("stat") = "std",
        pyb::arg("scale_rounding") = "floor",
        "QuEST's forward quantizer on x (already Hadamard-transformed; qmx-sim's --transform quest): per\n"
        "1xK group a scale of clip_ratio x the group's std (or rms) / the element max, floored to a power of\n"
        "two (or 'nearest', 'exact'), RNE to the elements; returns dequant, codes, the trust mask, the\n"
        "scales (one per group) and the clipped count. clip_ratio 0: the format's MSE-optimal constant.");

  m.def("assemble", [](const pyb::array& codes, const pyb::array& scales, const pyb::object& spec, float tensor_amax,
                       const std::optional<std::vector<float>>& line_amax) {
    const InArray c = CodesInput(codes, "codes");
    const QuantSpec s = SpecFromObject(spec);
    if (!(scales.flags() & pyb::array::c_style)) throw pyb::type_error("scales must be C-contiguous");
    const bool fp32 = ScaleFormatOf(s.rule) == ScaleFormat::kFp32;
    if (fp32 ? !scales.dtype().is(pyb::dtype::of<float>()) : !scales.dtype().is(pyb::dtype::of<uint8_t>()))
      throw pyb::type_error(std::string("scales of spec '") + s.name + "' must be " + (fp32 ? "float32" : "uint8"));
    const auto* cb = static_cast<const uint8_t*>(c.data);
    const auto* sb = static_cast<const uint8_t*>(scales.data());
    return std::make_shared<QuantizedTensor>(
        AssembleQuantized(s, c.shape, std::vector<uint8_t>(cb, cb + c.count),
                          std::vector<uint8_t>(sb, sb + scales.nbytes()), tensor_amax,
                          line_amax ? *line_amax : std::vector<float>{}));
  }, pyb::arg("codes"), pyb::arg("scales"), pyb::arg("spec"), pyb::arg("tensor_amax") = 0.0f,
        pyb::arg("line_amax") = std::nullopt,
        "A QuantizedTensor from stored codes and scales (copied), its spec (a name, a dict or JSON text), the\n"
        "tensor amax and, for a row-scaled spec, each line's amax.");
}

}  // namespace

void BindQuantize(pyb::module_& m) {
  BindQuantizeTypes(m);
  BindSpecs(m);
  BindQuantizers(m);
  BindQuantizeCuda(m);
}

}  // namespace qmx::py
