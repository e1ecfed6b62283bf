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
#include <string>
#include <vector>

#include "sharding/gather_plan.h"
#include "sharding/model_layout.h"

namespace accel::zero {

sharding::GatherPlan plan_partitions(const std::vector<sharding::UnitLayout>& units, int stage,
                                     int64_t persistence_threshold, int64_t max_reuse_distance);

// The model's hidden size (the embedding's row width), which Accelerate's
// "auto" stage-3 sizes derive from; 0 when there is no embedding.
int64_t hidden_size(const std::vector<sharding::UnitLayout>& units);

// transformer_moe_cls_names: what DeepSpeed's set_z3_leaf_modules does to
// those classes (their parameters gathered together, whatever experts the
// tokens reach) every ZeRO-3 unit here already has, so the option is a
// check: each name must be a mixture-of-experts block class of the model.
// A block unit holding ACCEL_PARAM_EXPERTS parameters is transformers'
// Qwen2MoeSparseMoeBlock when it holds a shared expert, else Mixtral's
// MixtralSparseMoeBlock (moe_block_class; nullptr for other units).
// Returns the units of the named classes; throws Error
// (ACCEL_ERROR_INVALID_ARGUMENT) naming a class the model does not have.
const char* moe_block_class(const sharding::UnitLayout& unit);
std::vector<int32_t> moe_leaf_units(const std::vector<sharding::UnitLayout>& units,
                                    const std::vector<std::string>& class_names);

}  // namespace accel::zero
