// cast_counter.cpp — saturation and underflow counts (see cast_counter.h).
#include "cast_counter.h"

#include <accel/sdk/error.hpp>

#include <cmath>
#include <cstring>

namespace accel::fp8 {

float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &word, sizeof(out));
  return out;
}

float f16_to_float(uint16_t bits) {
  const int sign = (bits >> 15) & 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

CastCounts count_cast(const std::vector<uint8_t>& source, DLDataType source_dtype, const std::vector<uint8_t>& fp8,
                      DLDataType fp8_dtype, float scale) {
  CastCounts counts;
  const size_t n = fp8.size();
  const size_t width = source_dtype.bits / 8u;
  if (source.size() != n * width) {
    throw sdk::Error(ACCEL_ERROR_INTERNAL, sdk::format("count_cast: %zu source bytes for %zu elements of %u bits",
                                                       source.size(), n, unsigned{source_dtype.bits}));
  }
  const auto limit = static_cast<float>(accel_fp8_max(fp8_dtype));
  for (size_t i = 0; i < n; ++i) {
    float x;
    if (source_dtype.code == kDLFloat && source_dtype.bits == 32) {
      std::memcpy(&x, &source[i * 4], sizeof(x));
    } else {
      uint16_t bits;
      std::memcpy(&bits, &source[i * 2], sizeof(bits));
      x = source_dtype.code == kDLBfloat ? bf16_to_float(bits) : f16_to_float(bits);
    }
    const float scaled = x * scale;
    if (!std::isnan(scaled) && std::fabs(scaled) > limit) ++counts.saturated;
    if (x != 0.0f && (fp8[i] & 0x7f) == 0) ++counts.underflow;
  }
  counts.elements = static_cast<int64_t>(n);
  return counts;
}

}  // namespace accel::fp8
