// sharded_optimizer.h — gradient clipping and the AdamW step over what the plugin
// owns: the fp32 shards of sharded units, and the host-owned full buffers of
// ignored / NO_SHARD units (the host's own optimizer does not run once a
// plugin takes the step over, so the plugin steps those too, with its own moments).
//
// Clipping: the squared norm of this rank's gradient shards, plus the
// host-owned gradients counted on sharding rank 0 only (every rank holds
// them whole), summed over SHARDING (not REPLICA: replicas hold equal
// shards), then clip_scale of everything with the global norm — each element
// counted once, as torch.nn.utils.clip_grad_norm_ over the whole model.
// AdamW: per unit, the parameters' flat ranges cut to this shard, merged into
// runs of equal weight decay (0 for roles in no_decay_roles), one adamw_step
// per run; the padding is never stepped. Partitions in host memory
// (optimizer offload) step on the fused CpuAdamW (cpu_adamw.h, DeepSpeed's
// DeepSpeedCPUAdam) with the host's --threads workers (one per core of the
// rank's share when 0), the rest on the host's adamw_step kernel service.
// Thread-safety: loop thread only.
#pragma once

#include <accel/accel.h>
#include <accel/sdk/kernels.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu_adamw.h"
#include "expert_slices.h"
#include "shard_store.h"

namespace accel::sharding {

// A run of elements of a unit's flat buffer stepped with one weight decay.
struct DecayRun {
  int64_t begin = 0;  // relative to the stepped buffer's first element
  int64_t count = 0;
  bool decay = true;
};

// The runs of `params` (flat order) restricted to `range` of the unit's flat
// buffer, relative to range.begin, adjacent runs of equal decay merged.
std::vector<DecayRun> decay_runs(const std::vector<ParamLayout>& params, sdk::FlatRange range, uint32_t no_decay_roles);

// Which split parameters a rank counts in the clipping norm besides the
// whole ones (expert_slices.h): tensor-parallel slices, expert slices, or both.
struct CountedSlices {
  bool tensor = true;
  bool experts = true;
};

// The elements of split parameters (tensor-parallel or expert slices, as
// `which` says) within `range`, relative to range.begin, adjacent ones merged.
std::vector<sdk::FlatRange> split_ranges(const std::vector<ParamLayout>& params, sdk::FlatRange range,
                                         CountedSlices which = {});

// The tensor-parallel group the units' split parameters are sliced over
// (megatron); absent (nullptr) when nothing is split.
struct TensorGroup {
  AccelGroup* group = nullptr;
  int32_t rank = 0;
  int32_t size = 1;
};

class ShardedOptimizer {
 public:
  // With a tensor group, the clipping norm also sums over TENSOR: each tensor
  // rank counts its slices of split parameters, tensor rank 0 alone the
  // parameters every tensor rank holds whole (Megatron's norm, each element
  // counted once). With a pipeline group (stages holding different units)
  // it sums over PIPELINE too; tied copies (UnitLayout::tied_copy) are
  // scaled but counted by their owning stage only. With expert groups
  // (expert_slices.h) it sums over EXPERT too: each expert rank counts its
  // expert slices, expert rank 0 alone everything else — unless the
  // sharding group spans the expert groups (more than one rank: ZeRO and
  // FSDP shard over the whole data group), whose sum then covers them. A
  // unit sharded over EXPERT_DATA (shard_store.h) counts its expert slices
  // on every rank and the rest on expert rank 0.
  ShardedOptimizer(const sdk::Kernels& ops, ShardStore& store, AccelGroup* sharding, int32_t sharding_rank,
                   TensorGroup tensor = {}, AccelGroup* pipeline = nullptr, ExpertGroups experts = {});

  void clip_gradients(const AccelClipArgs& args);
  // The fused host step's threads; 0 when partitions step on the device.
  int host_step_threads() const { return cpu_adamw_ ? cpu_adamw_->threads() : 0; }
  void step(const AccelOptimizerStepArgs& args);

 private:
  void step_scaled(const AccelOptimizerStepArgs& args);

  const sdk::Kernels& ops_;
  ShardStore& store_;
  AccelGroup* sharding_;
  int32_t sharding_rank_;
  TensorGroup tensor_;
  AccelGroup* pipeline_;  // null: one stage
  ExpertGroups experts_;
  std::unique_ptr<CpuAdamW> cpu_adamw_;  // host-resident partitions (ShardStore::host_resident)
};

}  // namespace accel::sharding
