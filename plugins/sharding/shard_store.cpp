// shard_store.cpp — allocating and initialising the per-unit state (see
// shard_store.h).
#include "shard_store.h"

#include <accel/sdk/error.hpp>

#include <algorithm>

namespace accel::sharding {

namespace {

// Whether a ZeRO-1/2 unit's master shard can be a slice of the host's fp32
// parameters: no offload (the step runs where the host keeps them), the unit
// a multiple of the group (no padding a slice would run past), fp32 present.
bool views_host_params(const sdk::Kernels& ops, const ShardingOptions& config, const ShardedUnit& unit) {
  const DLDataType fp32{kDLFloat, 32, 1};
  if (config.cpu_offload || unit.shards.padding() != 0 || !accel_dtype_equal(config.param_dtype, fp32)) {
    return false;
  }
  const DLTensor* params = ops.storage(unit.layout.index).params;
  return params != nullptr && accel_dtype_equal(params->dtype, fp32);
}

// Whether a ZeRO-1 unit's gradient shard can also be a slice of the host's
// gradients (ZeRO-2 releases those after the reduce-scatter, so its shards
// are its own): fp32 reduction into fp32 gradients, both present.
bool views_host_grads(const sdk::Kernels& ops, const ShardingOptions& config, const ShardedUnit& unit) {
  const DLDataType fp32{kDLFloat, 32, 1};
  if (!unit.host_grads || !accel_dtype_equal(config.reduce_dtype, fp32)) return false;
  const DLTensor* grads = ops.storage(unit.layout.index).grads;
  return grads != nullptr && accel_dtype_equal(grads->dtype, fp32);
}

// sync_module_states for one unit's full parameters: world rank 0's
// everywhere, except that expert slices come from the first rank holding
// the same experts (each EXPERT_DATA's rank 0).
void broadcast_unit(const sdk::Kernels& ops, AccelGroup* world, const ExpertGroups& experts, const UnitLayout& layout,
                    const DLTensor* full) {
  if (!experts.active() || !holds_expert_slices(layout)) {
    ops.broadcast(world, full, 0, "sharding sync_module_states");
    return;
  }
  for (const SliceRun& run : slice_runs(layout)) {
    const sdk::FlatView part(*full, run.range.begin, run.range.size());
    ops.broadcast(run.experts ? experts.expert_data : world, part.get(), 0,
                  run.experts ? "sharding sync_module_states (experts)" : "sharding sync_module_states");
  }
}

}  // namespace

bool ShardStore::any_over_expert_data() const {
  return std::any_of(sharded_.begin(), sharded_.end(),
                     [](const std::unique_ptr<ShardedUnit>& u) { return u && u->over_expert_data; });
}

ShardStore::ShardStore(const sdk::Kernels& ops, const ShardingOptions& config, const std::vector<UnitLayout>& units,
                       const GatherPlan& plan, AccelGroup* sharding_group, AccelGroup* world, int32_t world_rank,
                       uint32_t managed, const ExpertGroups& experts)
    : host_resident_(config.cpu_offload), formats_(sharding::moment_formats(ops.services().precision_policy())) {
  const DLDataType fp32{kDLFloat, 32, 1};
  // The group a sharded unit's shards span (shard_store.h).
  const sdk::GroupShape sharding = ops.shape(sharding_group);
  const auto over_expert_data = [&](const UnitLayout& layout) {
    return experts.active() && holds_expert_slices(layout);
  };
  const auto shape_of = [&](const UnitLayout& layout) {
    return over_expert_data(layout) ? sdk::GroupShape{experts.data_rank, experts.data_size} : sharding;
  };
  const auto broadcast = [&](const UnitLayout& layout, const DLTensor* full) {
    broadcast_unit(ops, world, experts, layout, full);
  };
  if (formats_.scaled() && !config.moment_swap_dir.empty()) {
    throw sdk::Error(ACCEL_ERROR_UNSUPPORTED,
                     "scaled low-precision AdamW moments (the precision policy: fp8's msamp O2) with the moments "
                     "swapped to NVMe are not built; use opt_level O1, or offload the optimizer to cpu");
  }
  const auto scale_slots = [&](const UnitLayout& layout) {
    return std::vector<float>(formats_.scaled() ? layout.params.size() : 0, 1.0f);
  };
  const AccelMemoryPlace place = config.shard_place();
  // Indexed by unit: `units` may be a subset (a pipeline stage's).
  size_t slots = 0;
  for (const UnitLayout& layout : units) slots = std::max(slots, static_cast<size_t>(layout.index) + 1);
  sharded_.resize(slots);
  replicated_.resize(slots);
  if (!config.moment_swap_dir.empty()) {
    // The swap first: with masters, each unit's is written as soon as it is cut.
    std::vector<int64_t> swap_numel(slots, 0);
    for (const UnitLayout& layout : units) {
      if (plan.sharded(layout.index)) {
        const sdk::FlatShardLayout shards(layout.numel, shape_of(layout).size);
        swap_numel[static_cast<size_t>(layout.index)] = shards.shard_numel();
      }
    }
    make_swap(ops, config, std::move(swap_numel), world_rank);
  }
  // A unit whose master is cut: with masters swapped (and the parameters
  // the plugin's), it moves to the file now, so the initial weights never
  // sit in host memory whole.
  const auto keep = [&](std::unique_ptr<ShardedUnit> unit) {
    if (swap_ && swap_->holds_masters() && !unit->host_params && swap_->swapped(unit->layout.index)) {
      ops.synchronize();
      swap_->write_masters(unit->layout.index, static_cast<const float*>(unit->master.tensor().data));
      unit->master = sdk::Buffer{};
      unit->master_swapped = true;
    }
    sharded_[static_cast<size_t>(unit->layout.index)] = std::move(unit);
  };
  for (const UnitLayout& layout : units) {
    const auto index = static_cast<size_t>(layout.index);
    if (!plan.sharded(layout.index)) {
      auto unit = std::make_unique<ReplicatedUnit>();
      unit->layout = layout;
      unit->exp_avg = ops.allocate(ACCEL_MEMORY_OPTIMIZER, formats_.exp_avg, layout.numel, ACCEL_MEMORY_DEVICE,
                                   true, "sharding exp_avg (replicated)");
      unit->exp_avg_sq = ops.allocate(ACCEL_MEMORY_OPTIMIZER, formats_.exp_avg_sq, layout.numel, ACCEL_MEMORY_DEVICE,
                                      true, "sharding exp_avg_sq (replicated)");
      unit->exp_avg_scale = scale_slots(layout);
      unit->exp_avg_sq_scale = scale_slots(layout);
      if (config.sync_module_states) broadcast(layout, ops.storage(layout.index).params);
      replicated_[index] = std::move(unit);
      continue;
    }
    auto unit = std::make_unique<ShardedUnit>();
    unit->layout = layout;
    const sdk::GroupShape shape = shape_of(layout);
    unit->over_expert_data = over_expert_data(layout);
    if (unit->over_expert_data && sharding.size != experts.size * experts.data_size) {
      throw sdk::Error(ACCEL_ERROR_UNSUPPORTED,
                       "unit " + layout.name + " holds experts and is sharded, but the sharding group (" +
                           std::to_string(sharding.size) + " ranks) is not the data group (" +
                           std::to_string(experts.size * experts.data_size) +
                           "): expert units shard over EXPERT_DATA only beside a sharding group of every data rank");
    }
    unit->group = unit->over_expert_data ? experts.expert_data : sharding_group;
    unit->shards = sdk::FlatShardLayout(layout.numel, shape.size);
    unit->shard_index = shape.rank;
    unit->real = unit->shards.real_part(shape.rank);
    unit->host_params = (managed & ACCEL_STORAGE_PARAMS) == 0;
    unit->host_grads = (managed & ACCEL_STORAGE_GRADS) == 0;
    const int64_t n = unit->shards.shard_numel();
    if (config.moment_swap_dir.empty()) {
      unit->exp_avg = ops.allocate(ACCEL_MEMORY_OPTIMIZER, formats_.exp_avg, n, place, true, "sharding exp_avg shard");
      unit->exp_avg_sq =
          ops.allocate(ACCEL_MEMORY_OPTIMIZER, formats_.exp_avg_sq, n, place, true, "sharding exp_avg_sq shard");
      unit->exp_avg_scale = scale_slots(layout);
      unit->exp_avg_sq_scale = scale_slots(layout);
    }  // else the moments live in the swap file
    if (unit->host_params && views_host_params(ops, config, *unit)) {
      // The partition is stepped in place in the host's parameters and
      // published by an in-place all_gather: 4 bytes per parameter, not 4 + 4/N.
      const sdk::Kernels::Materialized host = ops.storage(layout.index);
      if (config.sync_module_states) broadcast(layout, host.params);
      unit->master_view = std::make_unique<sdk::FlatView>(*host.params, unit->shard_begin(), n);
      if (views_host_grads(ops, config, *unit)) {
        unit->grad_view = std::make_unique<sdk::FlatView>(*host.grads, unit->shard_begin(), n);
      } else {
        unit->grad = ops.allocate(ACCEL_MEMORY_GRADS, fp32, n, place, true, "sharding gradient shard");
      }
      sharded_[index] = std::move(unit);
      continue;
    }
    unit->master = ops.allocate(ACCEL_MEMORY_PARAMS, fp32, n, place, true, "sharding master shard");
    unit->grad = ops.allocate(ACCEL_MEMORY_GRADS, fp32, n, place, true, "sharding gradient shard");

    // cpu_ram_efficient_loading (and init_shard_slices): each rank computes
    // just its shard's slice of the initial weights (init_range: the seed
    // streams, or only this slice's bytes of --init-from's files), so no
    // rank holds, nor reads, even one whole unit; every rank's slice comes
    // from the same seed or file, which is what sync_module_states asks for.
    // The padding stays zero.
    if (unit->host_params) {
      const DLTensor* full = ops.storage(layout.index).params;
      if (config.sync_module_states) broadcast(layout, full);
      if (!unit->real.empty()) {
        const sdk::FlatView slice(*full, unit->real.begin, unit->real.size());
        const sdk::FlatView into(unit->master.tensor(), 0, unit->real.size());
        ops.copy(slice.get(), into.get());
      }
      sharded_[index] = std::move(unit);
      continue;
    }
    if (config.cpu_ram_efficient_loading || config.init_shard_slices) {
      const sdk::FlatView into(unit->master.tensor(), 0, unit->real.size());
      if (unit->real.empty() || ops.init_range(layout.index, unit->real.begin, into.get())) {
        keep(std::move(unit));
        continue;
      }
      // A 1.0 host: rank 0 materialises each unit and broadcasts it (below).
    }
    // One unit full at a time: ZeRO-3-style initialisation without a
    // full-model peak. The broadcast's sources materialise: world rank 0,
    // and for expert slices each EXPERT_DATA's first rank.
    const bool source = world_rank == 0 || (unit->over_expert_data && experts.data_rank == 0);
    const AccelStorageInit init =
        config.cpu_ram_efficient_loading && !source ? ACCEL_INIT_UNDEFINED : ACCEL_INIT_FROM_SEED;
    const DLTensor* full = ops.materialize(layout.index, ACCEL_STORAGE_PARAMS, init, fp32).params;
    if (config.sync_module_states) broadcast(layout, full);
    if (!unit->real.empty()) {
      const sdk::FlatView slice(*full, unit->real.begin, unit->real.size());
      const sdk::FlatView into(unit->master.tensor(), 0, unit->real.size());
      ops.copy(slice.get(), into.get());
    }
    ops.release(layout.index, ACCEL_STORAGE_PARAMS);
    keep(std::move(unit));
  }
}

void ShardStore::make_swap(const sdk::Kernels& ops, const ShardingOptions& config, std::vector<int64_t> numel,
                           int32_t world_rank) {
  const int64_t slot = MomentSwap::slot_elements(numel, config.moment_swap_piece_elements);
  if (slot == 0) return;  // nothing sharded to swap
  std::vector<float*> slots;
  for (int32_t i = 0; i < config.moment_swap_buffers; ++i) {
    // Host memory: the step runs on the host (offload), and the I/O thread
    // reads and writes these directly.
    swap_buffers_.push_back(ops.allocate(ACCEL_MEMORY_OPTIMIZER, DLDataType{kDLFloat, 32, 1},
                                         MomentSwap::arrays(config.swap_masters) * slot,
                                         ACCEL_MEMORY_HOST, false, "sharding NVMe swap buffer"));
    slots.push_back(static_cast<float*>(swap_buffers_.back().tensor().data));
  }
  swap_ = std::make_unique<MomentSwap>(config.moment_swap_dir, world_rank, std::move(numel),
                                       config.moment_swap_piece_elements, std::move(slots), config.swap_masters);
}

void ShardStore::zero_grads(const sdk::Kernels& ops) {
  for (const auto& unit : sharded_) {
    if (!unit) continue;
    // A slice of the host's gradients: the host zeroes those itself, and
    // they hold this step's local gradients until the reduction replaces them.
    if (!unit->grad_view) ops.fill(&unit->grad.tensor(), 0.0);
    unit->grad_is_zero = true;
  }
}

}  // namespace accel::sharding
