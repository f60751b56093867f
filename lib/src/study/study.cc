// study.cc: one quantizer applied to one tensor and measured (qmx/study.h).
#include "qmx/study.h"

#include <cmath>
#include <cstring>

#include "qmx/error.h"

namespace qmx {

std::vector<std::string> StudyTransformSyntax() {
  return {"none", "hadamard:N (N in 16 32 64 128 256)", "rht:N[:SEED] (randomized Hadamard)",
          "quest (QuEST clipping after a Hadamard of the spec's block size)", "quest:N", "quest-rht:N[:SEED]"};
}

void SetStudyTransform(StudyMethod& m, const std::string& t) {
  m.hadamard.reset();
  m.quest = false;
  if (t == "none" || t.empty()) return;
  if (t == "quest") {
    m.quest = true;
    if (m.spec.axis != Axis::kRow || m.spec.block_rows != 1 || m.spec.block_cols <= 0)
      throw Error("transform 'quest' needs a row-wise 1xK spec (" + m.spec.name + " is " + DescribeBlock(m.spec) +
                  ")");
    HadamardSpec h;
    h.block = m.spec.block_cols;
    if (h.block != 16 && h.block != 32 && h.block != 64 && h.block != 128 && h.block != 256)
      throw Error("transform 'quest': the spec's block of " + std::to_string(h.block) +
                  " is not a Hadamard size; write quest:N");
    m.hadamard = h;
    return;
  }
  if (t.rfind("quest:", 0) == 0) {
    m.quest = true;
    m.hadamard = ParseHadamard("hadamard:" + t.substr(6));
    return;
  }
  if (t.rfind("quest-rht:", 0) == 0) {
    m.quest = true;
    m.hadamard = ParseHadamard("rht:" + t.substr(10));
    return;
  }
  if (t.rfind("hadamard:", 0) == 0 || t.rfind("rht:", 0) == 0) {
    m.hadamard = ParseHadamard(t);
    return;
  }
  std::string forms;
  for (const std::string& f : StudyTransformSyntax()) forms += "\n  " + f;
  throw Error("unknown transform '" + t + "'; accepted forms:" + forms);
}

std::string DescribeStudyTransform(const StudyMethod& m) {
  if (!m.hadamard) return m.quest ? "quest-nohadamard" : "none";
  if (!m.quest) return DescribeHadamard(*m.hadamard);
  const std::string h = DescribeHadamard(*m.hadamard);  // hadamard:N or rht:N[:S]
  return m.hadamard->randomized ? "quest-" + h : "quest:" + h.substr(h.find(':') + 1);
}

size_t MisalignmentGroup(const StudyMethod& m, size_t cols) {
  if (m.hadamard) return static_cast<size_t>(m.hadamard->block);
  const BlockExtent b = ResolveBlock(m.spec, 1, cols);
  if (m.spec.axis == Axis::kRow && b.rows == 1 && b.cols > 0 && cols % b.cols == 0) return b.cols;
  return cols;
}

StudyOutcome RunStudyMethod(const float* x, size_t rows, size_t cols, const StudyMethod& m, Exec exec) {
  ValidateQuantSpec(m.spec);
  const size_t n = rows * cols;
  StudyOutcome out;
  std::vector<float> y;
  const float* src = x;
  if (m.hadamard) {
    y.resize(n);
    HadamardForward(*m.hadamard, x, y.data(), rows, cols, exec);
    src = y.data();
  }
  std::vector<float> deq(n);
  if (m.quest) {
    QuestResult r = QuestQuantize(src, rows, cols, m.spec, m.quest_opt, exec);
    deq = std::move(r.dequant);
    QuantStats& st = out.stats;
    st.elements = n;
    st.saturated = r.clipped;
    st.scale_histogram.assign(256, 0);
    for (float s : r.scales) {
      int e = 0;
      std::frexp(s, &e);
      const int bin = std::isfinite(s) && s > 0 ? std::min(254, std::max(0, e - 1 + 127)) : 255;
      ++st.scale_histogram[static_cast<size_t>(bin)];
    }
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(src[i])) ++st.nan_inputs;
      else if (std::isinf(src[i])) ++st.inf_inputs;
      else if (src[i] != 0 && deq[i] == 0) ++st.flushed_to_zero;
    }
  } else {
    const TensorView v{DType::kF32, src, rows, cols};
    const QuantizedTensor q = Quantize(v, m.spec, exec);
    out.stats = ComputeStats(v, q);
    Dequantize(q, deq.data(), exec);
  }
  out.misalignment_group = MisalignmentGroup(m, cols);
  out.misalignment = ProjectionMisalignment(src, deq.data(), rows, cols, out.misalignment_group, exec);
  if (m.hadamard) HadamardInverse(*m.hadamard, deq.data(), deq.data(), rows, cols, exec);
  out.error = CompareTensors(x, deq.data(), n, exec);
  return out;
}

}  // namespace qmx
