// test_dequantize.cc: Dequantize on arbitrary codes and scales, against its formula written out here one
// element at a time: every UE8M0 and E4M3 scale byte (UE8M0's 0 is an FP32 subnormal scale, 254 the
// largest, 255 NaN), FP32 scales that are NaN, infinite, zero, negative or subnormal, NaN codes and code
// bytes with bits above the element's, ragged blocks on both axes and 2-D blocks, row-scaled NVFP4, FTZ on
// and off, one thread and several. The fast path finds each block's decode factor once per block and row.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/format.h"
#include "qmx/quantize.h"
#include "qmx/scale.h"

namespace qmx {
// A scope of its own: the tests compile in unity batches (QMX_UNITY_BUILD), beside files whose helpers
// have the same names (test_dequant_order.cc's Bits and Expected).
namespace dequantize_test {
namespace {

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

double Flush(double x, bool ftz) { return ftz && x != 0 && std::fabs(x) < 0x1p-126 ? std::copysign(0.0, x) : x; }

// Element (r, c) by the formula: the code's value (its element bits) times its block's flushed decode
// scale, in double, rounded to FP32, then flushed. UE8M0's byte 0xFF decodes to NaN, and a NaN decode scale
// is the value of each element of its block, NaN codes included.
float Expected(const QuantizedTensor& q, size_t r, size_t c, DequantOrder order, bool ftz) {
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const size_t si = (r / be.rows) * q.scale_cols + c / be.cols;
  double scale = 0;
  switch (ScaleFormatOf(q.spec.rule)) {
    case ScaleFormat::kUe8m0:
      if (q.scales[si] == 0xFF) return std::nanf("");
      scale = std::ldexp(1.0, q.scales[si] - 127);
      break;
    case ScaleFormat::kE4m3: scale = Nvfp4DecodeScale(q.scales[si], q.SecondLevelAmax(r, c), q.spec.rule, order); break;
    default: {
      float f;
      std::memcpy(&f, &q.scales[4 * si], 4);
      scale = f;
    }
  }
  scale = Flush(scale, ftz);
  if (std::isnan(scale)) return static_cast<float>(scale);
  const double v = DecodeToFloat(q.spec.elem, q.codes[r * q.cols + c] & q.spec.elem.CodeMask());
  return static_cast<float>(Flush(static_cast<float>(v * scale), ftz));
}

// Dequantize sequentially and in parallel, with FTZ and without, every element against Expected (the
// reference path for tt-metal's BFP unpacker, which has no scale factor).
void CheckAll(const QuantizedTensor& q, DequantOrder order = DequantOrder::kByRule) {
  const size_t n = q.rows * q.cols;
  for (const bool ftz : {false, true})
    for (const Exec exec : {Exec::kSequential, Exec::kParallel}) {
      INFO(q.spec.name << " " << DescribeBlock(q.spec) << " order " << DequantOrderName(order) << " ftz " << ftz
                       << " parallel " << (exec == Exec::kParallel));
      std::vector<float> got(n), ref(n);
      Dequantize(q, got.data(), order, ftz, exec);
      if (q.spec.rule == ScaleRule::kBfp) DequantizeRef(q, ref.data(), order, ftz);
      size_t bad = 0, first = n;
      for (size_t i = 0; i < n; ++i) {
        const float want = q.spec.rule == ScaleRule::kBfp ? ref[i] : Expected(q, i / q.cols, i % q.cols, order, ftz);
        if (Bits(got[i]) == Bits(want)) continue;
        if (bad++ == 0) first = i;
      }
      INFO("first differing element " << first);
      CHECK(bad == 0);
    }
}

// Bytes of every value (n of them, `step` apart mod 256: all 256 where n >= 256 and step is odd).
std::vector<uint8_t> AllBytes(size_t n, size_t step) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * step + 3);
  return v;
}

QuantSpec Spec(const std::string& name, Axis axis, int block_rows = 0, int block_cols = 0) {
  QuantSpec spec = QuantSpecByName(name);
  spec.axis = axis;
  if (block_rows != 0) {
    spec.block_rows = block_rows;
    spec.block_cols = block_cols;
  }
  return spec;
}

size_t ScaleCount(const QuantSpec& spec, size_t rows, size_t cols) {
  const BlockExtent be = ResolveBlock(spec, rows, cols);
  return ((rows + be.rows - 1) / be.rows) * ((cols + be.cols - 1) / be.cols);
}

// A rows x cols tensor of the spec whose code bytes take every value (the bits above the element's too).
QuantizedTensor Assemble(const QuantSpec& spec, size_t rows, size_t cols, std::vector<uint8_t> scales, float amax = 0,
                         std::vector<float> line_amax = {}) {
  return AssembleQuantized(spec, {rows, cols}, AllBytes(rows * cols, 37), std::move(scales), amax,
                           std::move(line_amax));
}

// FP32 scales: the special values first, then powers of two times 1..1.75, as stored bytes.
std::vector<uint8_t> Fp32Scales(size_t n) {
  const float special[] = {NAN,    -NAN,    INFINITY, -INFINITY, 0.0f,  -0.0f,
                           1e-40f, -3e-39f, 1e-45f,   -2.5f,     3e38f, 0x1p-126f};
  std::vector<uint8_t> out(4 * n);
  for (size_t i = 0; i < n; ++i) {
    const float f = i < 12 ? special[i] : std::ldexp(1.0f + (i % 7) / 8.0f, static_cast<int>(i % 61) - 30);
    std::memcpy(&out[4 * i], &f, 4);
  }
  return out;
}

}  // namespace

TEST_CASE("dequantize: UE8M0 blocks of every scale byte, both axes, 2-D and ragged blocks", "[quantize][dequantize]") {
  const size_t rows = 70, cols = 130;  // 130 = 4 * 32 + 2: a ragged last block on each row
  for (const char* name : {"mxfp8", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp4", "mxint8"})
    for (const Axis axis : {Axis::kRow, Axis::kCol}) {
      const QuantSpec spec = Spec(name, axis);
      REQUIRE(ScaleCount(spec, rows, cols) >= 256);
      CheckAll(Assemble(spec, rows, cols, AllBytes(ScaleCount(spec, rows, cols), 7)));
    }
  const QuantSpec blocks2d = Spec("mxfp8", Axis::kRow, 16, 16);
  CheckAll(Assemble(blocks2d, rows, cols, AllBytes(ScaleCount(blocks2d, rows, cols), 7)));
}

TEST_CASE("dequantize: FP32 scales that are NaN, infinite, zero, negative or subnormal, over NaN codes",
          "[quantize][dequantize]") {
  for (const Axis axis : {Axis::kRow, Axis::kCol}) {
    const QuantSpec spec = Spec("fp8-block128x128", axis);
    CheckAll(Assemble(spec, 300, 400, Fp32Scales(ScaleCount(spec, 300, 400))));
  }
  CheckAll(Assemble(Spec("fp8-rowwise", Axis::kRow), 70, 50, Fp32Scales(70)));
  CheckAll(Assemble(Spec("fp8-block1x128", Axis::kRow), 20, 300, Fp32Scales(60)));
  const std::vector<uint8_t> special = Fp32Scales(12);  // one tensor per special scale
  for (size_t k = 0; k < 12; ++k)
    CheckAll(Assemble(Spec("fp8-tensor-current", Axis::kRow), 9, 33,
                      {special.begin() + 4 * k, special.begin() + 4 * k + 4}));
}

TEST_CASE("dequantize: NVFP4 blocks of every E4M3 scale byte, in each order, row-scaled on both axes",
          "[quantize][dequantize]") {
  const size_t rows = 70, cols = 128;
  for (const Axis axis : {Axis::kRow, Axis::kCol}) {
    QuantSpec spec = Spec("nvfp4", axis);
    const size_t n = ScaleCount(spec, rows, cols);
    REQUIRE(n >= 256);
    // amax 2e-36: decode scales down among FP32's subnormals, which FTZ flushes
    for (const float amax : {3.0f, 2e-36f})
      for (const DequantOrder order :
           {DequantOrder::kByRule, DequantOrder::kTe, DequantOrder::kGlobalDiv, DequantOrder::kGlobalRecip})
        CheckAll(Assemble(spec, rows, cols, AllBytes(n, 7), amax), order);
    // Row-scaled: each row's (each column's) own amax, from 2^-130 to 2^30.
    spec.row_scaled = true;
    std::vector<float> line_amax(axis == Axis::kRow ? rows : cols);
    for (size_t i = 0; i < line_amax.size(); ++i)
      line_amax[i] = std::ldexp(1.0f + i % 5, static_cast<int>(i % 41) * 4 - 130);
    CheckAll(Assemble(spec, rows, cols, AllBytes(n, 7), 0, line_amax));
  }
}

TEST_CASE("dequantize: BFP shared exponents of every byte equal the reference unpacker", "[quantize][dequantize]") {
  for (const char* name : {"bfp8_b", "bfp4_b", "bfp2_b"})
    for (const Axis axis : {Axis::kRow, Axis::kCol}) {
      const QuantSpec spec = Spec(name, axis);
      CheckAll(Assemble(spec, 70, 72, AllBytes(ScaleCount(spec, 70, 72), 7)));
    }
}

}  // namespace dequantize_test
}  // namespace qmx
