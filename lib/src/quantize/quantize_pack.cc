// quantize_pack.cc: sub-byte code packing (4-, 6- and 8-bit) and the cuBLASLt scale layouts of
// qmx/quantize.h: how quantized tensors are laid out for storage and for the GEMM libraries.
#include "qmx/quantize.h"

#include <cstring>

#include "qmx/error.h"

namespace qmx {

// ------------------------------------------------------------------ packing

size_t PackedSize(size_t n, int bits) {
  if (bits == 4) return (n + 1) / 2;
  if (bits == 6) return (n * 6 + 7) / 8;
  if (bits == 8) return n;
  throw Error("packing takes 4-, 6- or 8-bit codes, not " + std::to_string(bits));
}

std::vector<uint8_t> PackCodes(const uint8_t* codes, size_t n, int bits) {
  std::vector<uint8_t> out(PackedSize(n, bits), 0);
  if (bits == 8) {
    if (n) std::memcpy(out.data(), codes, n);
  } else if (bits == 4) {
    for (size_t i = 0; i < n; ++i) out[i / 2] |= static_cast<uint8_t>((codes[i] & 0xF) << (4 * (i & 1)));
  } else {
    for (size_t i = 0; i < n; ++i) {
      const size_t bit = 6 * i;
      const uint32_t v = static_cast<uint32_t>(codes[i] & 0x3F) << (bit % 8);
      out[bit / 8] |= static_cast<uint8_t>(v);
      if ((bit % 8) > 2) out[bit / 8 + 1] |= static_cast<uint8_t>(v >> 8);
    }
  }
  return out;
}

std::vector<uint8_t> UnpackCodes(const uint8_t* packed, size_t packed_size, size_t n, int bits) {
  if (packed_size < PackedSize(n, bits))
    throw Error("packed buffer of " + std::to_string(packed_size) + " bytes is too small for " + std::to_string(n) + " " +
                std::to_string(bits) + "-bit codes");
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (bits == 8) out[i] = packed[i];
    else if (bits == 4) out[i] = (packed[i / 2] >> (4 * (i & 1))) & 0xF;
    else {
      const size_t bit = 6 * i;
      uint32_t v = packed[bit / 8];
      if (bit / 8 + 1 < packed_size) v |= static_cast<uint32_t>(packed[bit / 8 + 1]) << 8;
      out[i] = static_cast<uint8_t>((v >> (bit % 8)) & 0x3F);
    }
  }
  return out;
}

// ------------------------------------------------------------------ cuBLASLt layouts

std::vector<uint8_t> ScalesToCublasTiled(const QuantizedTensor& q) {
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  if (sf == ScaleFormat::kFp32 || be.rows != 1 || q.spec.axis != Axis::kRow)
    throw Error("the 128x4 tiled layout holds 1-D row-wise UE8M0 or E4M3 block scales (quantize the transposed operand "
                "row-wise for the other GEMM side), not '" + DescribeSpec(q.spec) + "'");
  const size_t kt = (q.scale_cols + 3) / 4, rt = (q.rows + 127) / 128;
  std::vector<uint8_t> out(rt * 128 * kt * 4, 0);
  for (size_t r = 0; r < q.rows; ++r)
    for (size_t c = 0; c < q.scale_cols; ++c)
      out[((r / 128) * kt + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4] = q.scales[r * q.scale_cols + c];
  return out;
}

std::vector<float> ScalesToCublasBlockwise(const QuantizedTensor& q) {
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  if (ScaleFormatOf(q.spec.rule) != ScaleFormat::kFp32 || q.spec.axis != Axis::kRow)
    throw Error("blockwise cuBLASLt scales are FP32 1x128 or 128x128 row-wise scales, not '" + DescribeSpec(q.spec) + "'");
  if (be.rows == 1 && be.cols == 128) {  // VEC128_32F: ceil(K/128) x roundup(M, 4), M contiguous
    const size_t ld = (q.rows + 3) / 4 * 4;
    std::vector<float> out(q.scale_cols * ld, 0.0f);
    for (size_t r = 0; r < q.rows; ++r)
      for (size_t c = 0; c < q.scale_cols; ++c) out[c * ld + r] = q.ScaleAt(r, c);
    return out;
  }
  if (be.rows == 128 && be.cols == 128) {  // BLK128x128_32F: K-major, each block row padded to 4
    const size_t ld = (q.scale_cols + 3) / 4 * 4;
    std::vector<float> out(q.scale_rows * ld, 0.0f);
    for (size_t r = 0; r < q.scale_rows; ++r)
      for (size_t c = 0; c < q.scale_cols; ++c) out[r * ld + c] = q.ScaleAt(r, c);
    return out;
  }
  throw Error("blockwise cuBLASLt scales are 1x128 or 128x128 blocks, not " + DescribeBlock(q.spec));
}

}  // namespace qmx
