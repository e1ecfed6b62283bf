// Conversions between fp32 and the 16- and 8-bit float formats MPI has no type
// for (f16, bf16, FP8 E4M3FN, FP8 E5M2), used by the MPI backend's reduction
// operators, its avg division and the tests' references.
//
// Rounding follows PyTorch's c10 (c10/util/Half.h, BFloat16.h,
// Float8_e4m3fn.h, Float8_e5m2.h) bit for bit: round to nearest even; fp32
// values beyond a format's range become inf (f16, bf16, E5M2) or NaN (E4M3FN,
// which has no inf); NaN stays NaN. So a reduction here rounds exactly where
// `tensor.to(dtype)` would. Pure functions; thread-safe. They rely on IEEE
// float arithmetic (no -ffast-math, no flush-to-zero), like c10 does.
#pragma once

#include <cstdint>
#include <cstring>

namespace accel::comm::lowp {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ------------------------------------------------------------------ bf16 --

inline float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  if (f != f) return 0x7FC0;  // canonical quiet NaN
  const uint32_t u = bits_of(f);
  const uint32_t rounding_bias = ((u >> 16) & 1u) + 0x7FFFu;
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// ------------------------------------------------------------------- f16 --

inline float f16_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal numbers: shift exponent and mantissa into place, rebias by scaling.
  const float normalized = float_of((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormals: build 0.5 + m * 2^-24 and subtract the 0.5.
  const float denormalized = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result = sign | (two_w < (1u << 27) ? bits_of(denormalized) : bits_of(normalized));
  return float_of(result);
}

inline uint16_t float_to_f16(float f) {
  // Scaling to the edge of the f16 range and back makes the FPU do the
  // rounding (c10's fp16_ieee_from_fp32_value).
  float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = bits_of(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = bits_of(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// ------------------------------------------------------------ FP8 E4M3FN --

// 1 sign, 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN, no inf.
inline float e4m3_to_float(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exponent = (v >> 3) & 0xFu;
  const uint32_t mantissa = v & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return float_of(sign | 0x7FC00000u);
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-9.
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-9f;
    return sign ? -magnitude : magnitude;
  }
  return float_of(sign | ((exponent + 127 - 7) << 23) | (mantissa << 20));
}

inline uint8_t float_to_e4m3(float f) {
  uint32_t f_bits = bits_of(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= (1087u << 20)) {  // >= 480 (rounds past 448) or inf/NaN
    result = 0x7F;
  } else if (f_bits < (121u << 23)) {  // below 2^-6: subnormal in E4M3
    // 2^14 has an fp32 ulp of 2^-9, the E4M3 subnormal step: adding it makes
    // the FPU round to that step, and the low bits are the E4M3 encoding.
    const uint32_t denorm_mask = 141u << 23;
    f_bits = bits_of(float_of(f_bits) + float_of(denorm_mask));
    result = static_cast<uint8_t>(f_bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 20) & 1u;
    f_bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 20);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

// -------------------------------------------------------------- FP8 E5M2 --

// 1 sign, 5 exponent (bias 15), 2 mantissa bits: the top byte of an f16.
inline float e5m2_to_float(uint8_t v) { return f16_to_float(static_cast<uint16_t>(v) << 8); }

inline uint8_t float_to_e5m2(float f) {
  uint32_t f_bits = bits_of(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= (143u << 23)) {  // >= 65536: inf, or NaN if it was NaN
    result = f_bits > (255u << 23) ? 0x7F : 0x7C;
  } else if (f_bits < (113u << 23)) {  // below 2^-14: subnormal in E5M2
    // As for E4M3: 2^7 has an fp32 ulp of 2^-16, the E5M2 subnormal step.
    const uint32_t denorm_mask = 134u << 23;
    f_bits = bits_of(float_of(f_bits) + float_of(denorm_mask));
    result = static_cast<uint8_t>(f_bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 21) & 1u;
    f_bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFFFu;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 21);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

// ------------------------------------------------------------- codecs --

// Static codec types so reduction loops are templates with inlined
// conversions, one instantiation per format.
struct F16 {
  using Storage = uint16_t;
  static float decode(Storage v) { return f16_to_float(v); }
  static Storage encode(float f) { return float_to_f16(f); }
};
struct BF16 {
  using Storage = uint16_t;
  static float decode(Storage v) { return bf16_to_float(v); }
  static Storage encode(float f) { return float_to_bf16(f); }
};
struct E4M3 {
  using Storage = uint8_t;
  static float decode(Storage v) { return e4m3_to_float(v); }
  static Storage encode(float f) { return float_to_e4m3(f); }
};
struct E5M2 {
  using Storage = uint8_t;
  static float decode(Storage v) { return e5m2_to_float(v); }
  static Storage encode(float f) { return float_to_e5m2(f); }
};

}  // namespace accel::comm::lowp
