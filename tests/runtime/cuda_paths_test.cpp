// The CUDA twins against their CPU paths, on a GPU: the fused FP8 cast gives
// the CPU cast's codes and amax bit for bit, scaled_gemm on the tensor cores
// matches the CPU product, the fused AdamW step matches the single-tensor
// step, and the caching allocator's peak is what device_memory_peak reports.
// Skipped (GTEST_SKIP) where no GPU is present: CI compiles it, and
// bench/gpu/run.sh runs it first on a GPU machine.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <array>
#include <limits>
#include <string>
#include <vector>

#include "host/comm/cuda_backend.h"
#include "host/model/adamw_step.h"
#include "host/runtime/fp8_tensor_cores.h"
#include "host/util/device_memory.h"

namespace accel::runtime {
namespace {

class CudaPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    // The test binary links LibTorch's CPU library; its CUDA one is loaded
    // on demand (host/comm/cuda_backend.h).
    if (!comm::load_cuda_backend() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  const at::Device gpu{at::kCUDA, 0};
};

// kernel_services.cpp's CPU cast: amax of |x|, clamp(x * scale), ATen's rounding.
std::pair<at::Tensor, at::Tensor> cpu_cast(const at::Tensor& x, double scale, at::ScalarType type) {
  const double limit = type == at::ScalarType::Float8_e4m3fn ? 448.0 : 57344.0;
  const at::Tensor f = x.to(at::kFloat);
  return {(f * scale).clamp(-limit, limit).to(type), f.abs().max()};
}

TEST_F(CudaPaths, TheFusedCastGivesTheCpuCodesAndAmaxBitForBit) {
  at::manual_seed(1);
  for (const at::ScalarType source : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const at::ScalarType target : {at::ScalarType::Float8_e4m3fn, at::ScalarType::Float8_e5m2}) {
      // A length with a scalar tail, and a view one element in (the unaligned path).
      for (const int64_t offset : {0, 1}) {
        const at::Tensor base = (at::randn({1000003 + offset}) * 200).to(source);
        const at::Tensor x = base.narrow(0, offset, 1000003);
        const auto [codes, amax] = cpu_cast(x, 3.7, target);
        const at::Tensor x_gpu = x.to(gpu);  // a contiguous copy: aligned again
        const at::Tensor input = offset == 0 ? x_gpu : base.to(gpu).narrow(0, offset, 1000003);
        at::Tensor out = at::empty({1000003}, x_gpu.options().dtype(target));
        const at::Tensor scale = at::full({}, 3.7f, x_gpu.options().dtype(at::kFloat));
        const at::Tensor amax_gpu = at::full({}, 5.0f, scale.options());
        ASSERT_TRUE(fused_fp8_cast(input, out, scale, amax_gpu, /*accumulate_amax=*/false));
        EXPECT_TRUE(at::equal(out.cpu().view(at::kByte), codes.view(at::kByte))) << source << " -> " << target;
        EXPECT_EQ(amax_gpu.item<float>(), amax.item<float>());
        // Accumulating keeps the larger of the cell and this tensor's amax.
        const at::Tensor big = at::full({}, 1e30f, scale.options());
        ASSERT_TRUE(fused_fp8_cast(input, out, scale, big, /*accumulate_amax=*/true));
        EXPECT_EQ(big.item<float>(), 1e30f);
      }
    }
  }
  // NaN and infinities: NaN codes and a NaN amax, infinities saturated.
  at::Tensor special = at::tensor({1.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                   std::nanf("")});
  const auto [codes, amax] = cpu_cast(special, 1.0, at::ScalarType::Float8_e4m3fn);
  at::Tensor out = at::empty({4}, special.options().dtype(at::ScalarType::Float8_e4m3fn).device(gpu));
  const at::Tensor amax_gpu = at::zeros({}, at::TensorOptions().device(gpu));
  ASSERT_TRUE(fused_fp8_cast(special.to(gpu), out, std::nullopt, amax_gpu, false));
  EXPECT_TRUE(at::equal(out.cpu().view(at::kByte), codes.view(at::kByte)));
  EXPECT_TRUE(std::isnan(amax_gpu.item<float>()));
}

TEST_F(CudaPaths, TheTransposingCastGivesTheCpuCodesBothWays) {
  at::manual_seed(2);
  // Whole 64 x 64 tiles, partial and odd extents, and a view one element in
  // (the element-wise path).
  const std::vector<std::array<int64_t, 3>> shapes = {{256, 192, 0}, {130, 66, 0}, {65, 33, 0}, {128, 64, 1}, {1, 7, 0}};
  for (const at::ScalarType source : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const at::ScalarType target : {at::ScalarType::Float8_e4m3fn, at::ScalarType::Float8_e5m2}) {
      for (const auto& [rows, cols, offset] : shapes) {
        const at::Tensor base = (at::randn({rows * cols + offset}) * 300).to(source);
        const at::Tensor x = base.narrow(0, offset, rows * cols).view({rows, cols});
        const auto [codes, amax] = cpu_cast(x, 0.9, target);
        const at::Tensor input = base.to(gpu).narrow(0, offset, rows * cols).view({rows, cols});
        at::Tensor out = at::empty({rows, cols}, input.options().dtype(target));
        at::Tensor out_t = at::empty({cols, rows}, input.options().dtype(target));
        const at::Tensor scale = at::full({}, 0.9f, input.options().dtype(at::kFloat));
        const at::Tensor amax_gpu = at::zeros({}, scale.options());
        ASSERT_TRUE(fused_fp8_cast(input, out, scale, amax_gpu, /*accumulate_amax=*/false, &out_t));
        const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + "+" + std::to_string(offset);
        EXPECT_TRUE(at::equal(out.cpu().view(at::kByte), codes.view(at::kByte))) << source << " -> " << target << what;
        EXPECT_TRUE(at::equal(out_t.cpu().view(at::kByte), codes.t().contiguous().view(at::kByte)))
            << source << " -> " << target << " " << what;
        EXPECT_EQ(amax_gpu.item<float>(), amax.item<float>()) << what;
      }
    }
  }
}

TEST_F(CudaPaths, TheTensorCoreGemmMatchesTheCpuProduct) {
  at::manual_seed(2);
  for (const auto& [m, k, n] : {std::tuple{256, 768, 2304}, std::tuple{40, 72, 24}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const at::Tensor a = (at::randn(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}) * 4)
                                 .to(at::ScalarType::Float8_e4m3fn);
        const at::Tensor b = (at::randn(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}) * 4)
                                 .to(at::ScalarType::Float8_e5m2);
        const at::Tensor sa = at::full({}, 0.5f), sb = at::full({}, 2.0f), bias = at::randn({n});
        const at::Tensor want = scaled_gemm(a, ta, b, tb, sa, sb, bias, at::kFloat);
        // The scales as the fp8 plugin passes them: cells inside an array,
        // not 16-byte aligned (which cuBLASLt refuses as given).
        const at::Tensor cells = at::stack({sa, sb, sa, sb}).to(gpu);
        const at::Tensor got = scaled_gemm(a.to(gpu), ta, b.to(gpu), tb, cells[2], cells[1], bias.to(gpu),
                                           at::kFloat);
        // Hopper's FP8 MMA accumulates with fewer bits between cuBLASLt's
        // promotions to fp32: about 1e-4 relative here (measured, H100).
        EXPECT_LT((got.cpu() - want).norm().item<double>() / want.norm().item<double>(), 1e-3)
            << m << "x" << k << "x" << n << " " << ta << tb;
        // Straight into a bf16 output, the bias in the epilogue.
        at::Tensor got16 = at::empty({m, n}, at::TensorOptions().dtype(at::kBFloat16).device(gpu));
        scaled_gemm(a.to(gpu), ta, b.to(gpu), tb, cells[0], cells[3], bias.to(gpu), at::kBFloat16, &got16);
        EXPECT_LT((got16.cpu().to(at::kFloat) - want).norm().item<double>() / want.norm().item<double>(), 1e-2);
      }
    }
  }
}

TEST_F(CudaPaths, TheFusedAdamWStepMatchesTheCpuStep) {
  const model::AdamWHyper h{3e-3, 0.9, 0.95, 1e-8, 0.1};
  const int64_t n = 3000017, decay = 2000003;
  at::manual_seed(3);
  at::Tensor p = at::randn({n}), m = at::randn({n}) * 0.1, v = at::rand({n}) * 0.01;
  at::Tensor gp = p.to(gpu), gm = m.to(gpu), gv = v.to(gpu);
  for (int64_t t = 1; t <= 3; ++t) {
    const at::Tensor g = at::randn({n});
    model::adamw_step_flat(p, g, m, v, decay, t, h);
    model::adamw_step_flat(gp, g.to(gpu), gm, gv, decay, t, h);  // the fused step on a CUDA buffer
  }
  EXPECT_LT((gp.cpu() - p).abs().max().item<double>(), 1e-6);
  EXPECT_LT((gv.cpu() - v).abs().max().item<double>(), 1e-6);
}

TEST_F(CudaPaths, TheDevicePeakIsTheCachingAllocators) {
  reset_device_memory_peak(gpu);
  const int64_t before = device_memory_peak(gpu).allocated;
  { const at::Tensor big = at::empty({64 << 20}, at::TensorOptions().dtype(at::kByte).device(gpu)); }
  const DeviceMemoryPeak peak = device_memory_peak(gpu);
  EXPECT_GE(peak.allocated, before + (64 << 20));
  EXPECT_GE(peak.reserved, peak.allocated);
}

}  // namespace
}  // namespace accel::runtime
