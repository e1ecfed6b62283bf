// host_param_sync.h — ZeRO-1/2's last step: after the optimizer has stepped
// every rank's fp32 partition, the updated partitions are all-gathered into
// the full parameters the host keeps, so every rank computes the next
// forward with the same, whole model (DeepSpeed's allgather of the updated
// fp16/fp32 partitions, bucketed by allgather_bucket_size there, per unit
// here).
//
// Per sharded unit whose parameters are the host's (ShardedUnit::host_params):
// the master shard (brought to the device first when offloaded) is
// all-gathered over its sharding group straight into the host's buffer when the unit's
// size is a multiple of the group, else into a padded staging buffer whose
// real part is copied out. The gathers are issued asynchronously and
// completed together. Invariant after publish(): every rank's host
// parameters equal the concatenated masters. Thread-safety: loop thread
// only.
#pragma once

#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/kernels.hpp>

#include <cstdint>

#include "shard_store.h"

namespace accel::sharding {

class HostParamSync {
 public:
  // Each unit gathers over its own sharding group (ShardedUnit::group).
  HostParamSync(const sdk::Kernels& ops, ShardStore& store, sdk::BufferPool& comm_buffers)
      : ops_(ops), store_(store), comm_buffers_(comm_buffers) {}

  void publish();
  // Elements all-gathered by publish() since the last call (communicated
  // bytes against the theory).
  int64_t take_gathered_elements() {
    const int64_t n = gathered_elements_;
    gathered_elements_ = 0;
    return n;
  }

 private:
  const sdk::Kernels& ops_;
  ShardStore& store_;
  sdk::BufferPool& comm_buffers_;
  int64_t gathered_elements_ = 0;
};

}  // namespace accel::sharding
