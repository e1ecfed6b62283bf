// gather_engine.cpp — all-gathering and releasing wrap groups (see
// gather_engine.h).
#include "gather_engine.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <exception>

namespace accel::sharding {

GatherEngine::GatherEngine(const sdk::Kernels& ops, const ShardingOptions& config, const GatherPlan& plan,
                           ShardStore& store, AccelGroup* sharding, sdk::BufferPool& comm_buffers)
    : ops_(ops),
      config_(config),
      plan_(plan),
      store_(store),
      sharding_(sharding),
      comm_buffers_(comm_buffers),
      state_(plan.groups.size(), State::resharded),
      in_flight_(plan.groups.size()) {}

int32_t GatherEngine::alive_count() const {
  const auto is_alive = [](State s) { return s != State::resharded; };
  return static_cast<int32_t>(std::count_if(state_.begin(), state_.end(), is_alive));
}

int64_t GatherEngine::elements(int32_t group) const {
  int64_t n = 0;
  for (int32_t u : plan_.groups[static_cast<size_t>(group)].units) n += store_.sharded(u)->layout.numel;
  return n;
}

int64_t GatherEngine::alive_elements() const {
  int64_t n = 0;
  for (size_t g = 0; g < state_.size(); ++g) {
    if (state_[g] != State::resharded) n += elements(static_cast<int32_t>(g));
  }
  return n;
}

void GatherEngine::note_alive() { counters_.max_alive = std::max(counters_.max_alive, alive_count()); }

void GatherEngine::issue(int32_t group, bool async) {
  const DLDataType fp32{kDLFloat, 32, 1};
  std::vector<UnitGather>& gathers = in_flight_[static_cast<size_t>(group)];
  // Marked before anything is issued: should a unit fail half-way, release()
  // still completes the gathers already in flight before their buffers go.
  state_[static_cast<size_t>(group)] = State::gathering;
  for (int32_t u : plan_.groups[static_cast<size_t>(group)].units) {
    ShardedUnit& unit = *store_.sharded(u);
    UnitGather g;
    g.unit = u;
    g.full = ops_.materialize(u, ACCEL_STORAGE_PARAMS, ACCEL_INIT_UNDEFINED, config_.param_dtype).params;
    const int64_t shard_numel = unit.shards.shard_numel();

    // This rank's contribution: the master shard itself when it already is
    // fp32 on the device, else a device copy cast to param_dtype; a master in
    // the NVMe swap is read into host memory first.
    const DLTensor* send = &unit.master_tensor();
    if (unit.master_swapped) {
      g.read_in = ops_.allocate(ACCEL_MEMORY_COMM, fp32, shard_numel, ACCEL_MEMORY_HOST_PINNED, false,
                                "sharding shard read from NVMe");
      store_.swap()->read_masters(u, static_cast<float*>(g.read_in.tensor().data));
      send = &g.read_in.tensor();
    }
    if (!sdk::same_space(*send, *g.full)) {
      sdk::BufferPool::Lease on_device =
          comm_buffers_.take(ACCEL_MEMORY_COMM, fp32, shard_numel, ACCEL_MEMORY_DEVICE, "sharding shard copied in");
      ops_.copy(send, &on_device.tensor());
      g.staged_shard = std::move(on_device);
      send = &g.staged_shard.tensor();
    }
    if (!accel_dtype_equal(send->dtype, config_.param_dtype)) {
      sdk::BufferPool::Lease cast = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.param_dtype, shard_numel,
                                                       ACCEL_MEMORY_DEVICE, "sharding shard in param_dtype");
      ops_.convert(send, &cast.tensor());
      g.staged_shard = std::move(cast);  // frees the fp32 copy-in, if any, once cast
      send = &g.staged_shard.tensor();
    }

    const DLTensor* receive = g.full;
    if (unit.shards.padding() != 0) {
      g.padded = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.param_dtype, unit.shards.padded_numel(),
                                    ACCEL_MEMORY_DEVICE, "sharding padded all_gather");
      receive = &g.padded.tensor();
    }
    g.work = ops_.all_gather(sharding_, send, receive, "sharding all_gather", async);
    gathers.push_back(std::move(g));
  }
  state_[static_cast<size_t>(group)] = async ? State::gathering : State::gathered;
  ++counters_.gathers;
  note_alive();
  if (!async) complete(group);
}

void GatherEngine::complete(int32_t group) {
  std::vector<UnitGather>& gathers = in_flight_[static_cast<size_t>(group)];
  // Every handle is waited for, even after one failed, so no collective
  // still writes into a staging buffer when it is freed; the first failure
  // is rethrown afterwards.
  std::exception_ptr failure;
  for (UnitGather& g : gathers) {
    try {
      ops_.wait_and_free(g.work);
      g.work = nullptr;
      if (g.padded && !failure) {
        const int64_t numel = store_.sharded(g.unit)->layout.numel;
        const sdk::FlatView real(g.padded.tensor(), 0, numel);
        ops_.copy(real.get(), g.full);
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  gathers.clear();  // frees the staging buffers
  state_[static_cast<size_t>(group)] = State::gathered;
  if (failure) std::rethrow_exception(failure);
}

void GatherEngine::ensure_gathered(int32_t group) {
  if (deferred_ == group) deferred_ = -1;
  switch (state_[static_cast<size_t>(group)]) {
    case State::resharded:
      issue(group, false);
      break;
    case State::gathering:
      complete(group);
      break;
    case State::gathered:
      break;
  }
}

void GatherEngine::prefetch(int32_t group) {
  if (group < 0 || state_[static_cast<size_t>(group)] != State::resharded) return;
  if (config_.max_prefetch_elements > 0 && elements(group) > config_.max_prefetch_elements) return;
  const bool over_count = config_.limit_all_gathers && alive_count() >= 2;
  const bool over_elements =
      config_.max_live_elements > 0 && alive_elements() + elements(group) > config_.max_live_elements;
  if (over_count || over_elements) {
    deferred_ = group;
    return;
  }
  issue(group, true);
  ++counters_.prefetches;
}

void GatherEngine::release(int32_t group) {
  if (state_[static_cast<size_t>(group)] == State::resharded) return;
  if (state_[static_cast<size_t>(group)] == State::gathering) complete(group);
  for (int32_t u : plan_.groups[static_cast<size_t>(group)].units) ops_.release(u, ACCEL_STORAGE_PARAMS);
  state_[static_cast<size_t>(group)] = State::resharded;
  ++counters_.releases;
  if (deferred_ >= 0) {
    const int32_t next = deferred_;
    deferred_ = -1;
    prefetch(next);
  }
}

void GatherEngine::release_all() {
  deferred_ = -1;
  // Every group, even after one failed (teardown after an error); the first
  // failure is rethrown at the end.
  std::exception_ptr failure;
  for (size_t g = 0; g < state_.size(); ++g) {
    try {
      release(static_cast<int32_t>(g));
    } catch (...) {
      state_[g] = State::resharded;
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

GatherCounters GatherEngine::take_counters() {
  GatherCounters out = counters_;
  counters_ = GatherCounters{};
  counters_.max_alive = alive_count();
  return out;
}

}  // namespace accel::sharding
