// printf-style formatting into std::string, type-checked by the compiler
// (format attribute). Used where std::format is unavailable (g++ 12) and fmt
// cannot be used (see log.h).
#pragma once

#include <string>

namespace accel {

std::string strformat(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Human-readable byte count: "1.50 GiB".
std::string format_bytes(double bytes);

// Human-readable duration, to the second: "42s", "3m07s", "2h05m" (hours
// drop the seconds). Negative or non-finite input gives "?".
std::string format_duration(double seconds);

}  // namespace accel
