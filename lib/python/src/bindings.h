// bindings.h: the parts of the _qmx extension module, one per library layer, registered by module.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace qmx::py {

// Why a CUDA entry point cannot run in a build without the backend.
inline constexpr const char* kNoCuda =
    "this qmx was built without the CUDA backend (gpu/README.md: build it with the CUDA Toolkit)";

void BindFormats(pybind11::module_& m);    // formats.cc: registry, format_info, convert, decode
void BindQuantize(pybind11::module_& m);   // quantize.cc: QuantizedTensor, quantize, dequantize
void BindGemm(pybind11::module_& m);       // gemm.cc: GEMM under the accumulation models
void BindAnalysis(pybind11::module_& m);   // analysis.cc: transforms, metrics, golden vectors
void BindRecipe(pybind11::module_& m);     // recipe.cc: a linear layer under a training recipe
void BindBench(pybind11::module_& m);      // bench.cc: the library kernels timed in-process
void BindIo(pybind11::module_& m);         // io.cc: .safetensors files

}  // namespace qmx::py
