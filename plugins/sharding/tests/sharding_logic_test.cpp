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

ParamLayout whole(const char* name, AccelParamRole role, int64_t offset, std::vector<int64_t> shape) {
  ParamLayout p;
  p.name = name;
  p.role = role;
  p.flat_offset = offset;
  p.numel = 1;
  for (int64_t x : shape) p.numel *= x;
  p.global_shape = shape;
  p.local_shape = shape;
  return p;
}

// The local half (dim 0) of a tensor-parallel parameter of `global` shape.
ParamLayout half(const char* name, int64_t offset, std::vector<int64_t> global) {
  std::vector<int64_t> local = global;
  local[0] /= 2;
  ParamLayout p = whole(name, ACCEL_PARAM_LINEAR_WEIGHT, offset, local);
  p.global_shape = global;
  p.split.dim = 0;
  p.split.local_shape = local;
  p.split.global_shape = global;
  return p;
}

TEST(DecayRuns, ShardCutsParametersAndMergesEqualDecay) {
  std::vector<ParamLayout> params(4);
  params[0] = whole("w", ACCEL_PARAM_LINEAR_WEIGHT, 0, {2, 5});
  params[1] = whole("e", ACCEL_PARAM_EMBEDDING, 10, {10});
  params[2] = whole("b", ACCEL_PARAM_BIAS, 20, {5});
  params[3] = whole("n", ACCEL_PARAM_NORM, 25, {5});
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

// The elements a tensor rank other than 0 counts in the clipping norm: its
// slices of split parameters, cut to the range, merged when adjacent.
TEST(SplitRanges, OnlySplitParametersInsideTheRange) {
  std::vector<ParamLayout> params;
  params.push_back(whole("ln", ACCEL_PARAM_NORM, 0, {4}));
  params.push_back(half("fc", 4, {4, 3}));         // local [2, 3]: elements 4..10
  params.push_back(half("fc_b", 10, {4}));         // local [2]: 10..12, adjacent: merged
  params.push_back(whole("proj_b", ACCEL_PARAM_BIAS, 12, {3}));  // 12..15
  params.push_back(half("proj", 15, {2, 2}));      // local [1, 2]: 15..17
  const std::vector<sdk::FlatRange> all = split_ranges(params, sdk::FlatRange{0, 17});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].begin, 4);
  EXPECT_EQ(all[0].end, 12);
  EXPECT_EQ(all[1].begin, 15);
  EXPECT_EQ(all[1].end, 17);
  // A shard [6, 16): relative to its first element.
  const std::vector<sdk::FlatRange> shard = split_ranges(params, sdk::FlatRange{6, 16});
  ASSERT_EQ(shard.size(), 2u);
  EXPECT_EQ(shard[0].begin, 0);
  EXPECT_EQ(shard[0].end, 6);
  EXPECT_EQ(shard[1].begin, 9);
  EXPECT_EQ(shard[1].end, 10);
  EXPECT_TRUE(split_ranges(params, sdk::FlatRange{0, 4}).empty());
}

// Expert parallelism: an expert rank other than 0 counts its expert slices
// only, a tensor rank other than 0 its tensor slices only (expert_slices.h).
TEST(SplitRanges, ExpertSlicesApartFromTensorSlices) {
  std::vector<ParamLayout> params;
  params.push_back(whole("router", ACCEL_PARAM_ROUTER, 0, {4}));
  params.push_back(half("attn", 4, {4, 3}));  // a tensor slice: 4..10
  ParamLayout experts = half("experts", 10, {4, 2});  // an expert slice: 10..14
  experts.role = ACCEL_PARAM_EXPERTS;
  params.push_back(experts);
  EXPECT_TRUE(is_expert_slice(params[2]));
  EXPECT_FALSE(is_expert_slice(params[1]));
  EXPECT_TRUE(holds_expert_slices(UnitLayout{0, "block.0", ACCEL_UNIT_BLOCK, 14, 3, {}, params}));
  const std::vector<sdk::FlatRange> both = split_ranges(params, sdk::FlatRange{0, 14});
  ASSERT_EQ(both.size(), 1u);  // adjacent: merged
  EXPECT_EQ(both[0].begin, 4);
  EXPECT_EQ(both[0].end, 14);
  const std::vector<sdk::FlatRange> experts_only = split_ranges(params, sdk::FlatRange{0, 14}, {false, true});
  ASSERT_EQ(experts_only.size(), 1u);
  EXPECT_EQ(experts_only[0].begin, 10);
  EXPECT_EQ(experts_only[0].end, 14);
  const std::vector<sdk::FlatRange> tensor_only = split_ranges(params, sdk::FlatRange{0, 14}, {true, false});
  ASSERT_EQ(tensor_only.size(), 1u);
  EXPECT_EQ(tensor_only[0].end, 10);
  // An expert that is whole (expert size 1) is not a slice.
  params[2].split = sdk::SplitSlice{};
  EXPECT_FALSE(is_expert_slice(params[2]));
}

// The runs a unit over EXPERT_DATA reduces apart (grad_reducer.h): expert
// slices, and everything else, however the parameters interleave.
TEST(SliceRuns, AlternateExpertSlicesAndTheRest) {
  std::vector<ParamLayout> params;
  params.push_back(whole("norm", ACCEL_PARAM_NORM, 0, {4}));
  params.push_back(whole("router", ACCEL_PARAM_ROUTER, 4, {4}));
  ParamLayout gate_up = half("experts.gate_up", 8, {4, 2});  // 8..12
  gate_up.role = ACCEL_PARAM_EXPERTS;
  params.push_back(gate_up);
  ParamLayout down = half("experts.down", 12, {4, 2});  // 12..16
  down.role = ACCEL_PARAM_EXPERTS;
  params.push_back(down);
  params.push_back(whole("shared", ACCEL_PARAM_OTHER, 16, {2}));
  const std::vector<SliceRun> runs = slice_runs(UnitLayout{0, "block.0", ACCEL_UNIT_BLOCK, 18, 5, {}, params});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].range, (sdk::FlatRange{0, 8}));
  EXPECT_FALSE(runs[0].experts);
  EXPECT_EQ(runs[1].range, (sdk::FlatRange{8, 16}));
  EXPECT_TRUE(runs[1].experts);
  EXPECT_EQ(runs[2].range, (sdk::FlatRange{16, 18}));
  EXPECT_FALSE(runs[2].experts);
  // Without expert slices (expert size 1: whole experts) the unit is one run.
  params[2].split = params[3].split = sdk::SplitSlice{};
  const std::vector<SliceRun> one = slice_runs(UnitLayout{0, "block.0", ACCEL_UNIT_BLOCK, 18, 5, {}, params});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].range, (sdk::FlatRange{0, 18}));
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
