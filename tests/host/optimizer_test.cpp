// AdamW on flat buffers, LR schedules, clipping and the loss scaler.
#include <gtest/gtest.h>

#include <cmath>

#include "host/model/unit.h"
#include "host/train/flat_adamw.h"
#include "host/train/grad_clip.h"
#include "host/train/loss_scaler.h"
#include "host/train/lr_schedule.h"
#include "host/train/step_values.h"

using namespace accel::train;
using accel::model::AdamWHyper;
using accel::model::adamw_step_flat;

namespace {

// Scalar AdamW as torch.optim.AdamW documents it, in double.
struct ScalarAdamW {
  double p, m = 0, v = 0;
  void step(double g, int t, const AdamWHyper& h, bool decay) {
    if (decay) p *= 1 - h.lr * h.weight_decay;
    m = h.beta1 * m + (1 - h.beta1) * g;
    v = h.beta2 * v + (1 - h.beta2) * g * g;
    const double m_hat = m / (1 - std::pow(h.beta1, t)), v_hat = v / (1 - std::pow(h.beta2, t));
    p -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
  }
};

TEST(FlatAdamW, MatchesTheScalarDefinitionAndDecaysOnlyThePrefix) {
  const AdamWHyper h{1e-2, 0.9, 0.95, 1e-8, 0.1};
  at::Tensor param = at::tensor({0.5f, -1.0f, 2.0f, 0.25f});
  at::Tensor m = at::zeros({4}), v = at::zeros({4});
  std::vector<ScalarAdamW> ref = {{0.5}, {-1.0}, {2.0}, {0.25}};
  const float grads[3][4] = {{0.1f, -0.2f, 0.3f, 0.0f}, {0.05f, 0.2f, -0.1f, 1.0f}, {-0.3f, 0.0f, 0.1f, 0.5f}};
  for (int t = 1; t <= 3; ++t) {
    at::Tensor g = at::tensor(std::vector<float>(grads[t - 1], grads[t - 1] + 4));
    adamw_step_flat(param, g, m, v, /*decay_numel=*/2, t, h);
    for (int i = 0; i < 4; ++i) ref[i].step(grads[t - 1][i], t, h, i < 2);
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(param[i].item<double>(), ref[i].p, 1e-6) << i;
}

// The step runs chunk by chunk (its temporary is a chunk, not the buffer):
// any chunking, including one that splits the decayed prefix, gives the
// bits of a single pass.
TEST(FlatAdamW, ChunkedStepsGiveTheBitsOfOnePass) {
  const AdamWHyper h{3e-3, 0.9, 0.95, 1e-8, 0.1};
  const int64_t n = 10007, decay = 6001;
  at::manual_seed(7);
  const at::Tensor p0 = at::randn({n}), m0 = at::randn({n}) * 0.1, v0 = at::rand({n}) * 0.01;
  at::Tensor whole_p = p0.clone(), whole_m = m0.clone(), whole_v = v0.clone();
  for (int64_t t = 1; t <= 3; ++t) {
    const at::Tensor g = at::randn({n});
    adamw_step_flat(whole_p, g, whole_m, whole_v, decay, t, h, /*chunk_numel=*/n);
  }
  for (int64_t chunk : {1000, 4096, 6001, 9999}) {
    at::manual_seed(7);
    at::randn({n}), at::randn({n}), at::rand({n});  // the same generator state as above
    at::Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
    for (int64_t t = 1; t <= 3; ++t) {
      const at::Tensor g = at::randn({n});
      adamw_step_flat(p, g, m, v, decay, t, h, chunk);
    }
    EXPECT_TRUE(at::equal(p, whole_p)) << "chunk " << chunk;
    EXPECT_TRUE(at::equal(m, whole_m)) << "chunk " << chunk;
    EXPECT_TRUE(at::equal(v, whole_v)) << "chunk " << chunk;
  }
}

// A CUDA rank's step: ATen's fused AdamW over the decayed prefix and the
// rest, run here on CPU tensors. It computes the single-tensor step's
// function (another rounding order) and decays only the prefix.
TEST(FlatAdamW, TheFusedStepOfACudaRankMatchesTheSingleTensorStep) {
  const AdamWHyper h{3e-3, 0.9, 0.95, 1e-8, 0.1};
  const int64_t n = 10007, decay = 6001;
  at::manual_seed(11);
  const at::Tensor p0 = at::randn({n}), m0 = at::randn({n}) * 0.1, v0 = at::rand({n}) * 0.01;
  at::Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
  at::Tensor fp = p0.clone(), fm = m0.clone(), fv = v0.clone();
  for (int64_t t = 1; t <= 5; ++t) {
    const at::Tensor g = at::randn({n});
    adamw_step_flat(p, g, m, v, decay, t, h);
    accel::model::adamw_step_fused_flat(fp, g, fm, fv, decay, t, h);
  }
  EXPECT_LT((fp - p).abs().max().item<double>(), 1e-6);
  EXPECT_LT((fm - m).abs().max().item<double>(), 1e-6);
  EXPECT_LT((fv - v).abs().max().item<double>(), 1e-6);
  // The parameters moved (a step that did nothing would pass the above).
  EXPECT_GT((fp - p0).abs().max().item<double>(), 1e-3);
  // Without decay on the prefix the result differs there: the regions are applied as given.
  at::Tensor np = p0.clone(), nm = m0.clone(), nv = v0.clone();
  accel::model::adamw_step_fused_flat(np, at::zeros({n}), nm, nv, 0, 1, h);
  at::Tensor dp = p0.clone(), dm = m0.clone(), dv = v0.clone();
  accel::model::adamw_step_fused_flat(dp, at::zeros({n}), dm, dv, decay, 1, h);
  EXPECT_TRUE(at::equal(np.narrow(0, decay, n - decay), dp.narrow(0, decay, n - decay)));
  EXPECT_FALSE(at::equal(np.narrow(0, 0, decay), dp.narrow(0, 0, decay)));
}

// A skip decided on the device: the fused kernel (a CUDA rank's) changes
// nothing when found_inf holds, and steps as without it when it does not.
TEST(FlatAdamW, TheFusedStepChangesNothingWhenFoundInfHolds) {
  const AdamWHyper h{3e-3, 0.9, 0.95, 1e-8, 0.1};
  at::manual_seed(5);
  const at::Tensor p0 = at::randn({257}), m0 = at::randn({257}) * 0.1, v0 = at::rand({257}) * 0.01;
  const at::Tensor g = at::randn({257});
  at::Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
  accel::model::adamw_step_fused_flat(p, g, m, v, 100, 3, h, at::ones({}));
  EXPECT_TRUE(at::equal(p, p0) && at::equal(m, m0) && at::equal(v, v0));
  accel::model::adamw_step_fused_flat(p, g, m, v, 100, 3, h, at::full({}, 2.0f));  // any non-zero value skips
  EXPECT_TRUE(at::equal(p, p0) && at::equal(m, m0) && at::equal(v, v0));
  at::Tensor rp = p0.clone(), rm = m0.clone(), rv = v0.clone();
  accel::model::adamw_step_fused_flat(p, g, m, v, 100, 3, h, at::zeros({}));
  accel::model::adamw_step_fused_flat(rp, g, rm, rv, 100, 3, h);
  EXPECT_TRUE(at::equal(p, rp) && at::equal(m, rm) && at::equal(v, rv));
  EXPECT_FALSE(at::equal(p, p0));
}

// FlatAdamW::step with a skip verdict: nothing moves, and the count is the
// caller's (count_step) in either case.
TEST(FlatAdamW, ASkippedStepChangesNoUnit) {
  accel::model::ParamSpec spec;
  spec.name = "w";
  spec.shape = {3};
  accel::model::Unit unit("u", accel::model::UnitKind::block, {spec});
  unit.flat_params().copy_(at::tensor({1.0f, -2.0f, 3.0f}));
  unit.flat_grads().copy_(at::tensor({0.5f, 0.5f, -0.5f}));
  std::vector<accel::model::Unit> units;
  units.push_back(std::move(unit));
  FlatAdamW adamw(units);
  const at::Tensor before = units[0].flat_params().clone();
  accel::OptimizerOptions o;
  adamw.step(units, o, 1e-2, at::ones({}, at::kBool));
  EXPECT_TRUE(at::equal(units[0].flat_params(), before));
  EXPECT_TRUE(at::equal(adamw.exp_avg()[0], at::zeros({3})));
  EXPECT_EQ(adamw.step_count(), 0);
  adamw.step(units, o, 1e-2, at::zeros({}, at::kBool));
  EXPECT_FALSE(at::equal(units[0].flat_params(), before));
  EXPECT_EQ(adamw.step_count(), 0);
  adamw.count_step();
  EXPECT_EQ(adamw.step_count(), 1);
}

// The step's values: one read brings the averaged loss, the two flags, the
// skip verdict and the norm; a non-finite loss or an overflow skips.
TEST(StepValues, OneReadBringsEverythingAndSkipsOnANonFiniteLossOrOverflow) {
  StepValues values(at::tensor({2.5, 0.5, 1.0}, at::kDouble));
  EXPECT_FALSE(values.is_read());
  values.skip_if(at::Tensor());  // no verdict: nothing
  values.set_grad_norm(at::tensor(3.0f));
  values.read(nullptr);
  EXPECT_TRUE(values.is_read());
  EXPECT_DOUBLE_EQ(values.loss(), 2.5);
  EXPECT_DOUBLE_EQ(values.stop_mean(), 0.5);
  EXPECT_DOUBLE_EQ(values.written_mean(), 1.0);
  EXPECT_FALSE(values.skipped());
  EXPECT_DOUBLE_EQ(values.grad_norm(), 3.0);
  EXPECT_THROW(values.skip_if(at::ones({}, at::kBool)), std::logic_error);

  StepValues nan_loss(at::tensor({NAN, 0.0, 0.0}, at::kDouble));
  EXPECT_TRUE(nan_loss.skip().item<bool>());
  nan_loss.read(nullptr);
  EXPECT_TRUE(nan_loss.skipped());
  EXPECT_FALSE(nan_loss.has_grad_norm());

  StepValues overflow(at::tensor({1.0, 0.0, 0.0}, at::kDouble));
  overflow.skip_if(at::zeros({}, at::kBool));
  EXPECT_FALSE(overflow.skip().item<bool>());
  overflow.skip_if(at::ones({}, at::kBool));
  overflow.read(nullptr);
  EXPECT_TRUE(overflow.skipped());

  // A norm given after an early read is read on its own; a host norm is not read.
  StepValues early(at::tensor({1.0, 0.0, 1.0}, at::kDouble));
  early.read(nullptr);
  early.set_grad_norm(at::tensor(4.0, at::kDouble));
  early.read(nullptr);
  EXPECT_DOUBLE_EQ(early.grad_norm(), 4.0);
  early.set_grad_norm(5.0);
  early.read(nullptr);
  EXPECT_DOUBLE_EQ(early.grad_norm(), 5.0);
  EXPECT_THROW(StepValues(at::tensor({1.0f, 0.0f, 0.0f})), std::logic_error);
}

TEST(LrSchedule, WarmupThenDecayToMinLr) {
  accel::OptimizerOptions o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 4;
  o.schedule = accel::LrScheduleKind::cosine;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 0, 20), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 3, 20), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 4, 20), 1.0);
  EXPECT_NEAR(learning_rate_at(o, 19, 20), 0.1, 1e-12);
  // 21 steps: decay over steps 4..20, halfway (cos = 0) at step 12.
  EXPECT_NEAR(learning_rate_at(o, 12, 21), 0.55, 1e-12);
  o.schedule = accel::LrScheduleKind::linear;
  EXPECT_NEAR(learning_rate_at(o, 19, 20), 0.1, 1e-12);
  o.decay_steps = 40;  // the horizon wins over the run's length
  EXPECT_GT(learning_rate_at(o, 19, 20), 0.5);
  o.decay_steps = 0;
  o.schedule = accel::LrScheduleKind::constant;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 19, 20), 1.0);
}

TEST(GradClip, ScalesOnlyAboveTheThreshold) {
  std::vector<at::Tensor> grads = {at::tensor({3.0f}), at::tensor({4.0f, 0.0f})};
  EXPECT_NEAR(global_grad_norm(grads).item<double>(), 5.0, 1e-9);
  EXPECT_NEAR(clip_grad_norm(grads, 10.0).item<double>(), 5.0, 1e-9);
  EXPECT_FLOAT_EQ(grads[0].item<float>(), 3.0f);
  EXPECT_NEAR(clip_grad_norm(grads, 1.0).item<double>(), 5.0, 1e-9);
  EXPECT_NEAR(global_grad_norm(grads).item<double>(), 1.0, 1e-5);
  EXPECT_EQ(global_grad_norm({}).item<double>(), 0.0);
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  accel::GradScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 2;
  LossScaler scaler(o, /*active=*/true);
  std::vector<at::Tensor> grads = {at::tensor({8.0f, 16.0f})};
  EXPECT_FALSE(scaler.unscale_and_check(grads));
  EXPECT_FLOAT_EQ(grads[0][1].item<float>(), 2.0f);
  scaler.update(false);
  scaler.update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 16);
  std::vector<at::Tensor> bad = {at::tensor({1.0f, INFINITY})};
  EXPECT_TRUE(scaler.unscale_and_check(bad));
  scaler.update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  // The verdict on the device, unread: what a step hands its optimizer.
  std::vector<at::Tensor> again = {at::tensor({1.0f, NAN})};
  const at::Tensor found_inf = scaler.unscale(again);
  ASSERT_TRUE(found_inf.defined());
  EXPECT_EQ(found_inf.scalar_type(), at::kBool);
  EXPECT_TRUE(found_inf.item<bool>());

  LossScaler inactive(o, /*active=*/false);
  EXPECT_FALSE(inactive.unscale(bad).defined());
  EXPECT_DOUBLE_EQ(inactive.scale(), 1.0);
  EXPECT_FALSE(inactive.unscale_and_check(bad));
}

// DeepSpeed's fp16.hysteresis and fp16.min_loss_scale (--grad_scaler.hysteresis,
// --grad_scaler.min_scale): before them an overflow always halved the scale
// and nothing bounded it below.
TEST(LossScaler, HysteresisAbsorbsOverflowsUntilTheNthAndTheFloorHolds) {
  accel::GradScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  o.hysteresis = 2;
  o.min_scale = 2;
  LossScaler scaler(o, /*active=*/true);
  scaler.update(true);  // the first overflow is absorbed: skipped, scale kept
  EXPECT_DOUBLE_EQ(scaler.scale(), 8);
  scaler.update(true);  // the second backs off
  EXPECT_DOUBLE_EQ(scaler.scale(), 4);
  scaler.update(true);  // hysteresis spent: every overflow backs off, down to the floor
  EXPECT_DOUBLE_EQ(scaler.scale(), 2);
  scaler.update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 2);
  for (int i = 0; i < 3; ++i) scaler.update(false);  // a growth refills the hysteresis
  EXPECT_DOUBLE_EQ(scaler.scale(), 4);
  scaler.update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 4);
  scaler.update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 2);
}

}  // namespace
