// printf-style formatting into std::string (see strformat.h).
#include "host/util/strformat.h"

#include <cstdarg>
#include <cstdio>

namespace accel {

std::string strformat(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list measure;
  va_copy(measure, args);
  const int length = std::vsnprintf(nullptr, 0, format, measure);
  va_end(measure);
  std::string out;
  if (length > 0) {
    out.resize(static_cast<size_t>(length));
    std::vsnprintf(out.data(), out.size() + 1, format, args);
  }
  va_end(args);
  return out;
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  return strformat(unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
}

}  // namespace accel
