// grad_reducer.h — the reduction half of FSDP and ZeRO-2/3: gradients of sharded units
// reduce-scattered into the fp32 gradient shards, and gradients of host-owned
// (ignored / NO_SHARD) units all-reduced like DDP.
//
// Sharded unit, per micro-batch: its full gradient buffer is materialised
// zeroed (in param_dtype: autograd accumulates into the parameters' .grad)
// before its group's backward, then reduce_scatter(AVG) over SHARDING — in
// reduce_dtype, through a zero-tailed staging buffer when the unit's size is
// not a multiple of the group — and the received chunk is added (axpy) to the
// fp32 gradient shard, which accumulates the step's micro-batches; the full
// buffer is released. When the shard still holds the zeros of the step's
// start and reduce_dtype is its fp32 in its space (the usual first
// micro-batch), the reduce_scatter writes straight into the shard: the same
// values as 0 + chunk, without a chunk buffer (a shard's size, kept idle in
// the pool through the step's peak otherwise) or the addition. A ZeRO-1
// gradient shard is a slice of the host's own gradients, reduced once per
// step: in place, the reduce_scatter's output being this rank's chunk of its
// input (no chunk buffer: at N = 1 no collective at all). HYBRID: on the last
// micro-batch the shard is all-reduced (AVG) over REPLICA, asynchronously,
// completed in finish().
// Host-owned unit: its gradients are all-reduced (AVG) over DATA once, on the
// last micro-batch (gradients_ready), asynchronously. With expert
// parallelism (set_experts, expert_slices.h) a unit's expert slices are
// scaled by 1 / expert size and averaged over EXPERT_DATA instead: the
// data group's average of the experts this rank holds. A sharded unit
// holding expert slices reduce-scatters over its group, EXPERT_DATA
// (shard_store.h); on the last micro-batch its shard's expert slices are
// scaled by 1 / expert size and its other elements all-reduced (AVG) over
// EXPERT, asynchronously (HSDP's two stages, the second skipping the
// experts, which differ over EXPERT).
//
// FP8 gradient communication (the precision policy's grad_comm_dtype,
// accel/precision.h; fp8's MS-AMP O1/O2): the reduce_scatter input is the
// unit's gradients as scaled FP8, one scale per parameter agreed with a MAX
// all_reduce over SHARDING (accel/sdk/precision.hpp, the codec ddp uses
// too), summed in FP8 and decoded (/ N) into the fp32 shard — directly while
// the shard holds zeros or is a ZeRO-1 view, else through an fp32 chunk and
// axpy. Host-owned units all_reduce their FP8 gradients over DATA the same
// way, decoded in finish(). The policy's wire dtype takes reduce_dtype's
// place (the full gradients may still be param_dtype bf16: the amaxes and
// the casts read any float dtype). HYBRID sharding (a second, REPLICA reduction) is
// refused with it: that all_reduce is not built in FP8. A group of one rank
// moves nothing and its gradients stay unquantised.
//
// Invariant after finish(): every gradient shard and host-owned gradient
// holds the gradient of the global batch (the average over the data ranks).
// Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/tensor.hpp>
#include <accel/sdk/kernels.hpp>

#include <accel/sdk/precision.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "expert_slices.h"
#include "sharding_options.h"
#include "shard_store.h"

namespace accel::sharding {

class GradReducer {
 public:
  GradReducer(const sdk::Kernels& ops, const ShardingOptions& config, ShardStore& store, AccelGroup* sharding,
              AccelGroup* replica, AccelGroup* data, sdk::BufferPool& comm_buffers);

  // Zeroed full gradient buffer for a sharded unit (a no-op if it exists).
  void materialize_grads(int32_t unit);
  // Reduce-scatters a sharded unit's full gradients into its shard and
  // releases them (unless they are the host's: ZeRO-1 reduces the host's
  // accumulated gradients once, at gradients_ready); on the last micro-batch of a hybrid run, starts the
  // shard's all-reduce over REPLICA.
  void reduce_scatter(int32_t unit, bool last_micro_batch);
  // Starts the all-reduce of a host-owned unit's gradients over DATA.
  void all_reduce_replicated(int32_t unit, const DLTensor* grads);
  // Expert parallelism: units' expert slices reduce over EXPERT_DATA (see
  // above). Throws Error with FP8 gradient communication (its all_reduce
  // is built over DATA only), or with a replica group beside units sharded
  // over EXPERT_DATA. Call before the first reduction.
  void set_experts(const ExpertGroups& experts);
  // Completes every asynchronous reduction.
  void finish();
  // Waits without throwing (teardown after a failure).
  void abandon() noexcept;

  bool fp8() const { return fp8_ != nullptr; }

  int64_t take_reduce_scatters() {
    const int64_t n = reduce_scatters_;
    reduce_scatters_ = 0;
    return n;
  }

 private:
  const sdk::Kernels& ops_;
  const ShardingOptions& config_;
  ShardStore& store_;
  AccelGroup* sharding_;
  AccelGroup* replica_;
  AccelGroup* data_;
  sdk::BufferPool& comm_buffers_;  // reduce_scatter staging, leased per unit
  int32_t sharding_size_ = 1;
  int32_t replica_size_ = 1;
  int32_t data_size_ = 1;
  ExpertGroups experts_;
  std::vector<std::unique_ptr<sdk::FlatView>> expert_views_;  // the views in flight, freed in finish()
  void reduce_scatter_fp8(int32_t unit, const DLTensor* full);
  void all_reduce_with_experts(const UnitLayout& layout, const DLTensor* grads);
  void finish_shard(ShardedUnit& unit);

  // A host-owned unit's FP8 all_reduce in flight: decoded in finish().
  struct PendingFp8 {
    std::unique_ptr<sdk::FlatView> grads;  // the unit's gradients (the segments' source)
    std::vector<sdk::GradSegment> segments;
    sdk::Fp8Scales scales;
    sdk::BufferPool::Lease wire;
  };

  std::vector<AccelWork*> pending_;
  std::vector<PendingFp8> pending_fp8_;
  std::unique_ptr<sdk::Fp8GradComm> fp8_;       // FP8 over SHARDING, or null
  std::unique_ptr<sdk::Fp8GradComm> fp8_data_;  // FP8 over DATA (host-owned units)
  int32_t sharding_rank_ = 0;
  int64_t reduce_scatters_ = 0;
  bool reduce_scatter_in_place_ = false;  // the host takes an in-place reduce_scatter (ABI 1.7)
};

}  // namespace accel::sharding
