// The merged trace (profile_merged.json): every rank's events on rank 0's
// clock, each rank its own process track, and the ranks' parts of one
// collective joined by flow arrows drawn from the rank that arrived last
// (the one the others waited for) to every other rank's part.
//
// A collective is identified on every rank alike: by the communicator's
// sequence number and the group's ranks when the host gives them (every
// collective plugins issue), otherwise by its label, its step and its
// occurrence within that step (the host's own loss all-reduce).
//
// Pure functions; rank 0 assembles, the others contribute their parts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clock_sync.h"
#include "timeline.h"

namespace accel::profiler {

struct CollectivePart {
  uint64_t key = 0;      // the collective's identity (FNV-1a of its key text)
  int32_t rank = 0;
  uint64_t track = 0;
  double begin_ns = 0;   // on rank 0's clock
  double end_ns = 0;
  static constexpr size_t kPackedSize = 5;
};

std::vector<CollectivePart> collective_parts(const Timeline& timeline, const ClockMap& clock, int32_t rank);
std::vector<int64_t> pack_parts(const std::vector<CollectivePart>& parts);
std::vector<CollectivePart> unpack_parts(const std::vector<int64_t>& packed);

// Flow events ("s"/"f" pairs) for every collective with parts on two or
// more ranks; counts into *waited_for, per rank, the collectives that rank
// arrived at last.
std::string flow_events_json(const std::vector<CollectivePart>& parts, std::map<int32_t, int64_t>* waited_for);

// The merged trace's otherData: the alignment of every rank (offsets at
// start and end, drift, residual error) and the waited-for counts.
std::string merged_other_data(const std::vector<ClockMap>& clocks, const std::map<int32_t, int64_t>& waited_for);

}  // namespace accel::profiler
