// cast_counter.h — counts of saturated and underflowed elements of FP8
// casts, per tensor class, for the per-step metrics.
//
// A cast saturates an element when |x * scale| exceeds the format's largest
// finite value (the kernel clamps it), and underflows one when x is non-zero
// but its FP8 value is zero. Both are decided on the host from the source
// tensor, the FP8 result and the scale, exactly as the kernel computed them
// (fp32 product); a device tensor is first copied to the host, which costs a
// synchronisation — hence the count_saturation option. Thread-safety: loop
// thread only.
#pragma once

#include <accel/accel.h>

#include <array>
#include <cstdint>
#include <vector>

namespace accel::fp8 {

struct CastCounts {
  int64_t saturated = 0;
  int64_t underflow = 0;
  int64_t elements = 0;
};

// Counts one cast of `source` (f32, bf16 or f16 values as raw bytes) into
// `fp8` (raw FP8 bytes of `fp8_dtype`) with `scale`.
CastCounts count_cast(const std::vector<uint8_t>& source, DLDataType source_dtype, const std::vector<uint8_t>& fp8,
                      DLDataType fp8_dtype, float scale);

// Decodes one 16-bit float to fp32 (bf16: the top half of an fp32; f16:
// IEEE half, subnormals included).
float bf16_to_float(uint16_t bits);
float f16_to_float(uint16_t bits);

}  // namespace accel::fp8
