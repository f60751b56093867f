// libFuzzer target for the study's user strings: quantization specs (a recipe name with the CLI's overrides,
// or the JSON of a quantized file's qmx.spec metadata), training recipe lists, distributions and Hadamard
// transforms. The input's first line chooses:
//   "{..."                   QuantSpecFromJson of the whole input;
//   "recipe NAME,NAME"       TrainingRecipesByNames;
//   "dist SPEC"              ParseDist (its description must parse back to itself);
//   "hadamard SPEC"          ParseHadamard (the same), then the fast transform against its scalar twin;
//   "NAME KEY=V KEY=V ..."   BuildQuantSpec with the overrides (keys as the CLI's options: profile, elem,
//                            rule, block, axis, round, sat, nan, scaling, subnormals, nan-fallback, sr-bits,
//                            seed, margin, and row-scaled=1).
// Bytes after the first line are the FP32 data (repeated to fill a 4 x 64 tensor). Every string must throw
// qmx::Error or give an object that round-trips through its own description or JSON; a spec must quantize the
// data on the fast path and the scalar reference to the same codes, scales and tensor scales (or make both
// throw qmx::Error).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/quantize.h"
#include "qmx/recipe.h"
#include "qmx/transform.h"

namespace {

constexpr size_t kRows = 4, kCols = 64;

std::vector<float> Data(const uint8_t* p, size_t n) {
  std::vector<float> x(kRows * kCols);
  for (size_t i = 0; i < x.size(); ++i) {
    if (n < 4) {
      x[i] = static_cast<float>(static_cast<int>(i % 29) - 14) * 0.37f;
      continue;
    }
    uint32_t w = 0;
    for (size_t j = 0; j < 4; ++j) w = w << 8 | p[(4 * i + j) % n];
    std::memcpy(&x[i], &w, 4);
  }
  return x;
}

bool Same(const qmx::QuantizedTensor& a, const qmx::QuantizedTensor& b) {
  return a.codes == b.codes && a.scales == b.scales && a.scale_rows == b.scale_rows && a.scale_cols == b.scale_cols &&
         std::memcmp(&a.tensor_amax, &b.tensor_amax, 4) == 0 && std::memcmp(&a.tensor_decode, &b.tensor_decode, 4) == 0;
}

void CheckSpec(const qmx::QuantSpec& spec, const std::vector<float>& x) {
  const std::string json = qmx::QuantSpecToJson(spec);
  if (qmx::QuantSpecToJson(qmx::QuantSpecFromJson(json)) != json) std::abort();
  const qmx::TensorView v{qmx::DType::kF32, x.data(), kRows, kCols};
  qmx::QuantizedTensor fast, ref;
  bool fast_error = false, ref_error = false;
  try {
    fast = qmx::Quantize(v, spec, qmx::Exec::kSequential);
  } catch (const qmx::Error&) {
    fast_error = true;
  }
  try {
    ref = qmx::QuantizeRef(v, spec);
  } catch (const qmx::Error&) {
    ref_error = true;
  }
  if (fast_error != ref_error || (!fast_error && !Same(fast, ref))) std::abort();
}

qmx::QuantSpec FromWords(const std::string& line) {
  std::istringstream in(line);
  std::string name, item;
  in >> name;
  qmx::SpecOverrides o;
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw qmx::Error("not KEY=VALUE");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "profile") o.profile = v;
    else if (k == "elem") o.elem = v;
    else if (k == "rule") o.rule = v;
    else if (k == "block") o.block = v;
    else if (k == "axis") o.axis = v;
    else if (k == "round") o.round = v;
    else if (k == "sat") o.sat = v;
    else if (k == "nan") o.nan_policy = v;
    else if (k == "scaling") o.scaling = v;
    else if (k == "subnormals") o.subnormals = v;
    else if (k == "nan-fallback") o.nan_fallback = v;
    else if (k == "row-scaled") o.row_scaled = v == "1";
    else if (k == "sr-bits" || k == "seed" || k == "margin") {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < -1000000 || n > 1000000) throw qmx::Error("bad number");
      if (k == "sr-bits") o.sr_bits = static_cast<int>(n);
      else if (k == "seed") o.seed = static_cast<uint64_t>(n);
      else o.margin = static_cast<int>(n);
    } else {
      throw qmx::Error("unknown key");
    }
  }
  return qmx::BuildQuantSpec(name, o);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nl = static_cast<const uint8_t*>(std::memchr(data, '\n', size));
  const std::string line(reinterpret_cast<const char*>(data), nl ? static_cast<size_t>(nl - data) : size);
  const std::vector<float> x = nl ? Data(nl + 1, size - static_cast<size_t>(nl + 1 - data)) : Data(nullptr, 0);
  try {
    if (!line.empty() && line[0] == '{') {
      CheckSpec(qmx::QuantSpecFromJson(std::string(reinterpret_cast<const char*>(data), size)), x);
    } else if (line.rfind("recipe ", 0) == 0) {
      std::vector<std::string> names;
      std::stringstream in(line.substr(7));
      for (std::string n; std::getline(in, n, ',');) names.push_back(n);
      for (const auto& r : qmx::TrainingRecipesByNames(names))
        if (qmx::DescribeTrainingRecipe(r).empty()) std::abort();
    } else if (line.rfind("dist ", 0) == 0) {
      const qmx::DistSpec d = qmx::ParseDist(line.substr(5));
      const std::string desc = qmx::DescribeDist(d);
      if (qmx::DescribeDist(qmx::ParseDist(desc)) != desc) std::abort();
      std::vector<float> y(kCols), z(kCols);
      qmx::GenerateDist(d, 7, y.data(), kCols, 0, qmx::Exec::kSequential);
      qmx::GenerateDist(d, 7, z.data(), kCols, 0, qmx::Exec::kParallel);
      if (std::memcmp(y.data(), z.data(), kCols * sizeof(float)) != 0) std::abort();
    } else if (line.rfind("hadamard ", 0) == 0) {
      const qmx::HadamardSpec h = qmx::ParseHadamard(line.substr(9));
      const std::string desc = qmx::DescribeHadamard(h);
      if (qmx::DescribeHadamard(qmx::ParseHadamard(desc)) != desc) std::abort();
      qmx::ValidateHadamard(h, kCols);
      std::vector<float> fast(x.size()), ref(x.size());
      qmx::HadamardForward(h, x.data(), fast.data(), kRows, kCols, qmx::Exec::kSequential);
      qmx::HadamardButterfliesRef(h, x.data(), ref.data(), kRows, kCols);
      if (std::memcmp(fast.data(), ref.data(), x.size() * sizeof(float)) != 0) std::abort();
    } else {
      CheckSpec(FromWords(line), x);
    }
  } catch (const qmx::Error&) {
  }
  return 0;
}
