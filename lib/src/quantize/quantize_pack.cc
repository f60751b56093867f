// quantize_pack.cc: the cuBLASLt scale layouts of qmx/quantize.h: how quantized tensors' scales are laid
// out for the GEMM libraries (the sub-byte code packing is io/packing.cc, which the file readers share).
#include "qmx/quantize.h"

#include <cstring>

#include "qmx/error.h"

namespace qmx {

// ------------------------------------------------------------------ cuBLASLt layouts

size_t CublasTiledIndex(size_t r, size_t c, size_t scale_cols) {
  const size_t col_tiles = (scale_cols + 3) / 4;
  return ((r / 128) * col_tiles + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

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
      out[CublasTiledIndex(r, c, q.scale_cols)] = q.scales[r * q.scale_cols + c];
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
