// The precision area (accel/precision.h, ABI 1.8): who may set the policy and
// when, what get_policy returns, and the scaled AdamW kernel's two passes
// (kernels->adamw_step_scaled) against the host's one-shot step they must
// reproduce bit for bit.
#include <gtest/gtest.h>

#include <string>

#include "host/model/adamw_step.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

using PrecisionServicesTest = ServicesTest;

AccelPrecisionPolicy o2_policy() {
  AccelPrecisionPolicy p{};
  p.struct_size = sizeof(p);
  p.grad_comm_dtype = DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};
  p.exp_avg_dtype = DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};
  p.exp_avg_sq_dtype = DLDataType{kDLFloat, 16, 1};
  return p;
}

TEST_F(PrecisionServicesTest, DefaultPolicyUntilAPrecisionPluginSetsOneDuringCreate) {
  ASSERT_TRUE(ACCEL_STRUCT_HAS_FIELD(services, AccelHostServices, precision));
  const AccelPrecisionServices& precision = *services->precision;
  const AccelPrecisionPolicy* policy = nullptr;
  ASSERT_EQ(precision.get_policy(&host, &policy), ACCEL_OK);
  EXPECT_EQ(policy->grad_comm_dtype.bits, 0);
  EXPECT_EQ(policy->exp_avg_dtype.bits, 0);

  const AccelPrecisionPolicy wanted = o2_policy();
  host.kind = ACCEL_PLUGIN_PRECISION;
  // Outside create: refused.
  EXPECT_EQ(precision.set_policy(&host, &wanted), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_NE(last_error().find("during create"), std::string::npos) << last_error();
  context.creating_plugins = true;
  // A parallel plugin may not set it.
  host.kind = ACCEL_PLUGIN_PARALLEL;
  EXPECT_EQ(precision.set_policy(&host, &wanted), ACCEL_ERROR_FAILED_PRECONDITION);
  host.kind = ACCEL_PLUGIN_PRECISION;
  ASSERT_EQ(precision.set_policy(&host, &wanted), ACCEL_OK);
  ASSERT_EQ(precision.get_policy(&other_host, &policy), ACCEL_OK);
  EXPECT_EQ(policy->grad_comm_dtype.code, ACCEL_DL_FLOAT8_E4M3FN);
  EXPECT_EQ(policy->exp_avg_sq_dtype.bits, 16);
  EXPECT_EQ(context.precision_policy_owner, "tester");
  // The same policy again is fine; another one names both plugins.
  EXPECT_EQ(precision.set_policy(&host, &wanted), ACCEL_OK);
  AccelPrecisionPolicy o1 = wanted;
  o1.exp_avg_dtype = DLDataType{};
  o1.exp_avg_sq_dtype = DLDataType{};
  other_host.kind = ACCEL_PLUGIN_PRECISION;
  EXPECT_EQ(precision.set_policy(&other_host, &o1), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_NE(last_error().find("tester and other"), std::string::npos) << last_error();
}

TEST_F(PrecisionServicesTest, UnsupportedDtypesAreRefusedNamingTheField) {
  context.creating_plugins = true;
  host.kind = ACCEL_PLUGIN_PRECISION;
  AccelPrecisionPolicy bad = o2_policy();
  bad.exp_avg_dtype = DLDataType{kDLBfloat, 16, 1};
  EXPECT_EQ(services->precision->set_policy(&host, &bad), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("exp_avg_dtype"), std::string::npos) << last_error();
  bad = o2_policy();
  bad.grad_comm_dtype = DLDataType{kDLFloat, 16, 1};
  EXPECT_EQ(services->precision->set_policy(&host, &bad), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("grad_comm_dtype"), std::string::npos) << last_error();
}

// The kernel's UPDATE pass, the caller's scale choice, then STORE: the same
// parameter and stored moments as adamw_step_scaled_flat on the whole tensor.
TEST_F(PrecisionServicesTest, TwoPassScaledAdamWEqualsTheOneShotStep) {
  at::manual_seed(3);
  const model::AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
  at::Tensor p1 = at::randn({1000}), g = at::randn({1000}) * 0.01;
  at::Tensor p2 = p1.clone();
  at::Tensor m1 = at::zeros({1000}, at::ScalarType::Float8_e4m3fn), v1 = at::zeros({1000}, at::kHalf);
  at::Tensor m2 = m1.clone(), v2 = v1.clone();
  float ms = 1.0f, vs = 1.0f;    // the one-shot step's scales
  float ms2 = 1.0f, vs2 = 1.0f;  // the two passes'
  for (int64_t step = 1; step <= 3; ++step) {
    model::adamw_step_scaled_flat(p1, g, m1, ms, v1, vs, p1.numel(), step, h);

    AccelScaledAdamWArgs a{};
    a.struct_size = sizeof(a);
    View param(p2), grad(g), m(m2), v(v2);
    a.param = param;
    a.grad = grad;
    a.exp_avg = m;
    a.exp_avg_sq = v;
    at::Tensor m_scale = at::full({}, ms2, at::kFloat), v_scale = at::full({}, vs2, at::kFloat);
    at::Tensor m_amax = at::zeros({}, at::kFloat), v_amax = at::zeros({}, at::kFloat);
    View m_scale_view(m_scale), v_scale_view(v_scale), m_amax_view(m_amax), v_amax_view(v_amax);
    a.exp_avg_scale = m_scale_view;
    a.exp_avg_sq_scale = v_scale_view;
    a.exp_avg_amax = m_amax_view;
    a.exp_avg_sq_amax = v_amax_view;
    a.lr = h.lr;
    a.beta1 = h.beta1;
    a.beta2 = h.beta2;
    a.eps = h.eps;
    a.weight_decay = h.weight_decay;
    a.step = step;
    a.pass = ACCEL_SCALED_ADAMW_UPDATE;
    ASSERT_EQ(services->kernels->adamw_step_scaled(&host, &a), ACCEL_OK) << last_error();
    at::Tensor m_new = at::full({}, model::moment_scale(m_amax.item<float>(), m2.scalar_type()), at::kFloat);
    at::Tensor v_new = at::full({}, model::moment_scale(v_amax.item<float>(), v2.scalar_type()), at::kFloat);
    View m_new_view(m_new), v_new_view(v_new);
    a.exp_avg_amax = nullptr;
    a.exp_avg_sq_amax = nullptr;
    a.exp_avg_new_scale = m_new_view;
    a.exp_avg_sq_new_scale = v_new_view;
    a.pass = ACCEL_SCALED_ADAMW_STORE;
    ASSERT_EQ(services->kernels->adamw_step_scaled(&host, &a), ACCEL_OK) << last_error();
    ms2 = m_new.item<float>();
    vs2 = v_new.item<float>();

    EXPECT_TRUE(at::equal(p1, p2)) << "step " << step;
    EXPECT_EQ(ms, ms2);
    EXPECT_EQ(vs, vs2);
    EXPECT_TRUE(at::equal(m1.view(at::kByte), m2.view(at::kByte))) << "step " << step;
    EXPECT_TRUE(at::equal(v1, v2)) << "step " << step;
  }
  EXPECT_GT(ms, 1.0f);  // the moments are small: scaled up into E4M3's range
}

}  // namespace
}  // namespace accel::runtime::testing
