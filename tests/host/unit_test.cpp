// Units: parameters are views into one flat buffer, gradients land in the
// flat gradient buffer, decayed parameters come first.
#include <gtest/gtest.h>

#include "host/model/gpt.h"

using namespace accel::model;

namespace {

GptConfig tiny() { return GptConfig{2, 2, 16, 8, 32}; }

TEST(Unit, ParametersAreViewsIntoTheFlatBuffer) {
  GptModel model(tiny());
  for (Unit& unit : model.units()) {
    const float* base = unit.flat_params().data_ptr<float>();
    int64_t total = 0;
    for (const Param& p : unit.params()) {
      EXPECT_EQ(p.value.data_ptr<float>(), base + p.offset) << p.spec.name;
      EXPECT_TRUE(p.value.is_leaf());
      EXPECT_TRUE(p.value.requires_grad());
      total += p.spec.numel();
    }
    EXPECT_EQ(total, unit.numel());
  }
  EXPECT_EQ(model.num_parameters(), count_parameters(tiny()));
}

TEST(Unit, DecayedParametersComeFirst) {
  GptModel model(tiny());
  for (const Unit& unit : model.units()) {
    for (const Param& p : unit.params()) {
      const bool in_decay_range = p.offset + p.spec.numel() <= unit.decay_numel();
      EXPECT_EQ(in_decay_range, p.spec.decays()) << p.spec.name;
    }
  }
  EXPECT_EQ(model.units().back().decay_numel(), 0);  // ln_f only
}

TEST(Unit, BackwardAccumulatesIntoTheFlatGradientBuffer) {
  GptModel model(tiny());
  model.initialise(3);
  const at::Tensor tokens = at::randint(0, 32, {2, 8}, at::kLong);
  model.loss(tokens, tokens).backward();
  for (Unit& unit : model.units()) {
    EXPECT_GT(unit.flat_grads().abs().sum().item<double>(), 0.0) << unit.name();
    for (const Param& p : unit.params()) {
      EXPECT_EQ(p.value.grad().data_ptr<float>(), unit.flat_grads().data_ptr<float>() + p.offset);
    }
  }
  const at::Tensor first = model.units()[1].flat_grads().clone();
  model.loss(tokens, tokens).backward();  // accumulates: twice the gradient
  EXPECT_TRUE(at::allclose(model.units()[1].flat_grads(), 2 * first, 1e-5, 1e-7));
  model.zero_grads();
  EXPECT_EQ(model.units()[1].flat_grads().abs().sum().item<double>(), 0.0);
}

TEST(Unit, ParameterHintsFollowMegatronSplits) {
  GptModel model(tiny());
  const Unit& block = model.units()[1];
  EXPECT_EQ(block.param("h.0.attn.c_attn.weight").spec.hint, ParallelHint::column);
  EXPECT_EQ(block.param("h.0.attn.c_proj.weight").spec.hint, ParallelHint::row);
  EXPECT_EQ(block.param("h.0.ln_1.weight").spec.role, ParamRole::norm);
  EXPECT_EQ(model.units()[0].param("wte.weight").spec.hint, ParallelHint::vocab);
  EXPECT_THROW(block.param("nope"), std::out_of_range);
}

}  // namespace
