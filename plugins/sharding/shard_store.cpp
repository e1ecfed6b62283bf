// shard_store.cpp — allocating and initialising the per-unit state (see
// shard_store.h).
#include "shard_store.h"

#include <accel/sdk/error.hpp>

namespace accel::sharding {

ShardStore::ShardStore(const sdk::Kernels& ops, const ShardingOptions& config, const std::vector<UnitLayout>& units,
                       const GatherPlan& plan, sdk::GroupShape sharding, AccelGroup* world, int32_t world_rank,
                       uint32_t managed) {
  const DLDataType fp32{kDLFloat, 32, 1};
  const AccelMemoryPlace place = config.shard_place();
  sharded_.resize(units.size());
  replicated_.resize(units.size());
  for (const UnitLayout& layout : units) {
    const auto index = static_cast<size_t>(layout.index);
    if (!plan.sharded(layout.index)) {
      auto unit = std::make_unique<ReplicatedUnit>();
      unit->layout = layout;
      unit->exp_avg = ops.allocate(ACCEL_MEMORY_OPTIMIZER, fp32, layout.numel, ACCEL_MEMORY_DEVICE, true,
                                   "sharding exp_avg (replicated)");
      unit->exp_avg_sq = ops.allocate(ACCEL_MEMORY_OPTIMIZER, fp32, layout.numel, ACCEL_MEMORY_DEVICE, true,
                                      "sharding exp_avg_sq (replicated)");
      if (config.sync_module_states) {
        ops.broadcast(world, ops.storage(layout.index).params, 0, "sharding sync_module_states");
      }
      replicated_[index] = std::move(unit);
      continue;
    }
    auto unit = std::make_unique<ShardedUnit>();
    unit->layout = layout;
    unit->shards = sdk::FlatShardLayout(layout.numel, sharding.size);
    unit->shard_index = sharding.rank;
    unit->real = unit->shards.real_part(sharding.rank);
    unit->host_params = (managed & ACCEL_STORAGE_PARAMS) == 0;
    unit->host_grads = (managed & ACCEL_STORAGE_GRADS) == 0;
    const int64_t n = unit->shards.shard_numel();
    unit->master = ops.allocate(ACCEL_MEMORY_PARAMS, fp32, n, place, true, "sharding master shard");
    unit->grad = ops.allocate(ACCEL_MEMORY_GRADS, fp32, n, place, true, "sharding gradient shard");
    unit->exp_avg = ops.allocate(ACCEL_MEMORY_OPTIMIZER, fp32, n, place, true, "sharding exp_avg shard");
    unit->exp_avg_sq = ops.allocate(ACCEL_MEMORY_OPTIMIZER, fp32, n, place, true, "sharding exp_avg_sq shard");

    // cpu_ram_efficient_loading: each rank computes just its shard's slice
    // of the seeded initial weights (init_range), so no rank holds even one
    // whole unit; every rank's slice comes from the same seed, which is what
    // sync_module_states asks for. The padding stays zero.
    if (unit->host_params) {
      const DLTensor* full = ops.storage(layout.index).params;
      if (config.sync_module_states) ops.broadcast(world, full, 0, "sharding sync_module_states");
      if (!unit->real.empty()) {
        const sdk::FlatView slice(*full, unit->real.begin, unit->real.size());
        const sdk::FlatView into(unit->master.tensor(), 0, unit->real.size());
        ops.copy(slice.get(), into.get());
      }
      sharded_[index] = std::move(unit);
      continue;
    }
    if (config.cpu_ram_efficient_loading) {
      const sdk::FlatView into(unit->master.tensor(), 0, unit->real.size());
      if (unit->real.empty() || ops.init_range(layout.index, unit->real.begin, into.get())) {
        sharded_[index] = std::move(unit);
        continue;
      }
      // A 1.0 host: rank 0 materialises each unit and broadcasts it (below).
    }
    // One unit full at a time: ZeRO-3-style initialisation without a
    // full-model peak.
    const AccelStorageInit init =
        config.cpu_ram_efficient_loading && world_rank != 0 ? ACCEL_INIT_UNDEFINED : ACCEL_INIT_FROM_SEED;
    const DLTensor* full = ops.materialize(layout.index, ACCEL_STORAGE_PARAMS, init, fp32).params;
    if (config.sync_module_states) ops.broadcast(world, full, 0, "sharding sync_module_states");
    if (!unit->real.empty()) {
      const sdk::FlatView slice(*full, unit->real.begin, unit->real.size());
      const sdk::FlatView into(unit->master.tensor(), 0, unit->real.size());
      ops.copy(slice.get(), into.get());
    }
    ops.release(layout.index, ACCEL_STORAGE_PARAMS);
    sharded_[index] = std::move(unit);
  }
}

void ShardStore::zero_grads(const sdk::Kernels& ops) {
  for (const auto& unit : sharded_) {
    if (!unit) continue;
    ops.fill(&unit->grad.tensor(), 0.0);
    unit->grad_is_zero = true;
  }
}

}  // namespace accel::sharding
