// Which plugins capture trace events (accel/trace.h, set_capture), and the
// gate between a plugin's capture switch and the deliveries to its
// trace_event hook.
//
// Why a gate: a delivery checks the switch and then calls the hook outside
// any lock (hooks run concurrently, accel/plugin.h). Without a gate a thread
// that saw the switch on could call the hook after the plugin turned it off
// and went on to tear down. So every delivery is counted while it runs, and
// turning a switch off returns only once no delivery to that plugin is in
// progress on another thread.
//
// Invariant: after set(plugin, false) returns, no call to deliver(plugin, ..)
// runs its callable on another thread, and none starts until set(plugin,
// true). A hook may turn its own plugin's capture off from inside a delivery
// (the profiler does, on the step's END): the calling thread's own
// deliveries are not waited for, nor are those of other threads that are
// themselves waiting in set(.., false) from inside a delivery, so neither
// deadlocks.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

namespace accel::runtime {

class TraceCapture {
 public:
  // Whether any plugin captures now (lock-free: the emit fast path).
  bool any() const { return on_count_.load(std::memory_order_acquire) > 0; }
  bool captures(const std::string& plugin) const;

  // Turns `plugin`'s capture on or off; off waits as described above.
  void set(const std::string& plugin, bool on);

  // Runs `deliver` if `plugin` captures, counted as a delivery in progress
  // until it returns (or throws).
  template <typename Deliver>
  void deliver(const std::string& plugin, Deliver&& deliver) {
    if (!enter(plugin)) return;
    const Leave leave{this, plugin};
    deliver();
  }

  // Calls `visit(plugin)` for every plugin that captures now, under the lock
  // (do not call back into this object from it).
  template <typename Visit>
  void for_each_capturing(Visit&& visit) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [plugin, state] : plugins_) {
      if (state.on) visit(plugin);
    }
  }

 private:
  struct State {
    bool on = false;
    int in_flight = 0;  // deliveries running now, on any thread
    int parked = 0;     // of those, held by threads waiting in set(.., false)
    int waiting = 0;    // threads waiting in set(.., false)
  };
  struct Leave {
    TraceCapture* capture;
    const std::string& plugin;
    ~Leave() { capture->leave(plugin); }
  };
  bool enter(const std::string& plugin);
  void leave(const std::string& plugin) noexcept;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<std::string, State> plugins_;
  std::atomic<int> on_count_{0};
};

}  // namespace accel::runtime
