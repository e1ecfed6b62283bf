// The logic of the FP8 device paths, run on the CPU: scaled_gemm's layout
// handling (transposes, padding, bias, writing in place) through ATen's CPU
// _scaled_mm against the emulation's dequantised fp32 product, and the fused
// cast's per-element arithmetic (cuda/fp8_cast_math.h) against ATen's.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "host/runtime/cuda/fp8_cast_math.h"
#include "host/runtime/fp8_tensor_cores.h"

namespace accel::runtime {
namespace {

// An FP8 operand of `shape` with values spread over the format, and its exact fp32 value.
std::pair<at::Tensor, at::Tensor> fp8_operand(std::vector<int64_t> shape, at::ScalarType type) {
  const at::Tensor codes = (at::randn(shape) * 8).to(type);
  return {codes, codes.to(at::kFloat)};
}

// The emulation's function: (sa op(a)) (sb op(b)) + bias in fp32.
at::Tensor reference(const at::Tensor& a, bool ta, const at::Tensor& b, bool tb, double sa, double sb,
                     const at::Tensor& bias) {
  at::Tensor product = at::matmul((ta ? a.t() : a) * sa, (tb ? b.t() : b) * sb);
  return bias.defined() ? product + bias.to(at::kFloat) : product;
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kFloat) - want).norm().item<double>() / want.norm().item<double>();
}

TEST(ScaledGemm, EveryTransposeAndUnalignedShapeGivesTheDequantisedProduct) {
  at::manual_seed(3);
  const at::Tensor sa = at::full({}, 0.5f), sb = at::full({}, 0.25f);
  // m, k, n: aligned, then extents that need padding to 16 (k and n).
  for (const auto& [m, k, n] : {std::tuple{32, 64, 48}, std::tuple{24, 40, 20}, std::tuple{7, 13, 5}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const auto [a8, a] = fp8_operand(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k},
                                         at::ScalarType::Float8_e4m3fn);
        const auto [b8, b] = fp8_operand(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
                                         at::ScalarType::Float8_e5m2);
        const at::Tensor got = scaled_gemm(a8, ta, b8, tb, sa, sb, std::nullopt, at::kFloat);
        ASSERT_EQ(got.sizes(), at::IntArrayRef({m, n}));
        EXPECT_LT(relative_error(got, reference(a, ta, b, tb, 0.5, 0.25, {})), 1e-6)
            << m << "x" << k << "x" << n << " ta=" << ta << " tb=" << tb;
      }
    }
  }
}

TEST(ScaledGemm, BiasInTheEpilogueOrInFp32AndStraightIntoTheOutput) {
  at::manual_seed(4);
  const at::Tensor one = at::ones({});
  const auto [a8, a] = fp8_operand({32, 64}, at::ScalarType::Float8_e4m3fn);
  const auto [w8, w] = fp8_operand({48, 64}, at::ScalarType::Float8_e4m3fn);
  const at::Tensor bias = at::randn({48});
  const at::Tensor want = reference(a, false, w, true, 1.0, 1.0, bias);
  // A bf16 output takes a bf16 or fp32 bias in the epilogue; an fp32 output adds it in fp32.
  for (const at::Tensor& b : {bias.to(at::kBFloat16), bias}) {
    const at::Tensor got = scaled_gemm(a8, false, w8, true, one, one, b, at::kBFloat16);
    EXPECT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_LT(relative_error(got, want), 1e-2) << b.scalar_type();  // bf16 output rounding
  }
  EXPECT_LT(relative_error(scaled_gemm(a8, false, w8, true, one, one, bias, at::kFloat), want), 1e-6);
  at::Tensor out = at::full({32, 48}, std::numeric_limits<float>::quiet_NaN(), at::kBFloat16);
  const at::Tensor returned = scaled_gemm(a8, false, w8, true, one, one, bias.to(at::kBFloat16), at::kBFloat16, &out);
  EXPECT_EQ(returned.data_ptr(), out.data_ptr());
  EXPECT_FALSE(out.isnan().any().item<bool>());
  EXPECT_LT(relative_error(out, want), 1e-2);
  // An output that needs padding is written through a copy, all of it.
  const auto [w8_odd, w_odd] = fp8_operand({20, 64}, at::ScalarType::Float8_e4m3fn);
  at::Tensor odd = at::full({32, 20}, std::numeric_limits<float>::quiet_NaN());
  scaled_gemm(a8, false, w8_odd, true, one, one, std::nullopt, at::kFloat, &odd);
  EXPECT_LT(relative_error(odd, reference(a, false, w_odd, true, 1.0, 1.0, {})), 1e-6);
}

TEST(Fp8TensorCores, GpusBeforeAdaAreRefusedInOneLine) {
  EXPECT_EQ(fp8_tensor_core_refusal(89, "cuda:0"), "");  // Ada
  EXPECT_EQ(fp8_tensor_core_refusal(90, "cuda:0"), "");  // Hopper
  EXPECT_EQ(fp8_tensor_core_refusal(100, "cuda:0"), "");  // Blackwell
  const std::string line = fp8_tensor_core_refusal(80, "cuda:1");  // A100
  EXPECT_NE(line.find("cuda:1 has 8.0"), std::string::npos) << line;
  EXPECT_NE(line.find("not emulated"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(fp8_tensor_core_refusal(86, "cuda:0"), "");  // Ampere consumer parts
}

TEST(Fp8CastMath, TheAmaxKeyOrdersMagnitudesAndLetsNanWin) {
  using cuda_math::amax_key;
  using cuda_math::amax_value;
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {0.0f, -0.0f, 1e-40f, -1e-30f, 0.5f, -2.0f, 3.0e38f, -inf, inf};
  for (float x : values) {
    for (float y : values) {
      EXPECT_EQ(amax_key(x) < amax_key(y), std::fabs(x) < std::fabs(y)) << x << " vs " << y;
    }
    EXPECT_EQ(amax_value(amax_key(x)), std::fabs(x));
    EXPECT_GT(amax_key(std::nanf("")), amax_key(x));
    EXPECT_GT(amax_key(-std::nanf("")), amax_key(x));
  }
  EXPECT_TRUE(std::isnan(amax_value(amax_key(-std::nanf("")))));
}

TEST(Fp8CastMath, SaturateThenRoundGivesTheCpuPathsCodes) {
  at::manual_seed(5);
  at::Tensor x = at::randn({4096}) * 300;
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = -std::numeric_limits<float>::infinity();
  x[2] = std::nanf("");
  const float scale = 1.75f;
  for (const auto& [type, limit] : {std::pair{at::ScalarType::Float8_e4m3fn, 448.0f},
                                    std::pair{at::ScalarType::Float8_e5m2, 57344.0f}}) {
    // kernel_services.cpp's CPU path: clamp(x * scale), then ATen's conversion.
    const at::Tensor cpu = (x * scale).clamp(-limit, limit).to(type);
    at::Tensor device_math = at::empty({4096});
    for (int64_t i = 0; i < 4096; ++i) {
      device_math[i] = cuda_math::saturate_scaled(x[i].item<float>(), scale, limit);
    }
    const at::Tensor codes = device_math.to(type);
    EXPECT_TRUE(at::equal(codes.view(at::kByte), cpu.view(at::kByte))) << type;
  }
}

}  // namespace
}  // namespace accel::runtime
