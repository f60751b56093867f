// qmx/checkpoint.h: the quantized tensors of real checkpoints, found by the layouts their producers
// publish (docs/io.md "Checkpoints" cites each), decoded by each layout's own formula, and audited:
// which scale rule or library profile reproduces the stored codes and scales bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/quantize.h"
#include "qmx/safetensors.h"

namespace qmx {

// The layouts (the file's tensor names for a logical tensor P + "weight", or X):
//   qmx                       X.codes, X.scales, metadata qmx.spec (what `qmx-sim quantize` writes)
//   gpt-oss-mxfp4             X.blocks / X_blocks U8 [..., G, 16] (two E2M1 per byte, element 2i low),
//                             X.scales / X_scales U8 [..., G] (UE8M0): MXFP4 1x32 over [..., 32 G]
//   modelopt-nvfp4            P.weight U8 [O, I/2] (or F4 [O, I]), P.weight_scale F8_E4M3 [O, I/16],
//                             P.weight_scale_2 F32 (a multiplier), P.input_scale
//   compressed-tensors-nvfp4  P.weight_packed U8 [O, I/2], P.weight_scale F8_E4M3 [O, I/16],
//                             P.weight_global_scale F32 [1] (a divisor: 2688 / amax), P.input_global_scale
//   compressed-tensors-mxfp4  P.weight_packed U8 [O, I/2], P.weight_scale U8 (UE8M0) [O, I/32]
//   torchao                   M._weight_qdata (U8 packed FP4, or F8_E4M3 / F8_E5M2), M._weight_scale
//                             (F8_E8M0: MX 1x32; F8_E4M3: NVFP4 1x16; linear or cuBLAS-swizzled),
//                             M._weight_per_tensor_scale F32 (NVFP4, a multiplier); logical name M.weight
//   deepseek-fp8              P.weight F8_E4M3 [O, I], P.weight_scale_inv F32 [ceil(O/128), ceil(I/128)]
//                             (a multiplier, despite the name)
//   fp8-scaled                P.weight F8_E4M3 / F8_E5M2, P.weight_scale F32 per tensor ([], [1]) or per
//                             row ([O], [O, 1]) (compressed-tensors and ModelOpt FP8)
enum class CheckpointLayout {
  kQmx,
  kGptOssMxfp4,
  kModelOptNvfp4,
  kCompressedTensorsNvfp4,
  kCompressedTensorsMxfp4,
  kTorchao,
  kDeepSeekFp8,
  kFp8Scaled,
};
const char* CheckpointLayoutName(CheckpointLayout layout);

// A quantized tensor found in a file, before its bytes are read.
struct CheckpointTensorInfo {
  std::string name;                // logical name ("model.layers.0.mlp.down_proj.weight")
  CheckpointLayout layout;
  std::vector<std::string> parts;  // the file's tensors it is made of (codes, scales, globals)
};

// Finds every quantized tensor by its layout's names. Tensors of a matching name whose dtype or shape
// do not fit the layout throw IoError naming them (a checkpoint half in a layout is not guessed at).
std::vector<CheckpointTensorInfo> ScanCheckpoint(const SafetensorsReader& reader);
// The one of `found` with this logical name, or nullptr.
const CheckpointTensorInfo* FindCheckpointTensor(const std::vector<CheckpointTensorInfo>& found, const std::string& name);

// A quantized tensor read: its codes (unpacked, the logical shape), scales in the QuantizedTensor order
// (row-major block grid; swizzled scales are unswizzled) and the spec the layout implies (element format,
// block, scale format; the rule the producer used is what `audit` finds out).
struct CheckpointTensor {
  CheckpointTensorInfo info;
  QuantizedTensor q;
  // NVFP4's second-level scale as stored: ModelOpt's weight_scale_2 and torchao's per_tensor_scale
  // multiply the E4M3 scale, compressed-tensors' weight_global_scale divides it; 1 when absent.
  float global = 1;
  bool global_divides = false;
};
CheckpointTensor LoadCheckpointTensor(const SafetensorsReader& reader, const CheckpointTensorInfo& info);

// The tensor's FP32 values by its producer's formula, each element rounded once to FP32:
//   UE8M0 scales: decode(code) * 2^(s - 127) (s = 0xFF gives NaN, the OCP reading);
//   NVFP4 (modelopt, torchao): fl32(decode(code) * fl32(fp32(s8) * global));
//   NVFP4 (compressed-tensors): fl32(decode(code) * fl32(fp32(s8) / global));
//   FP32 scales: fl32(decode(code) * s); qmx: Dequantize. Frameworks that return BF16 round this result.
std::vector<float> DecodeCheckpointTensor(const CheckpointTensor& t);
// The same with NVFP4's scales met in `order` (qmx/scale.h DequantOrder) for qmx-sim's own tensors; a
// checkpoint's NVFP4 tensors carry their decode scale and its producer's order (any other is an error).
std::vector<float> DecodeCheckpointTensor(const CheckpointTensor& t, DequantOrder order);
// And as a kernel built with flush-to-zero decodes it when `ftz` (qmx/quantize.h Dequantize's ftz): each block's
// decode scale, then each value, below 2^-126 in magnitude taken as a zero of its sign.
std::vector<float> DecodeCheckpointTensor(const CheckpointTensor& t, DequantOrder order, bool ftz);
// Block i's scale as that decoding applies it (row-major over the scale grid): 2^(s - 127) (NaN for 0xFF),
// the FP32 scale, NVFP4's fl32(s8 * global) or fl32(s8 / global) (qmx's own: its rule's decode scale).
float CheckpointBlockScale(const CheckpointTensor& t, size_t i);

// The audit of one quantized tensor: every scale rule and library profile that applies to its scheme,
// re-quantizing the source (the given high-precision tensor, or the decoded values) and comparing codes
// and scales with the stored ones bit for bit.
struct AuditCandidate {
  std::string name;      // "rule=ocp-floor", "profile=torchao-rceil", "rule=nvfp4", ...
  std::string spec;      // DescribeSpec of what was run
  bool reproduces = false;
  uint64_t code_mismatches = 0, scale_mismatches = 0;
  // The first difference: element or scale index (row-major), stored and re-quantized bytes.
  bool has_first = false;
  std::string first_what;  // "code" or "scale"
  uint64_t first_index = 0;
  uint32_t first_stored = 0, first_requantized = 0;
};
struct AuditStats {
  uint64_t elements = 0, zero_codes = 0, max_codes = 0, nan_codes = 0;  // max: +-max finite magnitude
  uint64_t blocks = 0, nan_scales = 0;
  double min_scale = 0, max_scale = 0;          // decoded block scales (finite ones)
  double decoded_amax = 0;                      // max |decoded| over finite values
  // With a source: its amax, the elements that saturated (|x| above the block's max) and the nonzero
  // finite inputs stored as zero codes.
  bool has_source = false;
  double source_amax = 0;
  uint64_t saturated = 0, flushed_to_zero = 0;
};
// The scheme a quantized tensor's formats name: "nvfp4" (E4M3 scales), "mx-ELEM" (UE8M0 scales), or
// "SPEC-ELEM" for FP32 scales ("fp8-block128x128-e4m3").
std::string CheckpointScheme(const QuantizedTensor& q);

struct AuditResult {
  CheckpointTensorInfo info;
  std::string scheme;   // CheckpointScheme: "mx-e2m1", "nvfp4", "fp8-block128x128-e4m3", ...
  std::string source;   // "decoded" or the source tensor's name
  AuditStats stats;
  std::vector<AuditCandidate> candidates;
};
// `source` (F32 / BF16 / F16, the checkpoint's shape, or its last two dimensions swapped) or nullptr to
// audit against the decoded values. Throws qmx::Error when the source's shape does not fit.
AuditResult AuditCheckpointTensor(const CheckpointTensor& t, const NpyArray* source, const std::string& source_name);

// `audit --convert FROM->TO`: whether a quantized tensor converts into another quantization without a value
// changing. FROM matches a tensor by its scheme ("mx-e2m1"), its element format ("e4m3") or a spec name whose
// element and scale formats are the tensor's ("mxfp4", "nvfp4"); ConvertMatches says whether it does.
bool ConvertMatches(const CheckpointTensor& t, const std::string& from);
// The target: a spec name ("mxfp8", "nvfp4", ...), or an element format ("e4m3fnuz"), which keeps the tensor's
// own block and scale format with that element. Throws qmx::Error naming both kinds when `to` is neither.
QuantSpec ConvertTarget(const CheckpointTensor& t, const std::string& to);
struct ConvertDiff {
  uint64_t index = 0;  // element, row-major in the tensor's (rows x cols) view
  float from = 0, to = 0;
};
struct ConvertAudit {
  QuantizedTensor converted;
  uint64_t elements = 0, inexact = 0;      // elements whose value changed (NaN stays NaN; -0 and +0 are one value)
  uint64_t blocks = 0, inexact_blocks = 0;  // the target's scale blocks, and those holding a changed element
  std::vector<ConvertDiff> first;           // the first 10 changed elements
  bool Exact() const { return inexact == 0; }
};
// The tensor's decoded values (DecodeCheckpointTensor) quantized under `to`, then compared with their own
// dequantization. factor > 0 (a per-tensor FP32 target from a per-tensor FP32-scaled tensor only) re-encodes
// element by element instead: each code's value divided by factor into to's element format (its rounding and
// saturation), under the source's scale times factor, which keeps every value where the target holds it:
// E4M3 -> E4M3FNUZ with factor 2 (FNUZ's bias is one more). Throws qmx::Error when factor does not fit.
ConvertAudit ConvertCheckpointTensor(const CheckpointTensor& t, const QuantSpec& to, double factor);

}  // namespace qmx
