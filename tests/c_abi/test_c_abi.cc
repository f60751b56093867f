// test_c_abi.cc: the C ABI (qmx/qmx_c.h, libqmx_c.so) against the C++ library: every golden/level1 file
// replayed through it (conversions and their flags, decoding, UE8M0 scales, MX and NVFP4 blocks, SR with
// given bits, dot products), quantization and GEMMs equal to
// qmx::Quantize and qmx::Gemm, and its errors (a status and a message, never an exception).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "golden/golden_internal.h"
#include "qmx/gemm.h"
#include "qmx/golden.h"
#include "qmx/qmx_c.h"
#include "qmx/quantize.h"
#include "qmx/rng.h"
#include "qmx/round.h"

namespace c_abi_test {

namespace fs = std::filesystem;
using qmx::golden::HeaderKeys;
using qmx::golden::KeyValue;

const fs::path kLevel1 = fs::path(QMX_SOURCE_DIR) / "golden" / "level1";

// A golden field of FP32 bits as the float.
float F32(const std::string& hex) {
  const uint32_t bits = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// The header keys' cast options as the C ABI takes them.
qmx_cast_options OptionsOf(const HeaderKeys& keys) {
  qmx_cast_options o;
  qmx_cast_options_default(&o);
  auto get = [&](const char* k) { return qmx::golden::HasKey(keys, k) ? KeyValue(keys, k) : std::string(); };
  const std::string r = get("round"), s = get("sat"), ns = get("nan-sign"), nf = get("nan-fallback"),
                    sub = get("subnormals");
  REQUIRE(qmx_cast_options_set(&o, r.c_str(), s.c_str(), ns.c_str(), nf.c_str(), sub.c_str(), nullptr) == QMX_OK);
  for (const char* k : {"tininess", "nan-payload", "sr-bits"})
    if (qmx::golden::HasKey(keys, k)) REQUIRE(qmx_cast_options_set_key(&o, k, KeyValue(keys, k).c_str()) == QMX_OK);
  return o;
}

const char* SourceFormat(const std::string& src) { return src == "f32" ? "fp32" : src == "f16" ? "fp16" : "bf16"; }

// Replays a file's cases through the C ABI where it has the operation; the outputs in the file's fields.
std::string Runner(const std::string& op, const HeaderKeys& keys, const std::vector<std::vector<std::string>>& inputs,
                   std::vector<std::vector<std::string>>& outputs) {
  outputs.clear();
  if (op == "convert") {
    const qmx_cast_options o = OptionsOf(keys);
    const std::string src = SourceFormat(KeyValue(keys, "src")), dst = KeyValue(keys, "dst");
    qmx_format_info info;
    REQUIRE(qmx_format_info_get(dst.c_str(), &info) == QMX_OK);
    const int digits = info.bits <= 8 ? 2 : (info.bits + 3) / 4;  // codes as the files write them
    for (const auto& in : inputs) {
      uint64_t code = 0;
      uint32_t flags = 0;
      REQUIRE(qmx_convert(src.c_str(), std::stoull(in[0], nullptr, 16), dst.c_str(), &o, 0, &code, &flags) == QMX_OK);
      outputs.push_back({qmx::golden::Hex(code, digits), qmx::golden::Hex(flags, 2)});
    }
    return "";
  }
  if (op == "decode") {
    const std::string f = KeyValue(keys, "fmt");
    for (const auto& in : inputs) {
      double v = 0;
      const uint64_t code = std::stoull(in[0], nullptr, 16);
      REQUIRE(qmx_decode(f.c_str(), code, &v) == QMX_OK);
      const float x = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      if (std::isnan(v)) bits = (std::signbit(v) ? 0x80000000u : 0u) | 0x7FC00000u;  // the file's quiet NaN
      outputs.push_back({qmx::golden::Hex(bits, 8), "00"});
    }
    return "";
  }
  if (op == "ue8m0") {
    const std::string elem = KeyValue(keys, "elem"), rule = KeyValue(keys, "rule");
    for (const auto& in : inputs) {
      uint8_t s = 0, sb = 0;
      REQUIRE(qmx_ue8m0_scale(F32(in[0]), elem.c_str(), rule.c_str(), &s) == QMX_OK);
      // The bits form (the DPI package's) gives the same byte.
      REQUIRE(qmx_ue8m0_scale_bits(static_cast<uint32_t>(std::stoul(in[0], nullptr, 16)), elem.c_str(), rule.c_str(),
                                   &sb) == QMX_OK);
      REQUIRE(sb == s);
      outputs.push_back({qmx::golden::Hex(s, 2), "00"});
    }
    return "";
  }
  if (op == "mx-block") {
    const size_t bl = std::stoul(KeyValue(keys, "block"));
    const qmx_cast_options o = OptionsOf(keys);
    for (const auto& in : inputs) {
      std::vector<float> x(bl);
      for (size_t j = 0; j < bl; ++j) x[j] = F32(in[j]);
      std::vector<uint8_t> codes(bl);
      uint8_t scale = 0;
      REQUIRE(qmx_mx_blocks(x.data(), bl, KeyValue(keys, "elem").c_str(), KeyValue(keys, "rule").c_str(),
                            KeyValue(keys, "nan").c_str(), KeyValue(keys, "scaling").c_str(), bl, &o, codes.data(),
                            &scale) == QMX_OK);
      outputs.push_back({qmx::golden::Hex(scale, 2), qmx::golden::JoinCodes(codes.data(), bl, 2), "--"});
    }
    return "";
  }
  if (op == "nvfp4-block") {
    const size_t bl = std::stoul(KeyValue(keys, "block"));
    const qmx_cast_options o = OptionsOf(keys);
    for (const auto& in : inputs) {
      std::vector<float> x(bl);
      for (size_t j = 0; j < bl; ++j) x[j] = F32(in[1 + j]);
      std::vector<uint8_t> codes(bl);
      uint8_t scale = 0;
      float decode = 0;
      REQUIRE(qmx_nvfp4_blocks(x.data(), 1, bl, F32(in[0]), KeyValue(keys, "rule").c_str(), bl, &o, codes.data(),
                               &scale, &decode) == QMX_OK);
      uint32_t dbits;
      std::memcpy(&dbits, &decode, 4);
      // The bits form (the DPI package's) gives the same codes, scale and decode scale.
      std::vector<uint32_t> xb(bl);
      for (size_t j = 0; j < bl; ++j) xb[j] = static_cast<uint32_t>(std::stoul(in[1 + j], nullptr, 16));
      std::vector<uint8_t> codes_b(bl);
      uint8_t scale_b = 0;
      uint32_t dbits_b = 0;
      REQUIRE(qmx_nvfp4_blocks_bits(xb.data(), 1, bl, static_cast<uint32_t>(std::stoul(in[0], nullptr, 16)),
                                    KeyValue(keys, "rule").c_str(), bl, &o, codes_b.data(), &scale_b, &dbits_b) == QMX_OK);
      REQUIRE(codes_b == codes);
      REQUIRE(scale_b == scale);
      REQUIRE(dbits_b == dbits);
      outputs.push_back(
          {qmx::golden::Hex(dbits, 8), qmx::golden::Hex(scale, 2), qmx::golden::JoinCodes(codes.data(), bl, 1), "--"});
    }
    return "";
  }
  if (op == "sr") {
    // Stochastic rounding with given random bits: one conversion per element (PTX's cvt.rs x4 layout packs
    // four, each with its byte of rbits, the codes from the top down).
    const qmx_cast_options o = OptionsOf(keys);
    const std::string dst = KeyValue(keys, "dst");
    const bool x4 = KeyValue(keys, "layout") == "ptx-cvt-rs-x4";
    qmx_format_info info;
    REQUIRE(qmx_format_info_get(dst.c_str(), &info) == QMX_OK);
    for (const auto& in : inputs) {
      const size_t lanes = x4 ? 4 : 1;
      const uint32_t rb = static_cast<uint32_t>(std::stoul(in[lanes], nullptr, 16));
      uint64_t packed = 0;
      uint32_t all = 0;
      for (size_t j = 0; j < lanes; ++j) {
        uint64_t code = 0;
        uint32_t flags = 0;
        const uint32_t r = x4 ? (rb >> qmx::golden::detail::SrRbitsShift(info.bits, j)) & 0xFF : rb;
        REQUIRE(qmx_convert("fp32", std::stoull(in[j], nullptr, 16), dst.c_str(), &o, r, &code, &flags) == QMX_OK);
        packed |= code << ((3 - j) * (info.bits == 4 ? 4 : 8));
        all |= flags;
        if (!x4) packed = code;
      }
      outputs.push_back({qmx::golden::Hex(packed, x4 ? (info.bits == 4 ? 4 : 8) : 2), qmx::golden::Hex(all, 2)});
    }
    return "";
  }
  if (op == "dot") {
    const size_t k = std::stoul(KeyValue(keys, "k"));
    const std::string scale = KeyValue(keys, "scale");
    const size_t block = scale == "none" ? 0 : std::stoul(KeyValue(keys, "block"));
    const int digits = scale == "fp32" ? 8 : 2;
    auto words = [](const std::string& hex, size_t n, int w) {
      std::vector<uint32_t> v(n);
      for (size_t i = 0; i < n && hex != "-"; ++i) v[i] = static_cast<uint32_t>(std::stoul(hex.substr(i * w, w), nullptr, 16));
      return v;
    };
    auto tensor = [&](const char* key) {
      return qmx::golden::HasKey(keys, key) ? static_cast<uint32_t>(std::stoul(KeyValue(keys, key), nullptr, 16))
                                           : 0x3F800000u;
    };
    const uint32_t ta = tensor("tensor-a"), tb = tensor("tensor-b");
    for (const auto& in : inputs) {
      const std::vector<uint32_t> a32 = words(in[0], k, 2), b32 = words(in[1], k, 2);
      const std::vector<uint8_t> a(a32.begin(), a32.end()), b(b32.begin(), b32.end());
      const size_t ns = block ? k / block : 0;
      const std::vector<uint32_t> sa = words(in[2], ns, digits), sb = words(in[3], ns, digits);
      const bool has_c = in[4] != "-";
      uint32_t d = 0;
      REQUIRE(qmx_dot(KeyValue(keys, "model").c_str(), KeyValue(keys, "a").c_str(), a.data(),
                      KeyValue(keys, "b").c_str(), b.data(), k, scale.c_str(), sa.data(), sb.data(), block, ta, tb,
                      has_c, has_c ? static_cast<uint32_t>(std::stoul(in[4], nullptr, 16)) : 0u, &d) == QMX_OK);
      outputs.push_back({qmx::golden::Hex(d, 8), "--"});
    }
    return "";
  }
  return "op=" + op + " is not replayed through the C ABI";
}

TEST_CASE("c abi: every golden/level1 file (conversions, decoding, scales, MX and NVFP4 blocks, SR, dots) replays through it",
          "[c_abi]") {
  qmx::golden::VerifyOptions vo;
  vo.external = Runner;
  const std::vector<qmx::golden::FileResult> res = qmx::golden::Verify(kLevel1.string(), vo);
  size_t ran = 0, cases = 0;
  for (const auto& r : res) {
    INFO(r.path << (r.first.empty() ? std::string() : ": " + r.first[0].text) << " " << r.skipped);
    CHECK(r.ok());
    CHECK(r.skipped.empty());  // every operation has its C ABI call
    if (r.skipped.empty()) {
      ++ran;
      cases += r.cases;
    }
  }
  INFO("files replayed " << ran << ", cases " << cases);
  CHECK(ran >= 750);  // every file: conversions, decode, ue8m0, mx-block, nvfp4-block, sr and dot
  CHECK(cases > 100000);
}

// The flags, which Verify leaves to the library's own backend: every f32 conversion file's third field.
TEST_CASE("c abi: the flags of every golden f32 conversion", "[c_abi]") {
  size_t files = 0, lines = 0;
  for (const auto& e : fs::directory_iterator(kLevel1 / "conversions")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("f32_", 0) != 0) continue;
    std::ifstream in(e.path());
    std::string line;
    HeaderKeys keys;
    while (std::getline(in, line)) {
      if (line.rfind("# op=", 0) == 0) {
        std::istringstream ss(line.substr(2));
        std::string kv;
        while (ss >> kv) {
          const size_t eq = kv.find('=');
          if (eq != std::string::npos) keys.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
        }
        continue;
      }
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ss(line);
      std::string x, code, flags;
      ss >> x >> code >> flags;
      const qmx_cast_options o = OptionsOf(keys);
      uint64_t c = 0;
      uint32_t f = 0;
      REQUIRE(qmx_convert("fp32", std::stoull(x, nullptr, 16), KeyValue(keys, "dst").c_str(), &o, 0, &c, &f) == QMX_OK);
      INFO(name << ": " << line);
      CHECK(c == std::stoull(code, nullptr, 16));
      CHECK(f == std::stoul(flags, nullptr, 16));
      ++lines;
    }
    ++files;
  }
  CHECK(files >= 100);
  CHECK(lines > 50000);
}

TEST_CASE("c abi: array conversion with flags and stochastic rounding equals the library", "[c_abi]") {
  std::mt19937 rng(3);
  std::vector<float> x(4099);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng) * 300.0f;
  x[5] = NAN;
  x[6] = INFINITY;
  for (const char* fmt : {"e4m3", "e2m1", "e4m3fnuz", "float8_e5m2"}) {
    qmx_cast_options o;
    qmx_cast_options_default(&o);
    REQUIRE(qmx_cast_options_set(&o, "sr", nullptr, nullptr, nullptr, nullptr, nullptr) == QMX_OK);
    std::vector<uint8_t> codes(x.size()), flags(x.size()), want(x.size());
    REQUIRE(qmx_convert_f32(x.data(), x.size(), fmt, &o, 77, 1000, codes.data(), flags.data()) == QMX_OK);
    qmx::CastOptions c;
    c.rounding = qmx::Rounding::kSrA;
    qmx::ConvertToCodes(qmx::DType::kF32, x.data(), x.size(), qmx::ParseFormat(fmt), c, want.data(),
                        qmx::SrSource{77, 1000, nullptr});
    INFO(fmt);
    CHECK(codes == want);
    for (size_t i = 0; i < x.size(); i += 97) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      const qmx::RoundResult r =
          qmx::Convert(qmx::fmt::kFP32, bits, qmx::ParseFormat(fmt), c, qmx::RandomBitsForElement(77, 1000 + i));
      CHECK(flags[i] == r.flags);
      CHECK(codes[i] == r.code);
    }
  }
}

TEST_CASE("c abi: quantize and GEMM equal qmx::Quantize and qmx::Gemm", "[c_abi]") {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  const size_t m = 7, k = 64, n = 5;
  std::vector<float> a(m * k), bt(n * k);
  for (float& v : a) v = nd(rng);
  for (float& v : bt) v = nd(rng) * 0.01f;
  for (const char* spec : {"mxfp8", "nvfp4", "fp8-block1x128", "fp8-tensor-current"}) {
    INFO(spec);
    std::vector<uint8_t> codes(m * k), scales(4096);
    size_t written = 0;
    float ts = 0;
    REQUIRE(qmx_quantize(spec, a.data(), m, k, 5, codes.data(), scales.data(), scales.size(), &written, &ts) == QMX_OK);
    qmx::QuantSpec s = qmx::QuantSpecByName(spec);
    s.seed = 5;
    const qmx::QuantizedTensor q = qmx::Quantize(qmx::TensorView{qmx::DType::kF32, a.data(), m, k}, s);
    CHECK(std::equal(q.codes.begin(), q.codes.end(), codes.begin()));
    REQUIRE(written == q.scales.size());
    CHECK(std::equal(q.scales.begin(), q.scales.end(), scales.begin()));
    CHECK(ts == q.tensor_decode);
    // Too small a buffer: an error naming the bytes needed, nothing thrown.
    if (written > 1) {
      CHECK(qmx_quantize(spec, a.data(), m, k, 5, codes.data(), scales.data(), written - 1, &written, nullptr) ==
            QMX_ERR_ARGUMENT);
      CHECK_THAT(qmx_last_error(), Catch::Contains("the scales need"));
    }
  }
  // MXFP8 operands with UE8M0 scales, against qmx::Gemm with the same operands.
  std::vector<uint8_t> ac(m * k), bc(k * n);
  for (auto& c : ac) c = static_cast<uint8_t>(rng() % 0x7E);
  for (auto& c : bc) c = static_cast<uint8_t>(rng() % 0x7E | (rng() & 0x80));
  std::vector<uint32_t> sa(m * (k / 32)), sb((k / 32) * n);
  for (auto& s : sa) s = 120 + rng() % 14;
  for (auto& s : sb) s = 120 + rng() % 14;
  const qmx_operand oa{"e4m3", ac.data(), m, k, "ue8m0", sa.data(), 1, 32, 1.0f};
  const qmx_operand ob{"e4m3", bc.data(), k, n, "ue8m0", sb.data(), 32, 1, 1.0f};
  qmx::GemmOperand ga = qmx::OperandFromCodes(qmx::fmt::kE4M3, m, k, ac.data()),
                   gb = qmx::OperandFromCodes(qmx::fmt::kE4M3, k, n, bc.data());
  qmx::SetBlockScales(ga, qmx::ScaleFormat::kUe8m0, 1, 32, sa.data());
  qmx::SetBlockScales(gb, qmx::ScaleFormat::kUe8m0, 32, 1, sb.data());
  for (const char* model : {"exact", "blackwell-mxf8f6f4", "fp32-seq", "block-exact"}) {
    INFO(model);
    std::vector<float> d(m * n);
    REQUIRE(qmx_gemm(model, &oa, &ob, nullptr, d.data()) == QMX_OK);
    const std::vector<float> want = qmx::Gemm(ga, gb, nullptr, qmx::AccumModelByName(model));
    CHECK(std::memcmp(d.data(), want.data(), d.size() * 4) == 0);
  }
}

TEST_CASE("c abi: errors are statuses with the library's messages", "[c_abi]") {
  CHECK(qmx_abi_version() == QMX_C_ABI_VERSION);
  uint64_t code = 0;
  CHECK(qmx_convert("fp32", 0, "e4m4x", nullptr, 0, &code, nullptr) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("unknown format 'e4m4x'"));
  CHECK(qmx_convert("fp32", 0, "e4m3", nullptr, 0, nullptr, nullptr) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("qmx_convert: code is NULL"));
  qmx_cast_options o;
  qmx_cast_options_default(&o);
  const qmx_cast_options before = o;
  CHECK(qmx_cast_options_set(&o, "rne", "sometimes", nullptr, nullptr, nullptr, nullptr) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("sometimes"));
  CHECK(std::memcmp(&o, &before, sizeof o) == 0);  // unchanged on error
  REQUIRE(qmx_cast_options_set(&o, nullptr, "nosat", nullptr, nullptr, nullptr, nullptr) == QMX_OK);
  CHECK(qmx_convert("fp32", 0x3F800000, "e2m1", &o, 0, &code, nullptr) == QMX_ERR_ARGUMENT);  // e2m1 has no Inf/NaN
  o.rounding = 99;
  CHECK(qmx_convert("fp32", 0x3F800000, "e4m3", &o, 0, &code, nullptr) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("outside its enumeration"));
  uint32_t fl = 0;
  CHECK(qmx_convert_named("fp32", 0, "e4m3", "sideways", "", "", "", "", 0, &code, &fl) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("sideways"));
  REQUIRE(qmx_convert_named("fp32", 0x447A0000, "e4m3", "", "nosat", "", "", "", 0, &code, &fl) == QMX_OK);
  CHECK(code == 0x7F);  // OFP8 NONSAT: overflow to NaN
  float xs[32] = {1.0f};
  uint8_t cs[32], sc = 0;
  CHECK(qmx_mx_blocks(xs, 32, "e4m3", "max-finite", "block-nan", "", 32, nullptr, cs, &sc) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("max-finite"));
  double v = 0;
  CHECK(qmx_decode("e2m1", 0x10, &v) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("does not fit e2m1's 4 bits"));
  uint8_t s = 0;
  CHECK(qmx_ue8m0_scale(1.0f, "e4m3", "sideways", &s) == QMX_ERR_ARGUMENT);
  std::vector<float> d(4);
  const uint8_t codes[6] = {0, 0, 0, 0, 0, 0};  // B is 3 x 2
  const qmx_operand a{"e4m3", codes, 2, 2, nullptr, nullptr, 0, 0, 1.0f},
      b{"e4m3", codes, 3, 2, nullptr, nullptr, 0, 0, 1.0f};
  CHECK(qmx_gemm("exact", &a, &b, nullptr, d.data()) == QMX_ERR_ARGUMENT);  // K differs
  CHECK(std::string(qmx_last_error()).size() > 0);
  // qmx_dot: the golden replay above covers its results; here its argument errors.
  const uint8_t ka[4] = {0x38, 0x38, 0x38, 0x38};
  const uint32_t sk[2] = {127, 127};
  uint32_t dd = 0;
  CHECK(qmx_dot("exact", "e4m3", ka, "e4m3", ka, 4, "ue8m0", sk, sk, 3, 0x3F800000u, 0x3F800000u, 0, 0, &dd) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("qmx_dot: block must divide k (4), not 3"));
  CHECK(qmx_dot("exact", "e4m3", ka, "e4m3", ka, 0, nullptr, nullptr, nullptr, 0, 0x3F800000u, 0x3F800000u, 0, 0, &dd) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("k must be 1..2^20"));
  CHECK(qmx_dot("exact", "e4m3", ka, "e4m3", ka, 4, "ue8m0", nullptr, sk, 2, 0x3F800000u, 0x3F800000u, 0, 0, &dd) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("qmx_dot: sa is NULL"));
  CHECK(qmx_dot("exact", "e4m3", ka, nullptr, ka, 4, "none", nullptr, nullptr, 0, 0x3F800000u, 0x3F800000u, 0, 0, &dd) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("qmx_dot: b_format is NULL"));
  CHECK(qmx_dot("sideways", "e4m3", ka, "e4m3", ka, 4, "", nullptr, nullptr, 0, 0x3F800000u, 0x3F800000u, 0, 0, &dd) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("sideways"));
  // Four products of 1 * 1 with C = 0.5 under the exact model: 4.5, with the scales 2^0 or without.
  REQUIRE(qmx_dot("exact", "e4m3", ka, "e4m3", ka, 4, "ue8m0", sk, sk, 2, 0x3F800000u, 0x3F800000u, 1, 0x3F000000u, &dd) == QMX_OK);
  CHECK(dd == 0x40900000u);
  REQUIRE(qmx_dot("exact", "e4m3", ka, "e4m3", ka, 4, "none", nullptr, nullptr, 0, 0x40000000u, 0x3F800000u, 0, 0, &dd) == QMX_OK);
  CHECK(dd == 0x41000000u);  // 4 * 2 (the tensor scale of A)
  CHECK(qmx_nvfp4_blocks_bits(nullptr, 1, 16, 0, "nvfp4", 16, nullptr, cs, &sc, nullptr) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("qmx_nvfp4_blocks_bits: x_bits is NULL"));
  CHECK(qmx_ue8m0_scale_bits(0x3F800000u, "e4m3", "sideways", &s) == QMX_ERR_ARGUMENT);
  qmx_format_info info;
  REQUIRE(qmx_format_info_get("float8_e4m3fnuz", &info) == QMX_OK);
  CHECK(info.max_finite == 240);
  CHECK(info.canonical_nan_code == 0x80);
  CHECK(info.has_negative_zero == 0);
}

}  // namespace c_abi_test

TEST_CASE("c abi: options by golden-header key, tininess, and conversions from a header line", "[c_abi]") {
  qmx_cast_options o;
  qmx_cast_options_default(&o);
  CHECK(o.tininess == 0);
  REQUIRE(qmx_cast_options_set_key(&o, "tininess", "after") == QMX_OK);
  CHECK(o.tininess == static_cast<int>(qmx::Tininess::kAfterRounding));
  REQUIRE(qmx_cast_options_set_key(&o, "sr-bits", "13") == QMX_OK);
  CHECK(o.sr_bits == 13);
  const qmx_cast_options kept = o;
  CHECK(qmx_cast_options_set_key(&o, "sr-bits", "13x") == QMX_ERR_ARGUMENT);
  CHECK(qmx_cast_options_set_key(&o, "tininess", "late") == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("tininess must be before or after, not 'late'"));
  CHECK(qmx_cast_options_set_key(&o, "colour", "red") == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("unknown cast option key 'colour'"));
  CHECK(std::memcmp(&o, &kept, sizeof o) == 0);
  // E4M3's smallest normal is 2^-6; 0x3C7C0000 = 2^-7 * 1.96875 rounds (RNE) to 2^-6 at the format's
  // precision with an unbounded exponent: tiny before rounding, not after.
  const uint32_t x = 0x3C7C0000u;
  uint64_t code_b = 0, code_a = 0;
  uint32_t fl_b = 0, fl_a = 0;
  REQUIRE(qmx_convert_keys("fp32", x, "e4m3", "round=rne sat=satfinite", 0, &code_b, &fl_b) == QMX_OK);
  REQUIRE(qmx_convert_keys("fp32", x, "e4m3",
                           "# op=convert src=f32 dst=e4m3 round=rne sat=satfinite nan-sign=keep nan-fallback=max "
                           "subnormals=keep tininess=after spec=OFP8-1.0 level=1 seed=1 generator=qmx-sim 0.1.0\n",
                           0, &code_a, &fl_a) == QMX_OK);
  CHECK(code_a == code_b);
  CHECK(code_a == 0x08);  // 2^-6
  CHECK(fl_b == (QMX_FLAG_INEXACT | QMX_FLAG_UNDERFLOW));
  CHECK(fl_a == QMX_FLAG_INEXACT);
  qmx_cast_options_default(&o);
  o.tininess = 1;
  uint64_t code = 0;
  uint32_t fl = 0;
  REQUIRE(qmx_convert("fp32", x, "e4m3", &o, 0, &code, &fl) == QMX_OK);
  CHECK(fl == fl_a);
  o.tininess = 2;
  CHECK(qmx_convert("fp32", x, "e4m3", &o, 0, &code, &fl) == QMX_ERR_ARGUMENT);
  CHECK(qmx_convert_keys("fp32", x, "e4m3", "round=rne tininess", 0, &code, &fl) == QMX_ERR_ARGUMENT);
  CHECK_THAT(qmx_last_error(), Catch::Contains("is not key=value"));
}
