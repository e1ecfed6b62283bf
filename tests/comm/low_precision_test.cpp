// The fp32 <-> f16 / bf16 / FP8 conversions the MPI backend reduces with:
// every 16- and 8-bit pattern round-trips, the formats' landmarks (largest
// finite value, smallest subnormal, overflow) come out as PyTorch's c10
// produces them, ties round to even. And the status codes keep the ABI's
// numbers, so the services wrapper can map them one to one.
#include "host/comm/low_precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "accel/status.h"
#include "host/comm/types.h"

namespace accel::comm {
namespace {

using namespace lowp;

TEST(LowPrecision, EveryBf16AndF16PatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float b = bf16_to_float(h);
    if (!std::isnan(b)) {
      EXPECT_EQ(float_to_bf16(b), h) << "bf16 " << bits;
    }
    const float f = f16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
    } else {
      EXPECT_EQ(float_to_f16(f), h) << "f16 " << bits;
    }
  }
}

TEST(LowPrecision, EveryFp8PatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFF; ++bits) {
    const uint8_t v = static_cast<uint8_t>(bits);
    const float a = e4m3_to_float(v);
    if (std::isnan(a)) {
      EXPECT_EQ(v & 0x7F, 0x7F) << "only S.1111.111 is NaN in E4M3FN";
    } else {
      EXPECT_EQ(float_to_e4m3(a), v) << "e4m3 " << bits;
    }
    const float b = e5m2_to_float(v);
    if (!std::isnan(b)) {
      EXPECT_EQ(float_to_e5m2(b), v) << "e5m2 " << bits;
    }
  }
}

TEST(LowPrecision, Landmarks) {
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);                // largest finite E4M3FN
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);              // largest finite E5M2
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7C)));
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f / 3.0f)), 0.333984375f);
}

TEST(LowPrecision, OverflowFollowsC10) {
  EXPECT_EQ(float_to_e4m3(460.0f), 0x7E);         // rounds down to 448
  EXPECT_EQ(float_to_e4m3(480.0f) & 0x7F, 0x7F);  // no inf in E4M3FN: NaN
  EXPECT_EQ(float_to_e4m3(-1e9f), 0xFF);
  EXPECT_EQ(float_to_e5m2(70000.0f), 0x7C);  // inf
  EXPECT_EQ(float_to_e5m2(-std::numeric_limits<float>::infinity()), 0xFC);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(70000.0f))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(LowPrecision, TiesRoundToEven) {
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: even is 1.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // E4M3: 1.0625 is halfway between 1 and 1.125.
  EXPECT_EQ(e4m3_to_float(float_to_e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(e4m3_to_float(float_to_e4m3(1.1875f)), 1.25f);
  // E5M2: 1.125 is halfway between 1 and 1.25.
  EXPECT_EQ(e5m2_to_float(float_to_e5m2(1.125f)), 1.0f);
  // f16: 2049 is halfway between 2048 and 2050.
  EXPECT_EQ(f16_to_float(float_to_f16(2049.0f)), 2048.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(2051.0f)), 2052.0f);
}

TEST(LowPrecision, SubnormalsRound) {
  // Half the smallest E4M3 subnormal rounds to even (zero); 1.5 of it to 2.
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(1.5f * std::ldexp(1.0f, -9)), 0x02);
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(float_to_e5m2(-std::ldexp(1.0f, -16)), 0x81);
}

TEST(Types, StatusCodesMatchTheAbi) {
  static_assert(static_cast<int>(ErrorCode::ok) == ACCEL_OK);
  static_assert(static_cast<int>(ErrorCode::invalid_argument) == ACCEL_ERROR_INVALID_ARGUMENT);
  static_assert(static_cast<int>(ErrorCode::unsupported) == ACCEL_ERROR_UNSUPPORTED);
  static_assert(static_cast<int>(ErrorCode::failed_precondition) == ACCEL_ERROR_FAILED_PRECONDITION);
  static_assert(static_cast<int>(ErrorCode::timeout) == ACCEL_ERROR_TIMEOUT);
  static_assert(static_cast<int>(ErrorCode::aborted) == ACCEL_ERROR_ABORTED);
  static_assert(static_cast<int>(ErrorCode::internal) == ACCEL_ERROR_INTERNAL);
  EXPECT_STREQ(error_code_name(ErrorCode::timeout), accel_status_name(ACCEL_ERROR_TIMEOUT));
}

TEST(Types, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8_e5m2), 1u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_STREQ(dtype_name(DType::f8_e4m3), "f8_e4m3");
  EXPECT_FALSE(dtype_valid(static_cast<DType>(42)));
  EXPECT_TRUE(dtype_is_low_precision_float(DType::bf16));
  EXPECT_FALSE(dtype_is_low_precision_float(DType::f32));
}

}  // namespace
}  // namespace accel::comm
