// gather_engine.h — gathering a wrap group's full parameters from the shards,
// and releasing them: the all-gather half of FSDP and ZeRO-3.
//
// A group is RESHARDED (no full parameters), GATHERING (an asynchronous
// all_gather in flight, started by a prefetch) or GATHERED (every unit's full
// buffer materialised and filled). To gather a unit: materialise its full
// PARAMS buffer in param_dtype, bring this rank's fp32 master shard to the
// device (cpu_offload) and cast it to param_dtype, all_gather over SHARDING
// into the buffer — or into a padded staging buffer, copied out, when the
// unit's size is not a multiple of the group size.
//
// Prefetch issues the all_gather asynchronously and returns; the group is
// completed (waited) when it is needed. limit_all_gathers: at most two
// groups are alive (GATHERING or GATHERED) after a prefetch — a prefetch that
// would make a third is deferred — as is one that would take the alive
// groups' elements past max_live_elements (ZeRO-3's
// stage3_max_live_parameters), when set — and issued when a group is released (or
// dropped if the group is gathered on demand first). The peak number of alive
// groups is reported per step. Staging buffers of in-flight gathers are
// leased from the plugin's communication pool (accel/sdk/buffer_pool.hpp)
// and go back to it at completion. Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/tensor.hpp>
#include <accel/sdk/kernels.hpp>

#include <cstdint>
#include <vector>

#include "sharding_options.h"
#include "shard_store.h"
#include "gather_plan.h"

namespace accel::sharding {

struct GatherCounters {
  int64_t gathers = 0;     // groups gathered (on demand or prefetched)
  int64_t prefetches = 0;  // of which prefetched
  int64_t releases = 0;    // groups released
  int32_t max_alive = 0;   // peak groups alive at once
};

class GatherEngine {
 public:
  GatherEngine(const sdk::Kernels& ops, const ShardingOptions& config, const GatherPlan& plan, ShardStore& store,
               AccelGroup* sharding, sdk::BufferPool& comm_buffers);

  // Makes `group`'s full parameters usable: completes its prefetch, or
  // gathers it now.
  void ensure_gathered(int32_t group);
  // Starts gathering `group` asynchronously, unless it is alive already or
  // the limit defers it. -1 is ignored.
  void prefetch(int32_t group);
  // Frees `group`'s full parameters (completing an in-flight gather first),
  // then issues a deferred prefetch if the limit now allows it.
  void release(int32_t group);
  bool alive(int32_t group) const { return state_.at(static_cast<size_t>(group)) != State::resharded; }
  // Releases every alive group and drops a deferred prefetch (end of a step,
  // teardown).
  void release_all();

  GatherCounters take_counters();

 private:
  enum class State { resharded, gathering, gathered };
  struct UnitGather {
    int32_t unit = 0;
    const DLTensor* full = nullptr;       // the materialised buffer (host-owned view)
    sdk::Buffer read_in;                  // the master read from the NVMe swap (master_swapped); not pooled:
                                          // idle pooled copies would keep the partition the swap moved out
    sdk::BufferPool::Lease staged_shard;  // the shard in param_dtype on the device, when not the master itself
    sdk::BufferPool::Lease padded;        // all_gather output when numel % S != 0
    AccelWork* work = nullptr;
  };

  void issue(int32_t group, bool async);
  void complete(int32_t group);
  int32_t alive_count() const;
  int64_t elements(int32_t group) const;  // the group's unit elements
  int64_t alive_elements() const;
  void note_alive();

  const sdk::Kernels& ops_;
  const ShardingOptions& config_;
  const GatherPlan& plan_;
  ShardStore& store_;
  AccelGroup* sharding_;
  sdk::BufferPool& comm_buffers_;
  std::vector<State> state_;
  std::vector<std::vector<UnitGather>> in_flight_;  // per group
  int32_t deferred_ = -1;
  GatherCounters counters_;
};

}  // namespace accel::sharding
