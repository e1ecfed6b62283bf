// gather_engine.h — gathering a wrap group's full parameters from the shards,
// and releasing them: the all-gather half of FSDP and ZeRO-3.
//
// A group is RESHARDED (no full parameters), GATHERING (an asynchronous
// all_gather in flight, started by a prefetch) or GATHERED (every unit's full
// buffer materialised and filled). To gather a unit: materialise its full
// PARAMS buffer in param_dtype, bring this rank's fp32 master shard to the
// device (cpu_offload) and cast it to param_dtype, all_gather over the
// unit's sharding group (ShardedUnit::group) into the buffer — or into a padded staging buffer, copied out, when the
// unit's size is not a multiple of the group size.
//
// Prefetch issues the all_gather asynchronously and returns; the group is
// completed (waited) when it is needed. limit_all_gathers: at most two
// groups are alive (GATHERING or GATHERED) after a prefetch — a prefetch that
// would make a third is deferred — as is one that would take the alive
// groups' elements past max_live_elements (ZeRO-3's
// stage3_max_live_parameters), when set — and issued when a group is released (or
// dropped if the group is gathered on demand first). The peak number of alive
// groups is reported per step. Staging buffers of in-flight gathers are
// leased from the plugin's communication pool (accel/sdk/buffer_pool.hpp)
// and go back to it at completion.
//
// Encoded gathers (ABI 1.8, accel/gather_codec.h): before each unit's gather
// the engine asks the host's gather codec which of the unit's parameters may
// travel encoded (a precision plugin's answer; fp8: the block linears'
// weights as E4M3). When some may, the rank's shard is packed as
// codec_plan.h lays it out — the codec encodes those elements into 1-byte
// codes, the others are copied as they are — the packets are all-gathered as
// bytes, and after the gather the codec decodes every rank's codes into the
// full buffer (param_dtype) and the other elements are copied there. The
// full buffer is then what a plain gather would have made, except for the
// encoded parameters, which hold their decoded values. Without a codec (a
// host before 1.8, no provider, or nothing encoded) the gather is the plain
// one. Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/tensor.hpp>
#include <accel/sdk/kernels.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "codec_plan.h"
#include "sharding_options.h"
#include "shard_store.h"
#include "gather_plan.h"

namespace accel::sharding {

// One unit's encoded-gather layout: which parameters travel as which code
// dtype (the codec's answer) and where each element goes (codec_plan.h).
struct UnitCodec {
  std::vector<DLDataType> code_dtypes;  // per parameter; bits 0: as is
  std::vector<bool> encoded;
  CodecGatherPlan plan;
};

struct GatherCounters {
  int64_t gathers = 0;     // groups gathered (on demand or prefetched)
  int64_t prefetches = 0;  // of which prefetched
  int64_t releases = 0;    // groups released
  int32_t max_alive = 0;   // peak groups alive at once
  int64_t bytes = 0;       // all_gather output bytes (what the host's comm_bytes counts for them)
  int64_t encoded_units = 0;  // unit gathers that went encoded
};

class GatherEngine {
 public:
  // Each unit gathers over its own sharding group (ShardedUnit::group).
  GatherEngine(const sdk::Kernels& ops, const ShardingOptions& config, const GatherPlan& plan, ShardStore& store,
               sdk::BufferPool& comm_buffers);

  // Makes `group`'s full parameters usable: completes its prefetch, or
  // gathers it now. `codec_flags` (ACCEL_GATHER_CODEC_*) go to the codec's
  // query: NO_GRAD for an evaluation forward.
  void ensure_gathered(int32_t group, uint32_t codec_flags = 0);
  // Starts gathering `group` asynchronously, unless it is alive already or
  // the limit defers it. -1 is ignored.
  void prefetch(int32_t group, uint32_t codec_flags = 0);
  // Frees `group`'s full parameters (completing an in-flight gather first),
  // then issues a deferred prefetch if the limit now allows it.
  void release(int32_t group);
  bool alive(int32_t group) const { return state_.at(static_cast<size_t>(group)) != State::resharded; }
  // Releases every alive group and drops a deferred prefetch (end of a step,
  // teardown).
  void release_all();

  GatherCounters take_counters();

 private:
  enum class State { resharded, gathering, gathered };
  struct UnitGather {
    int32_t unit = 0;
    const DLTensor* full = nullptr;       // the materialised buffer (host-owned view)
    sdk::Buffer read_in;                  // the master read from the NVMe swap (master_swapped); not pooled:
                                          // idle pooled copies would keep the partition the swap moved out
    sdk::BufferPool::Lease staged_shard;  // the shard in param_dtype on the device, when not the master itself
    sdk::BufferPool::Lease padded;        // all_gather output when numel % S != 0
    AccelWork* work = nullptr;
    // Encoded gathers: the plan (owned by codecs_), this rank's packet and
    // every rank's, gathered.
    const UnitCodec* codec = nullptr;
    uint32_t codec_flags = 0;
    sdk::BufferPool::Lease packet_out;
    sdk::BufferPool::Lease packet_in;
  };

  void issue(int32_t group, bool async, uint32_t codec_flags);
  // The codec's answer for `unit` on this gather (query), or nullptr when
  // nothing of it travels encoded.
  const UnitCodec* ask_codec(const ShardedUnit& unit, uint32_t codec_flags);
  void encode(UnitGather& g, const ShardedUnit& unit, const DLTensor& send);
  void decode(UnitGather& g);
  void complete(int32_t group);
  int32_t alive_count() const;
  int64_t elements(int32_t group) const;  // the group's unit elements
  int64_t alive_elements() const;
  void note_alive();

  const sdk::Kernels& ops_;
  const ShardingOptions& config_;
  const GatherPlan& plan_;
  ShardStore& store_;
  sdk::BufferPool& comm_buffers_;
  std::vector<State> state_;
  std::vector<std::vector<UnitGather>> in_flight_;  // per group
  int32_t deferred_ = -1;
  uint32_t deferred_flags_ = 0;
  GatherCounters counters_;
  // Per unit: the last codec answer and its packet plan (kept while the
  // answer stays the same).
  std::vector<std::unique_ptr<UnitCodec>> codecs_;
  const AccelGatherCodecServices* codec_services_ = nullptr;  // null: host before 1.8
};

}  // namespace accel::sharding
