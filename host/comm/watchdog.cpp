// The watchdog thread (see watchdog.h).
#include "host/comm/watchdog.h"

#include <algorithm>
#include <chrono>

#include "host/comm/abort.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::comm {

Watchdog::Watchdog(std::shared_ptr<CommState> state, std::function<std::string()> health_check,
                   std::function<void()> on_failure)
    : state_(std::move(state)), health_check_(std::move(health_check)), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::track(const std::shared_ptr<Work>& work) {
  if (work->finished()) return;
  std::lock_guard<std::mutex> lock(mu_);
  works_.push_back(work);
}

void Watchdog::run() {
  const auto period = std::chrono::milliseconds(std::max<int64_t>(state_->options().watchdog_period_ms, 1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    check_once();
    lock.lock();
  }
}

void Watchdog::check_once() {
  if (health_check_ && !state_->failed()) {
    const std::string problem = health_check_();
    if (!problem.empty())
      state_->set_failed(Status::error(ErrorCode::aborted, state_->who() + ": " + problem));
  }

  // Test every tracked Work outside the lock, so track() never waits on MPI.
  std::vector<std::weak_ptr<Work>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    works.swap(works_);
  }
  std::vector<std::weak_ptr<Work>> still_pending;
  for (const std::weak_ptr<Work>& weak : works) {
    std::shared_ptr<Work> work = weak.lock();
    if (work && !work->try_test()) still_pending.push_back(weak);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    works_.insert(works_.end(), still_pending.begin(), still_pending.end());
  }

  if (!state_->failed()) return;
  if (on_failure_ && !on_failure_ran_) {
    on_failure_ran_ = true;
    on_failure_();
  }
  const CommOptions& options = state_->options();
  if (!options.abort_on_failure || fatal_called_) return;
  const auto since = SteadyClock::now() - state_->failed_at();
  if (since < std::chrono::milliseconds(options.abort_grace_ms)) return;
  fatal_called_ = true;
  const std::string reason =
      state_->failure().message +
      strformat(" [the watchdog of %s ended the job %lld ms after the failure]", state_->who().c_str(),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(since).count()));
  if (options.fatal_handler) {
    options.fatal_handler(reason);
  } else {
    abort_all(reason);
  }
}

}  // namespace accel::comm
