// bindings.h: the parts of the _qmx extension module, one per library layer, registered by module.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace qmx::py {

void BindFormats(pybind11::module_& m);    // formats.cc: registry, format_info, convert, decode
void BindQuantize(pybind11::module_& m);   // quantize.cc: QuantizedTensor, quantize, dequantize
void BindGemm(pybind11::module_& m);       // gemm.cc: GEMM under the accumulation models
void BindAnalysis(pybind11::module_& m);   // analysis.cc: transforms, metrics, golden vectors
void BindRecipe(pybind11::module_& m);     // recipe.cc: a linear layer under a training recipe
void BindBench(pybind11::module_& m);      // bench.cc: the library kernels timed in-process
void BindIo(pybind11::module_& m);         // io.cc: .safetensors files

}  // namespace qmx::py
