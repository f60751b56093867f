// libFuzzer target for user format descriptions (qmx::ParseFormat: "e4m3:bias=8", "e5m2:special=fn",
// "e4m3:unsigned", P3109 "binary8p3se", registry names). Any string must either throw qmx::Error or give a
// format whose limits are ordered (0 < min subnormal <= max finite, min subnormal <= min normal; a format
// with no normal code, such as binary2p2ue, reports the formula's min normal above its max finite) and,
// for 8 bits or fewer, a finite-code count within the code space.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "qmx/error.h"
#include "qmx/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  qmx::Format f;
  try {
    f = qmx::ParseFormat(spec);
  } catch (const qmx::Error&) {
    return 0;
  }
  const qmx::FormatLimits lim = qmx::Limits(f);
  if (!(lim.min_subnormal > 0 && lim.min_subnormal <= lim.min_normal && lim.min_subnormal <= lim.max_finite)) std::abort();
  if (f.Bits() <= 8) {
    uint64_t n = 0;
    try {
      n = qmx::FiniteCodeCount(f);
    } catch (const qmx::Error&) {
      std::abort();
    }
    if (n == 0 || n > (uint64_t{1} << f.Bits())) std::abort();
  }
  return 0;
}
