// qmx/sha256.h: SHA-256 (FIPS 180-4) for the golden-vector manifests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qmx {

// The digest of data as 64 lowercase hex digits (the form sha256sum prints).
std::string Sha256Hex(const void* data, size_t size);
inline std::string Sha256Hex(const std::string& s) { return Sha256Hex(s.data(), s.size()); }

}  // namespace qmx
