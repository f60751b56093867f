// libFuzzer target for the .npy parser (qmx::ParseNpy). Any input must either parse into an array
// whose bytes match its shape and dtype, or throw qmx::IoError; never crash or read out of bounds
// (the build adds ASan and UBSan). A parsed array must survive SerializeNpy -> ParseNpy unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "qmx/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  qmx::NpyArray array;
  try {
    array = qmx::ParseNpy(bytes, "fuzz.npy");
  } catch (const qmx::IoError&) {
    return 0;
  }
  if (array.data.size() != array.count() * qmx::DTypeSize(array.dtype)) std::abort();
  qmx::NpyArray again = qmx::ParseNpy(qmx::SerializeNpy(array), "roundtrip.npy");
  if (again.dtype != array.dtype || again.shape != array.shape || again.data != array.data) std::abort();
  return 0;
}
