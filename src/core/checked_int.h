// Sizes computed in 64 bits and then held in an int: one error line naming
// the quantity when the value does not fit (a silent wrap would size a
// buffer wrong).
#pragma once
#include <climits>
#include <cstdint>
#include <string_view>

#include "core/error.h"

namespace nextn {

inline int checked_int(int64_t value, std::string_view quantity) {
  if (value < 0 || value > INT_MAX) fail("{} = {} does not fit in 32 bits", quantity, value);
  return int(value);
}

}  // namespace nextn
