// Ping-pong clock offsets (see clock_sync.h).
#include "clock_sync.h"

#include <time.h>

#include <limits>

namespace accel::profiler {

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

double ClockMap::to_reference_ns(int64_t local_ns) const {
  double offset = static_cast<double>(start.offset_ns);
  if (has_end && end.local_ns != start.local_ns) {
    const double slope = static_cast<double>(end.offset_ns - start.offset_ns) /
                         static_cast<double>(end.local_ns - start.local_ns);
    offset += slope * static_cast<double>(local_ns - start.local_ns);
  }
  return static_cast<double>(local_ns) - offset;
}

double ClockMap::drift_ppm() const {
  if (!has_end || end.local_ns == start.local_ns) return 0.0;
  return 1e6 * static_cast<double>(end.offset_ns - start.offset_ns) /
         static_cast<double>(end.local_ns - start.local_ns);
}

std::vector<int64_t> ClockMap::pack() const {
  return {start.local_ns, start.offset_ns, start.error_ns, end.local_ns, end.offset_ns, end.error_ns, has_end ? 1 : 0};
}

ClockMap ClockMap::unpack(const std::vector<int64_t>& p) {
  ClockMap m;
  m.start = ClockSample{p.at(0), p.at(1), p.at(2)};
  m.end = ClockSample{p.at(3), p.at(4), p.at(5)};
  m.has_end = p.at(6) != 0;
  return m;
}

ClockSample ntp_sample(int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  const int64_t round_trip = (t4 - t1) - (t3 - t2);
  ClockSample s;
  s.local_ns = t2 + (t3 - t2) / 2;
  s.offset_ns = ((t2 - t1) + (t3 - t4)) / 2;
  s.error_ns = round_trip / 2 + 1;  // +1: never claim a zero error
  return s;
}

ClockSample best_sample(const std::vector<ClockRound>& rounds) {
  ClockSample best;
  int64_t best_round_trip = std::numeric_limits<int64_t>::max();
  for (const ClockRound& r : rounds) {
    const int64_t round_trip = (r.t4 - r.t1) - (r.t3 - r.t2);
    if (round_trip < best_round_trip) {
      best_round_trip = round_trip;
      best = ntp_sample(r.t1, r.t2, r.t3, r.t4);
    }
  }
  return best;
}

std::vector<ClockSample> measure_offsets(const Messenger& messenger, int32_t rank, int32_t world_size, int rounds) {
  std::vector<ClockSample> samples;
  if (rank == 0) {
    samples.push_back(ClockSample{monotonic_ns(), 0, 0});
    for (int32_t peer = 1; peer < world_size; ++peer) {
      std::vector<ClockRound> measured;
      for (int round = 0; round < rounds; ++round) {
        const int64_t t1 = monotonic_ns();
        messenger.send(peer, {t1});
        const std::vector<int64_t> reply = messenger.recv(peer, 2);
        const int64_t t4 = monotonic_ns();
        measured.push_back({t1, reply[0], reply[1], t4});
      }
      samples.push_back(best_sample(measured));
    }
  } else {
    for (int round = 0; round < rounds; ++round) {
      messenger.recv(0, 1);
      const int64_t t2 = monotonic_ns();
      const int64_t t3 = monotonic_ns();
      messenger.send(0, {t2, t3});
    }
  }
  return samples;
}

}  // namespace accel::profiler
