// test_format.cc: the registry's derived limits against the OCP tables (docs/REFERENCES.md section 1,
// typed here by hand as the independent expectation), decoding of every code, and user formats.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/format.h"
#include "support/hex.h"

using namespace qmx;
using qmx::test::Hex;

namespace {
struct SpecRow {
  const char* name;
  int bits;
  double max, min_normal, min_sub;
  int emax;
  bool inf, nan;
};
// OCP OFP8 rev 1.0 table 1 and OCP MX v1.0 tables 2-4.
const SpecRow kSpec[] = {
    {"e4m3", 8, 448, 0x1p-6, 0x1p-9, 8, false, true},      {"e5m2", 8, 57344, 0x1p-14, 0x1p-16, 15, true, true},
    {"e3m2", 6, 28, 0x1p-2, 0x1p-4, 4, false, false},      {"e2m3", 6, 7.5, 1, 0x1p-3, 2, false, false},
    {"e2m1", 4, 6, 1, 0.5, 2, false, false},               {"int8", 8, 127.0 / 64, 0x1p-6, 0x1p-6, 0, false, false},
    {"ue8m0", 8, 0x1p127, 0x1p-127, 0x1p-127, 127, false, true},
    {"bf16", 16, 0x1.FEp127, 0x1p-126, 0x1p-133, 127, true, true},
    {"fp16", 16, 65504, 0x1p-14, 0x1p-24, 15, true, true}, {"fp32", 32, 0x1.FFFFFEp127, 0x1p-126, 0x1p-149, 127, true, true},
    // The FNUZ formats: ml_dtypes' float8_e4m3fnuz / float8_e5m2fnuz / float8_e4m3b11fnuz (finfo), AMD CDNA3.
    {"e4m3fnuz", 8, 240, 0x1p-7, 0x1p-10, 7, false, true},   {"e5m2fnuz", 8, 57344, 0x1p-15, 0x1p-17, 15, false, true},
    {"e4m3b11fnuz", 8, 30, 0x1p-10, 0x1p-13, 4, false, true},
};
}  // namespace

TEST_CASE("format: registry limits equal the OCP and IEEE tables", "[format]") {
  REQUIRE(Registry().size() == std::size(kSpec));
  for (const SpecRow& s : kSpec) {
    INFO(s.name);
    const Format f = ParseFormat(s.name);
    const FormatLimits l = Limits(f);
    CHECK(f.Bits() == s.bits);
    CHECK(l.max_finite == s.max);
    CHECK(l.min_normal == s.min_normal);
    CHECK(l.min_subnormal == s.min_sub);
    CHECK(l.emax == s.emax);
    CHECK(f.HasInf() == s.inf);
    CHECK(f.HasNan() == s.nan);
  }
  CHECK(Limits(fmt::kE4M3).binades == Approx(17.81).margin(0.005));  // MXFP8 recipes: 17.8 binades
}

TEST_CASE("format: the FNUZ formats have one NaN at 0x80, no -0 and no Inf, and their library names", "[format]") {
  for (const Format& f : {fmt::kE4M3Fnuz, fmt::kE5M2Fnuz, fmt::kE4M3B11Fnuz}) {
    INFO(f.name);
    size_t nans = 0, zeros = 0;
    for (unsigned c = 0; c < 256; ++c) {
      const double v = DecodeToDouble(f, c);
      nans += std::isnan(v);
      zeros += v == 0;
      CHECK(!std::isinf(v));
      if (v == 0) CHECK_FALSE(std::signbit(v));
    }
    CHECK(nans == 1);
    CHECK(std::isnan(DecodeToDouble(f, 0x80)));
    CHECK(zeros == 1);
    CHECK(DecodeToDouble(f, 0xFF) == -DecodeToDouble(f, 0x7F));
  }
  CHECK(DecodeToDouble(fmt::kE4M3Fnuz, 0x7F) == 240);
  CHECK(DecodeToDouble(fmt::kE4M3Fnuz, 0x40) == 1);  // ml_dtypes: float8_e4m3fnuz(1.0) is 0x40
  CHECK(DecodeToDouble(fmt::kE4M3B11Fnuz, 0x58) == 1);
  CHECK(DecodeToDouble(fmt::kE5M2Fnuz, 0x01) == 0x1p-17);
  CHECK(std::string(ParseFormat("float8_e4m3fnuz").name) == "e4m3fnuz");
  CHECK(std::string(ParseFormat("torch.float8_e5m2fnuz").name) == "e5m2fnuz");
  CHECK(std::string(GetFormat("float8_e4m3b11fnuz").name) == "e4m3b11fnuz");
  // The same encoding as P3109's signed finite formats of the same precision.
  CHECK(ParseFormat("binary8p4sf").bias == fmt::kE4M3Fnuz.bias);
  for (unsigned c = 0; c < 256; ++c) {
    const double a = DecodeToDouble(ParseFormat("binary8p4sf"), c), b = DecodeToDouble(fmt::kE4M3Fnuz, c);
    CHECK((a == b || (std::isnan(a) && std::isnan(b))));
  }
}

TEST_CASE("format: special codes decode as the spec says", "[format]") {
  CHECK(std::isnan(DecodeToDouble(fmt::kE4M3, 0x7F)));
  CHECK(std::isnan(DecodeToDouble(fmt::kE4M3, 0xFF)));
  CHECK(DecodeToDouble(fmt::kE4M3, 0x7E) == 448);
  CHECK(DecodeToDouble(fmt::kE4M3, 0xFE) == -448);
  CHECK(DecodeToDouble(fmt::kE4M3, 0x78) == 256);  // S.1111.000 is a number in E4M3
  CHECK(DecodeToDouble(fmt::kE4M3, 0x01) == 0x1p-9);
  CHECK(std::signbit(DecodeToDouble(fmt::kE4M3, 0x80)));
  CHECK(DecodeToDouble(fmt::kE5M2, 0x7C) == HUGE_VAL);
  CHECK(DecodeToDouble(fmt::kE5M2, 0xFC) == -HUGE_VAL);
  for (uint64_t c : {0x7Dull, 0x7Eull, 0x7Full, 0xFDull, 0xFEull, 0xFFull}) CHECK(std::isnan(DecodeToDouble(fmt::kE5M2, c)));
  CHECK(DecodeToDouble(fmt::kE5M2, 0x7B) == 57344);
  CHECK(DecodeToDouble(fmt::kInt8, 0x80) == -2);
  CHECK(DecodeToDouble(fmt::kInt8, 0xFF) == -1.0 / 64);
  CHECK(DecodeToDouble(fmt::kInt8, 0x7F) == 127.0 / 64);
  CHECK(DecodeToDouble(fmt::kUE8M0, 0x00) == 0x1p-127);
  CHECK(DecodeToDouble(fmt::kUE8M0, 0x7F) == 1);
  CHECK(DecodeToDouble(fmt::kUE8M0, 0xFE) == 0x1p127);
  CHECK(std::isnan(DecodeToDouble(fmt::kUE8M0, 0xFF)));
}

TEST_CASE("format: E2M1, E2M3 and E3M2 value tables", "[format]") {
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint64_t c = 0; c < 16; ++c) {
    INFO(Hex(c));
    CHECK(DecodeToDouble(fmt::kE2M1, c) == (c & 8 ? -e2m1[c & 7] : e2m1[c & 7]));
  }
  // E2M3: subnormals k/8 for k < 8, then 1 + m/8 scaled by 2^(e-1); E3M2: k/16, then (1+m/4) 2^(e-3).
  for (uint64_t c = 0; c < 32; ++c) {
    const uint64_t e = c >> 3, m = c & 7;
    CHECK(DecodeToDouble(fmt::kE2M3, c) == (e == 0 ? m / 8.0 : (1 + m / 8.0) * std::ldexp(1.0, static_cast<int>(e) - 1)));
    const uint64_t e3 = c >> 2, m3 = c & 3;
    CHECK(DecodeToDouble(fmt::kE3M2, c) == (e3 == 0 ? m3 / 16.0 : (1 + m3 / 4.0) * std::ldexp(1.0, static_cast<int>(e3) - 3)));
  }
}

TEST_CASE("format: every bf16 and fp16 code decodes as the hardware reads it", "[format]") {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float bf = qmx::test::BitsFloat(c << 16);
    const double got = DecodeToDouble(fmt::kBF16, c);
    INFO(Hex(c, 4));
    if (std::isnan(bf)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(got == static_cast<double>(bf));
      CHECK(std::signbit(got) == std::signbit(bf));
    }
    qmx::test::Half h;
    const uint16_t c16 = static_cast<uint16_t>(c);
    std::memcpy(&h, &c16, 2);
    const double gh = DecodeToDouble(fmt::kFP16, c);
    if (std::isnan(static_cast<double>(h))) {
      CHECK(std::isnan(gh));
    } else {
      CHECK(gh == static_cast<double>(h));
    }
  }
}

TEST_CASE("format: Every code of every 8-bit-or-narrower registry format: classes and order", "[format]") {
  for (const auto& e : Registry()) {
    const Format& f = e.format;
    if (f.Bits() > 8) continue;
    INFO(f.name);
    int nans = 0, infs = 0;
    double prev = -1;
    const std::vector<double> table = DecodeTable(f);
    const std::vector<float> table32 = DecodeTableF32(f);
    REQUIRE(table.size() == (1u << f.Bits()));
    for (uint64_t c : AllCodes(f)) {
      CHECK(qmx::test::FloatBits(table32[c]) == qmx::test::FloatBits(DecodeToFloat(f, c)));
      CHECK((table[c] == DecodeToDouble(f, c) || std::isnan(table[c])));
      const CodeClass cls = ClassifyCode(f, c);
      nans += cls == CodeClass::kNan;
      infs += cls == CodeClass::kInf;
      const bool same = DecodeToFloat(f, c) == static_cast<float>(DecodeToDouble(f, c));
      CHECK((same || std::isnan(DecodeToDouble(f, c))));
      // Positive codes up to the largest finite one increase strictly in value.
      const bool positive_half = f.IsInt() ? c < 0x80 : (c & f.SignBit()) == 0;
      if (positive_half && c <= f.MaxFiniteCode()) {
        const double v = DecodeToDouble(f, c);
        CHECK(v > prev);
        prev = v;
      }
    }
    const std::string n = f.name;
    const bool fnuz = f.encoding == Encoding::kFnuz;
    CHECK(nans == (n == "e4m3" ? 2 : n == "e5m2" ? 6 : n == "ue8m0" || fnuz ? 1 : 0));
    CHECK(infs == (n == "e5m2" ? 2 : 0));
  }
}

TEST_CASE("format: user-described formats", "[format]") {
  const Format e3m4 = ParseFormat("e3m4");  // IEEE-style like ml_dtypes float8_e3m4: bias 3, max 15.5
  CHECK(e3m4.bias == 3);
  CHECK(Limits(e3m4).max_finite == 15.5);
  CHECK(e3m4.HasInf());
  const Format e6m1 = ParseFormat("e6m1");  // 8 bits, IEEE-style, bias 31
  CHECK(Limits(e6m1).max_finite == 1.5 * std::ldexp(1.0, 62 - 31));
  CHECK(Limits(ParseFormat("e4m3:bias=8")).max_finite == 120);  // IEEE-style: top binade reserved, 2^6 * 1.875
  CHECK(Limits(ParseFormat("e4m3:bias=8:special=fn")).max_finite == 224);
  CHECK(Limits(ParseFormat("e2m1:special=finite")).max_finite == 6);
  CHECK(Limits(ParseFormat("e3m2:unsigned")).max_finite == 28);
  CHECK_FALSE(ParseFormat("e3m2:unsigned").is_signed);
  CHECK(ParseFormat("e4m3").encoding == Encoding::kFnNan);  // the registry entry wins

  // P3109 binary8p3se: 5 exponent bits, bias 16, NaN 0x80, +-Inf 0x7F/0xFF, no -0.
  const Format p3 = ParseFormat("binary8p3se");
  CHECK(p3.exp_bits == 5);
  CHECK(p3.man_bits == 2);
  CHECK(p3.bias == 16);
  CHECK(ClassifyCode(p3, 0x80) == CodeClass::kNan);
  CHECK(ClassifyCode(p3, 0x7F) == CodeClass::kInf);
  CHECK(ClassifyCode(p3, 0xFF) == CodeClass::kInf);
  CHECK(DecodeToDouble(p3, 0x7E) == 49152);
  CHECK_FALSE(p3.HasNegativeZero());
  const Format p4f = ParseFormat("binary8p4sf");  // bias 8, finite: 0x7F is the max, 240
  CHECK(p4f.bias == 8);
  CHECK(DecodeToDouble(p4f, 0x7F) == 240);
  CHECK(ClassifyCode(p4f, 0x80) == CodeClass::kNan);
}

TEST_CASE("format: impossible formats give errors naming the problem", "[format]") {
  auto msg = [](const std::string& spec) {
    try {
      ParseFormat(spec);
    } catch (const qmx::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(msg("e0m3"), Catch::Contains("exponent bit"));
  CHECK_THAT(msg("e12m3"), Catch::Contains("exponent bits"));
  CHECK_THAT(msg("e1m2:special=ieee"), Catch::Contains("2 exponent bits"));
  CHECK_THAT(msg("e4m3:bias=x"), Catch::Contains("not an integer"));
  CHECK_THAT(msg("e4m3:bias"), Catch::Contains("bias needs a value"));
  CHECK_THAT(msg("e5m2:special=odd"), Catch::Contains("special must be"));
  CHECK_THAT(msg("e4m3:colour=red"), Catch::Contains("unknown option"));
  CHECK_THAT(msg("e8m3:bias=2000"), Catch::Contains("outside FP64"));
  CHECK_THAT(msg("binary8p9se"), Catch::Contains("precision P"));
  CHECK_THAT(msg("binary1p1se"), Catch::Contains("K must be"));
  CHECK_THAT(msg("float8"), Catch::Contains("unknown format 'float8'"));
  CHECK_THROWS_AS(AllCodes(fmt::kFP16), qmx::Error);
}

TEST_CASE("format: ml_dtypes and torch names are aliases of the registry's", "[format]") {
  CHECK(std::string(GetFormat("float8_e4m3fn").name) == "e4m3");
  CHECK(std::string(GetFormat("torch.float8_e5m2").name) == "e5m2");
  CHECK(std::string(ParseFormat("float8_e8m0fnu").name) == "ue8m0");
  CHECK(std::string(ParseFormat("float4_e2m1fn").name) == "e2m1");
  CHECK(std::string(ParseFormat("float6_e3m2fn").name) == "e3m2");
  CHECK(std::string(ParseFormat("bfloat16").name) == "bf16");
  // ml_dtypes' IEEE-like float8_e4m3: bias 7, Inf and NaN, so 240 is its largest finite value.
  const Format ieee = ParseFormat("float8_e4m3");
  CHECK(ieee.HasInf());
  CHECK(DecodeToDouble(ieee, ieee.MaxFiniteCode()) == 240.0);
  CHECK(CanonicalFormatName("e4m3") == "e4m3");
  CHECK(CanonicalFormatName("int8") == "int8");  // numpy's int8 is not OCP's scaled INT8: no alias
  // The unsigned block-scale formats: NVFP4's UE4M3 (E4M3's values without a sign) and AMD gfx1250's E5M3.
  const Format ue4m3 = ParseFormat("ue4m3"), ue5m3 = ParseFormat("ue5m3");
  CHECK(ue4m3.Bits() == 7);
  CHECK(ue5m3.Bits() == 8);
  for (uint64_t c = 0; c < 0x80; ++c) {
    INFO(c);
    const double e4 = DecodeToDouble(fmt::kE4M3, c), u4 = DecodeToDouble(ue4m3, c);
    CHECK((e4 == u4 || (std::isnan(e4) && std::isnan(u4))));
  }
  CHECK(DecodeToDouble(ue5m3, 0x01) == std::ldexp(1.0, -17));  // subnormal: 2^-14 * 1/8
  CHECK(DecodeToDouble(ue5m3, 0x08) == std::ldexp(1.0, -14));
  CHECK(DecodeToDouble(ue5m3, 0x78) == 1.0);
  CHECK(DecodeToDouble(ue5m3, 0xFE) == 114688.0);  // 2^16 * 1.75
  CHECK(std::isnan(DecodeToDouble(ue5m3, 0xFF)));
  CHECK(ue5m3.CanonicalNan() == 0xFF);
  CHECK_THROWS_WITH(ParseFormat("float8_e4m3fnuzz"), Catch::Contains("ml_dtypes / torch name"));
  // An FNUZ-style user format (a NaN at the -0 code, OFP8 overflow), and one that cannot be.
  const Format fnuz = ParseFormat("e4m3:bias=8:special=fnuz");
  CHECK(fnuz.MaxFiniteCode() == 0x7F);
  CHECK(fnuz.CanonicalNan() == 0x80);
  CHECK_THROWS_WITH(ParseFormat("e4m3:special=fnuz:unsigned"), Catch::Contains("fnuz format is signed"));
}
