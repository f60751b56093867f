// tensor_inputs.cc: float tensors from .npy and .safetensors files for the CLI commands.
#include "tensor_inputs.h"

#include "qmx/error.h"
#include "qmx/safetensors.h"

namespace qmx::cli {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::pair<std::string, NpyArray>> ReadSafetensorsInputs(const std::string& path,
                                                                    const std::vector<std::string>& names) {
  SafetensorsReader r(path);
  std::vector<std::string> picked = names;
  if (picked.empty()) {
    for (const auto& t : r.index().tensors)
      if (t.supported && (t.qmx_dtype == DType::kF32 || t.qmx_dtype == DType::kBF16 || t.qmx_dtype == DType::kF16))
        picked.push_back(t.name);
    if (picked.empty()) throw Error("'" + path + "' holds no F32, BF16 or F16 tensor");
  }
  std::vector<std::pair<std::string, NpyArray>> out;
  for (const auto& n : picked) out.emplace_back(n, r.Read(n));
  return out;
}

std::pair<std::string, NpyArray> ReadNpyInput(const std::string& path) {
  const std::string base = path.substr(path.find_last_of('/') + 1);
  return {base.substr(0, base.size() - 4), ReadNpy(path)};
}

}  // namespace qmx::cli
