// printf-style formatting into std::string, type-checked by the compiler
// (format attribute). Used where std::format is unavailable (g++ 12) and fmt
// cannot be used (see log.h).
#pragma once

#include <string>

namespace accel {

std::string strformat(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Human-readable byte count: "1.50 GiB".
std::string format_bytes(double bytes);

}  // namespace accel
