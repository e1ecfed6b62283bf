// checkpoint_io.h — fsdp's part of a checkpoint (accel/checkpoint.h): the
// parameters of the units it shards (MODEL space), the AdamW moments of every
// unit it steps (OPTIMIZER space, "exp_avg/NAME", "exp_avg_sq/NAME", the
// parameter's global shape) and its configuration as JSON (PLUGIN space,
// key "config", for information).
//
// Layout-free: tensors are stored by name and global offset, so any strategy
// at any world size loads them. state_dict_type SHARDED_STATE_DICT (and
// LOCAL_STATE_DICT, written the same way: an opaque flat shard cannot be
// resharded) — every rank of replica 0 puts its shard's part of every
// parameter as rectangles (sdk/flat_slices.hpp); FULL_STATE_DICT — replica 0
// all-gathers each unit's shards and world rank 0 puts whole tensors. Moments
// of host-owned units are put whole by world rank 0. Loading gets, on every
// rank, the rectangles of its own shard, whatever wrote them; a missing
// tensor is an error naming it. save_state runs on every rank (each rank's
// puts go to its own file). Thread-safety: loop thread only.
#pragma once

#include <accel/accel.h>

#include "fsdp_config.h"
#include "host_ops.h"
#include "shard_store.h"

namespace accel::fsdp {

class CheckpointIo {
 public:
  CheckpointIo(const HostOps& ops, const FsdpConfig& config, ShardStore& store, AccelGroup* sharding,
               GroupShape replica, int32_t world_rank);

  void save(const AccelStateArgs& args);
  void load(const AccelStateArgs& args);

 private:
  const HostOps& ops_;
  const FsdpConfig& config_;
  ShardStore& store_;
  AccelGroup* sharding_;
  GroupShape replica_;
  int32_t world_rank_;
};

}  // namespace accel::fsdp
