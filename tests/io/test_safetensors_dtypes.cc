// test_safetensors_dtypes.cc: the safetensors code dtypes (F8_E4M3, F8_E5M2, F8_E8M0, F6_E2M3, F6_E3M2,
// F4, I8) against files built byte by byte from the format (huggingface/safetensors tensor.rs: shapes
// count logical elements, numel * bits must be whole bytes; F4 as PyTorch's float4_e2m1fn_x2, element 2i
// in the low nibble; F6 as qmx-sim's little-endian bit stream), values by the OCP MX v1.0 tables.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/safetensors.h"
#include "support/arrays.h"

using namespace qmx;
using Catch::Matchers::Contains;
using qmx::test::U8Array;

namespace {

std::vector<uint8_t> Image(const std::string& header, const std::vector<uint8_t>& data) {
  std::string h = header;
  while (h.size() % 8 != 0) h += ' ';
  std::vector<uint8_t> out(8 + h.size());
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  std::memcpy(out.data() + 8, h.data(), h.size());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string TempFile(const std::vector<uint8_t>& bytes) {
  static int n = 0;
  const std::string path = "/tmp/qmx_st_dtypes_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  return path;
}

std::vector<float> Floats(const NpyArray& a) {
  REQUIRE(a.dtype == DType::kF32);
  std::vector<float> v(a.count());
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

// Equal as values, NaN equal to NaN, -0 distinct from +0.
bool Same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

}  // namespace

TEST_CASE("safetensors code dtypes: hand-built files read as codes and as values", "[io][safetensors][dtypes]") {
  // Data section, in header order:
  //   e4m3  F8_E4M3 [2, 2]: 0x38 (1.0), 0xb8 (-1.0), 0x7e (448), 0x7f (NaN)
  //   e5m2  F8_E5M2 [3]:    0x3c (1.0), 0x7c (Inf), 0x01 (2^-16)
  //   e8m0  F8_E8M0 [3]:    0x7f (1), 0x00 (2^-127), 0xff (NaN)
  //   fp4   F4 [1, 4]:      codes 1 2 7 15 packed 0x21 0xf7 -> 0.5 1 6 -6
  //   fp6   F6_E2M3 [4]:    codes 0x01 0x3f 0x08 0x20 as one 24-bit stream 0x808fc1 -> 0.125 -7.5 1 -0
  //   i8    I8 [2]:         0xff 0x7f -> -1 127
  const std::string header =
      R"({"e4m3":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]},)"
      R"("e5m2":{"dtype":"F8_E5M2","shape":[3],"data_offsets":[4,7]},)"
      R"("e8m0":{"dtype":"F8_E8M0","shape":[3],"data_offsets":[7,10]},)"
      R"("fp4":{"dtype":"F4","shape":[1,4],"data_offsets":[10,12]},)"
      R"("fp6":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[12,15]},)"
      R"("i8":{"dtype":"I8","shape":[2],"data_offsets":[15,17]}})";
  const std::vector<uint8_t> data = {0x38, 0xb8, 0x7e, 0x7f, 0x3c, 0x7c, 0x01, 0x7f, 0x00, 0xff,
                                     0x21, 0xf7, 0xc1, 0x8f, 0x80, 0xff, 0x7f};
  const std::string path = TempFile(Image(header, data));
  const SafetensorsReader r(path);
  struct Want {
    const char* name;
    std::vector<uint8_t> codes;
    std::vector<float> values;
    const char* format;
  };
  const std::vector<Want> want = {
      {"e4m3", {0x38, 0xb8, 0x7e, 0x7f}, {1.0f, -1.0f, 448.0f, NAN}, "e4m3"},
      {"e5m2", {0x3c, 0x7c, 0x01}, {1.0f, INFINITY, std::ldexp(1.0f, -16)}, "e5m2"},
      {"e8m0", {0x7f, 0x00, 0xff}, {1.0f, std::ldexp(1.0f, -127), NAN}, "ue8m0"},
      {"fp4", {0x1, 0x2, 0x7, 0xf}, {0.5f, 1.0f, 6.0f, -6.0f}, "e2m1"},
      {"fp6", {0x01, 0x3f, 0x08, 0x20}, {0.125f, -7.5f, 1.0f, -0.0f}, "e2m3"},
      {"i8", {0xff, 0x7f}, {-1.0f, 127.0f}, "int8"},
  };
  for (const Want& w : want) {
    INFO(w.name);
    const SafetensorsTensor& t = r.Get(w.name);
    CHECK(t.supported);
    CHECK(t.codes);
    CHECK(std::string(t.format.name) == w.format);
    const NpyArray c = r.Read(w.name);
    CHECK(c.dtype == DType::kU8);
    CHECK(c.shape == t.shape);
    CHECK(c.data == w.codes);
    const std::vector<float> v = Floats(r.ReadValues(w.name));
    REQUIRE(v.size() == w.values.size());
    for (size_t i = 0; i < v.size(); ++i) {
      INFO("element " << i << ": got " << v[i] << ", want " << w.values[i]);
      CHECK(Same(v[i], w.values[i]));
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("safetensors code dtypes: the writer's bytes equal the hand-built file", "[io][safetensors][dtypes]") {
  const std::vector<SafetensorsEntry> entries = {
      {"a", U8Array({1, 4}, {0x1, 0x2, 0x7, 0xf}), "F4"},
      {"b", U8Array({4}, {0x01, 0x3f, 0x08, 0x20}), "F6_E2M3"},
      {"c", U8Array({2}, {0x7f, 0x00}), "F8_E8M0"},
  };
  const std::string header = R"({"a":{"dtype":"F4","shape":[1,4],"data_offsets":[0,2]},)"
                             R"("b":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[2,5]},)"
                             R"("c":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[5,7]}})";
  CHECK(SerializeSafetensorsTyped(entries) == Image(header, {0x21, 0xf7, 0xc1, 0x8f, 0x80, 0x7f, 0x00}));
  // Round trip through ParseSafetensors: every code back.
  const SafetensorsIndex idx = ParseSafetensors(SerializeSafetensorsTyped(entries), "round trip");
  CHECK(idx.Find("a")->format.name == std::string("e2m1"));
  CHECK(idx.Find("b")->bits == 6);
  // F8 scales and codes stay one byte each; the native dtype of each registry format.
  CHECK(SafetensorsCodeDtype(fmt::kE4M3) == std::string("F8_E4M3"));
  CHECK(SafetensorsCodeDtype(fmt::kE2M1) == std::string("F4"));
  CHECK(SafetensorsCodeDtype(fmt::kUE8M0) == std::string("F8_E8M0"));
  CHECK(SafetensorsCodeDtype(fmt::kE3M2) == std::string("F6_E3M2"));
  CHECK(SafetensorsCodeDtype(fmt::kInt8) == std::string("I8"));
  CHECK(SafetensorsCodeDtype(fmt::kBF16) == nullptr);
}

TEST_CASE("safetensors code dtypes: codes that do not fit and counts that are not whole bytes are refused",
          "[io][safetensors][dtypes]") {
  CHECK_THROWS_WITH(SerializeSafetensorsTyped({{"a", U8Array({2}, {0x1, 0x10}), "F4"}}),
                    Contains("code 0x10 at element 1 does not fit F4's 4 bits"));
  CHECK_THROWS_WITH(SerializeSafetensorsTyped({{"a", U8Array({3}, {1, 2, 3}), "F4"}}), Contains("F4 needs an even count"));
  CHECK_THROWS_WITH(SerializeSafetensorsTyped({{"a", U8Array({6}, {1, 2, 3, 4, 5, 6}), "F6_E3M2"}}), Contains("F6 needs a multiple of 4"));
  CHECK_THROWS_WITH(SerializeSafetensorsTyped({{"a", U8Array({4}, {1, 2, 3, 4}), "I32"}}), Contains("is not written"));
  NpyArray f32;
  f32.dtype = DType::kF32;
  f32.shape = {1};
  f32.data.assign(4, 0);
  CHECK_THROWS_WITH(SerializeSafetensorsTyped({{"a", f32, "F8_E4M3"}}), Contains("is written from U8 codes"));
  // A file whose F4 shape is an odd count, or whose F6 span lies, is refused by the parser.
  CHECK_THROWS_WITH(ParseSafetensors(Image(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", {0, 0}), "odd"),
                    Contains("not whole bytes"));
  CHECK_THROWS_WITH(ParseSafetensors(Image(R"({"a":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,4]}})", {0, 0, 0, 0}), "f6"),
                    Contains("needs 3 bytes"));
  // The wide integer dtypes are known names, not readable ones.
  const std::string path = TempFile(Image(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}));
  const SafetensorsReader r(path);
  CHECK_FALSE(r.Get("a").supported);
  CHECK_THROWS_WITH(r.Read("a"), Contains("has dtype I32"));
  CHECK_THROWS_WITH(r.ReadValues("a"), Contains("has dtype I32"));
  std::remove(path.c_str());
}
