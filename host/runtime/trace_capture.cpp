// The capture switches and their delivery gate (see trace_capture.h).
#include "host/runtime/trace_capture.h"

#include <algorithm>
#include <vector>

namespace accel::runtime {
namespace {

// The deliveries the calling thread is inside, innermost last, by the
// address of their plugin's State (map nodes never move). What set(.., false)
// must not wait for: they cannot end before it returns.
thread_local std::vector<const void*> t_deliveries;

}  // namespace

bool TraceCapture::captures(const std::string& plugin) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = plugins_.find(plugin);
  return it != plugins_.end() && it->second.on;
}

void TraceCapture::set(const std::string& plugin, bool on) {
  std::unique_lock<std::mutex> lock(mutex_);
  State& state = plugins_[plugin];
  if (state.on != on) on_count_.fetch_add(on ? 1 : -1, std::memory_order_acq_rel);
  state.on = on;
  if (on) return;
  const int own = static_cast<int>(std::count(t_deliveries.begin(), t_deliveries.end(), &state));
  state.parked += own;
  if (own > 0) idle_.notify_all();  // another thread parked in here may now proceed
  state.waiting += 1;
  // Turned on again meanwhile: this off is superseded, nothing to wait for.
  idle_.wait(lock, [&] { return state.on || state.in_flight <= state.parked; });
  state.waiting -= 1;
  state.parked -= own;
}

bool TraceCapture::enter(const std::string& plugin) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = plugins_.find(plugin);
  if (it == plugins_.end() || !it->second.on) return false;
  it->second.in_flight += 1;
  t_deliveries.push_back(&it->second);
  return true;
}

void TraceCapture::leave(const std::string& plugin) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  State& state = plugins_.find(plugin)->second;  // entered: present
  state.in_flight -= 1;
  t_deliveries.pop_back();
  if (state.waiting > 0) idle_.notify_all();
}

}  // namespace accel::runtime
