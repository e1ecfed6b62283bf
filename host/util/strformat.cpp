// printf-style formatting into std::string (see strformat.h).
#include "host/util/strformat.h"

#include <cmath>
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

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e12) return "?";
  const long long total = std::llround(seconds);
  const long long hours = total / 3600, minutes = total / 60 % 60, secs = total % 60;
  if (hours > 0) return strformat("%lldh%02lldm", hours, minutes);
  if (minutes > 0) return strformat("%lldm%02llds", minutes, secs);
  return strformat("%llds", secs);
}

}  // namespace accel
