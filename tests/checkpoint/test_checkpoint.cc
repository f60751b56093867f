// test_checkpoint.cc: synthetic checkpoints in each published layout (qmx/checkpoint.h) found, read and
// decoded against each producer's formula written out here independently (E2M1 and E4M3 by their OCP
// tables, products in FP32 as the producers' PyTorch code computes them), swizzled scales built by
// torchao's to_blocked reshapes, the audit naming the rule that made a tensor (and none after a stored
// scale is changed), and its counts and first differences against their definitions.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qmx/checkpoint.h"
#include "qmx/error.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"
#include "support/arrays.h"

using namespace qmx;
using Catch::Matchers::Contains;
using qmx::test::F32Array;
using qmx::test::U8Array;

namespace {

// OCP E2M1 by value (gpt-oss's FP4_VALUES table).
const float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

// OCP E4M3 by its fields: bias 7, subnormals 2^-6 * m/8, S.1111.111 NaN.
float E4m3(uint8_t c) {
  const int e = (c >> 3) & 0xF, m = c & 7;
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  if (e == 15 && m == 7) return NAN;
  return sign * (e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7));
}

bool SameBits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b));
}

std::vector<uint8_t> Random(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

// Two E2M1 codes per byte, element 2i in the low nibble (written out, not PackCodes).
template <class Codes>
std::vector<uint8_t> Nibbles(const Codes& codes) {
  std::vector<uint8_t> out(codes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  return out;
}

std::string Write(const std::vector<SafetensorsEntry>& entries, const std::map<std::string, std::string>& meta = {}) {
  static int n = 0;
  const std::string path = "/tmp/qmx_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".safetensors";
  WriteSafetensorsTyped(path, entries, meta);
  return path;
}

struct Loaded {
  std::vector<CheckpointTensorInfo> found;
  CheckpointTensor t;
  std::vector<float> values;
};
Loaded LoadOnly(const std::string& path) {
  const SafetensorsReader r(path);
  Loaded l;
  l.found = ScanCheckpoint(r);
  REQUIRE(l.found.size() == 1);
  l.t = LoadCheckpointTensor(r, l.found[0]);
  l.values = DecodeCheckpointTensor(l.t);
  return l;
}

void CheckValues(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!SameBits(got[i], want[i]) && bad++ < 5) FAIL_CHECK("element " << i << ": got " << got[i] << ", want " << want[i]);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("checkpoint: gpt-oss MXFP4 blocks and scales, both namings", "[checkpoint]") {
  // [E=2, rows=3, G=2, 16] blocks, [2, 3, 2] scales; one scale 0xFF (NaN by OCP; gpt-oss's ldexp gives Inf).
  const size_t E = 2, R = 3, G = 2;
  const std::vector<uint8_t> codes = Random(E * R * G * 32, 1, 0, 15);
  std::vector<uint8_t> scales = Random(E * R * G, 2, 110, 140);
  scales[5] = 0xFF;
  std::vector<float> want(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    const uint8_t s = scales[i / 32];
    want[i] = s == 0xFF ? NAN : std::ldexp(kE2M1[codes[i]], s - 127);
  }
  for (const char* sep : {".", "_"}) {
    const std::string x = std::string("model.layers.0.mlp.experts.down_proj");
    const std::string path = Write({{x + sep + "blocks", U8Array({E, R, G, 16}, Nibbles(codes)), ""},
                                    {x + sep + "scales", U8Array({E, R, G}, scales), ""},
                                    {"model.layers.0.mlp.experts.down_proj_bias", F32Array({E, R}, std::vector<float>(E * R, 1)), ""}});
    const Loaded l = LoadOnly(path);
    CHECK(l.found[0].name == x);
    CHECK(l.found[0].layout == CheckpointLayout::kGptOssMxfp4);
    CHECK(l.t.q.shape == std::vector<size_t>{E, R, G * 32});
    CheckValues(l.values, want);
    std::remove(path.c_str());
  }
  // Blocks that are not [..., G, 16] beside [..., G] scales.
  const std::string bad = Write({{"w.blocks", U8Array({3, 15}, std::vector<uint8_t>(45)), ""}, {"w.scales", U8Array({3}, {1, 2, 3}), ""}});
  const SafetensorsReader r(bad);
  CHECK_THROWS_WITH(LoadCheckpointTensor(r, ScanCheckpoint(r).at(0)), Contains("must be [..., G, 16]"));
  std::remove(bad.c_str());
}

TEST_CASE("checkpoint: NVFP4 as ModelOpt (multiplier) and compressed-tensors (divisor) store it", "[checkpoint]") {
  const size_t O = 4, I = 64;
  const std::vector<uint8_t> codes = Random(O * I, 3, 0, 15);
  const std::vector<uint8_t> s8 = Random(O * I / 16, 4, 0x20, 0x7e);
  const float ws2 = 0.0123456789f, gs = 81.0f;
  std::vector<float> want_mo(codes.size()), want_ct(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    const float s = E4m3(s8[i / 16]);
    want_mo[i] = kE2M1[codes[i]] * (s * ws2);  // ModelOpt: nibble * (weight_scale * weight_scale_2)
    want_ct[i] = kE2M1[codes[i]] * (s / gs);   // compressed-tensors: nibble * (weight_scale / global_scale)
  }
  {
    const std::string path = Write({{"l.weight", U8Array({O, I / 2}, Nibbles(codes)), ""},
                                    {"l.weight_scale", U8Array({O, I / 16}, s8), "F8_E4M3"},
                                    {"l.weight_scale_2", F32Array({}, {ws2}), ""},
                                    {"l.input_scale", F32Array({}, {0.5f}), ""}});
    const Loaded l = LoadOnly(path);
    CHECK(l.found[0].name == "l.weight");
    CHECK(l.found[0].layout == CheckpointLayout::kModelOptNvfp4);
    CHECK(l.found[0].parts.size() == 4);
    CHECK(l.t.q.shape == std::vector<size_t>{O, I});
    CheckValues(l.values, want_mo);
    std::remove(path.c_str());
  }
  {  // the weight as native F4 with its logical shape
    const std::string path = Write({{"l.weight", U8Array({O, I}, codes), "F4"},
                                    {"l.weight_scale", U8Array({O, I / 16}, s8), "F8_E4M3"},
                                    {"l.weight_scale_2", F32Array({}, {ws2}), ""}});
    CheckValues(LoadOnly(path).values, want_mo);
    std::remove(path.c_str());
  }
  {
    const std::string path = Write({{"l.weight_packed", U8Array({O, I / 2}, Nibbles(codes)), ""},
                                    {"l.weight_scale", U8Array({O, I / 16}, s8), "F8_E4M3"},
                                    {"l.weight_global_scale", F32Array({1}, {gs}), ""}});
    const Loaded l = LoadOnly(path);
    CHECK(l.found[0].layout == CheckpointLayout::kCompressedTensorsNvfp4);
    CheckValues(l.values, want_ct);
    std::remove(path.c_str());
  }
  {  // a tiny weight_scale_2: with flush-to-zero, a decode scale or value below 2^-126 is a zero of its sign
    const float tiny = 0x1p-130f;
    const std::string path = Write({{"l.weight", U8Array({O, I / 2}, Nibbles(codes)), ""},
                                    {"l.weight_scale", U8Array({O, I / 16}, s8), "F8_E4M3"},
                                    {"l.weight_scale_2", F32Array({}, {tiny}), ""}});
    const Loaded l = LoadOnly(path);
    const std::vector<float> ftz = DecodeCheckpointTensor(l.t, DequantOrder::kByRule, true);
    const auto flush = [](float x) { return x != 0 && std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; };
    size_t changed = 0;
    for (size_t i = 0; i < codes.size(); ++i) {
      volatile float scale = E4m3(s8[i / 16]) * tiny;
      const float want = flush(kE2M1[codes[i]] * flush(scale));
      CHECK(SameBits(ftz[i], want));
      CHECK(SameBits(l.values[i], kE2M1[codes[i]] * static_cast<float>(scale)));
      changed += !SameBits(ftz[i], l.values[i]);
    }
    CHECK(changed > 0);
    std::remove(path.c_str());
  }
  {  // a scale grid that does not fit the weight
    const std::string path = Write({{"l.weight", U8Array({O, I / 2}, Nibbles(codes)), ""},
                                    {"l.weight_scale", U8Array({O, I / 32}, std::vector<uint8_t>(O * I / 32, 0x38)), "F8_E4M3"},
                                    {"l.weight_scale_2", F32Array({}, {ws2}), ""}});
    const SafetensorsReader r(path);
    CHECK_THROWS_WITH(LoadCheckpointTensor(r, ScanCheckpoint(r).at(0)), Contains("does not hold the 4 x 4 scales"));
    std::remove(path.c_str());
  }
  {  // weight_scale_2 without its weight
    const std::string path = Write({{"l.weight_scale_2", F32Array({}, {ws2}), ""}});
    const SafetensorsReader r(path);
    CHECK_THROWS_WITH(ScanCheckpoint(r), Contains("needs 'l.weight'"));
    std::remove(path.c_str());
  }
}

TEST_CASE("checkpoint: torchao NVFP4 with cuBLAS-swizzled scales, MXFP8 with linear ones", "[checkpoint]") {
  // 130 x 64 NVFP4: a 130 x 4 scale grid, swizzled into ceil(130/128) = 2 row tiles of 128 x 4 (shape
  // [64, 16]) by torchao's to_blocked: view(2, 128, 1, 4).permute(0, 2, 1, 3).reshape(-1, 4, 32, 4)
  // .transpose(1, 2).reshape(-1, 32, 16), written out as index arithmetic over those axes.
  const size_t M = 130, K = 64, C = K / 16;
  const std::vector<uint8_t> codes = Random(M * K, 5, 0, 15);
  const std::vector<uint8_t> s8 = Random(M * C, 6, 0x20, 0x7e);
  std::vector<uint8_t> swizzled(2 * 128 * 4, 0);
  for (size_t r = 0; r < M; ++r)
    for (size_t c = 0; c < C; ++c) {
      const size_t rb = r / 128, cb = c / 4, r128 = r % 128, c4 = c % 4;  // view + permute: block (rb, cb)
      const size_t r1 = r128 / 32, r2 = r128 % 32;                        // reshape(-1, 4, 32, 4): [b, r1, r2, c4]
      const size_t b = rb * 1 + cb;                                       // one column block
      swizzled[b * 512 + r2 * 16 + r1 * 4 + c4] = s8[r * C + c];           // transpose(1, 2): [b, r2, r1, c4]
    }
  const float pts = 0.03125f * 1.1f;
  std::vector<float> want(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) want[i] = kE2M1[codes[i]] * (pts * E4m3(s8[(i / K) * C + (i % K) / 16]));
  {
    const std::string path = Write({{"0._weight_qdata", U8Array({M, K / 2}, Nibbles(codes)), ""},
                                    {"0._weight_scale", U8Array({64, 16}, swizzled), "F8_E4M3"},
                                    {"0._weight_per_tensor_scale", F32Array({}, {pts}), ""}});
    const Loaded l = LoadOnly(path);
    CHECK(l.found[0].name == "0.weight");
    CHECK(l.found[0].layout == CheckpointLayout::kTorchao);
    CHECK(l.t.q.scales == s8);
    CheckValues(l.values, want);
    std::remove(path.c_str());
  }
  {  // MXFP8: F8_E4M3 qdata, F8_E8M0 scales [M, K / 32], linear
    const std::vector<uint8_t> c8 = Random(M * K, 7, 0, 0xFE);
    std::vector<uint8_t> e8 = Random(M * K / 32, 8, 100, 150);
    std::vector<float> w8(c8.size());
    for (size_t i = 0; i < c8.size(); ++i) w8[i] = E4m3(c8[i]) * std::ldexp(1.0f, e8[i / 32] - 127);
    const std::string path = Write({{"lin._weight_qdata", U8Array({M, K}, c8), "F8_E4M3"}, {"lin._weight_scale", U8Array({M, K / 32}, e8), "F8_E8M0"}});
    const Loaded l = LoadOnly(path);
    CHECK(l.t.q.spec.elem == fmt::kE4M3);
    CheckValues(l.values, w8);
    std::remove(path.c_str());
  }
}

TEST_CASE("checkpoint: DeepSeek-V3 128x128 FP8 with edge blocks, scaled FP8 per row and per tensor", "[checkpoint]") {
  const size_t O = 130, I = 260;
  const std::vector<uint8_t> c8 = Random(O * I, 9, 0, 0xFE);
  std::vector<float> s(2 * 3);
  for (size_t i = 0; i < s.size(); ++i) s[i] = 0.001f * static_cast<float>(i + 1) / 3.0f;
  std::vector<float> want(c8.size());
  for (size_t i = 0; i < c8.size(); ++i) want[i] = E4m3(c8[i]) * s[(i / I) / 128 * 3 + (i % I) / 128];
  {
    const std::string path = Write({{"m.weight", U8Array({O, I}, c8), "F8_E4M3"}, {"m.weight_scale_inv", F32Array({2, 3}, s), ""}});
    const Loaded l = LoadOnly(path);
    CHECK(l.found[0].layout == CheckpointLayout::kDeepSeekFp8);
    CheckValues(l.values, want);
    std::remove(path.c_str());
  }
  std::vector<float> row(O);
  for (size_t i = 0; i < O; ++i) row[i] = 0.01f / static_cast<float>(i + 3);
  for (size_t i = 0; i < c8.size(); ++i) want[i] = E4m3(c8[i]) * row[i / I];
  {
    const std::string path = Write({{"m.weight", U8Array({O, I}, c8), "F8_E4M3"}, {"m.weight_scale", F32Array({O, 1}, row), ""},
                                    {"m.input_scale", F32Array({}, {1.0f}), ""}});
    const Loaded l = LoadOnly(path);
    CHECK(l.found[0].layout == CheckpointLayout::kFp8Scaled);
    CHECK(l.t.q.spec.block_rows == 1);
    CheckValues(l.values, want);
    std::remove(path.c_str());
  }
  for (size_t i = 0; i < c8.size(); ++i) want[i] = E4m3(c8[i]) * 0.25f;
  {
    const std::string path = Write({{"m.weight", U8Array({O, I}, c8), "F8_E4M3"}, {"m.weight_scale", F32Array({}, {0.25f}), ""}});
    CheckValues(LoadOnly(path).values, want);
    std::remove(path.c_str());
  }
  {
    const std::string path = Write({{"m.weight", U8Array({O, I}, c8), "F8_E4M3"}, {"m.weight_scale", F32Array({3}, {1, 2, 3}), ""}});
    const SafetensorsReader r(path);
    CHECK_THROWS_WITH(LoadCheckpointTensor(r, ScanCheckpoint(r).at(0)), Contains("neither per tensor nor per row"));
    std::remove(path.c_str());
  }
}

TEST_CASE("checkpoint audit: the rule that made a gpt-oss tensor reproduces it; a changed scale is found",
          "[checkpoint][audit]") {
  const size_t R = 8, K = 256;
  std::vector<float> x(R * K);
  std::mt19937 rng(11);
  std::student_t_distribution<float> d(3.0f);
  for (float& v : x) v = d(rng);
  TensorView view;
  view.data = x.data();
  view.rows = R;
  view.cols = K;
  const NpyArray source = F32Array({R, K}, x);
  const char* const rule = GENERATE(values<const char*>({"ocp-floor", "round-up"}));
  CAPTURE(rule);
  INFO(rule);
  QuantSpec spec = QuantSpecByName("mxfp4");
  spec.rule = ParseScaleRule(rule);
  const QuantizedTensor q = Quantize(view, spec);
  std::vector<uint8_t> scales = q.scales;
  const std::string path = Write({{"w.blocks", U8Array({R, K / 32, 16}, Nibbles(q.codes)), ""}, {"w.scales", U8Array({R, K / 32}, scales), ""}});
  const SafetensorsReader r(path);
  const CheckpointTensor t = LoadCheckpointTensor(r, ScanCheckpoint(r).at(0));
  const AuditResult a = AuditCheckpointTensor(t, &source, "src");
  bool found = false;
  for (const AuditCandidate& c : a.candidates) {
    if (c.name == std::string("rule=") + rule) {
      found = true;
      CHECK(c.reproduces);
    }
  }
  CHECK(found);
  CHECK(a.stats.has_source);
  CHECK(a.stats.elements == R * K);
  std::remove(path.c_str());
  // One stored scale one step larger: no candidate reproduces, and each names scale 13 first.
  scales[13] += 1;
  const std::string bad = Write({{"w.blocks", U8Array({R, K / 32, 16}, Nibbles(q.codes)), ""}, {"w.scales", U8Array({R, K / 32}, scales), ""}});
  const SafetensorsReader rb(bad);
  const AuditResult ab = AuditCheckpointTensor(LoadCheckpointTensor(rb, ScanCheckpoint(rb).at(0)), &source, "src");
  for (const AuditCandidate& c : ab.candidates) {
    INFO(c.name);
    CHECK_FALSE(c.reproduces);
    if (c.name == std::string("rule=") + rule) {
      CHECK(c.scale_mismatches == 1);
      CHECK(c.first_what == "scale");
      CHECK(c.first_index == 13);
      CHECK(c.first_stored == uint32_t{scales[13]});
    }
  }
  std::remove(bad.c_str());
}

TEST_CASE("checkpoint audit: NVFP4 from the source under TE's order, in ModelOpt's layout", "[checkpoint][audit]") {
  const size_t R = 16, K = 128;
  std::vector<float> x(R * K);
  std::mt19937 rng(12);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  TensorView view;
  view.data = x.data();
  view.rows = R;
  view.cols = K;
  const QuantizedTensor q = Quantize(view, QuantSpecByName("nvfp4"));
  const std::string path = Write({{"p.weight", U8Array({R, K / 2}, Nibbles(q.codes)), ""},
                                  {"p.weight_scale", U8Array({R, K / 16}, q.scales), "F8_E4M3"},
                                  {"p.weight_scale_2", F32Array({}, {q.tensor_decode}), ""}});
  const SafetensorsReader r(path);
  const NpyArray source = F32Array({R, K}, x);
  const AuditResult a = AuditCheckpointTensor(LoadCheckpointTensor(r, ScanCheckpoint(r).at(0)), &source, "src");
  CHECK(a.scheme == "nvfp4");
  bool te = false;
  for (const AuditCandidate& c : a.candidates)
    if (c.name == "rule=nvfp4") te = c.reproduces;
  CHECK(te);
  // The source transposed (a producer that stores W^T) is matched by swapping its last two dimensions.
  std::vector<float> xt(x.size());
  for (size_t i = 0; i < R; ++i)
    for (size_t j = 0; j < K; ++j) xt[j * R + i] = x[i * K + j];
  const NpyArray source_t = F32Array({K, R}, xt);
  const AuditResult at = AuditCheckpointTensor(LoadCheckpointTensor(r, ScanCheckpoint(r).at(0)), &source_t, "src^T");
  CHECK(at.candidates.at(0).reproduces == a.candidates.at(0).reproduces);
  const NpyArray wrong = F32Array({R, K / 2}, std::vector<float>(R * K / 2));
  CHECK_THROWS_WITH(AuditCheckpointTensor(LoadCheckpointTensor(r, ScanCheckpoint(r).at(0)), &wrong, "w"), Contains("shape unlike"));
  std::remove(path.c_str());
}

namespace {

// The audit's statistics by their definitions (AuditStats, qmx/checkpoint.h), one element at a time.
AuditStats StatsByDefinition(const CheckpointTensor& t, const std::vector<float>* source) {
  const QuantizedTensor& q = t.q;
  const std::vector<float> decoded = DecodeCheckpointTensor(t);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const double maxv = Limits(q.spec.elem).max_finite;
  AuditStats st;
  for (size_t r = 0; r < q.rows; ++r)
    for (size_t c = 0; c < q.cols; ++c) {
      const size_t i = r * q.cols + c;
      const double v = DecodeToDouble(q.spec.elem, q.codes[i] & q.spec.elem.CodeMask());
      st.zero_codes += v == 0;
      st.nan_codes += std::isnan(v);
      st.max_codes += std::fabs(v) == maxv;
      if (std::isfinite(decoded[i]))
        st.decoded_amax = std::max(st.decoded_amax, std::fabs(static_cast<double>(decoded[i])));
      if (source == nullptr || !std::isfinite((*source)[i])) continue;
      const double x = std::fabs(static_cast<double>((*source)[i]));
      const double s = CheckpointBlockScale(t, (r / be.rows) * q.scale_cols + c / be.cols);
      st.source_amax = std::max(st.source_amax, x);
      st.saturated += std::isfinite(s) && s > 0 && x > maxv * s;
      st.flushed_to_zero += x != 0 && v == 0;
    }
  return st;
}

// A rule's candidate against the stored tensor and its re-quantization of x, compared byte by byte: the
// counts, and the first difference (a scale's before any code's).
void CheckCandidate(const AuditCandidate& a, const QuantizedTensor& stored, const std::vector<float>& x) {
  INFO(a.name);
  QuantSpec spec = stored.spec;
  spec.rule = ParseScaleRule(a.name.substr(5));
  spec.nan = spec.rule == ScaleRule::kMaxFinite ? NanPolicy::kIgnore : NanPolicy::kBlockNan;
  const QuantizedTensor r = Quantize(TensorView{DType::kF32, x.data(), stored.rows, stored.cols}, spec);
  const size_t w = ScaleBytes(ScaleFormatOf(spec.rule));
  uint64_t scales = 0, codes = 0, first = 0;
  uint32_t want = 0, got = 0;
  std::string what;
  for (size_t i = 0; i < stored.scale_rows * stored.scale_cols; ++i)
    if (std::memcmp(&stored.scales[i * w], &r.scales[i * w], w) != 0 && scales++ == 0) {
      what = "scale";
      first = i;
      std::memcpy(&want, &stored.scales[i * w], w);
      std::memcpy(&got, &r.scales[i * w], w);
    }
  for (size_t i = 0; i < stored.codes.size(); ++i)
    if (stored.codes[i] != r.codes[i] && codes++ == 0 && what.empty()) {
      what = "code";
      first = i;
      want = stored.codes[i];
      got = r.codes[i];
    }
  CHECK(a.scale_mismatches == scales);
  CHECK(a.code_mismatches == codes);
  CHECK(a.reproduces == (scales + codes == 0));
  CHECK(a.has_first == !what.empty());
  CHECK(a.first_what == what);
  CHECK(a.first_index == first);
  CHECK(a.first_stored == want);
  CHECK(a.first_requantized == got);
}

}  // namespace

TEST_CASE("checkpoint audit: counts and first differences as defined, element by element, with a source and without",
          "[checkpoint][audit]") {
  // DeepSeek FP8 in ragged 128x128 blocks with every E4M3 code (NaN too) and FP32 scales that are NaN,
  // infinite, zero, negative or tiny; gpt-oss MXFP4 with every UE8M0 byte (0xFF: NaN blocks). The source
  // holds NaN, Inf, zeros, tiny values and values past their block's range.
  const float fp8_scales[12] = {NAN,  INFINITY, 0.0f,  -0.5f, 1e-40f, 0x1p-10f,
                                3.0f, 1e-3f,    7e-2f, 0.25f, 1.5f,   0x1p-20f};
  std::vector<uint8_t> fp8_bytes(sizeof fp8_scales), mx_bytes(64 * 5);
  std::memcpy(fp8_bytes.data(), fp8_scales, sizeof fp8_scales);
  for (size_t i = 0; i < mx_bytes.size(); ++i) mx_bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  CheckpointTensor fp8, mx;
  fp8.info = {"f.weight", CheckpointLayout::kDeepSeekFp8, {"f.weight", "f.weight_scale_inv"}};
  fp8.q =
      AssembleQuantized(QuantSpecByName("fp8-block128x128"), {300, 416}, Random(300 * 416, 21, 0, 255), fp8_bytes, 0);
  mx.info = {"m", CheckpointLayout::kGptOssMxfp4, {"m.blocks", "m.scales"}};
  mx.q = AssembleQuantized(QuantSpecByName("mxfp4"), {64, 160}, Random(64 * 160, 22, 0, 15), mx_bytes, 0);
  for (const CheckpointTensor* t : {&fp8, &mx}) {
    const size_t n = t->q.rows * t->q.cols;
    std::mt19937 rng(23);
    std::normal_distribution<float> nd;
    std::vector<float> x(n);
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, 1e-30f, 1e-42f};
    for (size_t i = 0; i < n; ++i)
      x[i] = i % 97 < 8 ? special[i % 97] : nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 13) - 6);
    const NpyArray source = F32Array(t->q.shape, x);
    for (const bool with_source : {false, true}) {
      INFO(t->info.name << (with_source ? " with a source" : " without a source"));
      const AuditResult a = AuditCheckpointTensor(*t, with_source ? &source : nullptr, "src");
      const AuditStats want = StatsByDefinition(*t, with_source ? &x : nullptr);
      const AuditStats& got = a.stats;
      CHECK(got.elements == n);
      CHECK(got.zero_codes == want.zero_codes);
      CHECK(got.nan_codes == want.nan_codes);
      CHECK(got.max_codes == want.max_codes);
      CHECK(got.decoded_amax == want.decoded_amax);
      CHECK(got.has_source == with_source);
      CHECK(got.source_amax == want.source_amax);
      CHECK(got.saturated == want.saturated);
      CHECK(got.flushed_to_zero == want.flushed_to_zero);
      if (with_source) CHECK(want.saturated > 0);
      if (with_source) CHECK(want.flushed_to_zero > 0);
      const std::vector<float> requantized = with_source ? x : DecodeCheckpointTensor(*t);
      for (const AuditCandidate& c : a.candidates)
        if (c.name.rfind("rule=", 0) == 0) CheckCandidate(c, t->q, requantized);
    }
  }
}

TEST_CASE("checkpoint convert: E4M3 to E4M3FNUZ with factor 2 keeps every value, code for code", "[checkpoint]") {
  // Every finite E4M3 code (both zeros, subnormals, 448) in an FP8 per-tensor checkpoint.
  std::vector<uint8_t> c8;
  for (int rep = 0; rep < 4; ++rep)
    for (int c = 0; c < 256; ++c)
      if ((c & 0x7F) != 0x7F) c8.push_back(static_cast<uint8_t>(c));
  const size_t O = 8, I = c8.size() / O;
  const float s = 0.0123f;
  const std::string path =
      Write({{"m.weight", U8Array({O, I}, c8), "F8_E4M3"}, {"m.weight_scale", F32Array({}, {s}), ""}});
  const Loaded l = LoadOnly(path);
  REQUIRE(l.found[0].layout == CheckpointLayout::kFp8Scaled);
  CHECK(ConvertMatches(l.t, "e4m3"));
  CHECK(!ConvertMatches(l.t, "mxfp4"));
  const QuantSpec to = ConvertTarget(l.t, "e4m3fnuz");
  CHECK(std::string(to.elem.name) == "e4m3fnuz");
  const ConvertAudit a = ConvertCheckpointTensor(l.t, to, 2.0);
  CHECK(a.Exact());
  CHECK(a.elements == c8.size());
  // The independent reading: FNUZ's value of a bit pattern is half OCP's, so every code but OCP's -0 is kept
  // as it is, -0 becomes FNUZ's only zero, and the decode scale doubles.
  REQUIRE(a.converted.codes.size() == c8.size());
  size_t differ = 0;
  for (size_t i = 0; i < c8.size(); ++i) differ += a.converted.codes[i] != (c8[i] == 0x80 ? 0 : c8[i]);
  CHECK(differ == 0);
  CHECK(a.converted.ScaleAt(0, 0) == 2 * s);
  // Without the factor the scale comes from the amax (448 s / 240): values move.
  const ConvertAudit b = ConvertCheckpointTensor(l.t, to, 0);
  CHECK(b.inexact > 0);
  CHECK(b.inexact_blocks == 1);
  REQUIRE(!b.first.empty());
  CHECK(b.first[0].from != b.first[0].to);
  CHECK_THROWS_WITH(ConvertTarget(l.t, "nope"), Contains("neither a quantization spec"));
  CHECK_THROWS_WITH(ConvertTarget(l.t, "e9m9"), Contains("8 bits or fewer"));
  CHECK_THROWS_WITH(ConvertCheckpointTensor(l.t, QuantSpecByName("mxfp8"), 2.0), Contains("per-tensor FP32 target"));
  std::remove(path.c_str());
}

TEST_CASE("checkpoint convert: MXFP4 into MXFP8 is exact; into NVFP4 each changed value is counted", "[checkpoint]") {
  const size_t R = 16, G = 8;  // 16 rows of 8 blocks of 32
  std::vector<uint8_t> codes = Random(R * G * 32, 21, 0, 15);
  std::vector<uint8_t> scales = Random(R * G, 22, 110, 140);
  const std::string path =
      Write({{"w.blocks", U8Array({R, G, 16}, Nibbles(codes)), ""}, {"w.scales", U8Array({R, G}, scales), ""}});
  const Loaded l = LoadOnly(path);
  CHECK(ConvertMatches(l.t, "mxfp4"));
  CHECK(ConvertMatches(l.t, "mx-e2m1"));
  const ConvertAudit a = ConvertCheckpointTensor(l.t, QuantSpecByName("mxfp8"), 0);
  CHECK(a.Exact());
  CHECK(a.blocks == R * G);
  const ConvertAudit b = ConvertCheckpointTensor(l.t, QuantSpecByName("nvfp4"), 0);
  // The count, recomputed from the converted tensor's own dequantization.
  std::vector<float> back(l.values.size());
  Dequantize(b.converted, back.data());
  uint64_t changed = 0;
  for (size_t i = 0; i < back.size(); ++i) changed += !(back[i] == l.values[i] || (std::isnan(back[i]) && std::isnan(l.values[i])));
  CHECK(b.inexact == changed);
  CHECK(b.blocks == R * G * 2);
  CHECK(b.inexact_blocks <= b.blocks);
  CHECK(b.Exact() == (changed == 0));
  std::remove(path.c_str());
}
