// host_param_sync.cpp — all-gathering the stepped partitions into the host's
// parameters (see host_param_sync.h).
#include "host_param_sync.h"

#include <accel/sdk/error.hpp>

#include <exception>
#include <vector>

namespace accel::sharding {

void HostParamSync::publish() {
  const DLDataType fp32{kDLFloat, 32, 1};
  struct Pending {
    AccelWork* work = nullptr;
    const DLTensor* full = nullptr;
    int64_t numel = 0;
    sdk::BufferPool::Lease send;    // the shard on the device (offload)
    sdk::BufferPool::Lease padded;  // the receive buffer when padded
  };
  std::vector<Pending> pending;
  std::exception_ptr failure;
  try {
    for (int32_t u = 0; u < store_.num_units(); ++u) {
      ShardedUnit* unit = store_.sharded(u);
      if (unit == nullptr || !unit->host_params) continue;
      Pending p;
      p.full = ops_.storage(u).params;
      if (p.full == nullptr || !accel_dtype_equal(p.full->dtype, fp32)) {
        throw sdk::Error(ACCEL_ERROR_INTERNAL, "unit " + unit->layout.name + ": the host keeps no fp32 parameters");
      }
      p.numel = unit->layout.numel;
      // A master that is the host's own slice (ZeRO-1 views) is gathered in
      // place: the input is this rank's chunk of the output (accel/comm.h).
      const DLTensor* send = &unit->master_tensor();
      if (!sdk::same_space(*send, *p.full)) {
        p.send = comm_buffers_.take(ACCEL_MEMORY_COMM, fp32, unit->shards.shard_numel(), ACCEL_MEMORY_DEVICE,
                                    "sharding shard copied in");
        ops_.copy(send, &p.send.tensor());
        send = &p.send.tensor();
      }
      const DLTensor* receive = p.full;
      if (unit->shards.padding() != 0) {
        p.padded = comm_buffers_.take(ACCEL_MEMORY_COMM, fp32, unit->shards.padded_numel(), ACCEL_MEMORY_DEVICE,
                                      "sharding padded all_gather");
        receive = &p.padded.tensor();
      }
      p.work = ops_.all_gather(unit->group, send, receive, "sharding parameter all_gather", /*async=*/true);
      gathered_elements_ += unit->shards.padded_numel();
      pending.push_back(std::move(p));
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // Every gather is completed, even after a failure, before its buffers go.
  for (Pending& p : pending) {
    try {
      ops_.wait_and_free(p.work);
      if (p.padded && !failure) {
        const sdk::FlatView real(p.padded.tensor(), 0, p.numel);
        ops_.copy(real.get(), p.full);
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace accel::sharding
