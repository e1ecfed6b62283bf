// fp8_cast_math.h — the per-element arithmetic of the fused FP8 cast, shared
// by the CUDA kernel (fp8_cast.cu) and the CPU test that pins it
// (tests/runtime/fp8_tensor_cores_test.cpp). No CUDA or LibTorch types.
//
// The kernel reads each element once: it folds |x| into the amax and stores
// x * scale saturated to the FP8 range. amax is kept as the bit pattern of a
// non-negative float, because for those the integer order is the float
// order (+0 < denormals < normals < inf < NaN), so one integer atomicMax per
// block keeps the largest |x| and lets a NaN win, as max() over a tensor
// with a NaN in it does.
#pragma once

#include <cstdint>
#include <cstring>

#include "host/model/cuda/host_device.h"

namespace accel::runtime::cuda_math {

ACCEL_HOST_DEVICE inline uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

ACCEL_HOST_DEVICE inline float float_of(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// The ordered key of |x|: larger keys are larger magnitudes, NaN largest.
ACCEL_HOST_DEVICE inline uint32_t amax_key(float x) {
  const uint32_t bits = bits_of(x) & 0x7fffffffu;  // |x|: the sign bit cleared
  return bits > 0x7f800000u ? 0x7fc00000u : bits;  // every NaN as the canonical one
}

ACCEL_HOST_DEVICE inline float amax_value(uint32_t key) { return float_of(key); }

// x * scale clamped to +-limit (the FP8 format's largest finite value); NaN
// stays NaN. The store then rounds to nearest even, as ATen's conversion
// does after the CPU path's clamp.
ACCEL_HOST_DEVICE inline float saturate_scaled(float x, float scale, float limit) {
  const float v = x * scale;
  if (v != v) return v;
  return v > limit ? limit : (v < -limit ? -limit : v);
}

}  // namespace accel::runtime::cuda_math
