// grad_reducer.cpp — reduce-scattering sharded gradients and all-reducing
// replicated ones (see grad_reducer.h).
#include "grad_reducer.h"

#include <accel/sdk/error.hpp>
#include <accel/sdk/services.hpp>

namespace accel::sharding {

GradReducer::GradReducer(const sdk::Kernels& ops, const ShardingOptions& config, ShardStore& store,
                         AccelGroup* sharding, AccelGroup* replica, AccelGroup* data, sdk::BufferPool& comm_buffers)
    : ops_(ops),
      config_(config),
      store_(store),
      sharding_(sharding),
      replica_(replica),
      data_(data),
      comm_buffers_(comm_buffers) {
  sharding_size_ = ops.shape(sharding).size;
  replica_size_ = ops.shape(replica).size;
  data_size_ = ops.shape(data).size;
  sharding_rank_ = ops.shape(sharding).rank;
  reduce_scatter_in_place_ = sdk::host_abi_at_least(1, 7);
  const AccelPrecisionPolicy policy = ops.services().precision_policy();
  // Over one rank nothing travels: the gradients stay as they are.
  if (sdk::wants_fp8_grad_comm(policy) && data_size_ > 1) {
    if (replica_size_ > 1) {
      throw sdk::Error(ACCEL_ERROR_UNSUPPORTED,
                       "FP8 gradient communication (the precision policy) with a replica group (HYBRID sharding) is "
                       "not built: the replicas' all_reduce would stay fp32; shard over every rank");
    }
    if (sharding_size_ > 1) fp8_ = std::make_unique<sdk::Fp8GradComm>(ops, policy.grad_comm_dtype, sharding);
    fp8_data_ = std::make_unique<sdk::Fp8GradComm>(ops, policy.grad_comm_dtype, data);
  }
}

// The FP8 path of reduce_scatter (grad_reducer.h): `full` is the unit's
// whole gradient buffer, in any float dtype.
void GradReducer::reduce_scatter_fp8(int32_t u, const DLTensor* full) {
  ShardedUnit& unit = *store_.sharded(u);
  const int64_t numel = unit.layout.numel;
  const int64_t shard_numel = unit.shards.shard_numel();
  std::vector<sdk::GradSegment> segments;
  for (const ParamLayout& p : unit.layout.params) {
    segments.push_back(sdk::GradSegment{full, sdk::FlatRange{p.flat_offset, p.flat_offset + p.numel}, p.flat_offset});
  }
  sdk::BufferPool::Lease wire = comm_buffers_.take(ACCEL_MEMORY_COMM, fp8_->wire_dtype(), unit.shards.padded_numel(),
                                                   ACCEL_MEMORY_DEVICE, "sharding fp8 reduce_scatter input");
  if (unit.shards.padding() != 0) {
    const sdk::FlatView tail(wire.tensor(), numel, unit.shards.padding());
    ops_.fill(tail.get(), 0.0);
  }
  const sdk::Fp8Scales scales = fp8_->agree_scales(segments, wire.tensor(), "sharding fp8 amax all_reduce");
  fp8_->encode(segments, scales, wire.tensor());
  sdk::BufferPool::Lease chunk = comm_buffers_.take(ACCEL_MEMORY_COMM, fp8_->wire_dtype(), shard_numel,
                                                    ACCEL_MEMORY_DEVICE, "sharding fp8 reduce_scatter output");
  ops_.reduce_scatter(sharding_, &wire.tensor(), &chunk.tensor(), ACCEL_REDUCE_SUM, "sharding fp8 reduce_scatter");
  ++reduce_scatters_;
  wire.reset();
  if (!unit.host_grads) ops_.release(u, ACCEL_STORAGE_GRADS);

  // Decoded into the shard: in place while it holds the step's zeros (the
  // padding stays zero) or is a ZeRO-1 view (replaced, as the fp32 path
  // does); else through an fp32 chunk added to it.
  const sdk::FlatRange range{sharding_rank_ * shard_numel, (sharding_rank_ + 1) * shard_numel};
  const DLTensor& shard = unit.grad_tensor();
  const bool fp32_shard = accel_dtype_equal(shard.dtype, DLDataType{kDLFloat, 32, 1});
  if (fp32_shard && (unit.grad_view || unit.grad_is_zero) && sdk::same_space(chunk.tensor(), shard)) {
    fp8_->decode_range(chunk.tensor(), range, segments, scales, shard);
  } else {
    sdk::BufferPool::Lease decoded = comm_buffers_.take(ACCEL_MEMORY_COMM, DLDataType{kDLFloat, 32, 1}, shard_numel,
                                                        ACCEL_MEMORY_DEVICE, "sharding fp8 decoded chunk");
    ops_.fill(&decoded.tensor(), 0.0);
    fp8_->decode_range(chunk.tensor(), range, segments, scales, decoded.tensor());
    const DLTensor* addend = &decoded.tensor();
    sdk::BufferPool::Lease copied_out;
    if (!sdk::same_space(*addend, shard)) {
      copied_out = comm_buffers_.take(ACCEL_MEMORY_COMM, DLDataType{kDLFloat, 32, 1}, shard_numel,
                                      config_.shard_place(), "sharding gradient chunk copied out");
      ops_.copy(addend, &copied_out.tensor());
      ops_.synchronize();  // the host-side axpy below reads what the copy writes
      addend = &copied_out.tensor();
    }
    if (unit.grad_view) {
      ops_.copy(addend, &shard);
    } else {
      ops_.axpy(addend, &shard, 1.0);
    }
  }
  unit.grad_is_zero = false;
}

void GradReducer::materialize_grads(int32_t unit) {
  ops_.materialize(unit, ACCEL_STORAGE_GRADS, ACCEL_INIT_ZERO, config_.param_dtype);
}

void GradReducer::reduce_scatter(int32_t u, bool last_micro_batch) {
  ShardedUnit& unit = *store_.sharded(u);
  const DLTensor* full = ops_.storage(u).grads;
  if (full == nullptr) {
    throw sdk::Error(ACCEL_ERROR_INTERNAL,
                     "unit " + unit.layout.name + ": gradients not materialised at the end of its backward");
  }
  if (fp8_) {
    reduce_scatter_fp8(u, full);
    return;
  }
  const int64_t numel = unit.layout.numel;
  const int64_t shard_numel = unit.shards.shard_numel();

  // The reduce_scatter input: S chunks of shard_numel in reduce_dtype.
  sdk::BufferPool::Lease staged;
  const DLTensor* input = full;
  if (unit.shards.padding() != 0 || !accel_dtype_equal(full->dtype, config_.reduce_dtype)) {
    staged = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.reduce_dtype, unit.shards.padded_numel(),
                                ACCEL_MEMORY_DEVICE, "sharding reduce_scatter input");
    const sdk::FlatView real(staged.tensor(), 0, numel);
    ops_.convert(full, real.get());
    if (unit.shards.padding() != 0) {
      const sdk::FlatView tail(staged.tensor(), numel, unit.shards.padding());
      ops_.fill(tail.get(), 0.0);
    }
    input = &staged.tensor();
  }
  // Straight into the shard while it holds zeros (grad_reducer.h): 0 + x is
  // x. A ZeRO-1 view is this rank's chunk of the input itself (the host's
  // gradients): the reduction lands there in place (accel/comm.h, 1.7), and
  // over one rank there is nothing to reduce (the average of one is
  // itself). Only a host older than 1.7 takes the chunk below.
  const DLTensor& shard = unit.grad_tensor();
  const int32_t group_size = unit.shards.parts();
  const bool view_in_place = unit.grad_view && input == full && (group_size == 1 || reduce_scatter_in_place_);
  if (view_in_place ||
      (unit.grad_is_zero && !unit.grad_view && accel_dtype_equal(shard.dtype, config_.reduce_dtype) &&
       sdk::same_space(*input, shard))) {
    if (!(unit.grad_view && group_size == 1)) {
      ops_.reduce_scatter(unit.group, input, &shard, ACCEL_REDUCE_AVG, "sharding reduce_scatter");
      ++reduce_scatters_;
    }
    unit.grad_is_zero = false;
    staged.reset();
    if (!unit.host_grads) ops_.release(u, ACCEL_STORAGE_GRADS);
    if (last_micro_batch) finish_shard(unit);
    return;
  }
  sdk::BufferPool::Lease chunk = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.reduce_dtype, shard_numel,
                                                    ACCEL_MEMORY_DEVICE, "sharding reduce_scatter output");
  ops_.reduce_scatter(unit.group, input, &chunk.tensor(), ACCEL_REDUCE_AVG, "sharding reduce_scatter");
  ++reduce_scatters_;
  unit.grad_is_zero = false;
  staged.reset();
  if (!unit.host_grads) ops_.release(u, ACCEL_STORAGE_GRADS);

  if (unit.grad_view) {
    // ZeRO-1 views reduce once per step: the average replaces this rank's
    // local gradients in its slice of the host's buffer.
    ops_.copy(&chunk.tensor(), &unit.grad_tensor());
  } else {
    // Accumulate into the fp32 shard (pinned host memory with cpu_offload:
    // the chunk is copied out first, and the addition runs on the host).
    const DLTensor* addend = &chunk.tensor();
    sdk::BufferPool::Lease copied_out;
    if (!sdk::same_space(*addend, unit.grad_tensor())) {
      copied_out = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.reduce_dtype, shard_numel, config_.shard_place(),
                                      "sharding gradient chunk copied out");
      ops_.copy(addend, &copied_out.tensor());
      ops_.synchronize();  // the host-side axpy below reads what the copy writes
      addend = &copied_out.tensor();
    }
    ops_.axpy(addend, &unit.grad_tensor(), 1.0);
  }

  if (last_micro_batch) finish_shard(unit);
}

// The step's last reduction into a shard, averaged over its sharding group
// so far: over REPLICA too (HYBRID), or, spanning EXPERT_DATA, its expert
// slices scaled by 1 / expert size (expert_slices.h) and its other elements
// averaged over EXPERT. The expert group's ranks share one shard index, so
// they all-reduce the same ranges.
void GradReducer::finish_shard(ShardedUnit& unit) {
  const DLTensor& shard = unit.grad_tensor();
  if (replica_size_ > 1) {
    pending_.push_back(ops_.all_reduce(replica_, &shard, ACCEL_REDUCE_AVG, "sharding replica all_reduce",
                                       /*async=*/true));
  }
  if (!unit.over_expert_data) return;
  if (!experts_.active()) {
    throw sdk::Error(ACCEL_ERROR_INTERNAL, "unit " + unit.layout.name + " spans EXPERT_DATA without set_experts");
  }
  const sdk::FlatRange held{unit.shard_begin(), unit.shard_begin() + unit.shards.shard_numel()};
  for (const SliceRun& run : slice_runs(unit.layout)) {
    const sdk::FlatRange part = sdk::intersect(held, run.range);
    if (part.empty()) continue;
    expert_views_.push_back(std::make_unique<sdk::FlatView>(shard, part.begin - held.begin, part.size()));
    const DLTensor* view = expert_views_.back()->get();
    if (run.experts) {
      ops_.scale(view, 1.0 / experts_.size);
    } else {
      pending_.push_back(
          ops_.all_reduce(experts_.expert, view, ACCEL_REDUCE_AVG, "sharding expert-group all_reduce", true));
    }
  }
}

void GradReducer::set_experts(const ExpertGroups& experts) {
  if (!experts.active()) return;
  if (fp8_ || fp8_data_) {
    throw sdk::Error(ACCEL_ERROR_UNSUPPORTED,
                "FP8 gradient communication beside expert parallelism: the experts' gradients reduce over "
                "EXPERT_DATA, where no FP8 all_reduce is built; leave the precision plugin's FP8 gradients off");
  }
  if (replica_size_ > 1 && store_.any_over_expert_data()) {
    throw sdk::Error(ACCEL_ERROR_UNSUPPORTED,
                     "units holding experts sharded beside a replica group (HYBRID sharding) are not built: their "
                     "shards span EXPERT_DATA; shard over every data rank");
  }
  experts_ = experts;
}

// The unit's runs of expert slices and of the rest in flight as views of
// its buffer: expert slices scaled by 1 / expert size and averaged over
// EXPERT_DATA, the rest averaged over DATA.
void GradReducer::all_reduce_with_experts(const UnitLayout& layout, const DLTensor* grads) {
  for (const SliceRun& run : slice_runs(layout)) {
    expert_views_.push_back(std::make_unique<sdk::FlatView>(*grads, run.range.begin, run.range.size()));
    const DLTensor* view = expert_views_.back()->get();
    if (!run.experts) {
      pending_.push_back(ops_.all_reduce(data_, view, ACCEL_REDUCE_AVG, "sharding replicated all_reduce", true));
      continue;
    }
    ops_.scale(view, 1.0 / experts_.size);
    if (experts_.data_size > 1) {
      pending_.push_back(
          ops_.all_reduce(experts_.expert_data, view, ACCEL_REDUCE_AVG, "sharding expert grad all_reduce", true));
    }
  }
}

void GradReducer::all_reduce_replicated(int32_t unit, const DLTensor* grads) {
  if (data_size_ <= 1) return;
  if (grads == nullptr) grads = ops_.storage(unit).grads;
  if (experts_.active() && holds_expert_slices(*store_.layout(unit))) {
    all_reduce_with_experts(*store_.layout(unit), grads);
    return;
  }
  if (fp8_data_) {
    PendingFp8 entry;
    // The hook's view of the gradients lives for the hook only; the decode
    // in finish() writes through a flat view of the same memory.
    entry.grads = std::make_unique<sdk::FlatView>(*grads, 0, accel_tensor_numel(grads));
    entry.segments = sdk::unit_grad_segments(ops_.services(), unit, entry.grads->get(), 0);
    entry.wire = comm_buffers_.take(ACCEL_MEMORY_COMM, fp8_data_->wire_dtype(), accel_tensor_numel(grads),
                                    ACCEL_MEMORY_DEVICE, "sharding fp8 replicated all_reduce");
    entry.scales = fp8_data_->agree_scales(entry.segments, entry.wire.tensor(), "sharding fp8 amax all_reduce");
    fp8_data_->encode(entry.segments, entry.scales, entry.wire.tensor());
    pending_.push_back(ops_.all_reduce(data_, &entry.wire.tensor(), ACCEL_REDUCE_SUM,
                                       "sharding fp8 replicated all_reduce", /*async=*/true));
    pending_fp8_.push_back(std::move(entry));
    return;
  }
  pending_.push_back(ops_.all_reduce(data_, grads, ACCEL_REDUCE_AVG, "sharding replicated all_reduce", /*async=*/true));
}

void GradReducer::finish() {
  std::vector<AccelWork*> works;
  works.swap(pending_);
  for (size_t i = 0; i < works.size(); ++i) {
    try {
      ops_.wait_and_free(works[i]);
    } catch (...) {
      for (size_t j = i + 1; j < works.size(); ++j) pending_.push_back(works[j]);
      throw;
    }
  }
  for (PendingFp8& entry : pending_fp8_) fp8_data_->decode_to_sources(entry.wire.tensor(), entry.segments, entry.scales);
  pending_fp8_.clear();
  expert_views_.clear();
}

void GradReducer::abandon() noexcept {
  const AccelCommServices& comm = *ops_.services().table()->comm;
  for (AccelWork* work : pending_) {
    if (comm.work_wait(ops_.services().host(), work, nullptr) == ACCEL_OK) {
      (void)comm.work_free(ops_.services().host(), work);
    }
  }
  pending_.clear();
  pending_fp8_.clear();
  expert_views_.clear();
}

}  // namespace accel::sharding
