// accel/sdk/checked_math.hpp — int64 products and sums that report overflow.
//
// Options are bounded one by one (their schema's min/max), but a rule that
// combines them (tp x pp dividing the world, a profiler cycle of wait +
// warmup + active) can still leave int64 when a plugin or host reads them
// from another source, or when a bound is later widened. Wrapped products are
// undefined behaviour and, worse, can pass a divisibility test (2^32 x 2^32
// wraps to 0: a division by zero; other pairs wrap to 1 and divide
// anything). Every product or sum of option values is taken through these,
// and the caller turns nullopt into its one-line error naming the options.
//
// Header-only, no state; callable from any thread.
#pragma once

#include <cstdint>
#include <optional>

namespace accel::sdk {

// a x b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) noexcept {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) noexcept {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

}  // namespace accel::sdk
