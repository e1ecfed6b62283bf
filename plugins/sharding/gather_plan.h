// gather_plan.h — which units the sharding machinery shards, and the groups
// it gathers and releases together (fsdp's wrap groups, ZeRO-3's modules).
//
// A group is a set of units. In forward its first unit is the lowest index
// and its last the highest; in backward the reverse. Invariants of a
// GatherPlan: groups are disjoint, each non-empty with ascending units,
// ordered by their first forward unit; every sharded unit is in exactly one
// group; units tied to each other (the head reads the embedding's storage)
// are in the same group; a unit in no group (group_of == -1) is host-owned
// and replicated. How the groups are chosen is the strategy's (fsdp's
// wrap_plan, deepspeed_zero's zero_plan). Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accel::sharding {

struct GatherGroup {
  std::vector<int32_t> units;        // ascending
  bool keep_until_backward = false;  // not released after forward (reused soon)
  int32_t first_forward() const { return units.front(); }
  int32_t last_forward() const { return units.back(); }
  int32_t first_backward() const { return units.back(); }
  int32_t last_backward() const { return units.front(); }
};

struct GatherPlan {
  std::vector<GatherGroup> groups;  // ordered by first forward unit
  std::vector<int32_t> group_of;    // per unit: its group, or -1 (host-owned)

  bool sharded(int32_t unit) const { return group_of.at(static_cast<size_t>(unit)) >= 0; }
  // The next group forward needs after `unit`: that of the first sharded unit
  // after it in another group (-1: none). What a forward prefetch gathers.
  int32_t next_in_forward(int32_t unit) const {
    const int32_t own = group_of.at(static_cast<size_t>(unit));
    for (size_t v = static_cast<size_t>(unit) + 1; v < group_of.size(); ++v) {
      if (group_of[v] >= 0 && group_of[v] != own) return group_of[v];
    }
    return -1;
  }
  // Likewise for backward, which runs the units in reverse.
  int32_t next_in_backward(int32_t unit) const {
    const int32_t own = group_of.at(static_cast<size_t>(unit));
    for (size_t v = static_cast<size_t>(unit); v-- > 0;) {
      if (group_of[v] >= 0 && group_of[v] != own) return group_of[v];
    }
    return -1;
  }
};

}  // namespace accel::sharding
