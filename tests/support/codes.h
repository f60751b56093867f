// codes.h: a QuantizedTensor's codes (qmx::CodeVector) as a plain std::vector<uint8_t>, for the APIs and
// helpers that take one.
#pragma once

#include <cstdint>
#include <vector>

#include "qmx/quantize.h"

namespace qmx::test {

inline std::vector<uint8_t> PlainCodes(const CodeVector& c) { return std::vector<uint8_t>(c.begin(), c.end()); }

}  // namespace qmx::test
