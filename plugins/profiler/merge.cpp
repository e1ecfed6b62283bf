// The merged, clock-aligned trace (see merge.h).
#include "merge.h"

#include <algorithm>
#include <cstdio>

#include "chrome_trace.h"

namespace accel::profiler {
namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash & 0x7fffffffffffffffull;  // travels as an int64
}

}  // namespace

std::vector<CollectivePart> collective_parts(const Timeline& t, const ClockMap& clock, int32_t rank) {
  std::vector<CollectivePart> parts;
  std::map<std::string, int> occurrences;
  for (const Slice& s : t.slices) {
    const Event& e = t.begin_of(s);
    if (e.category != "comm") continue;
    const std::string seq = detail_value(e.detail, "seq");
    std::string key;
    if (!seq.empty()) {
      key = e.name + "|seq=" + seq + "|ranks=" + detail_value(e.detail, "group_ranks");
    } else {
      key = e.name + "|label=" + detail_value(e.detail, "label") + "|step=" + std::to_string(e.step);
      key += "|n=" + std::to_string(occurrences[key]++);
    }
    CollectivePart p;
    p.key = fnv1a(key);
    p.rank = rank;
    p.track = s.track;
    p.begin_ns = clock.to_reference_ns(s.ts_ns);
    p.end_ns = clock.to_reference_ns(s.ts_ns + s.dur_ns);
    parts.push_back(p);
  }
  return parts;
}

std::vector<int64_t> pack_parts(const std::vector<CollectivePart>& parts) {
  std::vector<int64_t> packed;
  for (const CollectivePart& p : parts) {
    packed.insert(packed.end(), {static_cast<int64_t>(p.key), p.rank, static_cast<int64_t>(p.track),
                                 static_cast<int64_t>(p.begin_ns), static_cast<int64_t>(p.end_ns)});
  }
  return packed;
}

std::vector<CollectivePart> unpack_parts(const std::vector<int64_t>& packed) {
  std::vector<CollectivePart> parts;
  for (size_t i = 0; i + CollectivePart::kPackedSize <= packed.size(); i += CollectivePart::kPackedSize) {
    CollectivePart p;
    p.key = static_cast<uint64_t>(packed[i]);
    p.rank = static_cast<int32_t>(packed[i + 1]);
    p.track = static_cast<uint64_t>(packed[i + 2]);
    p.begin_ns = static_cast<double>(packed[i + 3]);
    p.end_ns = static_cast<double>(packed[i + 4]);
    parts.push_back(p);
  }
  return parts;
}

std::string flow_events_json(const std::vector<CollectivePart>& parts, std::map<int32_t, int64_t>* waited_for) {
  std::map<uint64_t, std::vector<const CollectivePart*>> by_key;
  for (const CollectivePart& p : parts) by_key[p.key].push_back(&p);
  std::string out;
  int64_t id = 1;
  // Inside a part, a little after its start or before its end, so the
  // viewer binds the arrow to that slice.
  const auto inside = [](const CollectivePart& p, bool at_end) {
    const double margin = std::min(1000.0, (p.end_ns - p.begin_ns) / 2);
    return at_end ? p.end_ns - margin : p.begin_ns + margin;
  };
  for (const auto& [key, group] : by_key) {
    std::vector<int32_t> ranks;
    for (const CollectivePart* p : group) ranks.push_back(p->rank);
    std::sort(ranks.begin(), ranks.end());
    if (std::unique(ranks.begin(), ranks.end()) - ranks.begin() < 2) continue;
    const CollectivePart* last =
        *std::max_element(group.begin(), group.end(), [](const CollectivePart* a, const CollectivePart* b) {
          return a->begin_ns < b->begin_ns;
        });
    (*waited_for)[last->rank] += 1;
    for (const CollectivePart* p : group) {
      if (p == last || p->rank == last->rank) continue;
      const std::string flow = std::to_string(id++);
      if (!out.empty()) out += ",\n";
      out += "{\"ph\":\"s\",\"name\":\"collective\",\"cat\":\"collective\",\"id\":" + flow +
             ",\"ts\":" + json_us(inside(*last, false)) + ",\"pid\":" + std::to_string(last->rank) +
             ",\"tid\":" + std::to_string(last->track) + "},\n";
      out += "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"collective\",\"cat\":\"collective\",\"id\":" + flow +
             ",\"ts\":" + json_us(inside(*p, true)) + ",\"pid\":" + std::to_string(p->rank) +
             ",\"tid\":" + std::to_string(p->track) + "}";
    }
  }
  return out;
}

std::string merged_other_data(const std::vector<ClockMap>& clocks, const std::map<int32_t, int64_t>& waited_for) {
  std::string out = "{\"clock\":\"CLOCK_MONOTONIC of rank 0\",\"clock_alignment\":{";
  int64_t max_error = 0;
  for (size_t r = 0; r < clocks.size(); ++r) {
    const ClockMap& c = clocks[r];
    max_error = std::max(max_error, c.error_ns());
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s\"%zu\":{\"offset_start_us\":%.3f,\"offset_end_us\":%.3f,\"drift_ppm\":%.3f,"
                  "\"error_us\":%.3f,\"measured_at_end\":%s}",
                  r ? "," : "", r, static_cast<double>(c.start.offset_ns) / 1e3,
                  static_cast<double>(c.has_end ? c.end.offset_ns : c.start.offset_ns) / 1e3, c.drift_ppm(),
                  static_cast<double>(c.error_ns()) / 1e3, c.has_end ? "true" : "false");
    out += line;
  }
  out += "},\"max_alignment_error_us\":" + json_us(static_cast<double>(max_error));
  out += ",\"collectives_arrived_last\":{";
  bool first = true;
  for (const auto& [rank, count] : waited_for) {
    out += (first ? "\"" : ",\"") + std::to_string(rank) + "\":" + std::to_string(count);
    first = false;
  }
  return out + "}}";
}

}  // namespace accel::profiler
