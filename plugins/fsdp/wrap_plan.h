// wrap_plan.h — which units fsdp shards, and how they are grouped into wrap
// groups (auto_wrap_policy): the sets of units gathered and released together.
//
// A wrap group is a set of units. In forward its first unit is the lowest
// index and its last the highest; in backward the reverse. Invariants of a
// WrapPlan: groups are disjoint, each non-empty with ascending units, ordered
// by their first forward unit; every sharded unit is in exactly one group;
// units tied to each other (the head reads the embedding's storage) are in
// the same group, as PyTorch FSDP requires of shared parameters; a unit in no
// group (group_of == -1) is host-owned and replicated. Pure functions of the
// model layout: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "fsdp_config.h"
#include "sharding/gather_plan.h"
#include "sharding/model_layout.h"

namespace accel::fsdp {

// fsdp's wrap groups are the shared machinery's gather groups.
using WrapGroup = sharding::GatherGroup;
using WrapPlan = sharding::GatherPlan;
using sharding::UnitLayout;

// Units whose name `ignored` fully matches (std::regex_match), widened to the
// units tied to them (a tie cannot cross the sharded/host-owned boundary).
// `widened` (optional) receives the names added by ties.
std::vector<bool> select_ignored(const std::vector<UnitLayout>& units, const std::optional<std::regex>& ignored,
                                 std::vector<std::string>* widened = nullptr);

// Groups the units with `sharded[u]` per the policy:
//  - transformer_based: each unit matching one of `names` (a unit kind —
//    embedding, block, head — or a unit-name prefix; default: block) is a
//    group; the other units form one root group;
//  - size_based: consecutive units until a group holds >= min_num_params;
//  - no_wrap: all units in one group;
// then tied units' groups are merged. Throws Error when a name matches no
// unit.
WrapPlan plan_wrap_groups(const std::vector<UnitLayout>& units, const std::vector<bool>& sharded, WrapPolicy policy,
                          const std::vector<std::string>& names, int64_t min_num_params);

}  // namespace accel::fsdp
