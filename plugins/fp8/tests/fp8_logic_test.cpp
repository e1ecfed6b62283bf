// fp8_logic_test.cpp — the fp8 plugin's pure logic without a host: option
// validation (every refusal is one line naming the option) and the
// saturation / underflow counts against hand-computed FP8 bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../cast_counter.h"
#include "../fp8_config.h"

namespace accel::fp8 {
namespace {

std::string refusal(const RawOptions& raw) {
  try {
    (void)validate(raw);
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    return e.what();
  }
  return "";
}

TEST(Fp8Config, DefaultsAreAccelerates) {
  const Fp8Config c = validate(RawOptions{});
  EXPECT_EQ(c.format, Format::hybrid);
  EXPECT_EQ(c.amax_history_len, 1024);
  EXPECT_EQ(c.algo, AmaxAlgo::most_recent);
  EXPECT_EQ(c.margin, 0);
  EXPECT_EQ(c.interval, 1);
  EXPECT_FALSE(c.override_fprop || c.override_dgrad || c.override_wgrad);
  EXPECT_EQ(c.backward_dtype().code, ACCEL_DL_FLOAT8_E5M2);
  EXPECT_EQ(c.forward_dtype().code, ACCEL_DL_FLOAT8_E4M3FN);
}

TEST(Fp8Config, FormatAndBackendAreCaseInsensitiveLikeAccelerate) {
  RawOptions raw;
  raw.fp8_format = "e4m3";
  raw.backend = "MSAMP";
  raw.opt_level = "o1";
  raw.opt_level_given = true;
  const Fp8Config c = validate(raw);
  EXPECT_EQ(c.format, Format::e4m3);
  EXPECT_EQ(c.backward_dtype().code, ACCEL_DL_FLOAT8_E4M3FN);
  EXPECT_EQ(c.backend, Backend::msamp);
  EXPECT_EQ(c.opt_level, 1);
}

TEST(Fp8Config, OverrideLinearPrecisionIsThreeBooleans) {
  RawOptions raw;
  raw.override_linear_precision = " true, 0 ,TRUE";
  const Fp8Config c = validate(raw);
  EXPECT_TRUE(c.override_fprop);
  EXPECT_FALSE(c.override_dgrad);
  EXPECT_TRUE(c.override_wgrad);
  raw.override_linear_precision = "true,false";
  EXPECT_NE(refusal(raw).find("three comma-separated booleans"), std::string::npos);
  raw.override_linear_precision = "true,maybe,false";
  EXPECT_NE(refusal(raw).find("'maybe' is not true or false"), std::string::npos);
}

TEST(Fp8Config, EveryRefusalNamesTheOption) {
  const auto with = [](auto change) {
    RawOptions raw;
    change(raw);
    return refusal(raw);
  };
  EXPECT_NE(with([](RawOptions& r) { r.fp8_format = "E5M2"; }).find("fp8_format: unknown value 'E5M2'"),
            std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.margin = -1; }).find("margin -1: must be in 0..64"), std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.amax_history_len = 0; }).find("amax_history_len 0"), std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.interval = 0; }).find("interval 0"), std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.backend = "cuda"; }).find("backend: unknown value 'cuda'"),
            std::string::npos);
  EXPECT_NE(with([](RawOptions& r) {
              r.backend = "msamp";
              r.opt_level = "O3";
            }).find("DeepSpeed-only"),
            std::string::npos);
  EXPECT_NE(with([](RawOptions& r) {
              r.opt_level = "O1";
              r.opt_level_given = true;
            }).find("needs --fp8.backend msamp"),
            std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.amax_compute_algo = "mean"; }).find("amax_compute_algo"), std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.recipe = "block"; }).find("recipe: unknown value 'block'"),
            std::string::npos);
  EXPECT_NE(with([](RawOptions& r) { r.mixed_precision = "fp16"; }).find("--mixed-precision fp16"),
            std::string::npos);
  RawOptions bf16;
  bf16.mixed_precision = "bf16";
  EXPECT_EQ(refusal(bf16), "");
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(Fp8Config, WeightsTravelEncodedOnlyWhenEveryUseIsTheirCast) {
  const DLDataType bf16{kDLBfloat, 16, 1}, fp32{kDLFloat, 32, 1}, int8{kDLInt, 8, 1};
  Fp8Config c = validate(RawOptions{});
  EXPECT_TRUE(c.fp8_weight_gather);  // on by default
  EXPECT_TRUE(c.gathers_weights_encoded(0, bf16));
  EXPECT_TRUE(c.gathers_weights_encoded(0, fp32));
  EXPECT_FALSE(c.gathers_weights_encoded(0, int8));
  // An evaluation forward in the run's precision reads the weight itself.
  EXPECT_FALSE(c.gathers_weights_encoded(ACCEL_GATHER_CODEC_NO_GRAD, bf16));
  c.use_autocast_during_eval = true;
  EXPECT_TRUE(c.gathers_weights_encoded(ACCEL_GATHER_CODEC_NO_GRAD, bf16));
  // fprop and dgrad overridden read the unquantised weight; wgrad does not.
  for (const char* flags : {"true,false,false", "false,true,false", "false,false,true"}) {
    RawOptions raw;
    raw.override_linear_precision = flags;
    EXPECT_EQ(validate(raw).gathers_weights_encoded(0, bf16), std::string(flags) == "false,false,true") << flags;
  }
  RawOptions off;
  off.fp8_weight_gather = false;
  EXPECT_FALSE(validate(off).gathers_weights_encoded(0, bf16));
}

TEST(CastCounter, SaturationAndUnderflowOfE4M3) {
  // 500 > 448 saturates; 1e-4 underflows (E4M3's smallest subnormal is
  // 2^-9, values at or below 2^-10 round to zero); 0 is neither.
  const std::vector<float> x = {500.0f, -449.0f, 448.0f, 1e-4f, 0.0f, 1.0f};
  const std::vector<uint8_t> fp8 = {0x7e, 0xfe, 0x7e, 0x00, 0x00, 0x38};
  const CastCounts c = count_cast(f32_bytes(x), DLDataType{kDLFloat, 32, 1}, fp8,
                                  DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1}, 1.0f);
  EXPECT_EQ(c.saturated, 2);
  EXPECT_EQ(c.underflow, 1);
  EXPECT_EQ(c.elements, 6);
}

TEST(CastCounter, ScaleAppliesAndE5M2HasItsOwnLimit) {
  const std::vector<float> x = {30000.0f, 1.0f};
  const std::vector<uint8_t> fp8 = {0x7b, 0x3c};
  const DLDataType e5m2{ACCEL_DL_FLOAT8_E5M2, 8, 1};
  EXPECT_EQ(count_cast(f32_bytes(x), DLDataType{kDLFloat, 32, 1}, fp8, e5m2, 1.0f).saturated, 0);
  EXPECT_EQ(count_cast(f32_bytes(x), DLDataType{kDLFloat, 32, 1}, fp8, e5m2, 2.0f).saturated, 1);
  // Negative zero in FP8 (0x80) is zero too.
  EXPECT_EQ(count_cast(f32_bytes({1e-9f}), DLDataType{kDLFloat, 32, 1}, {0x80}, e5m2, 1.0f).underflow, 1);
}

TEST(CastCounter, SixteenBitSources) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x0001), 5.9604644775390625e-08f);  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  // bf16 1000 (0x447a) saturates E4M3 at scale 1.
  const std::vector<uint8_t> source = {0x7a, 0x44};
  EXPECT_EQ(count_cast(source, DLDataType{kDLBfloat, 16, 1}, {0x7e}, DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1}, 1.0f)
                .saturated,
            1);
}

}  // namespace
}  // namespace accel::fp8
