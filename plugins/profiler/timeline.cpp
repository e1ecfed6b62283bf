// Pairing ranges into slices (see timeline.h).
#include "timeline.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace accel::profiler {

std::string detail_value(const std::string& detail, const std::string& key) {
  size_t pos = 0;
  while (pos < detail.size()) {
    size_t end = detail.find("; ", pos);
    if (end == std::string::npos) end = detail.size();
    const std::string item = detail.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos && item.compare(0, eq, key) == 0 && eq == key.size()) return item.substr(eq + 1);
    pos = end + 2;
  }
  return {};
}

std::string Timeline::stack_of(size_t slice) const {
  std::vector<const std::string*> names;
  for (int s = static_cast<int>(slice); s >= 0; s = slices[static_cast<size_t>(s)].parent) {
    names.push_back(&events[slices[static_cast<size_t>(s)].begin].name);
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += (path.empty() ? "" : " > ") + **it;
  return path;
}

Timeline build_timeline(std::vector<Event> events) {
  Timeline t;
  // Each track in time order; stable, so events of one thread with equal
  // timestamps keep their emission order.
  std::vector<size_t> order(events.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (events[a].thread != events[b].thread) return events[a].thread < events[b].thread;
    return events[a].ts_ns < events[b].ts_ns;
  });
  t.events.reserve(events.size());
  for (size_t i : order) t.events.push_back(std::move(events[i]));

  // Pair per track with a stack of open BEGINs; an END closes the innermost
  // open range of its name, dropping ranges opened above it that never ended.
  struct Open {
    size_t begin;
    std::vector<size_t> children;  // slice indices
  };
  std::map<uint64_t, std::vector<Open>> open;
  std::vector<int> parent_begin;  // per slice: its parent's BEGIN index, or -1
  for (size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.type == ACCEL_TRACE_INSTANT || e.type == ACCEL_TRACE_COUNTER) {
      t.points.push_back(i);
      continue;
    }
    std::vector<Open>& stack = open[e.thread];
    if (e.type == ACCEL_TRACE_BEGIN) {
      stack.push_back(Open{i, {}});
      continue;
    }
    auto match = std::find_if(stack.rbegin(), stack.rend(), [&](const Open& o) { return t.events[o.begin].name == e.name; });
    if (match == stack.rend()) continue;  // an END whose BEGIN was not recorded
    const size_t keep = static_cast<size_t>(stack.rend() - match) - 1;
    stack.resize(keep + 1);  // unended ranges above it are dropped
    // What the emitter learnt only during the range (a collective's
    // sequence number, its bytes) travels on the END.
    Event& opened = t.events[stack.back().begin];
    if (opened.detail.empty()) opened.detail = e.detail;
    if (opened.bytes == 0) opened.bytes = e.bytes;
    Slice s;
    s.begin = stack.back().begin;
    s.ts_ns = t.events[s.begin].ts_ns;
    s.dur_ns = std::max<int64_t>(0, e.ts_ns - s.ts_ns);
    s.track = e.thread;
    s.depth = static_cast<int>(keep);
    const size_t index = t.slices.size();
    int64_t children = 0;
    for (size_t c : stack.back().children) {
      children += t.slices[c].dur_ns;
      t.slices[c].parent = static_cast<int>(index);
    }
    s.self_ns = std::max<int64_t>(0, s.dur_ns - children);
    t.slices.push_back(s);
    stack.pop_back();
    if (!stack.empty()) stack.back().children.push_back(index);
  }
  // Sort by time, parents before their children; remap parent indices.
  std::vector<size_t> by_time(t.slices.size());
  std::iota(by_time.begin(), by_time.end(), 0);
  std::stable_sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) {
    const Slice &x = t.slices[a], &y = t.slices[b];
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    if (x.dur_ns != y.dur_ns) return x.dur_ns > y.dur_ns;
    return x.depth < y.depth;
  });
  std::vector<int> new_index(t.slices.size());
  for (size_t k = 0; k < by_time.size(); ++k) new_index[by_time[k]] = static_cast<int>(k);
  std::vector<Slice> sorted;
  sorted.reserve(t.slices.size());
  for (size_t k : by_time) {
    Slice s = t.slices[k];
    if (s.parent >= 0) s.parent = new_index[static_cast<size_t>(s.parent)];
    sorted.push_back(s);
  }
  t.slices = std::move(sorted);
  // The unit of each slice: its own, or the nearest enclosing range's
  // (parents precede children in this order).
  for (Slice& s : t.slices) {
    s.unit = t.events[s.begin].unit;
    if (s.unit < 0 && s.parent >= 0) s.unit = t.slices[static_cast<size_t>(s.parent)].unit;
  }
  return t;
}

}  // namespace accel::profiler
