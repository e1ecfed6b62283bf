// sharding_logic_test.cpp — the shared sharding machinery's pure logic: the
// decay runs the sharded AdamW steps, and the gather plan's prefetch order.
// (The collectives, stores and schedules run under python.fsdp and
// python.deepspeed_zero.)
#include <gtest/gtest.h>

#include <vector>

#include "../gather_plan.h"
#include "../sharded_optimizer.h"

namespace accel::sharding {
namespace {

// --------------------------------------------------------------- decay runs

TEST(DecayRuns, ShardCutsParametersAndMergesEqualDecay) {
  std::vector<ParamLayout> params(4);
  params[0] = ParamLayout{"w", ACCEL_PARAM_LINEAR_WEIGHT, 0, 10, {2, 5}};
  params[1] = ParamLayout{"e", ACCEL_PARAM_EMBEDDING, 10, 10, {10}};
  params[2] = ParamLayout{"b", ACCEL_PARAM_BIAS, 20, 5, {5}};
  params[3] = ParamLayout{"n", ACCEL_PARAM_NORM, 25, 5, {5}};
  const uint32_t no_decay = (1u << ACCEL_PARAM_BIAS) | (1u << ACCEL_PARAM_NORM);
  const std::vector<DecayRun> a = decay_runs(params, sdk::FlatRange{5, 27}, no_decay);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].begin, 0);
  EXPECT_EQ(a[0].count, 15);
  EXPECT_TRUE(a[0].decay);
  EXPECT_EQ(a[1].begin, 15);
  EXPECT_EQ(a[1].count, 7);
  EXPECT_FALSE(a[1].decay);
  const std::vector<DecayRun> b = decay_runs(params, sdk::FlatRange{22, 30}, no_decay);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].count, 8);
  EXPECT_FALSE(b[0].decay);
  EXPECT_TRUE(decay_runs(params, sdk::FlatRange{30, 32}, no_decay).empty());  // padding only
  EXPECT_EQ(decay_runs(params, sdk::FlatRange{0, 30}, 0).size(), 1u);         // everything decays
}

// ------------------------------------------------------------- gather plan

// units 0..4; groups {0, 4} (tied ends), {1}, {2}; unit 3 host-owned.
GatherPlan example_plan() {
  GatherPlan plan;
  plan.groups = {GatherGroup{{0, 4}}, GatherGroup{{1}}, GatherGroup{{2}}};
  plan.group_of = {0, 1, 2, -1, 0};
  return plan;
}

TEST(GatherPlan, NextGroupSkipsItsOwnAndHostOwnedUnits) {
  const GatherPlan plan = example_plan();
  EXPECT_TRUE(plan.sharded(2));
  EXPECT_FALSE(plan.sharded(3));
  EXPECT_EQ(plan.next_in_forward(0), 1);
  EXPECT_EQ(plan.next_in_forward(1), 2);
  EXPECT_EQ(plan.next_in_forward(2), 0);   // unit 4, past the host-owned unit 3
  EXPECT_EQ(plan.next_in_forward(4), -1);  // the last unit
  EXPECT_EQ(plan.next_in_backward(4), 2);  // backward runs 4, 3, 2, ...
  EXPECT_EQ(plan.next_in_backward(1), 0);
  EXPECT_EQ(plan.next_in_backward(0), -1);  // the first unit
}

}  // namespace
}  // namespace accel::sharding
