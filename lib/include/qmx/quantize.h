// qmx/quantize.h: quantizing whole tensors under a QuantSpec (element format, block shape, axis, scale
// rule, cast options, NaN policy, seed) into a QuantizedTensor {codes, scales, shape, spec}, and back.
// Block layouts follow OCP MX v1.0 (1x32), NVFP4 (1x16, 16x16), DeepSeek-V3 blockwise FP8 (1x128,
// 128x128) and per-row / per-tensor FP8 scaling (docs/REFERENCES.md section 3).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/convert.h"
#include "qmx/detail/uninit_allocator.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/scale.h"

namespace qmx {

// A C-order tensor viewed as rows x cols: the last dimension is cols, the others fold into rows.
struct TensorView {
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16
  const void* data = nullptr;
  size_t rows = 0, cols = 0;
};

// Which direction a 1xK block runs. Row-wise: along the last dimension (a row of X for Y = X W^T);
// column-wise: down the columns (what the transposed GEMM operand needs), quantized from the same
// high-precision source as training frameworks do, never by transposing a quantized tensor.
enum class Axis : uint8_t { kRow, kCol };
const char* AxisName(Axis a);  // "row", "col"
Axis ParseAxis(const std::string& s);

struct QuantSpec {
  std::string name = "custom";
  Format elem = fmt::kE4M3;
  ScaleRule rule = ScaleRule::kRoundUp;
  // Block extent in the row-wise orientation, 0 meaning the whole dimension: 1x32 is {1, 32}, 16x16 is
  // {16, 16}, per-row {1, 0}, per-tensor {0, 0}. Axis::kCol swaps the two.
  int block_rows = 1, block_cols = 32;
  Axis axis = Axis::kRow;
  CastOptions cast{};
  NanPolicy nan = NanPolicy::kBlockNan;
  ElementScaling scaling = ElementScaling::kExact;  // UE8M0 rules: how elements are divided by X
  uint64_t seed = 0;  // stochastic rounding: element (r, c) uses RandomBitsForElement(seed, r * cols + c)
  int margin = 0;     // FP32 scales: s = destmax / amax / 2^margin
  bool delayed = false;  // per-tensor FP32 scale from an amax history (QuantizeDelayed), not the tensor
  // Row-scaled NVFP4 (Transformer Engine's row_scaled_nvfp4, NVIDIA/TransformerEngine#2931): the FP32
  // second-level scale comes from each line's amax instead of the tensor's, a line being a row for axis row
  // and a column for axis col (the direction the 1-D blocks run). NVFP4 rules and 1xN blocks only.
  bool row_scaled = false;
  // 4over6 rules: the order of each candidate's error sum (ErrorOrder, qmx/scale.h).
  ErrorOrder error_order = ErrorOrder::kSeq;
  // The block amax of a comparison reduction (AmaxOrder, qmx/scale.h), with a NaN policy that reacts to a NaN
  // amax: block-nan, scale-nan or te (UE8M0), block-nan (E4M3 and FP32 scales). Runs on the reference.
  AmaxOrder amax_order = AmaxOrder::kAny;
  // NVFP4 rules (but 4over6): the block scales' format, a registry name of a float format of 8 bits or fewer
  // (empty: E4M3, NVFP4's own): "ue4m3" (the same codes), "ue5m3" (AMD gfx1250's E5M3 scales), "e3m4", ...
  // TE's 6 x 448 becomes the elements' largest value (6 for E2M1; elem may be any format under these rules)
  // times the format's (a finite FP32), torchao's clamp [2^-6, 448] the format's smallest normal and largest
  // values; a NaN block's scale is the format's NaN code. Formats other than NVFP4's own (Nvfp4OwnFormats) run
  // on the reference; the GPU engine refuses them.
  // UE8M0 rules (MX, but bfp): the format the power-of-two scales are stored in (empty: UE8M0), as MxSpec's
  // scale_format: the rule's 2^k clamped to the format's powers of two, stored as its code. On the reference;
  // the GPU engine refuses them.
  std::string scale_format;
};

// The scales' code format of a UE8M0-rule spec: UE8M0 unless scale_format names another.
Format MxScaleFormat(const QuantSpec& spec);

// The block scales' code format of an NVFP4-rule spec: E4M3 unless scale_format names another.
Format Nvfp4ScaleFormat(const QuantSpec& spec);
// True when an NVFP4-rule spec's block scales are E4M3 codes (scale_format empty, "e4m3" or "ue4m3", whose
// codes and values are E4M3's).
bool E4m3BlockScales(const QuantSpec& spec);
// The largest value of an NVFP4-rule spec's elements: E2M1's 6 in NVFP4 (the rules' constant 6 is this value).
float Nvfp4ElemMax(const QuantSpec& spec);
// NVFP4's own formats: E4M3 block scales and elements whose largest value is 6 (the fast paths' and the GPU
// engine's case; other formats run on the reference).
bool Nvfp4OwnFormats(const QuantSpec& spec);
// qmx/scale.h's Nvfp4TensorScale and Nvfp4DecodeScale under an NVFP4-rule spec: its rule, its block scales'
// format (Nvfp4ScaleFormat) and its elements' largest value (Nvfp4ElemMax).
float Nvfp4TensorScale(float tensor_amax, const QuantSpec& spec);
float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, const QuantSpec& spec, DequantOrder order);

// The recipes' short names: mxfp8 (e4m3, round-up), mxfp8-ocp (ocp-floor), mxfp8_e5m2, mxfp6_e2m3,
// mxfp6_e3m2, mxfp4 (round-up), mxfp4-ocp, mxint8 (ocp-floor), nvfp4, nvfp4-2d (16x16), nvfp4-row (row-scaled), fp8-tensor-current,
// fp8-delayed, fp8-rowwise, fp8-block1x128, fp8-block128x128, and Tenstorrent's bfp8_b, bfp4_b, bfp2_b (ScaleRule::kBfp).
// Throws qmx::Error listing them.
QuantSpec QuantSpecByName(const std::string& name);
std::vector<std::string> QuantSpecNames();
// Library profiles: the rule, NaN policy, element scaling and rounding that reproduce a library's MX
// quantizer (docs/numerics.md "Profiles" cites the source of each): ocp, microxcaling, torchao-floor,
// torchao-rceil, transformer-engine, cuda-host. Applies to specs with UE8M0 scales; transformer-engine
// also accepts NVFP4 and FP32 specs. Throws qmx::Error for an unknown name or a spec it does not fit.
void ApplyProfile(QuantSpec& spec, const std::string& profile);
std::vector<std::string> ProfileNames();
std::string DescribeBlock(const QuantSpec& spec);  // "1x32", "16x16", "per-row", "per-tensor"
// Sets the block extent from "RxC" ("1x32", "16x16", "1xall"), "per-row" or "per-tensor"; throws qmx::Error.
void SetBlockShape(QuantSpec& spec, const std::string& block);
std::string DescribeSpec(const QuantSpec& spec);   // one line: name, element, block, axis, rule, cast, NaN policy
// Throws qmx::Error naming the inconsistency: an element format of more than 8 bits, a UE8M0 or NaN
// policy the rule cannot carry (NVFP4 with a UE8M0 rule, scale-nan with FP32 scales), max-finite without
// the ignore policy, block extents out of 0..65536, cast options the element cannot honour.
void ValidateQuantSpec(const QuantSpec& spec);

// A named spec's overrides; an empty string keeps the spec's own setting. SpecOverrideFields() names the
// text ones as the CLI and the Python package spell them.
struct SpecOverrides {
  std::string profile, elem, rule, block, axis, round, sat, nan_policy, scaling, subnormals, nan_fallback, error_order,
      amax_order, scale_format;
  int sr_bits = 8;
  uint64_t seed = 0;
  int margin = 0;
  bool row_scaled = false;  // `--row-scaled`: one second-level scale per line (NVFP4 rules)
};
// One text override: its Python keyword ("rounding"), its CLI option with the older spellings CLI11 also
// accepts ("--rule,--scale-rule"), one line of help naming the accepted values, and the field it sets. The
// CLI's `quantize` options, the binding and `qmx.make_spec` all take their list from this one table.
struct SpecOverrideField {
  using Member = std::string SpecOverrides::*;
  std::string name, option, help;
  Member field;
};
const std::vector<SpecOverrideField>& SpecOverrideFields();
// Sets the text override with Python keyword `name`; throws qmx::Error naming the known keywords.
void SetSpecOverride(SpecOverrides& o, const std::string& name, const std::string& value);
// QuantSpecByName(name), then the profile, then each override. A max-finite rule brings the ignore NaN
// policy with it unless nan_policy is given. The name gains a "+" when elem, rule or block changed a named
// recipe. Validated (ValidateQuantSpec); throws qmx::Error.
QuantSpec BuildQuantSpec(const std::string& name, const SpecOverrides& o);
// Every field of a spec as one JSON object (the `qmx.spec` metadata of `qmx-sim quantize` outputs), and
// back; QuantSpecFromJson validates and throws qmx::Error for invalid JSON or a missing or wrong field.
std::string QuantSpecToJson(const QuantSpec& spec, int indent = -1);
QuantSpec QuantSpecFromJson(const std::string& json);

// The block extent on a rows x cols tensor after the axis and the zeros are resolved.
struct BlockExtent {
  size_t rows, cols;
};
BlockExtent ResolveBlock(const QuantSpec& spec, size_t rows, size_t cols);

// Counts for the summary a user reads (ComputeStats).
struct QuantStats {
  uint64_t elements = 0;
  uint64_t nan_inputs = 0, inf_inputs = 0;
  uint64_t saturated = 0;        // finite inputs whose scaled magnitude exceeded the element's max
  uint64_t flushed_to_zero = 0;  // nonzero finite inputs that became a zero code
  uint64_t nan_blocks = 0;       // blocks whose scale is NaN (or a special byte under the te policy)
  std::vector<uint64_t> scale_histogram;  // 256 bins: UE8M0 by byte, E4M3 by code, FP32 by the biased
                                          // exponent of the decode scale (255 = Inf/NaN)
};
// The counts by name, in the one order the CLI's quantize summary and qmx.quantize_stats give them: elements,
// nan_inputs, inf_inputs, saturated, flushed_to_zero, nan_blocks.
std::vector<std::pair<std::string, uint64_t>> QuantStatsCounts(const QuantStats& s);

// The element codes' container: a std::vector<uint8_t> whose resize leaves new bytes unwritten (the
// allocator's construct default-initializes) and whose storage starts on a 64-byte line. The quantizers
// write every code, and a zero fill first would cost a whole extra write of the output (cli/bench/
// PERFORMANCE.md "Code vectors without a zero fill"). Aligned storage lets large outputs take whole-line
// non-temporal stores. Convert to a plain vector with std::vector<uint8_t>(c.begin(), c.end()); == and !=
// compare it with one.
using CodeVector = std::vector<uint8_t, detail::UninitAllocator<uint8_t>>;

struct QuantizedTensor {
  QuantSpec spec;
  std::vector<size_t> shape;  // the source's shape; rows x cols is its 2-D view
  size_t rows = 0, cols = 0;
  CodeVector codes;  // rows * cols element codes, one per byte, row-major (unpacked)
  size_t scale_rows = 0, scale_cols = 0;  // ceil(rows / block rows) x ceil(cols / block cols)
  std::vector<uint8_t> scales;  // row-major; ScaleBytes(ScaleFormatOf(rule)) bytes each (FP32 little-endian)
  float tensor_amax = 0;        // NVFP4 and per-tensor scaling: the source's amax (NaN-aware max of |x|)
  float tensor_decode = 1;      // NVFP4: fl32(1 / S_enc), the second-level scale; 1 otherwise (and row-scaled)
  // Row-scaled NVFP4: each line's amax (rows entries for axis row, cols for axis col), from which that
  // line's S_enc and decode scale come; tensor_amax is then the tensor's amax, for summaries. Empty otherwise.
  std::vector<float> line_amax;
  float ScaleAt(size_t sr, size_t sc) const;  // decoded block scale (NVFP4: the E4M3 value, before tensor_decode)
  // The amax that sets element (r, c)'s second-level scale: its line's when row-scaled, else tensor_amax.
  float SecondLevelAmax(size_t r, size_t c) const {
    return line_amax.empty() ? tensor_amax : line_amax[spec.axis == Axis::kCol ? c : r];
  }
};

// Quantizes x. Fast path (SIMD kernels, OpenMP over strips of blocks) and the scalar reference, equal bit
// for bit. FP32 scales with per-tensor blocks use current scaling; pass an encode scale explicitly (e.g.
// from DelayedScaling) with QuantizeWithScale.
QuantizedTensor Quantize(const TensorView& x, const QuantSpec& spec, Exec exec = Exec::kParallel);
QuantizedTensor QuantizeRef(const TensorView& x, const QuantSpec& spec);
// Per-tensor FP32 scaling with a given scale (delayed scaling); the spec must be per-tensor with an FP32 rule.
QuantizedTensor QuantizeWithScale(const TensorView& x, const QuantSpec& spec, Fp32Scale scale,
                                  Exec exec = Exec::kParallel);
// One step of delayed scaling: quantize with state.scale(), then push amax(x).
QuantizedTensor QuantizeDelayed(const TensorView& x, const QuantSpec& spec, DelayedScaling& state,
                                Exec exec = Exec::kParallel);

// NVFP4 with the tensor amax given instead of measured on x (Transformer Engine takes it from a separate
// amax reduction, which may cover more data than x): the spec's rule must be an NVFP4 rule and the spec not
// row-scaled (else qmx::Error). Any amax is taken as a hardware unit would take it (0, NaN and Inf included:
// the golden nvfp4-block suite drives those); user-facing entry points (qmx.quantize's tensor_amax) check it
// with CheckGivenAmax first. Blocks whose amax exceeds the given one saturate as the scales dictate.
QuantizedTensor QuantizeNvfp4WithAmax(const TensorView& x, const QuantSpec& spec, float tensor_amax,
                                      Exec exec = Exec::kParallel);
QuantizedTensor QuantizeNvfp4WithAmaxRef(const TensorView& x, const QuantSpec& spec, float tensor_amax);
// Throws qmx::Error unless the spec's rule gives E4M3 (NVFP4) block scales.
void CheckNvfp4Spec(const QuantSpec& spec);
// CheckNvfp4Spec, and a given tensor amax that is finite, not negative, and not 0 on nonzero x (which would
// quantize every value to 0): qmx::Error otherwise. The Python package calls it on a given tensor_amax.
void CheckGivenAmax(const TensorView& x, const QuantSpec& spec, float tensor_amax);

// The tensor amax that Quantize measures for a per-tensor scale (NVFP4's S_enc, FP8 current scaling) under
// `policy`: the largest |x|, NaN skipped, Inf counted except under block-nan and ignore (0 for an empty or
// all-NaN tensor). Fast path (SIMD, OpenMP over chunks) and reference, equal for every input.
float TensorAmax(const TensorView& x, NanPolicy policy, Exec exec = Exec::kParallel);
float TensorAmaxRef(const TensorView& x, NanPolicy policy);

// Decodes to FP32 (rows * cols values): UE8M0 scales exactly (decode(code) * 2^k), FP32 scales as
// fl32(decode(code) * decode_scale), NVFP4 as fl32(decode(code) * Nvfp4DecodeScale(scale, amax)) with the
// tensor's amax, or the element's line's when row-scaled.
// A NaN scale makes its block NaN.
void Dequantize(const QuantizedTensor& q, float* out, Exec exec = Exec::kParallel);
void DequantizeRef(const QuantizedTensor& q, float* out);
// The same with NVFP4's scales met in a given order (qmx/scale.h DequantOrder; kByRule is the above). Other
// recipes have one order only: any other than kByRule is an error naming NVFP4.
void Dequantize(const QuantizedTensor& q, float* out, DequantOrder order, Exec exec = Exec::kParallel);
void DequantizeRef(const QuantizedTensor& q, float* out, DequantOrder order);
// The same as a kernel compiled with flush-to-zero computes it when `ftz` (CUDA's -ftz=true or
// --use_fast_math, x86's FTZ and DAZ): an FP32 decode scale below 2^-126 in magnitude (UE8M0's 2^-127, a
// tiny FP32 or NVFP4 scale) is read as a zero of its sign, and a result below 2^-126 is written as a zero of
// its sign; NaN and Inf pass unchanged. The element values of the registry's formats are never FP32
// subnormals, and no addition takes part (so FMA contraction cannot change a bit). ftz = false is the above.
void Dequantize(const QuantizedTensor& q, float* out, DequantOrder order, bool ftz, Exec exec = Exec::kParallel);
void DequantizeRef(const QuantizedTensor& q, float* out, DequantOrder order, bool ftz);
// Quantize then dequantize in one pass (no codes tensor kept): equal to Dequantize(Quantize(x)).
void FakeQuantize(const TensorView& x, const QuantSpec& spec, float* out, Exec exec = Exec::kParallel);

QuantStats ComputeStats(const TensorView& x, const QuantizedTensor& q);
// A QuantizedTensor from stored parts: unpacked codes of a tensor of the given shape (its 2-D view as
// TensorView takes it), the scale grid the spec's block gives on that view, and the source's tensor amax
// (NVFP4's second-level scale is derived from it), and for a row-scaled spec each line's amax. Throws
// qmx::Error when the scale bytes do not fill that grid, the codes do not match the shape or the line
// amaxes do not match the lines.
QuantizedTensor AssembleQuantized(const QuantSpec& spec, std::vector<size_t> shape, std::vector<uint8_t> codes,
                                  std::vector<uint8_t> scales, float tensor_amax, std::vector<float> line_amax = {});

// The error of a dequantized tensor against its source, over the elements where both are finite, summed
// in element order.
struct DequantError {
  uint64_t finite_elements = 0;
  double mse = 0, max_abs_error = 0;
  bool has_sqnr = false;  // false when the error or the signal is zero
  double sqnr_db = 0;
};
DequantError ComputeDequantError(const TensorView& x, const float* dequantized);


// Sub-byte packing, for storage and hardware layouts.
// FP4 (4-bit codes): two per byte, element 2i in the low nibble, 2i+1 in the high nibble (the order of
// PyTorch's float4_e2m1fn_x2, cuBLAS and PTX e2m1x2); an odd count leaves the last high nibble zero.
// FP6 (6-bit codes): four codes in three bytes, little-endian bit stream: code i occupies bits
// [6i, 6i+6) of the stream, bit 0 being the low bit of byte 0. Other libraries' FP6 packings (e.g.
// torchao's pack_uint6) were not compared; unpack ours before handing codes to them.
std::vector<uint8_t> PackCodes(const uint8_t* codes, size_t n, int bits);
std::vector<uint8_t> UnpackCodes(const uint8_t* packed, size_t packed_size, size_t n, int bits);
size_t PackedSize(size_t n, int bits);

// Scale layouts cuBLASLt consumes (cuBLAS manual, "1D Block Scaling Factors Layout" and "Scaling factors
// layouts"; TensorRT-LLM get_sf_out_offset_128x4 states the same formula).
// 1-D block scaling (VEC32_UE8M0 for MX 1x32, VEC16_UE4M3 for NVFP4 1x16), row-wise blocks: the scale
// matrix (rows x scale_cols) padded with zeros to a multiple of 128 rows and 4 columns, in 128x4 tiles
// of 512 bytes: scale (r, c) goes to ((r / 128) * ceil(scale_cols / 4) + c / 4) * 512 + (r % 32) * 16 +
// ((r % 128) / 32) * 4 + c % 4 (CublasTiledIndex; torchao's to_blocked "swizzled" scales are the same layout).
std::vector<uint8_t> ScalesToCublasTiled(const QuantizedTensor& q);
size_t CublasTiledIndex(size_t r, size_t c, size_t scale_cols);
// Hopper blockwise FP32 scales (VEC128_32F for 1x128, BLK128x128_32F for 128x128): 1x128 row-wise scales
// as an M-major (rows contiguous) ceil(K/128) x roundup(M, 4) array; 128x128 scales K-major, each block
// row's ceil(K/128) scales padded to a multiple of 4. Padding is zero. Returns the padded array.
std::vector<float> ScalesToCublasBlockwise(const QuantizedTensor& q);

}  // namespace qmx
