// Clock alignment of the ranks: rank 0 ping-pongs with every other rank
// (NTP's four timestamps: t1 rank 0 sends, t2 rank r receives, t3 rank r
// answers, t4 rank 0 receives; offset = ((t2 - t1) + (t3 - t4)) / 2, round
// trip = (t4 - t1) - (t3 - t2)), keeps the round with the shortest round
// trip, and bounds that sample's error by half its round trip. Done at the
// run's start and end; between the two the offset is interpolated linearly
// in the rank's own clock (the drift correction).
//
// Thread-safety: loop thread only; every rank must call measure() together.
#pragma once

#include <cstdint>
#include <vector>

#include "messenger.h"

namespace accel::profiler {

// One rank's offset from rank 0 at one moment.
struct ClockSample {
  int64_t local_ns = 0;   // the rank's own clock at the sample
  int64_t offset_ns = 0;  // the rank's clock minus rank 0's
  int64_t error_ns = 0;   // half the round trip of the sample kept
};

// A rank's clock mapped onto rank 0's: the two samples, interpolated.
struct ClockMap {
  ClockSample start, end;
  bool has_end = false;
  double to_reference_ns(int64_t local_ns) const;
  int64_t error_ns() const { return has_end && end.error_ns > start.error_ns ? end.error_ns : start.error_ns; }
  // Parts per million the rank's clock runs fast against rank 0's.
  double drift_ppm() const;
  std::vector<int64_t> pack() const;
  static ClockMap unpack(const std::vector<int64_t>& packed);
  static constexpr size_t kPackedSize = 7;
};

// One ping-pong round's estimate from its four timestamps (t1, t4 on rank
// 0's clock; t2, t3 on the peer's).
ClockSample ntp_sample(int64_t t1, int64_t t2, int64_t t3, int64_t t4);
// Of several rounds' samples (with their round trips), the one with the
// shortest round trip: the tightest error bound.
struct ClockRound {
  int64_t t1, t2, t3, t4;
};
ClockSample best_sample(const std::vector<ClockRound>& rounds);

// CLOCK_MONOTONIC in nanoseconds: the clock of the host's trace events.
int64_t monotonic_ns();

// On rank 0, one sample per rank (rank 0's own: zero offset); on the other
// ranks, an empty vector (rank 0 holds their samples).
std::vector<ClockSample> measure_offsets(const Messenger& messenger, int32_t rank, int32_t world_size, int rounds);

}  // namespace accel::profiler
