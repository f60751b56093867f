// packing.cc: sub-byte code packing (4-, 6- and 8-bit; declared in qmx/quantize.h), in the io layer because
// the file formats share it (safetensors F4 / F6, checkpoint layouts) and the fuzz targets link it alone.
#include <cstring>

#include "qmx/error.h"
#include "qmx/quantize.h"

namespace qmx {

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

}  // namespace qmx
