// Small text helpers shared by nowcast mode's files: ostream-style concatenation, fixed-point
// numbers and the options' error (the library does not link fmt).
#pragma once

#include <sstream>
#include <string>

#include "hybrid/core/errors.h"

namespace ht {

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

inline std::string fixed(double x, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << x;
  return os.str();
}

// Throws OptionsError("NowcastStrategyOptions.<field> <why>").
[[noreturn]] inline void fail_option(const std::string& field, const std::string& why) {
  throw OptionsError("NowcastStrategyOptions." + field + " " + why);
}

}  // namespace ht
