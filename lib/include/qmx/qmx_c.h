/* qmx/qmx_c.h: the C ABI of qmx-sim (libqmx_c.so), for simulators and test benches that load a C library:
 * SystemVerilog DPI, cocotb through ctypes, Verilator C++ harnesses, other languages' FFIs.
 *
 * Plain integers, pointers and NUL-terminated strings; no C++ exception crosses it. Every function returns a
 * qmx_status; on anything but QMX_OK, qmx_last_error() gives the message the C++ library or the CLI would
 * give ("unknown format 'e4m4' ..."), kept per thread until the thread's next failing call. Formats,
 * roundings, saturation modes, scale rules, recipes and accumulation models are named as the CLI names them
 * (qmx-sim formats, docs/numerics.md), so a bench's parameters read the same in both. The results equal
 * the C++ library's bit for bit (tests/c_abi replays golden/level1 through this interface).
 *
 * Link: -lqmx_c (the shared library bundles the numerics; it needs libgomp and the C++ runtime). */
#ifndef QMX_QMX_C_H_
#define QMX_QMX_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define QMX_C_API __attribute__((visibility("default")))
#else
#define QMX_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define QMX_C_ABI_VERSION 4

typedef enum {
  QMX_OK = 0,
  QMX_ERR_ARGUMENT = 1, /* a bad value: an unknown name, an impossible option, a size that does not fit */
  QMX_ERR_NULL = 2,     /* a required pointer was NULL */
  QMX_ERR_INTERNAL = 3  /* anything else the library threw (out of memory, ...) */
} qmx_status;

/* Exception flags of a conversion (TestFloat's numbering, as the golden files write them). */
#define QMX_FLAG_INEXACT 0x01u
#define QMX_FLAG_UNDERFLOW 0x02u
#define QMX_FLAG_OVERFLOW 0x04u
#define QMX_FLAG_INVALID 0x10u
#define QMX_FLAG_SATURATED 0x20u

/* The ABI's version (QMX_C_ABI_VERSION of the library that was loaded). */
QMX_C_API int qmx_abi_version(void);
/* The message of this thread's last failing call ("" when none failed). Valid until its next failing call. */
QMX_C_API const char* qmx_last_error(void);

/* How a value is rounded into a format (qmx::CastOptions). Names as the CLI's options:
 *   rounding     rne rna rz ru rd ro sr sr-a sr-b sr-c
 *   saturation   satfinite nosat satpropagate
 *   nan_sign     keep positive            (--nan-sign)
 *   nan_fallback max zero                 (--nan-fallback: a NaN into a format without NaN)
 *   subnormals   keep flush               (--subnormals)
 *   negative     invalid magnitude        (--negative: a negative value into an unsigned format)
 *   tininess     before after             (--tininess: the underflow flag's tininess, before or after rounding)
 *   nan_payload  default quiet all-ones   (--nan-payload: an IEEE-style format's NaN mantissa field)
 * sr_bits: random bits per element for stochastic rounding (1..32). Version 2 added tininess, version 3
 * nan_payload (version 4 added qmx_dot and the _bits forms). */
typedef struct {
  int rounding, saturation, nan_sign, nan_fallback, subnormals, negative, sr_bits, tininess, nan_payload;
} qmx_cast_options;
/* The library's defaults: rne, satfinite, keep, max, keep, invalid, 8 bits, before, default. */
QMX_C_API void qmx_cast_options_default(qmx_cast_options* opt);
/* Sets opt from names (NULL or "" keeps opt's value); QMX_ERR_ARGUMENT for an unknown name. */
QMX_C_API qmx_status qmx_cast_options_set(qmx_cast_options* opt, const char* rounding, const char* saturation,
                                          const char* nan_sign, const char* nan_fallback, const char* subnormals,
                                          const char* negative);
/* Sets one option by its golden-header key (round, sat, nan-sign, nan-fallback, subnormals, negative, tininess,
 * nan-payload, sr-bits) and value; QMX_ERR_ARGUMENT for an unknown key or value. */
QMX_C_API qmx_status qmx_cast_options_set_key(qmx_cast_options* opt, const char* key, const char* value);

/* A format's parameters (registry names, ml_dtypes / torch names, eXmY[:...] and P3109 specs). */
typedef struct {
  int bits, exp_bits, man_bits, bias, is_signed;
  int has_inf, has_nan, has_negative_zero, has_subnormals;
  uint64_t max_finite_code, canonical_nan_code;
  double max_finite, min_normal, min_subnormal;
} qmx_format_info;
QMX_C_API qmx_status qmx_format_info_get(const char* format, qmx_format_info* info);

/* One conversion, the reference routine (qmx::Convert): the bits of a value of src_format (fp64, fp32, fp16,
 * bf16 or any format) rounded into dst_format under opt; random_bits feed stochastic rounding (the low
 * sr_bits are used). flags may be NULL. */
QMX_C_API qmx_status qmx_convert(const char* src_format, uint64_t x_bits, const char* dst_format,
                                 const qmx_cast_options* opt, uint32_t random_bits, uint64_t* code, uint32_t* flags);

/* qmx_convert with the options as names (NULL or "" for the library's default), in the shape SystemVerilog's
 * DPI passes them (string, longint unsigned, int unsigned): rtl/qmx_dpi.sv imports it. */
QMX_C_API qmx_status qmx_convert_named(const char* src_format, uint64_t x_bits, const char* dst_format,
                                       const char* rounding, const char* saturation, const char* nan_sign,
                                       const char* nan_fallback, const char* subnormals, uint32_t random_bits,
                                       uint64_t* code, uint32_t* flags);

/* qmx_convert with the options as a golden header writes them, "round=rne sat=satfinite tininess=after"
 * (space-separated key=value pairs of qmx_cast_options_set_key's keys; NULL or "" for the defaults). A whole
 * header line may be passed as it is: a leading "#", the keys op, src, dst, spec, level and seed are skipped
 * and generator ends it. rtl/qmx_dpi.sv imports it. */
QMX_C_API qmx_status qmx_convert_keys(const char* src_format, uint64_t x_bits, const char* dst_format,
                                      const char* options, uint32_t random_bits, uint64_t* code, uint32_t* flags);

/* n FP32 values into a format of 8 bits or fewer (qmx::ConvertToCodes, the fast paths): codes[n]; flags[n]
 * when not NULL (the reference routine then runs per element, as the library's Convert). Stochastic
 * rounding draws element i's bits from the library's Philox stream at (seed, first_index + i). */
QMX_C_API qmx_status qmx_convert_f32(const float* x, size_t n, const char* dst_format, const qmx_cast_options* opt,
                                     uint64_t seed, uint64_t first_index, uint8_t* codes, uint8_t* flags);

/* A code's value (qmx::DecodeToDouble: NaN, +-Inf and -0 as such). */
QMX_C_API qmx_status qmx_decode(const char* format, uint64_t code, double* value);

/* The UE8M0 scale byte for a block's amax under an OCP MX scale rule (ocp-floor, round-up, ceil, even,
 * max-finite; qmx::Ue8m0ScaleFromAmax) for element format elem. */
QMX_C_API qmx_status qmx_ue8m0_scale(float amax, const char* elem, const char* rule, uint8_t* scale);
/* The same with the amax as its FP32 bits. A float passed by value does not survive every simulator's DPI
 * (Verilator passes a SystemVerilog shortreal as a C double), so the DPI package (rtl/qmx_dpi.sv) imports the
 * _bits forms, which take and give every FP32 value as a uint32_t. */
QMX_C_API qmx_status qmx_ue8m0_scale_bits(uint32_t amax_bits, const char* elem, const char* rule, uint8_t* scale);

/* MX blocks (qmx::QuantizeMx): n FP32 values in blocks of `block` (the last may be short) into codes[n] of
 * elem and one UE8M0 scale byte per block, under a scale rule (ocp-floor round-up ceil even max-finite), a NaN
 * policy (block-nan ignore-nan ignore; qmx-sim quantize --nan), element scaling (exact fp32; --scaling) and
 * the cast options (deterministic roundings; NULL for the defaults). The golden files' op=mx-block. */
QMX_C_API qmx_status qmx_mx_blocks(const float* x, size_t n, const char* elem, const char* rule, const char* nan_policy,
                                   const char* scaling, size_t block, const qmx_cast_options* opt, uint8_t* codes,
                                   uint8_t* scales);

/* NVFP4 blocks with a given tensor amax (qmx::QuantizeNvfp4WithAmax, Transformer Engine's orders): a rows x
 * cols FP32 tensor in 1 x block blocks along its rows, under an NVFP4 rule (nvfp4, nvfp4-div, nvfp4-torchao,
 * ...): codes[rows * cols] (E2M1), one E4M3 scale byte per block, and the FP32 tensor decode scale
 * fl32(1 / S_enc). The golden files' op=nvfp4-block. */
QMX_C_API qmx_status qmx_nvfp4_blocks(const float* x, size_t rows, size_t cols, float tensor_amax, const char* rule,
                                      size_t block, const qmx_cast_options* opt, uint8_t* codes, uint8_t* scales,
                                      float* tensor_decode);
/* The same with FP32 values as their bits (x, the tensor amax and the tensor decode scale; see
 * qmx_ue8m0_scale_bits). */
QMX_C_API qmx_status qmx_nvfp4_blocks_bits(const uint32_t* x_bits, size_t rows, size_t cols, uint32_t tensor_amax_bits,
                                           const char* rule, size_t block, const qmx_cast_options* opt, uint8_t* codes,
                                           uint8_t* scales, uint32_t* tensor_decode_bits);

/* qmx::Quantize of a rows x cols FP32 tensor (row-major) under a recipe name (mxfp8, mxfp4, nvfp4,
 * fp8-block128x128, ...; qmx-sim quantize --spec): codes[rows * cols], one per element; scales as the
 * library stores them (scale_rows x scale_cols words of scale_bytes each: UE8M0 and E4M3 one byte, FP32 four,
 * little-endian; a per-tensor FP32 scale is a 1 x 1 grid), up to scales_capacity bytes; *scales_written the
 * bytes written; tensor_scale (may be NULL) NVFP4's second-level FP32 decode scale (1 otherwise). seed:
 * stochastic rounding. A scales_capacity too small for the grid is QMX_ERR_ARGUMENT, naming the bytes
 * needed. */
QMX_C_API qmx_status qmx_quantize(const char* spec, const float* x, size_t rows, size_t cols, uint64_t seed,
                                  uint8_t* codes, uint8_t* scales, size_t scales_capacity, size_t* scales_written,
                                  float* tensor_scale);

/* One GEMM operand: rows x cols codes of `format`, row-major (A is M x K, B is K x N), and optional block
 * scales: raw words (UE8M0 bytes, E4M3 bytes, or FP32 bit patterns) of a block_rows x block_cols grid,
 * row-major over the grid (qmx::SetBlockScales); scale_format "ue8m0", "e4m3", "fp32" or any format of 8 bits
 * or fewer (one code a word: "ue4m3", "ue5m3", ...; qmx::ParseBlockScaleFormat), NULL for none;
 * tensor_scale multiplies the result (1 for none). */
typedef struct {
  const char* format;
  const uint8_t* codes;
  size_t rows, cols;
  const char* scale_format;
  const uint32_t* scales;
  size_t block_rows, block_cols;
  float tensor_scale;
} qmx_operand;

/* D (M x N, FP32) = A B (+ C when c is not NULL) under an accumulation model (exact, fp32-seq, block-exact,
 * hopper-fp8, blackwell-mxf8f6f4, blackwell-mxf4nvf4, fused:..., qmx-sim gemm --model): qmx::Gemm. */
QMX_C_API qmx_status qmx_gemm(const char* model, const qmx_operand* a, const qmx_operand* b, const float* c, float* d);

/* One dot product d = sum over k of a[k] b[k] (+ c) under an accumulation model, as qmx_gemm computes it for
 * A 1 x k and B k x 1, in arguments a SystemVerilog DPI import can pass (no structs): k codes of a_format and
 * of b_format; block scales sa[k / block] and sb[k / block] as raw words of scale_format (as qmx_operand's;
 * NULL, "" or "none" for none, when sa, sb and block are not read); per-tensor FP32 scales (their
 * bits) tensor_a_bits and tensor_b_bits multiplying the result (0x3F800000, 1.0, for none); C's FP32 bits in
 * c_bits when has_c is nonzero; D's FP32 bits into *d_bits. Every FP32 value passes as its bits, so NaN
 * payloads and -0 arrive as they are (qmx_ue8m0_scale_bits says why). The golden files' op=dot. */
QMX_C_API qmx_status qmx_dot(const char* model, const char* a_format, const uint8_t* a, const char* b_format,
                             const uint8_t* b, size_t k, const char* scale_format, const uint32_t* sa,
                             const uint32_t* sb, size_t block, uint32_t tensor_a_bits, uint32_t tensor_b_bits,
                             int has_c, uint32_t c_bits, uint32_t* d_bits);

#ifdef __cplusplus
}
#endif

#endif /* QMX_QMX_C_H_ */
