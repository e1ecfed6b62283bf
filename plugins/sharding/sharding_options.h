// sharding_options.h — what the shared sharding machinery (this folder:
// shards, gathers, reductions, the sharded optimizer, checkpoints) needs to
// know of a strategy's configuration. fsdp's FsdpConfig and deepspeed_zero's
// ZeroConfig derive from it and fill it from their own options; the
// machinery reads nothing else, so one code path serves both strategies.
//
// Invariant: the strategy that fills it has checked it (dtypes valid, the
// mesh divides the world). Thread-safety: plain values.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <string>

namespace accel::sharding {

// What a plugin built on this machinery does (accel/plugin.h): runs on CPU
// and CUDA ranks, shards parameters, gradients and optimizer state, reduces
// gradients itself, and loads checkpoints of any layout.
inline constexpr uint64_t kShardingCapabilities = ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_SHARDS_PARAMS |
                                                  ACCEL_CAP_SHARDS_GRADS | ACCEL_CAP_SHARDS_OPTIMIZER |
                                                  ACCEL_CAP_REDUCES_GRADS | ACCEL_CAP_RESHARD_ON_LOAD |
                                                  ACCEL_CAP_PRECISION_GRAD_COMM | ACCEL_CAP_PRECISION_MOMENTS;

enum class BackwardPrefetch { backward_pre, backward_post, no_prefetch };
enum class StateDictType { full, sharded, local };

// Sizes of the SHARDING and REPLICA mesh dimensions (accel/comm.h).
struct MeshShape {
  int32_t sharding_size = 1;
  int32_t replica_size = 1;
};

struct ShardingOptions {
  MeshShape mesh;
  bool reshard_after_forward = true;  // release gathered parameters after forward
  BackwardPrefetch backward_prefetch = BackwardPrefetch::no_prefetch;
  bool forward_prefetch = false;
  bool limit_all_gathers = true;             // at most two groups alive or in flight
  int64_t max_live_elements = 0;             // > 0: also at most this many gathered elements alive
  int64_t max_prefetch_elements = 0;         // > 0: groups larger than this are gathered on demand only
  DLDataType param_dtype{kDLFloat, 32, 1};   // gathered (compute) parameters and their gradients
  DLDataType reduce_dtype{kDLFloat, 32, 1};  // the reduce-scatter / all-reduce of gradients
  bool cpu_offload = false;                  // shards in pinned host memory, stepped on the host
  // Non-empty: the sharded units' AdamW moments live in a file in this
  // directory, through moment_swap_buffers host buffers (moment_swap.h;
  // DeepSpeed's offload_optimizer device nvme, with cpu_offload).
  std::string moment_swap_dir;
  int32_t moment_swap_buffers = 4;
  // Units' moments are swapped in pieces of at most this many elements (one
  // I/O request of 8 bytes per element for the pair; DeepSpeed's default
  // aio.block_size of 1 MiB): the swap buffers do not grow with the largest
  // unit.
  int64_t moment_swap_piece_elements = int64_t{1} << 17;
  // With moment_swap_dir, the master partitions of units whose parameters
  // the plugin manages (ZeRO-3) live in the swap file too, after their
  // moments (DeepSpeed's offload_param device nvme, ZeRO-Infinity): host
  // memory holds a master shard only while it is gathered or checkpointed.
  bool swap_masters = false;
  StateDictType state_dict_type = StateDictType::full;
  bool sync_module_states = false;
  bool cpu_ram_efficient_loading = false;
  // Each rank fills its plugin-managed shards with init_range (its slice of
  // the seed streams or of --init-from's files) instead of materialising
  // every unit whole: ZeRO-3's zero3_init_flag. Unlike
  // cpu_ram_efficient_loading it needs no broadcast, and a host without
  // init_range falls back to every rank materialising each unit.
  bool init_shard_slices = false;

  AccelMemoryPlace shard_place() const { return cpu_offload ? ACCEL_MEMORY_HOST_PINNED : ACCEL_MEMORY_DEVICE; }
};

}  // namespace accel::sharding
