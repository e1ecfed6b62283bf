// shard_store.h — the state a sharding plugin owns per unit: for a sharded unit this
// rank's fp32 slice of its parameters (the master weights), of its gradients
// and of the AdamW moments; for a host-owned unit (ignored, or NO_SHARD) the
// full AdamW moments beside the host's buffers.
//
// Layout (sdk/flat_shard.hpp): a unit's flat buffer of numel elements is
// padded to a multiple of its sharding group's size S and cut into S equal
// shards; the group's rank i keeps shard i. The group is SHARDING, except
// with expert parallelism for a unit holding expert slices (expert_slices.h):
// EXPERT_DATA, the ranks holding the same experts (DeepSpeed's expert data
// parallel group). Such a unit's shard is equal over EXPERT outside its
// expert slices; GradReducer completes those elements' average there. Invariants: every shard buffer has
// shard_numel elements, the padding tail of master and gradient shards is
// zero (so collectives over the padded buffer move zeros), and shards live in
// pinned host memory with cpu_offload, else on the device. Allocated with
// their memory categories (PARAMS, GRADS, OPTIMIZER) so the host's per-category
// peaks measure the theory. Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/flat_shard.hpp>
#include <accel/sdk/tensor.hpp>
#include <accel/sdk/kernels.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "expert_slices.h"
#include "sharding_options.h"
#include "model_layout.h"
#include "gather_plan.h"
#include "moment_swap.h"
#include "scaled_moments.h"

namespace accel::sharding {

struct ShardedUnit {
  UnitLayout layout;
  sdk::FlatShardLayout shards;  // numel over `group`
  AccelGroup* group = nullptr;  // the ranks the shards span: SHARDING, or EXPERT_DATA (over_expert_data)
  int32_t shard_index = 0;      // this rank's index in `group`
  bool over_expert_data = false;  // holds expert slices, sharded over EXPERT_DATA (shard_store.h)
  sdk::FlatRange real;          // this shard's real elements, in unit coordinates
  sdk::Buffer master;           // fp32 parameters, shard_numel
  sdk::Buffer grad;             // fp32 gradients, shard_numel
  sdk::Buffer exp_avg;          // AdamW first moment, shard_numel (empty: in the swap file); fp32, or
                                // the precision policy's scaled format (scaled_moments.h)
  sdk::Buffer exp_avg_sq;       // AdamW second moment, likewise
  std::vector<float> exp_avg_scale;     // scaled moments: per parameter of `layout` (else empty)
  std::vector<float> exp_avg_sq_scale;
  bool grad_is_zero = true;     // `grad` holds the zeros of zero_grads (nothing reduced into it yet)
  bool host_params = false;     // the full parameters are the host's (ZeRO-1/2): refreshed after each step
  bool host_grads = false;      // the full gradients are the host's (ZeRO-1): reduced, never released
  bool master_swapped = false;  // the master shard lives in the NVMe swap (`master` empty; read_masters)
  // ZeRO-1/2 over fp32 host parameters on the device with no padding:
  // `master` is not allocated; the master shard is this rank's slice of the
  // host's own parameters (as Megatron's distributed optimizer steps the fp32
  // parameters in place: 4 bytes per parameter plus the 8/d of AdamW state,
  // not 4 + 4/d). ZeRO-1's gradient shard is likewise a slice of the host's
  // gradients (`grad` not allocated); ZeRO-2's is its own (the host's are
  // released after each unit's reduce-scatter).
  std::unique_ptr<sdk::FlatView> master_view;
  std::unique_ptr<sdk::FlatView> grad_view;

  int64_t shard_begin() const { return shards.shard(shard_index).begin; }
  const DLTensor& master_tensor() const { return master_view ? *master_view->get() : master.tensor(); }
  // The master shard, or null while it lives in the NVMe swap (master_swapped).
  const DLTensor* master_or_null() const { return master_view ? master_view->get() : master.tensor_or_null(); }
  const DLTensor& grad_tensor() const { return grad_view ? *grad_view->get() : grad.tensor(); }
};

struct ReplicatedUnit {
  UnitLayout layout;
  sdk::Buffer exp_avg;     // numel; fp32 or scaled, as ShardedUnit's
  sdk::Buffer exp_avg_sq;  // numel
  std::vector<float> exp_avg_scale;  // scaled moments: per parameter
  std::vector<float> exp_avg_sq_scale;
};

class ShardStore {
 public:
  // Allocates every unit's state and, for sharded units, cuts this rank's
  // master shard from the initial weights. `managed` is what the plugin took
  // over of each sharded unit (ACCEL_STORAGE_* bits): without PARAMS the
  // host's full parameters are sliced (broadcast first from world rank 0
  // when sync_module_states); with them, one unit at a time: materialise
  // (FROM_SEED; with cpu_ram_efficient_loading only on world rank 0, the
  // others UNDEFINED; with it or init_shard_slices each rank's slice alone
  // through init_range, where the host has it), broadcast from rank 0 over WORLD when
  // sync_module_states, copy the slice, release. Host-owned units are
  // broadcast in place when sync_module_states. `units` may be a subset of
  // the model's (a pipeline stage holds its own): the rest have no state.
  // sync_module_states broadcasts each unit over `world`: it needs every
  // rank to hold the same units (no pipeline stages). Sharded units span
  // `sharding`, those holding expert slices EXPERT_DATA when `experts` is
  // active (it must then equal the data group: Error otherwise).
  ShardStore(const sdk::Kernels& ops, const ShardingOptions& config, const std::vector<UnitLayout>& units,
             const GatherPlan& plan, AccelGroup* sharding, AccelGroup* world, int32_t world_rank,
             uint32_t managed = ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS, const ExpertGroups& experts = {});

  // nullptr when the unit is not of that kind.
  ShardedUnit* sharded(int32_t unit) { return sharded_.at(static_cast<size_t>(unit)).get(); }
  ReplicatedUnit* replicated(int32_t unit) { return replicated_.at(static_cast<size_t>(unit)).get(); }
  int32_t num_units() const { return static_cast<int32_t>(sharded_.size()); }
  // Unit `unit`'s layout, or null when this store holds no state of it.
  // Whether some sharded unit spans EXPERT_DATA.
  bool any_over_expert_data() const;
  const UnitLayout* layout(int32_t unit) const {
    if (const auto& s = sharded_.at(static_cast<size_t>(unit))) return &s->layout;
    if (const auto& r = replicated_.at(static_cast<size_t>(unit))) return &r->layout;
    return nullptr;
  }

  // Zeroes every gradient shard (step begin: accumulation starts afresh).
  void zero_grads(const sdk::Kernels& ops);

  // With ShardingOptions::moment_swap_dir, the sharded units' AdamW moments
  // live in its file (their exp_avg / exp_avg_sq buffers stay empty); else
  // nullptr.
  MomentSwap* swap() { return swap_.get(); }
  // Whether the sharded units' partitions live in host memory and step
  // there (ShardingOptions::cpu_offload).
  bool host_resident() const { return host_resident_; }
  // The moments' storage formats (the precision policy; fp32 by default).
  const MomentFormats& moment_formats() const { return formats_; }

 private:
  void make_swap(const sdk::Kernels& ops, const ShardingOptions& config, std::vector<int64_t> numel,
                 int32_t world_rank);

  bool host_resident_ = false;
  MomentFormats formats_;
  std::vector<std::unique_ptr<ShardedUnit>> sharded_;
  std::vector<std::unique_ptr<ReplicatedUnit>> replicated_;
  std::vector<sdk::Buffer> swap_buffers_;  // outlive swap_ (declared first)
  std::unique_ptr<MomentSwap> swap_;
};

}  // namespace accel::sharding
