// test_npy.cc: tests for the .npy reader/writer and WriteFileAtomic
// (round trips, byte-exact numpy layout, malformed and truncated input).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/io.h"

namespace qmx {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16,
                            DType::kBF16, DType::kU8,  DType::kU16};

NpyArray MakeArray(DType dtype, std::vector<size_t> shape) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  array.data.resize(array.count() * DTypeSize(dtype));
  for (size_t i = 0; i < array.data.size(); ++i) {
    array.data[i] = static_cast<uint8_t>(i * 37 + static_cast<size_t>(dtype) * 11 + 1);
  }
  return array;
}

// Builds a .npy image from a raw header text, without numpy's padding, so
// tests can feed exactly the header they want.
std::vector<uint8_t> RawNpy(const std::string& header, size_t data_bytes, int major = 1) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data_bytes, 0xab);
  return out;
}

std::string Header(const std::string& descr, const std::string& shape,
                   const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape +
         ", }\n";
}

// Runs fn, which must throw IoError; returns its message ("" and a failed
// check otherwise).
std::string IoErrorMessage(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  }
  FAIL_CHECK("expected IoError, nothing was thrown");
  return "";
}

std::string ParseError(const std::vector<uint8_t>& bytes) {
  return IoErrorMessage([&] { ParseNpy(bytes, "x.npy"); });
}

// A scratch directory removed at scope exit.
struct NpyTempDir {
  fs::path path;
  NpyTempDir() {
    path = fs::temp_directory_path() /
           ("qmx_test_npy_" + std::to_string(static_cast<long>(::getpid())));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~NpyTempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string File(const std::string& name) const { return (path / name).string(); }
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_CASE("io: dTypeName and DTypeSize", "[io][npy]") {
  CHECK(std::string(DTypeName(DType::kF32)) == "f32");
  CHECK(std::string(DTypeName(DType::kF64)) == "f64");
  CHECK(std::string(DTypeName(DType::kF16)) == "f16");
  CHECK(std::string(DTypeName(DType::kBF16)) == "bf16");
  CHECK(std::string(DTypeName(DType::kU8)) == "u8");
  CHECK(std::string(DTypeName(DType::kU16)) == "u16");
  CHECK(DTypeSize(DType::kF32) == 4);
  CHECK(DTypeSize(DType::kF64) == 8);
  CHECK(DTypeSize(DType::kF16) == 2);
  CHECK(DTypeSize(DType::kBF16) == 2);
  CHECK(DTypeSize(DType::kU8) == 1);
  CHECK(DTypeSize(DType::kU16) == 2);
}

TEST_CASE("io: npyArray::count", "[io][npy]") {
  NpyArray array;
  CHECK(array.count() == 1);  // scalar
  array.shape = {0};
  CHECK(array.count() == 0);
  array.shape = {2, 3, 4};
  CHECK(array.count() == 24);
}

TEST_CASE("io: round trip of every dtype and shape, in memory and on disk", "[io][npy]") {
  NpyTempDir dir;
  const std::vector<std::vector<size_t>> shapes = {{}, {0}, {5}, {2, 3, 4}};
  for (DType dtype : kAllDTypes) {
    for (const auto& shape : shapes) {
      INFO("dtype " << DTypeName(dtype) << " ndim " << shape.size());
      NpyArray array = MakeArray(dtype, shape);
      std::vector<uint8_t> bytes = SerializeNpy(array);
      CHECK(bytes.size() % 64 == array.data.size() % 64);  // preamble is 64-aligned
      NpyArray back = ParseNpy(bytes, "mem");
      CHECK(back.dtype == array.dtype);
      CHECK(back.shape == array.shape);
      CHECK(back.data == array.data);

      std::string path = dir.File(std::string("a_") + DTypeName(dtype) + ".npy");
      WriteNpy(path, array);
      NpyArray from_disk = ReadNpy(path);
      CHECK(from_disk.dtype == array.dtype);
      CHECK(from_disk.shape == array.shape);
      CHECK(from_disk.data == array.data);
    }
  }
}

TEST_CASE("io: serialized bytes match numpy.save for known arrays", "[io][npy]") {
  SECTION("<f4 shape (3,)") {
    NpyArray array;
    array.dtype = DType::kF32;
    array.shape = {3};
    // 1.0f, 2.0f, 3.0f little-endian.
    array.data = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40};
    // 10-byte prefix + 57-byte dict + spaces + '\n' = 128 (the next multiple
    // of 64); header length field = 118 = 'v'.
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
    REQUIRE(dict.size() == 57);
    std::string expected = std::string("\x93NUMPY\x01\x00v\x00", 10) + dict +
                           std::string(60, ' ') + "\n";
    REQUIRE(expected.size() == 128);
    expected.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
    std::vector<uint8_t> bytes = SerializeNpy(array);
    CHECK(std::string(bytes.begin(), bytes.end()) == expected);
  }
  SECTION("<f4 scalar") {
    NpyArray array;
    array.dtype = DType::kF32;
    array.data = {0, 0, 0, 0};
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
    std::string expected = std::string("\x93NUMPY\x01\x00v\x00", 10) + dict +
                           std::string(128 - 10 - 1 - dict.size(), ' ') + "\n" +
                           std::string(4, '\0');
    std::vector<uint8_t> bytes = SerializeNpy(array);
    CHECK(std::string(bytes.begin(), bytes.end()) == expected);
  }
  SECTION("descr spelling per dtype") {
    const std::pair<DType, const char*> cases[] = {
        {DType::kF32, "'<f4'"}, {DType::kF64, "'<f8'"}, {DType::kF16, "'<f2'"},
        {DType::kBF16, "'|V2'"}, {DType::kU8, "'|u1'"}, {DType::kU16, "'<u2'"}};
    for (const auto& c : cases) {
      std::vector<uint8_t> bytes = SerializeNpy(MakeArray(c.first, {2, 3}));
      std::string text(bytes.begin(), bytes.end());
      CHECK_THAT(text, Contains(std::string("{'descr': ") + c.second +
                                ", 'fortran_order': False, 'shape': (2, 3), }"));
    }
  }
}

TEST_CASE("io: large headers switch to format 2.0", "[io][npy]") {
  // 30000 dimensions of 1 ("1, " each) make a header past the 65535-byte limit of 1.0.
  NpyArray array = MakeArray(DType::kU8, std::vector<size_t>(30000, 1));
  std::vector<uint8_t> bytes = SerializeNpy(array);
  REQUIRE(bytes.size() > 12);
  CHECK(bytes[6] == 2);
  CHECK(bytes[7] == 0);
  uint32_t hlen = 0;
  for (size_t i = 4; i-- > 0;) hlen = (hlen << 8) | bytes[8 + i];
  CHECK((12 + hlen) % 64 == 0);
  NpyArray back = ParseNpy(bytes, "mem");
  CHECK(back.shape == array.shape);
  CHECK(back.data == array.data);
}

TEST_CASE("io: header parsing is tolerant of layout", "[io][npy]") {
  SECTION("versions 1.0, 2.0, 3.0") {
    for (int major = 1; major <= 3; ++major) {
      NpyArray array = ParseNpy(RawNpy(Header("<u2", "(2, 3)"), 12, major), "x.npy");
      CHECK(array.dtype == DType::kU16);
      CHECK(array.shape == std::vector<size_t>{2, 3});
      CHECK(array.data.size() == 12);
    }
  }
  SECTION("key order, quotes, spacing, trailing comma, Python 2 longs") {
    const char* headers[] = {
        "{'shape': (2, 3), 'fortran_order': False, 'descr': '<u2'}",
        "{ \"descr\" : \"<u2\" ,\"fortran_order\":False,'shape':(2,3,),}   \n",
        "{'descr':'<u2','fortran_order':False,'shape':(2L, 3L)}\n",
        "{u'descr': u'<u2', 'fortran_order': False, 'shape': ( 2 ,  3 ) , }",
    };
    for (const char* header : headers) {
      INFO(header);
      NpyArray array = ParseNpy(RawNpy(header, 12), "x.npy");
      CHECK(array.dtype == DType::kU16);
      CHECK(array.shape == std::vector<size_t>{2, 3});
    }
  }
  SECTION("shapes (), (0,), (5,)") {
    CHECK(ParseNpy(RawNpy(Header("<f8", "()"), 8), "x").shape.empty());
    CHECK(ParseNpy(RawNpy(Header("<f8", "(0,)"), 0), "x").shape == std::vector<size_t>{0});
    CHECK(ParseNpy(RawNpy(Header("<f8", "(5,)"), 40), "x").shape == std::vector<size_t>{5});
  }
  SECTION("dtype aliases") {
    CHECK(ParseNpy(RawNpy(Header("<u1", "(2,)"), 2), "x").dtype == DType::kU8);
    CHECK(ParseNpy(RawNpy(Header("|u1", "(2,)"), 2), "x").dtype == DType::kU8);
    CHECK(ParseNpy(RawNpy(Header("<V2", "(2,)"), 4), "x").dtype == DType::kBF16);
    CHECK(ParseNpy(RawNpy(Header("|V2", "(2,)"), 4), "x").dtype == DType::kBF16);
    CHECK(ParseNpy(RawNpy(Header("bfloat16", "(2,)"), 4), "x").dtype == DType::kBF16);
    CHECK(ParseNpy(RawNpy(Header("<f2", "(2,)"), 4), "x").dtype == DType::kF16);
  }
  SECTION("zero dimension with huge others is an empty array") {
    NpyArray array =
        ParseNpy(RawNpy(Header("<f4", "(0, 18446744073709551615, 99999999999)"), 0), "x");
    CHECK(array.count() == 0);
    CHECK(array.data.empty());
  }
}

TEST_CASE("io: malformed input throws IoError naming file and problem", "[io][npy]") {
  SECTION("bad magic") {
    std::vector<uint8_t> bytes = RawNpy(Header("<f4", "(1,)"), 4);
    bytes[1] = 'X';
    std::string msg = ParseError(bytes);
    CHECK_THAT(msg, Contains("x.npy") && Contains("not a .npy file"));
    CHECK_THAT(ParseError({}), Contains("not a .npy file"));
    CHECK_THAT(ParseError({'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l', 'd'}),
               Contains("not a .npy file"));
  }
  SECTION("truncated header") {
    CHECK_THAT(ParseError({0x93, 'N', 'U', 'M', 'P', 'Y', 1}), Contains("truncated header"));
    CHECK_THAT(ParseError({0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 5}),
               Contains("truncated header"));
    CHECK_THAT(ParseError({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 5, 0, 0}),
               Contains("truncated header"));
  }
  SECTION("header length beyond file") {
    std::vector<uint8_t> bytes = RawNpy(Header("<f4", "(1,)"), 0);
    bytes[9] = 0x7f;  // header length ~32 KiB in a ~60 byte file
    CHECK_THAT(ParseError(bytes), Contains("x.npy") && Contains("header length") &&
                                      Contains("beyond end of file"));
    std::vector<uint8_t> v2 = RawNpy(Header("<f4", "(1,)"), 4, 2);
    v2[11] = 0xff;  // 4 GiB header
    CHECK_THAT(ParseError(v2), Contains("beyond end of file"));
  }
  SECTION("unsupported format version") {
    std::vector<uint8_t> bytes = RawNpy(Header("<f4", "(1,)"), 4);
    bytes[6] = 4;
    CHECK_THAT(ParseError(bytes), Contains("unsupported .npy format version 4.0"));
    bytes[6] = 1;
    bytes[7] = 1;
    CHECK_THAT(ParseError(bytes), Contains("version 1.1"));
  }
  SECTION("missing keys") {
    CHECK_THAT(ParseError(RawNpy("{'fortran_order': False, 'shape': (1,), }", 4)),
               Contains("missing key 'descr'"));
    CHECK_THAT(ParseError(RawNpy("{'descr': '<f4', 'shape': (1,), }", 4)),
               Contains("missing key 'fortran_order'"));
    CHECK_THAT(ParseError(RawNpy("{'descr': '<f4', 'fortran_order': False}", 4)),
               Contains("missing key 'shape'"));
    CHECK_THAT(ParseError(RawNpy("{}", 4)), Contains("missing key"));
  }
  SECTION("unknown or duplicate keys, non-dict headers") {
    CHECK_THAT(ParseError(RawNpy(
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4)),
               Contains("unexpected key 'x'"));
    CHECK_THAT(ParseError(RawNpy(
                   "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
                   4)),
               Contains("duplicate key 'descr'"));
    CHECK_THAT(ParseError(RawNpy("[1, 2]", 4)), Contains("malformed header"));
    CHECK_THAT(ParseError(RawNpy("", 4)), Contains("malformed header"));
    CHECK_THAT(ParseError(RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
                                 4)),
               Contains("malformed header"));
    CHECK_THAT(ParseError(RawNpy("{'descr: '<f4'", 4)), Contains("malformed header"));
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "(1,)", "maybe"), 4)),
               Contains("malformed header"));
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "(1,)", "1"), 4)),
               Contains("fortran_order must be True or False"));
    CHECK_THAT(ParseError(RawNpy("{'descr': " + std::string(1000, '(') + "}", 4)),
               Contains("nesting too deep"));
  }
  SECTION("unparsable shape") {
    const char* bad_shapes[] = {"(2, x)", "(2.0,)", "(5)", "[2, 3]", "(-1,)",   "'2'",
                                "(2,,)",  "(,)",    "(2",  "None",   "((2,),)", "(2 3)"};
    for (const char* shape : bad_shapes) {
      INFO(shape);
      CHECK_THAT(ParseError(RawNpy(Header("<f4", shape), 8)),
                 Contains("x.npy") && Contains("unparsable shape"));
    }
  }
  SECTION("shape overflow") {
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "(4294967296, 4294967296)"), 4)),
               Contains("too large"));
    CHECK_THAT(ParseError(RawNpy(Header("<u1", "(4294967296, 4294967296)"), 4)),
               Contains("too large"));
    // count fits in size_t but count * itemsize does not.
    CHECK_THAT(ParseError(RawNpy(Header("<f8", "(4611686018427387904,)"), 4)),
               Contains("too large"));
    CHECK_THAT(ParseError(RawNpy(Header("<u1", "(99999999999999999999999,)"), 4)),
               Contains("too large"));
  }
  SECTION("unsupported dtypes") {
    std::string msg = ParseError(RawNpy(Header(">f4", "(1,)"), 4));
    CHECK(msg ==
          "x.npy: unsupported dtype '>f4' (qmx-sim reads little-endian <f4, <f8, <f2, |u1, "
          "<u2 and bf16 as |V2)");
    for (const char* descr : {"|O", "<i4", "<f16", "|b1", "<c8", ">u2", "=f4", "|V4", ""}) {
      INFO(descr);
      CHECK_THAT(ParseError(RawNpy(Header(descr, "(1,)"), 64)),
                 Contains("unsupported dtype"));
    }
    CHECK_THAT(ParseError(RawNpy(
                   "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", 4)),
               Contains("unsupported dtype") && Contains("structured"));
  }
  SECTION("fortran order") {
    CHECK(ParseError(RawNpy(Header("<f4", "(2, 2)", "True"), 16)) ==
          "x.npy: fortran_order=True is not supported; save the array in C order "
          "(e.g. np.ascontiguousarray)");
  }
  SECTION("data shorter or longer than the shape") {
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "(2, 3)"), 23)),
               Contains("x.npy") && Contains("truncated: expected 24 bytes of data, found 23"));
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "()"), 0)),
               Contains("truncated: expected 4 bytes of data, found 0"));
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "(2, 3)"), 25)),
               Contains("trailing garbage") && Contains("expected 24") &&
                   Contains("found 25"));
    CHECK_THAT(ParseError(RawNpy(Header("<f4", "(0,)"), 1)), Contains("trailing garbage"));
  }
}

TEST_CASE("io: every prefix truncation of a valid file throws", "[io][npy]") {
  for (DType dtype : kAllDTypes) {
    std::vector<uint8_t> full = SerializeNpy(MakeArray(dtype, {2, 3}));
    for (size_t len = 0; len < full.size(); ++len) {
      std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
      CHECK_THROWS_AS(ParseNpy(prefix, "x.npy"), IoError);
    }
    CHECK_NOTHROW(ParseNpy(full, "x.npy"));
  }
}

TEST_CASE("io: random corruption never crashes", "[io][npy]") {
  // Deterministic xorshift so failures reproduce; the point is that ASan/UBSan
  // builds see no out-of-bounds access, and only IoError escapes.
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const std::vector<uint8_t> valid = SerializeNpy(MakeArray(DType::kF32, {2, 3}));
  const char kInteresting[] = "(),:{}'\"0123456789-LTrueFalse \n\\[]";
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> bytes = valid;
    int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = next() % bytes.size();
      switch (next() % 4) {
        case 0: bytes[pos] = static_cast<uint8_t>(next()); break;
        case 1: bytes[pos] = static_cast<uint8_t>(kInteresting[next() % (sizeof(kInteresting) - 1)]); break;
        case 2: bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(pos)); break;
        default: bytes.resize(pos + 1); break;
      }
      if (bytes.empty()) break;
    }
    try {
      NpyArray array = ParseNpy(bytes, "fuzz.npy");
      CHECK(array.data.size() == array.count() * DTypeSize(array.dtype));
    } catch (const IoError& e) {
      CHECK_THAT(std::string(e.what()), Contains("fuzz.npy: "));
    }
  }
}

TEST_CASE("io: serializeNpy rejects inconsistent arrays", "[io][npy]") {
  NpyArray array = MakeArray(DType::kF32, {2, 3});
  array.data.pop_back();
  CHECK_THAT(IoErrorMessage([&] { SerializeNpy(array); }),
             Contains("data has 23 bytes") && Contains("needs 24"));
  NpyArray huge;
  huge.dtype = DType::kF64;
  huge.shape = {size_t{1} << 62, 4};
  CHECK_THAT(IoErrorMessage([&] { SerializeNpy(huge); }), Contains("too large"));
}

TEST_CASE("io: readNpy and WriteNpy report file problems", "[io][npy]") {
  NpyTempDir dir;
  const std::string missing = dir.File("missing.npy");
  CHECK_THAT(IoErrorMessage([&] { ReadNpy(missing); }),
             Contains("cannot open '" + missing + "': No such file or directory"));
  CHECK_THAT(IoErrorMessage([&] { ReadNpy(dir.path.string()); }), Contains("cannot read"));

  const std::string bad = dir.File("bad.npy");
  WriteFileAtomic(bad, "not numpy at all");
  CHECK_THAT(IoErrorMessage([&] { ReadNpy(bad); }), Contains(bad + ": not a .npy file"));

  const std::string nowhere = dir.File("no_such_dir/out.npy");
  CHECK_THAT(IoErrorMessage([&] { WriteNpy(nowhere, MakeArray(DType::kU8, {3})); }),
             Contains("cannot write '" + nowhere + "'"));
  NpyArray inconsistent = MakeArray(DType::kU8, {3});
  inconsistent.data.push_back(0);
  const std::string target = dir.File("inconsistent.npy");
  CHECK_THAT(IoErrorMessage([&] { WriteNpy(target, inconsistent); }), Contains(target));
  CHECK_FALSE(fs::exists(target));
}

TEST_CASE("io: writeFileAtomic replaces content and leaves no temp file", "[io][npy]") {
  NpyTempDir dir;
  const std::string path = dir.File("out.csv");
  WriteFileAtomic(path, "first version, longer than the second\n");
  CHECK(ReadText(path) == "first version, longer than the second\n");
  WriteFileAtomic(path, "second\n");
  CHECK(ReadText(path) == "second\n");
  WriteFileAtomic(path, std::string("bin\0ary", 7));
  CHECK(ReadText(path) == std::string("bin\0ary", 7));
  WriteFileAtomic(path, "");
  CHECK(ReadText(path).empty());

  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    names.push_back(entry.path().filename().string());
  }
  CHECK(names == std::vector<std::string>{"out.csv"});

  SECTION("non-existent directory") {
    const std::string nowhere = dir.File("absent/sub/out.csv");
    CHECK_THAT(IoErrorMessage([&] { WriteFileAtomic(nowhere, "x"); }),
               Contains("cannot write '" + nowhere + "'") &&
                   Contains("the directory") && Contains("does not exist"));
    CHECK_FALSE(fs::exists(dir.path / "absent"));
  }
  SECTION("a directory at the output path is refused and nothing is left behind") {
    fs::create_directories(dir.path / "a_dir" / "child");
    const std::string onto_dir = dir.File("a_dir");
    CHECK_THAT(IoErrorMessage([&] { WriteFileAtomic(onto_dir, "x"); }),
               Contains("cannot write '" + onto_dir + "'") && Contains("is a directory"));
    CHECK(fs::is_directory(dir.path / "a_dir"));
    size_t entries = 0;
    for (const auto& entry : fs::directory_iterator(dir.path)) {
      (void)entry;
      ++entries;
    }
    CHECK(entries == 2);  // out.csv and a_dir, no temp file
  }
}

}  // namespace
}  // namespace qmx
