// test_safetensors.cc: the .safetensors reader and writer: round trip through a file, the byte layout of
// the reference implementation's test vectors, and every validation rule on lying or truncated headers.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/safetensors.h"

using namespace qmx;

namespace {

std::vector<uint8_t> FileImage(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

NpyArray F32(std::vector<size_t> shape, float start) {
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = shape;
  a.data.resize(a.count() * 4);
  for (size_t i = 0; i < a.count(); ++i) {
    const float v = start + static_cast<float>(i);
    std::memcpy(&a.data[i * 4], &v, 4);
  }
  return a;
}

}  // namespace

TEST_CASE("safetensors: write, read back, header padded to 8 bytes", "[io][safetensors]") {
  NpyArray u8;
  u8.dtype = DType::kU8;
  u8.shape = {3};
  u8.data = {1, 2, 3};
  NpyArray bf;
  bf.dtype = DType::kBF16;
  bf.shape = {2, 0};
  const std::vector<std::pair<std::string, NpyArray>> t = {{"w", F32({2, 3}, 1.0f)}, {"codes", u8}, {"empty", bf}};
  const std::string path = "/tmp/qmx_test_" + std::to_string(::getpid()) + ".safetensors";
  WriteSafetensors(path, t, {{"producer", "qmx-sim"}});
  SafetensorsReader r(path);
  CHECK(r.index().data_start % 8 == 0);
  CHECK(r.index().tensors.size() == 3);
  CHECK(r.index().metadata.at("producer") == "qmx-sim");
  const NpyArray w = r.Read("w");
  CHECK(w.shape == std::vector<size_t>{2, 3});
  CHECK(w.data == t[0].second.data);
  CHECK(r.Read("codes").data == u8.data);
  CHECK(r.Read("empty").count() == 0);
  CHECK_THROWS_WITH(r.Read("bias"), Catch::Contains("no tensor named 'bias'") && Catch::Contains("w"));
  ::unlink(path.c_str());
}

TEST_CASE("safetensors: FNUZ codes are written and read as e4m3fnuz and e5m2fnuz", "[io][safetensors]") {
  NpyArray codes;
  codes.dtype = DType::kU8;
  codes.shape = {2, 3};
  codes.data = {0x00, 0x40, 0x7F, 0x80, 0xC0, 0xFF};  // 0, 1, 240, NaN, -1, -240 in e4m3fnuz
  const std::string path = "/tmp/qmx_test_fnuz_" + std::to_string(::getpid()) + ".safetensors";
  WriteSafetensorsTyped(path, {{"a", codes, "F8_E4M3FNUZ"}, {"b", codes, "F8_E5M2FNUZ"}});
  SafetensorsReader r(path);
  CHECK(r.Get("a").dtype == "F8_E4M3FNUZ");
  CHECK(r.Get("a").supported);
  CHECK(r.Read("a").data == codes.data);
  CHECK(std::string(SafetensorsCodeDtype(fmt::kE4M3Fnuz)) == "F8_E4M3FNUZ");
  CHECK(std::string(SafetensorsCodeDtype(fmt::kE5M2Fnuz)) == "F8_E5M2FNUZ");
  const NpyArray va = r.ReadValues("a"), vb = r.ReadValues("b");
  float x[6], y[6];
  std::memcpy(x, va.data.data(), sizeof x);
  std::memcpy(y, vb.data.data(), sizeof y);
  CHECK(x[1] == 1.0f);
  CHECK(x[2] == 240.0f);
  CHECK(std::isnan(x[3]));
  CHECK(x[5] == -240.0f);
  CHECK(y[2] == 57344.0f);  // e5m2fnuz 0x7F
  CHECK(y[1] == 1.0f);      // 0x40 is 1 in e5m2fnuz too (bias 16)
  ::unlink(path.c_str());
}

TEST_CASE("safetensors: the reference implementation's byte layout", "[io][safetensors]") {
  // An empty file: header "{}" padded with six spaces, N = 8.
  const std::vector<uint8_t> empty = SerializeSafetensors({});
  CHECK(empty == std::vector<uint8_t>{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '});
  // {"attn.0": F32 [1, 2, 3]}: the JSON takes 59 bytes, padded to N = 64.
  const std::vector<uint8_t> one = SerializeSafetensors({{"attn.0", F32({1, 2, 3}, 0.0f)}});
  CHECK(one[0] == 64);
  CHECK(one.size() == 8 + 64 + 24);
  CHECK(ParseSafetensors(one, "x").tensors[0].end == 24);
}

TEST_CASE("safetensors: lying, truncated and malformed headers give clear errors", "[io][safetensors]") {
  const auto err = [](const std::vector<uint8_t>& b) {
    try {
      ParseSafetensors(b, "f");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(err(FileImage(ok, 8)) == "no error");
  CHECK(err({1, 2, 3}).find("too short") != std::string::npos);
  CHECK(err(FileImage(ok, 4)).find("truncated") != std::string::npos);  // data shorter than the offsets
  CHECK(err(FileImage(ok, 12)).find("trailing") != std::string::npos);
  std::vector<uint8_t> huge = FileImage(ok, 8);
  huge[5] = 1;  // header length 2^40
  CHECK(err(huge).find("100 MB") != std::string::npos);
  std::vector<uint8_t> past = FileImage(ok, 8);
  past[0] = 200;  // header length beyond the file
  CHECK(err(past).find("runs past the end") != std::string::npos);
  CHECK(err(FileImage("[1,2]", 0)).find("'{'") != std::string::npos);
  CHECK(err(FileImage("{\"a\":", 0)).find("JSON") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8)).find("unknown dtype 'Q7'") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)).find("needs 12 bytes") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)).find("non-negative") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)).find("end < begin") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[2]}})", 8)).find("data_offsets") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12))
            .find("gap or overlap") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8))
            .find("gap or overlap") != std::string::npos);
  CHECK(err(FileImage(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8))
            .find("too large") != std::string::npos);
  CHECK(err(FileImage(R"({"__metadata__":{"k":1}})", 0)).find("not a string") != std::string::npos);
  // FP4 with an odd element count is not whole bytes.
  CHECK(err(FileImage(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2)).find("whole bytes") != std::string::npos);
}

TEST_CASE("safetensors: a sharded checkpoint reads as one, from its directory or its index", "[io][safetensors]") {
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("qmx_shards_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  WriteSafetensors((d / "m-1.safetensors").string(), {{"a", F32({2, 3}, 1)}, {"b", F32({4}, 10)}}, {{"format", "pt"}});
  WriteSafetensors((d / "m-2.safetensors").string(), {{"c", F32({3}, 20)}}, {{"format", "pt"}});
  WriteFileAtomic((d / "model.safetensors.index.json").string(),
                  R"({"metadata": {}, "weight_map": {"a": "m-1.safetensors", "b": "m-1.safetensors", "c": "m-2.safetensors"}})");
  for (const fs::path& p : {d, d / "model.safetensors.index.json"}) {
    INFO(p.string());
    CHECK(SafetensorsReader::IsSharded(p.string()));
    const SafetensorsReader r(p.string());
    CHECK(r.files().size() == 2);
    CHECK(r.index().tensors.size() == 3);
    CHECK(r.index().metadata.at("format") == "pt");
    const NpyArray c = r.Read("c");
    float v;
    std::memcpy(&v, &c.data[8], 4);
    CHECK(v == 22.0f);
    std::memcpy(&v, &r.Read("b").data[4], 4);
    CHECK(v == 11.0f);
    CHECK(r.index().Find("a")->file == 0);
    CHECK(r.index().Find("c")->file == 1);
  }
  CHECK(!SafetensorsReader::IsSharded((d / "m-1.safetensors").string()));
  // An index that maps a tensor to the wrong file, or to a file outside its directory; a name in two files;
  // metadata that disagrees.
  WriteFileAtomic((d / "bad.index.json").string(), R"({"weight_map": {"c": "m-1.safetensors"}})");
  CHECK_THROWS_WITH(SafetensorsReader((d / "bad.index.json").string()), Catch::Contains("which does not hold it"));
  WriteFileAtomic((d / "up.index.json").string(), R"({"weight_map": {"c": "../m-2.safetensors"}})");
  CHECK_THROWS_WITH(SafetensorsReader((d / "up.index.json").string()), Catch::Contains("beside the index"));
  WriteFileAtomic((d / "nomap.index.json").string(), R"({"metadata": {}})");
  CHECK_THROWS_WITH(SafetensorsReader((d / "nomap.index.json").string()), Catch::Contains("weight_map"));
  WriteSafetensors((d / "m-3.safetensors").string(), {{"a", F32({1}, 0)}});
  CHECK_THROWS_WITH(SafetensorsReader(d.string()), Catch::Contains("tensor 'a' is in both"));
  fs::remove(d / "m-3.safetensors");
  WriteSafetensors((d / "m-3.safetensors").string(), {{"z", F32({1}, 0)}}, {{"format", "np"}});
  CHECK_THROWS_WITH(SafetensorsReader(d.string()), Catch::Contains("metadata 'format' differs"));
  fs::remove_all(d);
  fs::create_directories(d);
  CHECK_THROWS_WITH(SafetensorsReader(d.string()), Catch::Contains("holds no .safetensors file"));
  fs::remove_all(d);
}
