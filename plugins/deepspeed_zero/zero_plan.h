// zero_plan.h — what each ZeRO stage partitions, as a gather plan of the
// shared sharding machinery (sharding/gather_plan.h).
//
// Stage 0 partitions nothing (every unit host-owned, gradients all-reduced).
// Stages 1–3 partition every unit over the data-parallel ranks, one group per
// unit, units tied to each other (the head reads the embedding's storage)
// in one group so that their shared gradient is complete before it is
// reduced. Stage 3 only: a group smaller than stage3_param_persistence_
// threshold elements stays whole on every rank (host-owned: DeepSpeed's
// persistent parameters), and a group whose reuse distance — the elements
// of the sharded units after it, which run forward and then backward before
// it is needed again — is below stage3_max_reuse_distance is kept gathered
// from its forward to its backward. Pure function of the layout:
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "sharding/gather_plan.h"
#include "sharding/model_layout.h"

namespace accel::zero {

sharding::GatherPlan plan_partitions(const std::vector<sharding::UnitLayout>& units, int stage,
                                     int64_t persistence_threshold, int64_t max_reuse_distance);

// The model's hidden size (the embedding's row width), which Accelerate's
// "auto" stage-3 sizes derive from; 0 when there is no embedding.
int64_t hidden_size(const std::vector<sharding::UnitLayout>& units);

}  // namespace accel::zero
