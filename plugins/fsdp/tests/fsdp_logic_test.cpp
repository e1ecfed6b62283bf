// Unit tests of fsdp's pure logic, no host needed: resolving
// sharding_strategy against reshard_after_forward, the mesh of each strategy,
// option text parsing, ignored units (with ties), wrap groups of every
// auto_wrap_policy on a gpt-tiny-shaped model (embedding and head tied) with
// their forward/backward order, and the weight-decay runs the optimizer
// steps on a shard.
#include <gtest/gtest.h>

#include <optional>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "../fsdp_config.h"
#include "../wrap_plan.h"

namespace accel::fsdp {
namespace {

// ------------------------------------------------------------------ sharding

ShardingChoice resolve(const char* strategy, bool strategy_given, const char* reshard, bool reshard_given,
                       int version = 1) {
  ShardingInputs in;
  in.fsdp_version = version;
  in.sharding_strategy = strategy;
  in.sharding_strategy_given = strategy_given;
  in.reshard_after_forward = reshard;
  in.reshard_after_forward_given = reshard_given;
  return resolve_sharding(in);
}

TEST(ResolveSharding, DefaultsToFullShardReleasingAfterForward) {
  const ShardingChoice c = resolve("FULL_SHARD", false, "true", false);
  EXPECT_EQ(c.strategy, ShardingStrategy::full_shard);
  EXPECT_TRUE(c.reshard_after_forward);
}

TEST(ResolveSharding, StrategyAloneSetsTheReleasePolicy) {
  EXPECT_FALSE(resolve("SHARD_GRAD_OP", true, "true", false).reshard_after_forward);
  EXPECT_TRUE(resolve("HYBRID_SHARD", true, "true", false).reshard_after_forward);
  EXPECT_FALSE(resolve("HYBRID_SHARD_ZERO2", true, "true", false).reshard_after_forward);
  EXPECT_EQ(resolve("NO_SHARD", true, "true", false).strategy, ShardingStrategy::no_shard);
}

TEST(ResolveSharding, BoolAloneIsFsdp2Spelling) {
  EXPECT_EQ(resolve("FULL_SHARD", false, "false", true, 2).strategy, ShardingStrategy::shard_grad_op);
  EXPECT_EQ(resolve("FULL_SHARD", false, "True", true, 2).strategy, ShardingStrategy::full_shard);
}

TEST(ResolveSharding, AgreeingBothAreAccepted) {
  const ShardingChoice c = resolve("HYBRID_SHARD_ZERO2", true, "false", true);
  EXPECT_EQ(c.strategy, ShardingStrategy::hybrid_shard_zero2);
  EXPECT_FALSE(c.reshard_after_forward);
  EXPECT_EQ(resolve("SHARD_GRAD_OP", true, "SHARD_GRAD_OP", true).strategy, ShardingStrategy::shard_grad_op);
}

TEST(ResolveSharding, StrategyNameInReshardAfterForwardWithVersion1) {
  const ShardingChoice c = resolve("FULL_SHARD", false, "HYBRID_SHARD", true);
  EXPECT_EQ(c.strategy, ShardingStrategy::hybrid_shard);
  EXPECT_TRUE(c.reshard_after_forward);
}

TEST(ResolveSharding, ContradictionsAndJunkAreOneLineErrors) {
  for (const auto& [strategy, reshard, version] :
       {std::tuple{"SHARD_GRAD_OP", "true", 1}, std::tuple{"FULL_SHARD", "false", 1},
        std::tuple{"NO_SHARD", "true", 1}, std::tuple{"FULL_SHARD", "SHARD_GRAD_OP", 1}}) {
    try {
      resolve(strategy, true, reshard, true, version);
      ADD_FAILURE() << strategy << " with " << reshard << " was accepted";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      EXPECT_NE(std::string(e.what()).find(strategy), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(resolve("FULL_SHARD", false, "FULL_SHARD", true, 2), sdk::Error);
  EXPECT_THROW(resolve("FULL_SHARD", false, "maybe", true), sdk::Error);
  EXPECT_THROW(resolve("BOGUS", true, "true", false), sdk::Error);
}

TEST(MeshShape, EachStrategy) {
  EXPECT_EQ(mesh_shape(ShardingStrategy::full_shard, 4, 4, 0).sharding_size, 4);
  EXPECT_EQ(mesh_shape(ShardingStrategy::shard_grad_op, 4, 4, 2).replica_size, 1);
  const MeshShape none = mesh_shape(ShardingStrategy::no_shard, 4, 4, 0);
  EXPECT_EQ(none.sharding_size, 1);
  EXPECT_EQ(none.replica_size, 4);
  const MeshShape hybrid = mesh_shape(ShardingStrategy::hybrid_shard, 4, 4, 2);
  EXPECT_EQ(hybrid.sharding_size, 2);
  EXPECT_EQ(hybrid.replica_size, 2);
  const MeshShape local = mesh_shape(ShardingStrategy::hybrid_shard_zero2, 8, 4, 0);
  EXPECT_EQ(local.sharding_size, 4);
  EXPECT_EQ(local.replica_size, 2);
  EXPECT_THROW(mesh_shape(ShardingStrategy::hybrid_shard, 4, 4, 3), sdk::Error);
  EXPECT_THROW(mesh_shape(ShardingStrategy::hybrid_shard, 4, 4, 8), sdk::Error);
}

TEST(OptionText, DtypesAndLists) {
  EXPECT_EQ(parse_dtype("bf16")->code, kDLBfloat);
  EXPECT_EQ(parse_dtype("fp16")->bits, 16);
  EXPECT_FALSE(parse_dtype("fp64"));
  EXPECT_EQ(dtype_label(*parse_dtype("fp32")), "fp32");
  EXPECT_EQ(split_list(" block, head ,,embedding"), (std::vector<std::string>{"block", "head", "embedding"}));
  EXPECT_TRUE(split_list("").empty());
}

// -------------------------------------------------------------- wrap groups

// gpt-tiny: embedding (tied by the head), two blocks, head.
std::vector<UnitLayout> tiny_model(int blocks = 2) {
  std::vector<UnitLayout> units;
  UnitLayout embedding;
  embedding.name = "embedding";
  embedding.kind = ACCEL_UNIT_EMBEDDING;
  embedding.numel = 20480;
  units.push_back(embedding);
  for (int b = 0; b < blocks; ++b) {
    UnitLayout block;
    block.name = "block." + std::to_string(b);
    block.kind = ACCEL_UNIT_BLOCK;
    block.numel = 49984;
    units.push_back(block);
  }
  UnitLayout head;
  head.name = "head";
  head.kind = ACCEL_UNIT_HEAD;
  head.numel = 128;
  head.tied_units = {0};
  units.push_back(head);
  for (size_t i = 0; i < units.size(); ++i) units[i].index = static_cast<int32_t>(i);
  return units;
}

std::vector<std::vector<int32_t>> groups_of(const WrapPlan& plan) {
  std::vector<std::vector<int32_t>> out;
  for (const WrapGroup& g : plan.groups) out.push_back(g.units);
  return out;
}

using Groups = std::vector<std::vector<int32_t>>;

TEST(WrapPlan, TransformerBasedWrapsEachBlockAndKeepsTiedUnitsTogether) {
  const std::vector<UnitLayout> units = tiny_model();
  const WrapPlan plan = plan_wrap_groups(units, std::vector<bool>(4, true), WrapPolicy::transformer_based, {}, 0);
  EXPECT_EQ(groups_of(plan), (Groups{{0, 3}, {1}, {2}}));
  EXPECT_EQ(plan.group_of, (std::vector<int32_t>{0, 1, 2, 0}));
  // Forward: root (embedding .. head), block.0, block.1, root again;
  // backward: root (from the head), block.1, block.0, root again.
  EXPECT_EQ(plan.next_in_forward(0), 1);
  EXPECT_EQ(plan.next_in_forward(1), 2);
  EXPECT_EQ(plan.next_in_forward(2), 0);
  EXPECT_EQ(plan.next_in_forward(3), -1);
  EXPECT_EQ(plan.next_in_backward(3), 2);
  EXPECT_EQ(plan.next_in_backward(2), 1);
  EXPECT_EQ(plan.next_in_backward(1), 0);
  EXPECT_EQ(plan.next_in_backward(0), -1);  // the root's last backward: nothing after it
  EXPECT_EQ(plan.groups[0].first_backward(), 3);
  EXPECT_EQ(plan.groups[0].last_backward(), 0);
}

TEST(WrapPlan, TransformerNamesAreKindsOrNamePrefixes) {
  const std::vector<UnitLayout> units = tiny_model();
  const std::vector<bool> all(4, true);
  const WrapPlan split = plan_wrap_groups(units, all, WrapPolicy::transformer_based, {"block.1"}, 0);
  EXPECT_EQ(groups_of(split), (Groups{{0, 1, 3}, {2}}));
  EXPECT_EQ(split.next_in_forward(0), 1);   // skips block.0, in the first group
  EXPECT_EQ(split.next_in_backward(3), 1);
  EXPECT_EQ(split.next_in_backward(1), -1);
  // Wrapping the embedding alone still merges it with the head that reads it.
  EXPECT_EQ(groups_of(plan_wrap_groups(units, all, WrapPolicy::transformer_based, {"embedding", "block"}, 0)),
            (Groups{{0, 3}, {1}, {2}}));
  EXPECT_THROW(plan_wrap_groups(units, all, WrapPolicy::transformer_based, {"GPT2Block"}, 0), sdk::Error);
  // A name prefix ends at a '.': "block.1" names block.1, not block.10.
  const std::vector<UnitLayout> twelve = tiny_model(12);
  const std::vector<bool> all12(14, true);
  EXPECT_EQ(plan_wrap_groups(twelve, all12, WrapPolicy::transformer_based, {"block.1"}, 0).groups.size(), 2u);
  EXPECT_THROW(plan_wrap_groups(units, all, WrapPolicy::transformer_based, {"bloc"}, 0), sdk::Error);
}

TEST(WrapPlan, SizeBasedFillsConsecutiveUnits) {
  const std::vector<UnitLayout> units = tiny_model();
  const std::vector<bool> all(4, true);
  // 20480 + 49984 closes the first group; block.1 alone reaches 40000; the
  // head left over joins the embedding's group.
  EXPECT_EQ(groups_of(plan_wrap_groups(units, all, WrapPolicy::size_based, {}, 40000)), (Groups{{0, 1, 3}, {2}}));
  EXPECT_EQ(groups_of(plan_wrap_groups(units, all, WrapPolicy::size_based, {}, 100000000)), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(groups_of(plan_wrap_groups(units, all, WrapPolicy::size_based, {}, 1)), (Groups{{0, 3}, {1}, {2}}));
}

TEST(WrapPlan, NoWrapIsOneGroup) {
  const WrapPlan plan = plan_wrap_groups(tiny_model(), std::vector<bool>(4, true), WrapPolicy::no_wrap, {}, 0);
  EXPECT_EQ(groups_of(plan), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(plan.next_in_forward(0), -1);
  EXPECT_EQ(plan.next_in_backward(3), -1);
}

TEST(WrapPlan, IgnoredUnitsAreInNoGroup) {
  const std::vector<UnitLayout> units = tiny_model(3);
  const std::vector<bool> ignored = select_ignored(units, std::regex("block\\.[01]"));
  EXPECT_EQ(ignored, (std::vector<bool>{false, true, true, false, false}));
  std::vector<bool> sharded(ignored.size());
  for (size_t i = 0; i < ignored.size(); ++i) sharded[i] = !ignored[i];
  const WrapPlan plan = plan_wrap_groups(units, sharded, WrapPolicy::transformer_based, {}, 0);
  EXPECT_EQ(groups_of(plan), (Groups{{0, 4}, {3}}));
  EXPECT_FALSE(plan.sharded(1));
  EXPECT_EQ(plan.next_in_backward(4), 1);  // host-owned block.0, block.1 skipped
  EXPECT_EQ(plan.next_in_forward(0), 1);
}

TEST(WrapPlan, IgnoringOneOfTiedUnitsIgnoresBoth) {
  const std::vector<UnitLayout> units = tiny_model();
  std::vector<std::string> widened;
  const std::vector<bool> ignored = select_ignored(units, std::regex("head"), &widened);
  EXPECT_EQ(ignored, (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(widened, (std::vector<std::string>{"embedding"}));
  // Full match: "block" matches no unit ("block.0" is not "block").
  EXPECT_EQ(select_ignored(units, std::regex("block")), std::vector<bool>(4, false));
  EXPECT_EQ(select_ignored(units, std::nullopt), std::vector<bool>(4, false));
}

}  // namespace
}  // namespace accel::fsdp
