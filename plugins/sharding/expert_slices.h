// expert_slices.h — what the sharding machinery needs to know of expert
// parallelism (accel/comm.h, ABI 1.12): the host splits every
// ACCEL_PARAM_EXPERTS parameter along dim 0 over ACCEL_GROUP_EXPERT, so a
// unit's expert slices differ between the ranks of an expert group and are
// equal between the ranks of EXPERT_DATA (those holding the same experts).
// Every other element is equal over the whole data group. Hence:
//   - gradients: expert slices are summed over EXPERT_DATA and divided by
//     the data size (each expert already summed the tokens its expert group
//     sent it); the rest is averaged over DATA (GradReducer);
//   - the clipping norm counts expert slices on every expert rank and sums
//     over EXPERT (ShardedOptimizer);
//   - a checkpoint's expert slices are put by EXPERT_DATA's first rank of
//     each expert group, tensor rank 0 of it (megatron keeps the experts
//     whole on every tensor rank; CheckpointIo);
//   - a sharded unit holding expert slices shards over EXPERT_DATA, not
//     SHARDING (ShardStore): its elements outside the expert slices are
//     then equal over EXPERT, where GradReducer completes their average.
// Plain values. Thread-safety: loop thread only.
#pragma once

#include <accel/accel.h>
#include <accel/sdk/flat_shard.hpp>
#include <accel/sdk/kernels.hpp>

#include <vector>

#include "model_layout.h"

namespace accel::sharding {

struct ExpertGroups {
  AccelGroup* expert = nullptr;       // EXPERT (null: no expert parallelism)
  AccelGroup* expert_data = nullptr;  // EXPERT_DATA
  int32_t rank = 0;                   // in EXPERT
  int32_t size = 1;
  int32_t data_rank = 0;              // in EXPERT_DATA
  int32_t data_size = 1;

  bool active() const { return size > 1; }
};

// The standard groups of a host with expert parallelism (size 1 and null
// groups when the mesh has none, or on a host before ABI 1.12).
ExpertGroups read_expert_groups(const sdk::Kernels& ops);

// A run of adjacent parameters of one kind in a unit's flat buffer: expert
// slices, or parameters equal over the data group.
struct SliceRun {
  sdk::FlatRange range;
  bool experts = false;
};

// Whether `p`'s local tensor is this rank's slice of a layer's experts.
inline bool is_expert_slice(const ParamLayout& p) { return p.role == ACCEL_PARAM_EXPERTS && p.is_split(); }

// `unit`'s parameters in flat order as alternating runs of expert slices
// and of the rest (a unit without expert slices is one run).
std::vector<SliceRun> slice_runs(const UnitLayout& unit);

// Whether any parameter of `unit` is an expert slice.
bool holds_expert_slices(const UnitLayout& unit);
// Whether `unit` holds a mixture of experts' stacked experts, split or not
// (planning reads the layout before the host splits them).
bool holds_experts(const UnitLayout& unit);

}  // namespace accel::sharding
