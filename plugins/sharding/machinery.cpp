// machinery.cpp — a strategy's sharding parts at step end and teardown (see
// machinery.h).
#include "machinery.h"

#include <accel/sdk/error.hpp>

namespace accel::sharding {

void Machinery::end_step(const sdk::Services& s) {
  if (gathers) {
    gathers->release_all();
    const GatherCounters c = gathers->take_counters();
    s.metric("gathers", static_cast<double>(c.gathers), ACCEL_METRIC_SUM);
    s.metric("prefetches", static_cast<double>(c.prefetches), ACCEL_METRIC_SUM);
    s.metric("max_gathered_groups", static_cast<double>(c.max_alive), ACCEL_METRIC_MAX);
    s.metric("gather_bytes", static_cast<double>(c.bytes), ACCEL_METRIC_SUM);
    s.metric("encoded_gathers", static_cast<double>(c.encoded_units), ACCEL_METRIC_SUM);
  }
  if (schedule && gathers) {
    s.metric("recompute_gathers", static_cast<double>(schedule->take_recompute_gathers()), ACCEL_METRIC_SUM);
  }
  if (reducer) s.metric("reduce_scatters", static_cast<double>(reducer->take_reduce_scatters()), ACCEL_METRIC_SUM);
  if (store && store->swap()) {
    const MomentSwap::Traffic io = store->swap()->take_traffic();
    s.metric("nvme_read_bytes", static_cast<double>(io.read), ACCEL_METRIC_SUM);
    s.metric("nvme_write_bytes", static_cast<double>(io.written), ACCEL_METRIC_SUM);
  }
  if (comm_buffers) {
    const sdk::BufferPool::Stats pool = comm_buffers->stats();
    s.metric("comm_buffers_allocated", static_cast<double>(pool.allocated));
    s.metric("comm_buffers_reused", static_cast<double>(pool.reused));
  }
}

void Machinery::teardown() noexcept {
  if (reducer) reducer->abandon();
  if (gathers) {
    try {
      gathers->release_all();
    } catch (...) {
      // the run is ending; the host frees what it materialised
    }
  }
  checkpoint.reset();
  optimizer.reset();
  publish.reset();
  schedule.reset();
  gathers.reset();
  reducer.reset();
  comm_buffers.reset();
  store.reset();
}

}  // namespace accel::sharding
