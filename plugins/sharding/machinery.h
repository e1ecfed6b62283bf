// machinery.h — the parts of the sharding machinery a strategy plugin owns,
// in one place, with what every strategy does with them alike at a step's
// end (release what is left gathered, report the counters) and at teardown
// (complete pending collectives before their buffers go, free everything in
// dependency order, never throw). fsdp and deepspeed_zero each hold one and
// build the parts their configuration needs; a part may be absent.
//
// Invariant: the parts are built in member order (store first) and freed in
// reverse; comm_buffers outlives every lease the gathers, reducer and
// parameter refresh hold. Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/services.hpp>

#include <memory>

#include "checkpoint_io.h"
#include "gather_engine.h"
#include "grad_reducer.h"
#include "host_param_sync.h"
#include "shard_store.h"
#include "sharded_optimizer.h"
#include "unit_schedule.h"

namespace accel::sharding {

struct Machinery {
  std::unique_ptr<ShardStore> store;
  std::unique_ptr<sdk::BufferPool> comm_buffers;
  std::unique_ptr<GatherEngine> gathers;  // absent: the host keeps the parameters (ZeRO-1/2)
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<UnitSchedule> schedule;  // absent: nothing happens per unit (ZeRO-0/1)
  std::unique_ptr<HostParamSync> publish;  // present: stepped partitions go back to the host (ZeRO-1/2)
  std::unique_ptr<ShardedOptimizer> optimizer;
  std::unique_ptr<CheckpointIo> checkpoint;

  // Releases whatever a step left gathered (an aborted pattern must not leak
  // a group) and records the step's counters as metrics: gathers,
  // prefetches, max_gathered_groups, gather_bytes (all_gather output
  // bytes), encoded_gathers (unit gathers through the codec),
  // recompute_gathers, reduce_scatters,
  // nvme_read_bytes, nvme_write_bytes, comm_buffers_allocated,
  // comm_buffers_reused.
  void end_step(const sdk::Services& services);
  // After a failure collectives may be pending: completes them, then frees
  // every part. Never throws.
  void teardown() noexcept;
};

}  // namespace accel::sharding
