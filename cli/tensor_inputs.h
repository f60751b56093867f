// tensor_inputs.h: reading the float tensors a command works on from .npy and .safetensors files, shared
// by `quantize` and `study`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "qmx/io.h"

namespace qmx::cli {

bool EndsWith(const std::string& s, const std::string& suffix);

// The named tensors of a .safetensors file, or, when names is empty, every F32 / BF16 / F16 tensor in it
// (throws qmx::Error when there is none). Unknown names throw the reader's IoError.
std::vector<std::pair<std::string, NpyArray>> ReadSafetensorsInputs(const std::string& path,
                                                                    const std::vector<std::string>& names);
// A .npy file as one tensor named after the file ("dir/act.npy" -> "act").
std::pair<std::string, NpyArray> ReadNpyInput(const std::string& path);

}  // namespace qmx::cli
