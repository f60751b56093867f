// float_bits.h: an FP32 value's bit pattern and back, for the library's sources (the one definition lives
// in qmx/host_device.h, shared with the CUDA backend).
#pragma once

#include "qmx/host_device.h"

namespace qmx::detail {

using hd::F32Bits;
using hd::F32FromBits;

}  // namespace qmx::detail
