// The kernel area, each kernel against its reference: FP8 casts round-trip
// within FP8 precision with a correct amax, AdamW is bit-identical to the
// host's adamw_step_flat, SGD follows torch.optim.SGD, GEMM matches
// at::matmul (also with FP8 operands and scales), delayed scaling follows
// accel/kernels.h; and malformed DLTensors are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <accel/sdk/kernels.hpp>

#include "host/comm/cuda_backend.h"
#include "host/model/adamw_step.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

class KernelServicesTest : public ServicesTest {
 protected:
  KernelServicesTest() { at::manual_seed(7); }
  const AccelKernelServices* kernels() { return services->kernels; }
  template <class Args>
  static Args args() {
    Args a{};
    a.struct_size = sizeof(Args);
    return a;
  }
};

const at::ScalarType kE4M3 = at::ScalarType::Float8_e4m3fn;
const at::ScalarType kE5M2 = at::ScalarType::Float8_e5m2;

// ---------------------------------------------------------------------------
// Cast
// ---------------------------------------------------------------------------

TEST_F(KernelServicesTest, Fp8CastRoundTripsWithinFp8PrecisionAndReportsAmax) {
  const at::Tensor x = at::randn({64, 32}) * 3.0;
  const float true_amax = x.abs().max().item<float>();
  const float scale_value = 448.0f / true_amax;
  at::Tensor scale = at::full({}, scale_value);
  at::Tensor inv_scale = at::full({}, 1.0f / scale_value);
  at::Tensor amax = at::zeros({1});
  at::Tensor q = at::empty({64, 32}, at::TensorOptions().dtype(kE4M3));
  at::Tensor back = at::empty({64, 32});
  View x_v(x), q_v(q), back_v(back), scale_v(scale), inv_v(inv_scale), amax_v(amax);

  AccelCastArgs cast = args<AccelCastArgs>();
  cast.input = x_v;
  cast.output = q_v;
  cast.scale = scale_v;
  cast.amax = amax_v;
  ASSERT_EQ(kernels()->cast(&host, &cast), ACCEL_OK) << last_error();
  EXPECT_EQ(amax.item<float>(), true_amax);

  AccelCastArgs dequant = args<AccelCastArgs>();
  dequant.input = q_v;
  dequant.output = back_v;
  dequant.scale = inv_v;
  ASSERT_EQ(kernels()->cast(&host, &dequant), ACCEL_OK) << last_error();
  // E4M3: 3 mantissa bits, so a relative error of at most 2^-4 for normal
  // values; below 2^-6 (subnormals) the step is 2^-9 in the scaled domain.
  const at::Tensor bound = x.abs() / 16.0 + std::ldexp(1.0, -10) / scale_value + 1e-7;
  EXPECT_TRUE(((back - x).abs() <= bound).all().item<bool>());
  EXPECT_FALSE(at::equal(back, x));  // it did quantise
  // Matches ATen's own conversion (round to nearest even).
  EXPECT_TRUE(at::equal(q.to(at::kFloat), (x * scale_value).to(kE4M3).to(at::kFloat)));
}

TEST_F(KernelServicesTest, Fp8CastSaturatesKeepsNanAndAccumulatesAmax) {
  const at::Tensor x = at::tensor({1.0f, -1000.0f, 70000.0f, std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()});
  at::Tensor e4 = at::empty({5}, at::TensorOptions().dtype(kE4M3));
  at::Tensor e5 = at::empty({5}, at::TensorOptions().dtype(kE5M2));
  View x_v(x), e4_v(e4), e5_v(e5);
  AccelCastArgs cast = args<AccelCastArgs>();
  cast.input = x_v;
  cast.output = e4_v;
  ASSERT_EQ(kernels()->cast(&host, &cast), ACCEL_OK) << last_error();
  const at::Tensor r4 = e4.to(at::kFloat);
  EXPECT_EQ(r4[1].item<float>(), -448.0f);
  EXPECT_EQ(r4[2].item<float>(), 448.0f);
  EXPECT_EQ(r4[3].item<float>(), 448.0f);
  EXPECT_TRUE(std::isnan(r4[4].item<float>()));
  cast.output = e5_v;
  ASSERT_EQ(kernels()->cast(&host, &cast), ACCEL_OK) << last_error();
  EXPECT_EQ(e5.to(at::kFloat)[2].item<float>(), 57344.0f);

  const at::Tensor small = at::tensor({0.5f, -2.0f});
  at::Tensor out = at::empty({2}, at::kBFloat16);
  at::Tensor amax = at::full({}, 3.0f);
  View small_v(small), out_v(out), amax_v(amax);
  AccelCastArgs acc = args<AccelCastArgs>();
  acc.input = small_v;
  acc.output = out_v;
  acc.amax = amax_v;
  acc.flags = ACCEL_CAST_AMAX_ACCUMULATE;
  ASSERT_EQ(kernels()->cast(&host, &acc), ACCEL_OK);
  EXPECT_EQ(amax.item<float>(), 3.0f);  // max(3, 2)
  acc.flags = 0;
  ASSERT_EQ(kernels()->cast(&host, &acc), ACCEL_OK);
  EXPECT_EQ(amax.item<float>(), 2.0f);
}

TEST_F(KernelServicesTest, Fp8CastStoresItsTransposeInTheSamePass) {
  const at::Tensor x = at::randn({6, 10}) * 100.0;
  at::Tensor scale = at::full({}, 2.5f);
  at::Tensor amax = at::zeros({});
  at::Tensor q = at::empty({6, 10}, at::TensorOptions().dtype(kE5M2));
  at::Tensor qt = at::empty({10, 6}, at::TensorOptions().dtype(kE5M2));
  View x_v(x), q_v(q), qt_v(qt), scale_v(scale), amax_v(amax);
  AccelCastArgs cast = args<AccelCastArgs>();
  cast.input = x_v;
  cast.output = q_v;
  cast.output_transposed = qt_v;
  cast.scale = scale_v;
  cast.amax = amax_v;
  ASSERT_EQ(kernels()->cast(&host, &cast), ACCEL_OK) << last_error();
  const at::Tensor codes = (x * 2.5f).clamp(-57344.0, 57344.0).to(kE5M2);
  EXPECT_TRUE(at::equal(q.view(at::kByte), codes.view(at::kByte)));
  EXPECT_TRUE(at::equal(qt.view(at::kByte), codes.t().contiguous().view(at::kByte)));
  EXPECT_EQ(amax.item<float>(), x.abs().max().item<float>());

  // A 1.8 caller's struct ends before the field: the host never reads it.
  at::Tensor untouched = at::zeros({10, 6}, at::TensorOptions().dtype(kE5M2));
  View untouched_v(untouched);
  cast.output_transposed = untouched_v;
  cast.struct_size = offsetof(AccelCastArgs, output_transposed);
  ASSERT_EQ(kernels()->cast(&host, &cast), ACCEL_OK) << last_error();
  EXPECT_EQ(untouched.view(at::kByte).sum().item<int64_t>(), 0);

  // Not the transpose's shape, or not the output's dtype: one line.
  cast.struct_size = sizeof(AccelCastArgs);
  at::Tensor same_shape = at::empty({6, 10}, at::TensorOptions().dtype(kE5M2));
  at::Tensor other_dtype = at::empty({10, 6}, at::TensorOptions().dtype(kE4M3));
  View same_shape_v(same_shape), other_dtype_v(other_dtype);
  for (const DLTensor* wrong : {same_shape_v.get(), other_dtype_v.get()}) {
    cast.output_transposed = wrong;
    EXPECT_EQ(kernels()->cast(&host, &cast), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("output_transposed must be a contiguous float8_e5m2 transpose"), std::string::npos)
        << last_error();
  }
}

// The SDK's cast_transposed on a host older than 1.9 (which would ignore the
// field) casts and copies the transposed view itself: the same codes.
TEST_F(KernelServicesTest, SdkCastTransposedCopiesTheTransposeOnA18Host) {
  const at::Tensor x = at::randn({5, 12}) * 10.0;
  const sdk::Services s(&host, services);
  const sdk::Kernels ops(s);
  for (const AccelAbiVersion version : {AccelAbiVersion{1, 8}, AccelAbiVersion{1, ACCEL_ABI_VERSION_MINOR}}) {
    at::Tensor q = at::empty({5, 12}, at::TensorOptions().dtype(kE4M3));
    at::Tensor qt = at::zeros({12, 5}, at::TensorOptions().dtype(kE4M3));
    View x_v(x), q_v(q), qt_v(qt);
    sdk::detail::loaded_host_abi = version;
    ops.cast_transposed(x_v, q_v, qt_v, nullptr, nullptr, false);
    sdk::detail::loaded_host_abi = {0, 0};
    EXPECT_TRUE(at::equal(q.view(at::kByte), x.to(kE4M3).view(at::kByte))) << version.minor;
    EXPECT_TRUE(at::equal(qt.view(at::kByte), x.to(kE4M3).t().contiguous().view(at::kByte))) << version.minor;
  }
}

// ---------------------------------------------------------------------------
// Elementwise and norms
// ---------------------------------------------------------------------------

TEST_F(KernelServicesTest, AxpyScaleAndFill) {
  at::Tensor x = at::randn({10});
  at::Tensor y = at::randn({10});
  const at::Tensor y0 = y.clone();
  at::Tensor alpha = at::full({}, -0.5f);
  View x_v(x), y_v(y), alpha_v(alpha);
  AccelAxpyArgs axpy = args<AccelAxpyArgs>();
  axpy.x = x_v;
  axpy.y = y_v;
  axpy.alpha = 2.0;
  ASSERT_EQ(kernels()->axpy(&host, &axpy), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::allclose(y, y0 + 2.0 * x));
  axpy.alpha_tensor = alpha_v;  // overrides alpha
  ASSERT_EQ(kernels()->axpy(&host, &axpy), ACCEL_OK);
  EXPECT_TRUE(at::allclose(y, y0 + 1.5 * x));

  AccelScaleArgs scale = args<AccelScaleArgs>();
  scale.x = y_v;
  scale.alpha = 0.0;
  ASSERT_EQ(kernels()->scale(&host, &scale), ACCEL_OK);
  EXPECT_EQ(y.abs().sum().item<float>(), 0.0f);

  at::Tensor history = at::empty({4, 3}, at::TensorOptions().dtype(kE4M3));
  at::Tensor ids = at::empty({5}, at::kLong);
  View h_v(history), ids_v(ids);
  AccelFillArgs fill = args<AccelFillArgs>();
  fill.x = h_v;
  fill.value = 1.0;
  ASSERT_EQ(kernels()->fill(&host, &fill), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(history.to(at::kFloat), at::ones({4, 3})));
  fill.x = ids_v;
  fill.value = 7;
  ASSERT_EQ(kernels()->fill(&host, &fill), ACCEL_OK);
  EXPECT_TRUE(at::equal(ids, at::full({5}, 7, at::kLong)));
}

TEST_F(KernelServicesTest, AxpyOnBf16ComputesInFp32) {
  at::Tensor y = at::full({4}, 256.0f).to(at::kBFloat16);
  at::Tensor x = at::full({4}, 1.0f);
  View x_v(x), y_v(y);
  AccelAxpyArgs axpy = args<AccelAxpyArgs>();
  axpy.x = x_v;
  axpy.y = y_v;
  axpy.alpha = 1.5;  // 257.5 rounds to 258 in bf16 (8 bits of mantissa)
  ASSERT_EQ(kernels()->axpy(&host, &axpy), ACCEL_OK) << last_error();
  EXPECT_EQ(y[0].item<float>(), 258.0f);
}

TEST_F(KernelServicesTest, SquaredNormSumsInputsAndSignalsInf) {
  const at::Tensor a = at::randn({7, 3});
  const at::Tensor b = at::randn({11}).to(at::kBFloat16);
  at::Tensor out = at::zeros({});
  View a_v(a), b_v(b), out_v(out);
  const DLTensor* inputs[] = {a_v, b_v};
  AccelSquaredNormArgs norm = args<AccelSquaredNormArgs>();
  norm.inputs = inputs;
  norm.num_inputs = 2;
  norm.output = out_v;
  ASSERT_EQ(kernels()->squared_norm(&host, &norm), ACCEL_OK) << last_error();
  const double expected = a.square().sum().item<double>() + b.to(at::kFloat).square().sum().item<double>();
  EXPECT_NEAR(out.item<float>(), expected, 1e-4 * expected);
  norm.flags = ACCEL_NORM_ACCUMULATE;
  ASSERT_EQ(kernels()->squared_norm(&host, &norm), ACCEL_OK);
  EXPECT_NEAR(out.item<float>(), 2 * expected, 2e-4 * expected);

  const at::Tensor bad = at::tensor({1.0f, std::numeric_limits<float>::infinity()});
  View bad_v(bad);
  const DLTensor* with_inf[] = {bad_v};
  norm.inputs = with_inf;
  norm.num_inputs = 1;
  norm.flags = 0;
  ASSERT_EQ(kernels()->squared_norm(&host, &norm), ACCEL_OK);
  EXPECT_TRUE(std::isinf(out.item<float>()));
}

TEST_F(KernelServicesTest, ClipScaleFollowsClipGradNorm) {
  at::Tensor g1 = at::full({4}, 3.0f);
  at::Tensor g2 = at::full({2}, 4.0f).to(at::kBFloat16);
  const float squared = 4 * 9.0f + 2 * 16.0f;  // 68
  at::Tensor total = at::full({}, squared);
  at::Tensor norm = at::zeros({});
  View g1_v(g1), g2_v(g2), total_v(total), norm_v(norm);
  const DLTensor* grads[] = {g1_v, g2_v};
  AccelClipScaleArgs clip = args<AccelClipScaleArgs>();
  clip.tensors = grads;
  clip.num_tensors = 2;
  clip.total_squared_norm = total_v;
  clip.total_norm = norm_v;
  clip.max_norm = 1.0;
  ASSERT_EQ(kernels()->clip_scale(&host, &clip), ACCEL_OK) << last_error();
  const float coef = 1.0f / (std::sqrt(squared) + 1e-6f);
  EXPECT_FLOAT_EQ(norm.item<float>(), std::sqrt(squared));
  EXPECT_TRUE(at::allclose(g1, at::full({4}, 3.0f * coef)));
  EXPECT_NEAR(g2[0].item<float>(), 4.0f * coef, 4.0f * coef / 128);

  // Below max_norm: unchanged (the coefficient clamps at 1).
  const at::Tensor before = g1.clone();
  clip.max_norm = 1e9;
  ASSERT_EQ(kernels()->clip_scale(&host, &clip), ACCEL_OK);
  EXPECT_TRUE(at::equal(g1, before));
  clip.max_norm = 0.0;
  EXPECT_EQ(kernels()->clip_scale(&host, &clip), ACCEL_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------
// Optimizers
// ---------------------------------------------------------------------------

TEST_F(KernelServicesTest, AdamWIsBitIdenticalToTheHostsFlatAdamW) {
  const int64_t n = 1000;
  at::Tensor param = at::randn({n});
  at::Tensor exp_avg = at::zeros({n});
  at::Tensor exp_avg_sq = at::zeros({n});
  at::Tensor ref_param = param.clone(), ref_avg = exp_avg.clone(), ref_sq = exp_avg_sq.clone();
  at::Tensor copy = at::empty({n}, at::kBFloat16);
  at::Tensor grad_scale = at::full({}, 0.5f);
  const model::AdamWHyper hyper{1e-3, 0.9, 0.95, 1e-8, 0.1};
  View p_v(param), m_v(exp_avg), v_v(exp_avg_sq), c_v(copy), s_v(grad_scale);
  for (int64_t step = 1; step <= 3; ++step) {
    const at::Tensor grad = at::randn({n});
    View g_v(grad);
    AccelAdamWArgs adamw = args<AccelAdamWArgs>();
    adamw.param = p_v;
    adamw.grad = g_v;
    adamw.exp_avg = m_v;
    adamw.exp_avg_sq = v_v;
    adamw.param_copy = c_v;
    adamw.grad_scale = s_v;
    adamw.lr = hyper.lr;
    adamw.beta1 = hyper.beta1;
    adamw.beta2 = hyper.beta2;
    adamw.eps = hyper.eps;
    adamw.weight_decay = hyper.weight_decay;
    adamw.step = step;
    ASSERT_EQ(kernels()->adamw_step(&host, &adamw), ACCEL_OK) << last_error();
    model::adamw_step_flat(ref_param, grad * grad_scale, ref_avg, ref_sq, n, step, hyper);
    ASSERT_TRUE(at::equal(param, ref_param)) << "step " << step;
    ASSERT_TRUE(at::equal(exp_avg, ref_avg));
    ASSERT_TRUE(at::equal(exp_avg_sq, ref_sq));
    ASSERT_TRUE(at::equal(copy, param.to(at::kBFloat16)));
  }
}

TEST_F(KernelServicesTest, AdamWSkipsTheStepOnFoundInfAndChecksBuffers) {
  at::Tensor param = at::randn({8});
  at::Tensor m = at::zeros({8}), v = at::zeros({8});
  const at::Tensor grad = at::randn({8});
  at::Tensor found_inf = at::ones({1});
  const at::Tensor before = param.clone();
  View p_v(param), m_v(m), v_v(v), g_v(grad), f_v(found_inf);
  AccelAdamWArgs adamw = args<AccelAdamWArgs>();
  adamw.param = p_v;
  adamw.grad = g_v;
  adamw.exp_avg = m_v;
  adamw.exp_avg_sq = v_v;
  adamw.found_inf = f_v;
  adamw.lr = 0.1;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.step = 1;
  ASSERT_EQ(kernels()->adamw_step(&host, &adamw), ACCEL_OK);
  EXPECT_TRUE(at::equal(param, before));
  EXPECT_EQ(m.abs().sum().item<float>(), 0.0f);

  at::Tensor short_m = at::zeros({7});
  View short_v(short_m);
  adamw.exp_avg = short_v;
  EXPECT_EQ(kernels()->adamw_step(&host, &adamw), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("exp_avg has 7 elements"), std::string::npos) << last_error();
  adamw.exp_avg = m_v;
  adamw.step = 0;
  EXPECT_EQ(kernels()->adamw_step(&host, &adamw), ACCEL_ERROR_INVALID_ARGUMENT);
}

TEST_F(KernelServicesTest, SgdFollowsTorchOptimSgd) {
  for (const bool nesterov : {false, true}) {
    at::Tensor param = at::randn({16});
    at::Tensor buf = at::empty({16});
    at::Tensor ref = param.clone();
    at::Tensor ref_buf;
    const double lr = 0.1, momentum = 0.9, dampening = nesterov ? 0.0 : 0.25, wd = 0.01;
    View p_v(param), b_v(buf);
    for (int64_t step = 1; step <= 3; ++step) {
      const at::Tensor grad = at::randn({16});
      View g_v(grad);
      AccelSgdArgs sgd = args<AccelSgdArgs>();
      sgd.param = p_v;
      sgd.grad = g_v;
      sgd.momentum_buffer = b_v;
      sgd.lr = lr;
      sgd.momentum = momentum;
      sgd.dampening = dampening;
      sgd.weight_decay = wd;
      sgd.step = step;
      sgd.flags = nesterov ? ACCEL_SGD_NESTEROV : 0;
      ASSERT_EQ(kernels()->sgd_step(&host, &sgd), ACCEL_OK) << last_error();
      // torch/optim/sgd.py, _single_tensor_sgd.
      at::Tensor d_p = grad.add(ref, wd);
      ref_buf = step == 1 ? d_p.clone() : ref_buf.mul(momentum).add(d_p, 1 - dampening);
      d_p = nesterov ? d_p.add(ref_buf, momentum) : ref_buf;
      ref.add_(d_p, -lr);
      ASSERT_TRUE(at::allclose(param, ref, 1e-6, 1e-7)) << "nesterov " << nesterov << " step " << step;
    }
  }
}

TEST_F(KernelServicesTest, SgdRequiresABufferExactlyWithMomentum) {
  at::Tensor param = at::randn({4});
  const at::Tensor grad = at::ones({4});
  View p_v(param), g_v(grad);
  AccelSgdArgs sgd = args<AccelSgdArgs>();
  sgd.param = p_v;
  sgd.grad = g_v;
  sgd.lr = 0.5;
  sgd.momentum = 0.9;
  sgd.step = 1;
  EXPECT_EQ(kernels()->sgd_step(&host, &sgd), ACCEL_ERROR_INVALID_ARGUMENT);
  sgd.momentum = 0.0;
  const at::Tensor before = param.clone();
  ASSERT_EQ(kernels()->sgd_step(&host, &sgd), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::allclose(param, before - 0.5));
}

// ---------------------------------------------------------------------------
// GEMM and FP8 scaling
// ---------------------------------------------------------------------------

TEST_F(KernelServicesTest, GemmMatchesMatmulForALinearLayer) {
  const at::Tensor x = at::randn({5, 7});
  const at::Tensor w = at::randn({3, 7});
  const at::Tensor bias = at::randn({3});
  at::Tensor out = at::empty({5, 3});
  View x_v(x), w_v(w), b_v(bias), out_v(out);
  AccelGemmArgs gemm = args<AccelGemmArgs>();
  gemm.a = x_v;
  gemm.b = w_v;
  gemm.out = out_v;
  gemm.bias = b_v;
  gemm.alpha = 0.5;
  gemm.flags = ACCEL_GEMM_TRANS_B;
  ASSERT_EQ(kernels()->gemm(&host, &gemm), ACCEL_OK) << last_error();
  const at::Tensor expected = 0.5 * at::matmul(x, w.t()) + bias;
  EXPECT_TRUE(at::allclose(out, expected, 1e-5, 1e-6));

  // Weight-gradient style: out += a^T b.
  const at::Tensor dy = at::randn({5, 3});
  at::Tensor dw = at::randn({3, 7});
  const at::Tensor dw0 = dw.clone();
  View dy_v(dy), dw_v(dw);
  AccelGemmArgs wgrad = args<AccelGemmArgs>();
  wgrad.a = dy_v;
  wgrad.b = x_v;
  wgrad.out = dw_v;
  wgrad.alpha = 1.0;
  wgrad.flags = ACCEL_GEMM_TRANS_A | ACCEL_GEMM_ACCUMULATE;
  ASSERT_EQ(kernels()->gemm(&host, &wgrad), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::allclose(dw, dw0 + at::matmul(dy.t(), x), 1e-5, 1e-5));

  wgrad.flags = 0;  // [5,3] x [5,7] does not chain
  EXPECT_EQ(kernels()->gemm(&host, &wgrad), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("op(a)"), std::string::npos) << last_error();
}

// On a GPU a bf16 x bf16 GEMM into fp32 (the fp8 plugin's bias gradient:
// ones [1, tokens] x g) reads the 16-bit operands as they are and
// accumulates in fp32: the CPU's fp32 product, within accumulation order.
// Skipped without a GPU (bench/gpu/run.sh runs it on one).
TEST_F(KernelServicesTest, CudaBf16GemmIntoFp32MatchesTheCpu) {
  if (!comm::load_cuda_backend() || !at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const at::TensorOptions gpu = at::TensorOptions().device(at::kCUDA, 0);
  const at::Tensor ones = at::ones({1, 4096}, gpu.dtype(at::kBFloat16));
  const at::Tensor g = (at::randn({4096, 768}) * 0.01).to(at::kBFloat16).to(gpu.device());
  at::Tensor grad_bias = at::randn({1, 768}, gpu.dtype(at::kFloat));
  const at::Tensor expected = grad_bias.cpu() + at::matmul(ones.cpu().to(at::kFloat), g.cpu().to(at::kFloat));
  View ones_v(ones), g_v(g), bias_v(grad_bias);
  AccelGemmArgs gemm = args<AccelGemmArgs>();
  gemm.a = ones_v;
  gemm.b = g_v;
  gemm.out = bias_v;
  gemm.alpha = 1.0;
  gemm.flags = ACCEL_GEMM_ACCUMULATE;
  ASSERT_EQ(kernels()->gemm(&host, &gemm), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::allclose(grad_bias.cpu(), expected, 1e-5, 1e-5));
}

TEST_F(KernelServicesTest, Fp8GemmDequantisesWithScalesAndReportsAmax) {
  const at::Tensor x = at::randn({6, 8});
  const at::Tensor w = at::randn({4, 8});
  const float sx = 448.0f / x.abs().max().item<float>();
  const float sw = 448.0f / w.abs().max().item<float>();
  const at::Tensor x8 = (x * sx).to(kE4M3);
  const at::Tensor w8 = (w * sw).to(kE4M3);
  at::Tensor inv_x = at::full({}, 1.0f / sx), inv_w = at::full({}, 1.0f / sw);
  at::Tensor amax = at::zeros({});
  at::Tensor out = at::empty({6, 4}, at::kBFloat16);
  View x_v(x8), w_v(w8), ix_v(inv_x), iw_v(inv_w), amax_v(amax), out_v(out);
  AccelGemmArgs gemm = args<AccelGemmArgs>();
  gemm.a = x_v;
  gemm.b = w_v;
  gemm.out = out_v;
  gemm.scale_a = ix_v;
  gemm.scale_b = iw_v;
  gemm.amax_out = amax_v;
  gemm.alpha = 1.0;
  gemm.flags = ACCEL_GEMM_TRANS_B;
  ASSERT_EQ(kernels()->gemm(&host, &gemm), ACCEL_OK) << last_error();
  const at::Tensor expected = at::matmul(x8.to(at::kFloat) / sx, (w8.to(at::kFloat) / sw).t());
  EXPECT_TRUE(at::allclose(out.to(at::kFloat), expected, 1e-2, 1e-2));
  EXPECT_NEAR(amax.item<float>(), expected.abs().max().item<float>(), 1e-5);
  // And close to the unquantised product.
  EXPECT_TRUE(at::allclose(out.to(at::kFloat), at::matmul(x, w.t()), 0.1, 0.3));

  const at::Tensor w5 = w.to(kE5M2);
  const at::Tensor x5 = x.to(kE5M2);
  View w5_v(w5), x5_v(x5);
  gemm.a = x5_v;
  gemm.b = w5_v;
  EXPECT_EQ(kernels()->gemm(&host, &gemm), ACCEL_ERROR_UNSUPPORTED);
  EXPECT_NE(last_error().find("float8_e5m2 x float8_e5m2"), std::string::npos) << last_error();
}

TEST_F(KernelServicesTest, Fp8ScaleUpdateUsesTheHistoryAndRollsIt) {
  const float inf = std::numeric_limits<float>::infinity();
  at::Tensor history = at::tensor({2.0f, 0.0f, 8.0f,   // row 0: this step
                                   4.0f, 1.0f, inf,    //
                                   1.0f, 0.5f, 2.0f}).reshape({3, 3});
  at::Tensor scale = at::full({3}, 5.0f);
  at::Tensor scale_inv = at::zeros({3});
  const at::Tensor original = history.clone();
  View h_v(history), s_v(scale), i_v(scale_inv);
  AccelFp8ScaleUpdateArgs update = args<AccelFp8ScaleUpdateArgs>();
  update.amax_history = h_v;
  update.scale = s_v;
  update.scale_inv = i_v;
  update.fp8_dtype = accel_dtype(ACCEL_DL_FLOAT8_E4M3FN, 8);
  update.margin = 1;
  update.algo = ACCEL_AMAX_MOST_RECENT;
  ASSERT_EQ(kernels()->fp8_scale_update(&host, &update), ACCEL_OK) << last_error();
  // amax = row 0: 448/2/2, kept (amax 0), 448/8/2.
  EXPECT_TRUE(at::allclose(scale, at::tensor({112.0f, 5.0f, 28.0f})));
  EXPECT_TRUE(at::allclose(scale_inv, at::tensor({1 / 112.0f, 1 / 5.0f, 1 / 28.0f})));
  EXPECT_TRUE(at::equal(history, original));  // no roll asked

  update.algo = ACCEL_AMAX_MAX;
  update.margin = 0;
  update.flags = ACCEL_FP8_ROLL_HISTORY;
  ASSERT_EQ(kernels()->fp8_scale_update(&host, &update), ACCEL_OK) << last_error();
  // amax = column max: 4, 1, inf (kept).
  EXPECT_TRUE(at::allclose(scale, at::tensor({112.0f, 448.0f, 28.0f})));
  EXPECT_TRUE(at::equal(history[0], at::zeros({3})));
  EXPECT_TRUE(at::equal(history[1], original[0]));
  EXPECT_TRUE(at::equal(history[2], original[1]));

  update.fp8_dtype = accel_dtype(kDLFloat, 32);
  EXPECT_EQ(kernels()->fp8_scale_update(&host, &update), ACCEL_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------
// Malformed tensors
// ---------------------------------------------------------------------------

TEST_F(KernelServicesTest, MalformedDLTensorsAreRefusedWithAMessage) {
  at::Tensor x = at::ones({4});
  View good(x);
  DLTensor no_strides = *good.get();
  no_strides.strides = nullptr;
  AccelScaleArgs scale = args<AccelScaleArgs>();
  scale.x = &no_strides;
  scale.alpha = 2.0;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "scale: x has ndim 1 but strides is NULL (the ABI requires strides)");

  DLTensor bad_dtype = *good.get();
  bad_dtype.dtype = accel_dtype(42, 32);
  scale.x = &bad_dtype;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unknown dtype"), std::string::npos) << last_error();

  DLTensor lanes = *good.get();
  lanes.dtype.lanes = 4;
  scale.x = &lanes;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_INVALID_ARGUMENT);

  DLTensor negative_ndim = *good.get();
  negative_ndim.ndim = -1;
  scale.x = &negative_ndim;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_INVALID_ARGUMENT);

  DLTensor packed = *good.get();
  packed.dtype = accel_dtype(ACCEL_DL_FLOAT4_E2M1FN, 4);
  scale.x = &packed;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_UNSUPPORTED);

  DLTensor on_vulkan = *good.get();
  on_vulkan.device = DLDevice{kDLVulkan, 0};
  scale.x = &on_vulkan;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_UNSUPPORTED);

  scale.x = nullptr;
  EXPECT_EQ(kernels()->scale(&host, &scale), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kernels()->scale(&host, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(at::equal(x, at::ones({4})));  // nothing was touched
}

TEST_F(KernelServicesTest, ByteOffsetIsHonoured) {
  at::Tensor x = at::zeros({6});
  View whole(x);
  DLTensor tail = *whole.get();
  int64_t two = 2;
  tail.shape = &two;
  tail.byte_offset = 4 * sizeof(float);
  AccelFillArgs fill = args<AccelFillArgs>();
  fill.x = &tail;
  fill.value = 9.0;
  ASSERT_EQ(kernels()->fill(&host, &fill), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(x, at::tensor({0.0f, 0.0f, 0.0f, 0.0f, 9.0f, 9.0f})));
}

}  // namespace
}  // namespace accel::runtime::testing
