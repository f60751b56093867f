// json_int.h: integer fields of the JSON the library reads (qmx.spec metadata, golden manifests). nlohmann's
// get<int>() converts any number with a cast, which is undefined for a double out of the type's range (found
// by fuzz_spec: "block": [1E32]); this takes integers only, range-checked, and names the field otherwise.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "qmx/error.h"

namespace qmx::detail {

template <class T>
T JsonInteger(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number_integer()) throw Error(what + " must be an integer, not " + v.dump());
  bool ok;
  if (v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else {
    const int64_t i = v.get<int64_t>();
    ok = i >= 0 ? static_cast<uint64_t>(i) <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                : std::numeric_limits<T>::is_signed && i >= static_cast<int64_t>(std::numeric_limits<T>::min());
  }
  if (!ok) throw Error(what + " is out of range: " + v.dump());
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

}  // namespace qmx::detail
