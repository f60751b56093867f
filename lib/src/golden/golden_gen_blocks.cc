// golden_gen_blocks.cc: the generators of the block suites, mx-block (OCP MX 6.3: one UE8M0 scale and 32
// element codes per block) and nvfp4-block (Transformer Engine's NVFP4), from edge blocks of the element
// format; and of the sr suite (PTX cvt.rs and P3109's stochastic rounding variants).
#include "golden/golden_gen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "qmx/cast_options.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/mx.h"
#include "qmx/round.h"
#include "qmx/scale.h"

namespace qmx::golden::detail {
namespace {

// ------------------------------------------------------------------ blocks
// Blocks of n FP32 values at the edges of the element format el (issue list of the scaling work),
// followed by `random` random blocks.
std::vector<std::vector<float>> EdgeBlocks(const Format& el, size_t n, int random, CaseRng& rng) {
  const double destmax = Limits(el).max_finite;
  std::vector<std::vector<float>> blocks;
  auto filled = [&](int lo, int hi) {
    std::vector<float> b(n);
    for (auto& v : b) v = RandomValue(rng, lo, hi);
    return b;
  };
  auto with_amax = [&](float amax) {
    std::vector<float> b = filled(-6, 0);  // magnitudes below 1: the others stay below amax
    for (auto& v : b) v = static_cast<float>(v * (static_cast<double>(amax) / 2.0));
    b[rng.Below(n)] = rng.Below(2) ? -amax : amax;
    return b;
  };
  std::vector<float> zeros(n, 0.0f);
  for (size_t i = 0; i < n; i += 2) zeros[i] = -0.0f;
  blocks.push_back(zeros);                                              // amax = 0
  blocks.push_back(with_amax(1.0f));                                    // amax a power of two
  const float dm8 = static_cast<float>(std::ldexp(destmax, 3));
  blocks.push_back(with_amax(dm8));                                     // amax = destmax * 2^3
  blocks.push_back(with_amax(std::nextafter(dm8, INFINITY)));           // just above
  blocks.push_back(with_amax(std::nextafter(dm8, 0.0f)));               // just below
  blocks.push_back(with_amax(F32FromBits(0x41FC0000u)));                          // 31.5: floor's scaled amax overflows destmax
  blocks.push_back(with_amax(F32FromBits(0x00012345u)));                          // amax below 2^-127 * destmax (FP32 subnormal)
  blocks.push_back(with_amax(std::numeric_limits<float>::max()));      // FLT_MAX
  std::vector<float> b = filled(-3, 3);
  b[rng.Below(n)] = std::numeric_limits<float>::quiet_NaN();
  blocks.push_back(b);                                                  // a NaN inside
  b = filled(-3, 3);
  b[rng.Below(n)] = INFINITY;
  blocks.push_back(b);                                                  // an Inf inside
  b = filled(-3, 3);
  b[0] = -INFINITY;
  b[n - 1] = -std::numeric_limits<float>::quiet_NaN();
  blocks.push_back(b);                                                  // -Inf and a NaN
  b = filled(-40, 0);
  b[0] = 1.0f;
  blocks.push_back(b);                                                  // elements underflowing the element format
  // Element midpoints against the scale destmax gives (X = 1 under the floor and round-up rules).
  const std::vector<float> table = DecodeTableF32(el);
  b.assign(n, 0.0f);
  b[0] = static_cast<float>(destmax);
  for (size_t i = 1; i < n; ++i) {
    const uint64_t c = rng.Below(el.MaxFiniteCode());
    const float lo = table[c], hi = table[c + 1];
    b[i] = std::isfinite(lo) && std::isfinite(hi) && lo >= 0 && hi > lo ? (lo + hi) / 2 : lo;
    if (rng.Below(2)) b[i] = -b[i];
  }
  blocks.push_back(b);
  blocks.push_back(std::vector<float>(n, static_cast<float>(-destmax)));  // every element -destmax
  for (int i = 0; i < random; ++i) {
    const int base = -130 + static_cast<int>(rng.Below(250)), spread = 1 + static_cast<int>(rng.Below(12));
    blocks.push_back(filled(base - spread, std::min(base, 127) + 1));
  }
  // A staircase, 1 and every power of two below it (each binade of the elements and under): last, so that
  // the blocks before it keep their random draws.
  b.assign(n, 0.0f);
  for (size_t i = 0; i < n; ++i) b[i] = std::ldexp(i % 2 ? -1.0f : 1.0f, -static_cast<int>(i));
  blocks.push_back(b);
  // A NaN beside one larger element, where the comparison reductions of a block amax part (qmx/scale.h
  // AmaxOrder): the NaN last, first, left of the larger element's first tree partner, after it, and right of
  // its first partner. Built without the random stream, so that every block before keeps its draws.
  const size_t h = n / 2;
  const std::pair<size_t, size_t> places[] = {{n - 1, 0}, {0, h}, {2, 2 + h}, {5, 1}, {h + 1, 1}};
  for (const auto& [nan_at, max_at] : places) {
    for (size_t i = 0; i < n; ++i) b[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + static_cast<float>(i) / 64.0f);
    b[max_at] = 100.0f;
    b[nan_at] = std::numeric_limits<float>::quiet_NaN();
    blocks.push_back(b);
  }
  return blocks;
}

Fields FloatFields(const std::vector<float>& v) {
  Fields f;
  for (float x : v) f.push_back(Hex(F32Bits(x), 8));
  return f;
}

}  // namespace

void GenMxBlock(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  struct Combo {
    ScaleRule rule;
    NanPolicy nan;
    ElementScaling scaling;
  };
  // Every rule x NaN policy with exact element scaling (OCP MX 6.3), then the libraries' FP32 element
  // scalings with the rule and policy each library pairs them with: microxcaling (floor, block NaN),
  // torchao RCEIL (round-up, NaN scale) and Transformer Engine (round-up, te, exp2f_rcp).
  std::vector<Combo> combos;
  for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven, ScaleRule::kMaxFinite})
    for (NanPolicy pol : {NanPolicy::kBlockNan, NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan, NanPolicy::kIgnore})
      combos.push_back({rule, pol, ElementScaling::kExact});
  combos.push_back({ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kFp32});
  combos.push_back({ScaleRule::kRoundUp, NanPolicy::kScaleNan, ElementScaling::kFp32});
  combos.push_back({ScaleRule::kRoundUp, NanPolicy::kTe, ElementScaling::kTeRcp});
  for (const auto& en : MxElements()) {
    for (const Combo& c : combos) {
      MxSpec spec;
      spec.elem = GetFormat(en);
      spec.rule = c.rule;
      spec.nan = c.nan;
      spec.scaling = c.scaling;
      try {
        ValidateMxSpec(spec);
      } catch (const Error&) {
        continue;  // max-finite takes only the ignore policy
      }
      std::string name = en + "_" + ScaleRuleName(c.rule) + "_" + NanPolicyName(c.nan);
      if (c.scaling != ElementScaling::kExact) name += std::string("_") + ElementScalingName(c.scaling);
      CaseRng rng(opt.seed, "mx-block/" + name);
      PlannedFile f;
      f.path = "mx-block/" + name + ".txt";
      f.header.op = "mx-block";
      f.header.Set("elem", en).Set("rule", ScaleRuleName(c.rule)).Set("nan", NanPolicyName(c.nan));
      f.header.Set("scaling", ElementScalingName(spec.scaling)).Set("round", RoundingName(spec.cast.rounding));
      f.header.Set("sat", SaturationName(spec.cast.saturation)).Set("block", "32").Set("spec", "OCP-MX-1.0");
      f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      for (const auto& b : EdgeBlocks(spec.elem, 32, opt.level >= 2 ? 400 : 3, rng)) f.inputs.push_back(FloatFields(b));
      emit(std::move(f));
    }
  }
}

void GenNvfp4Block(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  for (ScaleRule rule : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
    const std::string name = std::string("e2m1_") + ScaleRuleName(rule);
    CaseRng rng(opt.seed, "nvfp4-block/" + name);
    PlannedFile f;
    f.path = "nvfp4-block/" + name + ".txt";
    f.header.op = "nvfp4-block";
    f.header.Set("rule", ScaleRuleName(rule)).Set("round", "rne").Set("sat", "satfinite").Set("block", "16");
    f.header.Set("spec", "TransformerEngine-NVFP4");
    f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
    for (const auto& b : EdgeBlocks(fmt::kE2M1, 16, opt.level >= 2 ? 400 : 6, rng)) {
      float amax = 0;
      for (float v : b)
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
      // The tensor amax: the block's own, a larger one from elsewhere in the tensor, and a smaller one.
      const float larger = static_cast<float>(std::min<double>(std::ldexp(amax, 1 + static_cast<int>(rng.Below(20))),
                                                               std::numeric_limits<float>::max()));
      for (float t : {amax, larger, amax / 3}) {
        Fields fl = {Hex(F32Bits(t), 8)};
        for (const auto& x : FloatFields(b)) fl.push_back(x);
        f.inputs.push_back(std::move(fl));
      }
    }
    // Tensor amax at its own edges: 0, FLT_MAX, Inf, NaN.
    for (float t : {0.0f, std::numeric_limits<float>::max(), INFINITY, std::numeric_limits<float>::quiet_NaN()}) {
      Fields fl = {Hex(F32Bits(t), 8)};
      for (int j = 0; j < 16; ++j) fl.push_back(Hex(F32Bits(RandomValue(rng, -4, 3)), 8));
      f.inputs.push_back(std::move(fl));
    }
    emit(std::move(f));
  }
}

// ------------------------------------------------------------------ sr
void GenSr(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  for (const std::string dn : {"e4m3", "e5m2", "e2m3", "e3m2", "e2m1"}) {
    const Format& d = GetFormat(dn);
    CaseRng rng(opt.seed, "sr/" + dn);
    std::vector<uint64_t> values = ConversionInputs(SrcByName("f32"), d, opt.level, rng);
    // Exact midpoints between neighbouring codes: the random bits alone decide.
    const std::vector<float> table = DecodeTableF32(d);
    for (uint64_t c = 0; c + 1 <= d.MaxFiniteCode(); ++c)
      if (std::isfinite(table[c]) && std::isfinite(table[c + 1]) && table[c + 1] > table[c])
        values.push_back(F32Bits((table[c] + table[c + 1]) / 2));
    PlannedFile f;
    f.path = "sr/" + dn + "_sr-a.txt";
    f.header.op = "sr";
    f.header.Set("dst", dn).Set("round", "sr-a").Set("sr-bits", "8").Set("sat", "satfinite");
    f.header.Set("layout", "ptx-cvt-rs-x4").Set("spec", "PTX-ISA-8.7");
    f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
    const int repeats = opt.level >= 2 ? 8 : 2;
    static const uint32_t kEdges[] = {0x00000000u, 0xFFFFFFFFu, 0x7F7F7F7Fu, 0x80808080u, 0x01FE7F80u};
    for (size_t i = 0; i < values.size(); i += 4) {
      for (int r = 0; r < repeats + 1; ++r) {
        Fields fl;
        for (size_t j = 0; j < 4; ++j) fl.push_back(Hex(values[(i + j) % values.size()], 8));
        const uint32_t rb = r == 0 ? kEdges[(i / 4) % 5] : rng.Next();
        fl.push_back(Hex(rb, 8));
        f.inputs.push_back(std::move(fl));
      }
    }
    emit(std::move(f));
    // Element layout: the other SR variants and bit counts, one input and one R per line.
    for (const auto& [mode, nbits] : std::vector<std::pair<std::string, int>>{{"sr-a", 4}, {"sr-a", 16}, {"sr-b", 8}, {"sr-c", 8}}) {
      PlannedFile e;
      e.path = "sr/" + dn + "_" + mode + "_n" + std::to_string(nbits) + ".txt";
      e.header.op = "sr";
      e.header.Set("dst", dn).Set("round", mode).Set("sr-bits", std::to_string(nbits)).Set("sat", "satfinite");
      e.header.Set("layout", "element").Set("spec", "P3109-4.7.4");
      e.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      CaseRng erng(opt.seed, e.path);
      const uint32_t top = nbits == 32 ? 0xFFFFFFFFu : (1u << nbits) - 1;
      CastOptions cast;
      cast.rounding = ParseRounding(mode);
      cast.sr_bits = nbits;
      for (uint64_t v : values) {
        // R at its edges (0, all ones, the half point; level 2 also just below it), a random draw, and the
        // input's own boundary: the smallest R that rounds it up and the one below (the draw is monotone in R).
        std::vector<uint32_t> rs = {0u, top, (top >> 1) + 1, erng.Next() & top};
        if (opt.level >= 2) rs.push_back(top >> 1);
        if (const uint32_t at = SrThreshold(static_cast<uint32_t>(v), d, cast, top))
          for (uint32_t r : {at - 1, at})
            if (std::find(rs.begin(), rs.end(), r) == rs.end()) rs.push_back(r);
        for (uint32_t r : rs) e.inputs.push_back({Hex(v, 8), Hex(r, 8)});
      }
      emit(std::move(e));
    }
  }
}

}  // namespace qmx::golden::detail
