// The watchdog of one communicator: a thread that enforces deadlines nobody
// is waiting on. A Work that is never waited (a plugin that launched an
// all_reduce and then blocks elsewhere) still times out here; NCCL's
// asynchronous errors are noticed here; and once the communicator failed,
// the job is ended (CommOptions::fatal_handler, by default abort_all) if the
// caller has not ended it within abort_grace_ms — so a rank stuck where no
// deadline reaches still leaves (PyTorch's NCCL watchdog plays this role).
//
// Invariant: the watchdog only try-locks Works, so it never waits behind a
// waiter, and a waiter never waits behind it for more than one poll.
// Thread-safety: track() is called from the issuing thread; everything else
// runs on the watchdog's own thread. Destruction stops and joins it.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/comm/work.h"

namespace accel::comm {

class Watchdog {
 public:
  // `health_check`, if set, runs every period and returns a problem ("" when
  // healthy): a non-empty answer fails the communicator. `on_failure`, if
  // set, runs once on the watchdog thread after the communicator failed
  // (NCCL: ncclCommAbort, which frees kernels stuck on a dead peer).
  explicit Watchdog(std::shared_ptr<CommState> state, std::function<std::string()> health_check = {},
                    std::function<void()> on_failure = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches `work` until it finished (held weakly: a dropped handle's
  // backend abandons its request itself).
  void track(const std::shared_ptr<Work>& work);

 private:
  void run();
  void check_once();

  const std::shared_ptr<CommState> state_;
  const std::function<std::string()> health_check_;
  const std::function<void()> on_failure_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;                       // guarded by mu_
  std::vector<std::weak_ptr<Work>> works_;  // guarded by mu_
  bool on_failure_ran_ = false;             // watchdog thread only
  bool fatal_called_ = false;               // watchdog thread only
  std::thread thread_;
};

}  // namespace accel::comm
