// tensor_inputs.h: reading the float tensors a command works on from .npy and .safetensors files, shared
// by `quantize`, `study` and `recipe`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/outputs.h"
#include "qmx/io.h"

namespace qmx::cli {

bool EndsWith(const std::string& s, const std::string& suffix);

// The named tensors of a .safetensors file, or, when names is empty, every quantized tensor in a layout of
// qmx/checkpoint.h decoded to FP32 and every F32 / BF16 / F16 / code-dtype tensor that is not part of one
// (throws qmx::Error when there is none). A name is a quantized tensor's logical name (decoded), or a
// tensor of the file (code dtypes decoded to FP32 values). Unknown names throw the reader's IoError.
// allow_none: a file of no such tensor gives an empty list instead of the error.
std::vector<std::pair<std::string, NpyArray>> ReadSafetensorsInputs(const std::string& path,
                                                                    const std::vector<std::string>& names,
                                                                    bool allow_none = false);
// The names ReadSafetensorsInputs(path, {}) reads, in its order, without reading any tensor (qmx::Error when
// there is none).
std::vector<std::string> SafetensorsInputNames(const std::string& path);
// A .npy file as one tensor named after the file ("dir/act.npy" -> "act").
std::pair<std::string, NpyArray> ReadNpyInput(const std::string& path);

// A float tensor as a rows x cols FP32 matrix (rows: all but the last dimension).
struct Input {
  std::string name;
  std::vector<float> data;
  size_t rows = 0, cols = 0;
};
// An F32 / BF16 / F16 array as an Input (qmx::Error for other dtypes or an empty tensor).
Input FromArray(const std::string& name, const NpyArray& arr);
// "file.npy", "file.safetensors" (every float tensor) or "file.safetensors:NAME"; `option` names the
// command-line option in error messages.
struct TensorFileSpec {
  std::string path, name;  // name: the one tensor of a .safetensors file, or "" for all
  bool safetensors = false;
};
TensorFileSpec ParseTensorFileSpec(const std::string& spec, const std::string& option = "--in");
std::vector<Input> LoadTensorFile(const std::string& spec, const std::string& option = "--in");

// Arrays for the files the commands write: U8 bytes, and FP32 values, in the given shape.
NpyArray U8Array(std::vector<size_t> shape, std::vector<uint8_t> bytes);
NpyArray F32Array(std::vector<size_t> shape, const std::vector<float>& v);

}  // namespace qmx::cli
