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
  reduce_scatter_in_place_ = sdk::host_abi_at_least(1, 7);
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
  const bool view_in_place = unit.grad_view && input == full && (sharding_size_ == 1 || reduce_scatter_in_place_);
  if (view_in_place ||
      (unit.grad_is_zero && !unit.grad_view && accel_dtype_equal(shard.dtype, config_.reduce_dtype) &&
       sdk::same_space(*input, shard))) {
    if (!(unit.grad_view && sharding_size_ == 1)) {
      ops_.reduce_scatter(sharding_, input, &shard, ACCEL_REDUCE_AVG, "sharding reduce_scatter");
      ++reduce_scatters_;
    }
    unit.grad_is_zero = false;
    staged.reset();
    if (!unit.host_grads) ops_.release(u, ACCEL_STORAGE_GRADS);
    if (last_micro_batch && replica_size_ > 1) {
      pending_.push_back(ops_.all_reduce(replica_, &shard, ACCEL_REDUCE_AVG, "sharding replica all_reduce",
                                         /*async=*/true));
    }
    return;
  }
  sdk::BufferPool::Lease chunk = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.reduce_dtype, shard_numel,
                                                    ACCEL_MEMORY_DEVICE, "sharding reduce_scatter output");
  ops_.reduce_scatter(sharding_, input, &chunk.tensor(), ACCEL_REDUCE_AVG, "sharding reduce_scatter");
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

  if (last_micro_batch && replica_size_ > 1) {
    pending_.push_back(ops_.all_reduce(replica_, &unit.grad_tensor(), ACCEL_REDUCE_AVG, "sharding replica all_reduce",
                                       /*async=*/true));
  }
}

void GradReducer::all_reduce_replicated(int32_t unit, const DLTensor* grads) {
  if (data_size_ <= 1) return;
  if (grads == nullptr) grads = ops_.storage(unit).grads;
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
}

void GradReducer::abandon() noexcept {
  const AccelCommServices& comm = *ops_.services().table()->comm;
  for (AccelWork* work : pending_) {
    if (comm.work_wait(ops_.services().host(), work, nullptr) == ACCEL_OK) {
      (void)comm.work_free(ops_.services().host(), work);
    }
  }
  pending_.clear();
}

}  // namespace accel::sharding
