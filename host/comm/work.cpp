// Work handles and the state they share (see work.h). The polling loop lives
// here, once for both backends: they only say whether their operation is
// done (poll_locked), so deadlines, messages and the flight recorder behave
// the same whatever moves the bytes.
#include "host/comm/work.h"

#include <algorithm>
#include <thread>

#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::comm {

// ----------------------------------------------------------- CommState --

CommState::CommState(std::string backend, std::string group_name, int rank, int size,
                     std::vector<int> world_ranks, CommOptions options)
    : backend_(std::move(backend)),
      group_name_(std::move(group_name)),
      rank_(rank),
      size_(size),
      world_ranks_(std::move(world_ranks)),
      options_(std::move(options)),
      recorder_(options_.flight_recorder_entries) {}

int CommState::world_rank_of(int group_rank) const {
  if (world_ranks_.empty()) return group_rank;
  if (group_rank < 0 || group_rank >= static_cast<int>(world_ranks_.size())) return -1;
  return world_ranks_[static_cast<size_t>(group_rank)];
}

int64_t CommState::resolve_timeout_ms(int64_t op_timeout_ms) const {
  const int64_t t = op_timeout_ms > 0 ? op_timeout_ms : options_.timeout_ms;
  return t > 0 ? t : 1800 * 1000;
}

std::string CommState::who() const {
  return strformat("rank %d (rank %d of %d in group '%s', %s)", world_rank_of(rank_), rank_, size_,
                   group_name_.c_str(), backend_.c_str());
}

void CommState::set_failed(const Status& cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    failure_ = cause;
    failed_at_ = SteadyClock::now();
    failed_.store(true, std::memory_order_release);
  }
  log::error(cause.to_string());
  const std::string where = dump_flight_recorder();
  if (!where.empty()) log::error(who() + ": flight recorder written to " + where);
}

Status CommState::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

SteadyClock::time_point CommState::failed_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_at_;
}

std::string CommState::dump_flight_recorder() const {
  if (recorder_.capacity() == 0) return {};
  const std::string header = "flight recorder of " + who();
  if (!options_.flight_recorder_dir.empty()) {
    const std::string path =
        strformat("%s/flight_recorder_rank%d_%s_%s.txt", options_.flight_recorder_dir.c_str(),
                  world_rank_of(rank_), group_name_.c_str(), backend_.c_str());
    std::string error;
    if (recorder_.dump_to_file(path, header, &error)) return path;
    log::error(who() + ": could not write the flight recorder: " + error + "; logging it instead");
  }
  // The log gets the tail only: 2000 lines per rank would bury the cause.
  log::error(recorder_.dump(header, 32));
  return {};
}

// ---------------------------------------------------------------- Work --

namespace {

// A Work that failed before it started (validation, failed communicator).
class FailedWork final : public Work {
 public:
  FailedWork(std::shared_ptr<CommState> state, OpInfo info, ErrorCode code, const std::string& detail)
      : Work(std::move(state), std::move(info), 0) {
    fail_to_start(code, detail);
  }

 protected:
  Progress poll_locked(std::string*) override { return Progress::failed; }
};

}  // namespace

Work::Work(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms)
    : state_(std::move(state)),
      info_(std::move(info)),
      seq_(state_->next_seq()),
      timeout_ms_(state_->resolve_timeout_ms(timeout_ms)),
      deadline_(SteadyClock::now() + std::chrono::milliseconds(timeout_ms_)) {
  OpRecord record;
  record.seq = seq_;
  record.op = info_.op;
  record.dtype = info_.dtype;
  record.count = info_.count;
  record.peer = info_.peer;
  record.label = info_.label;
  record.issued_us = FlightRecorder::now_us();
  state_->recorder().record_issue(std::move(record));
}

Work::~Work() {
  if (!finished()) {
    // Cannot wait here (it could block past any deadline); the backend's
    // destructor abandons whatever request is still in flight.
    log::warn(state_->who() + ": " + describe() + " destroyed before it finished; abandoned");
    state_->recorder().record_finish(seq_, OpState::failed);
  }
}

std::shared_ptr<Work> Work::make_failed(const std::shared_ptr<CommState>& state, OpInfo info, ErrorCode code,
                                        const std::string& detail) {
  return std::make_shared<FailedWork>(state, std::move(info), code, detail);
}

std::string Work::describe() const {
  std::string out = strformat("%s #%llu", op_name(info_.op), static_cast<unsigned long long>(seq_));
  if (!info_.label.empty()) out += " '" + info_.label + "'";
  if (info_.op != OpType::barrier && info_.op != OpType::batch_p2p) {
    out += strformat(" (%s x%lld)", dtype_name(info_.dtype), static_cast<long long>(info_.count));
  }
  if (info_.peer >= 0) {
    const char* role = info_.op == OpType::broadcast ? "root"
                       : info_.op == OpType::send    ? "to peer"
                                                     : "from peer";
    out += strformat(" %s %d (world rank %d)", role, info_.peer, state_->world_rank_of(info_.peer));
  }
  return out;
}

Status Work::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Work::finish_locked(OpState state, Status status) {
  status_ = std::move(status);
  state_->recorder().record_finish(seq_, state);
  finished_.store(true, std::memory_order_release);
}

void Work::fail_to_start(ErrorCode code, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  finish_locked(OpState::failed, Status::error(code, state_->who() + ": " + describe() + ": " + detail));
}

bool Work::test_locked(SteadyClock::time_point deadline, int64_t waited_ms) {
  if (finished()) return true;
  std::string error;
  const Progress progress = poll_locked(&error);
  if (progress == Progress::done) {
    const std::string problem = complete_locked();
    if (problem.empty()) {
      finish_locked(OpState::completed, Status{});
      return true;
    }
    error = problem;
  }
  // Messages are formatted only on the way out: this runs on every poll.
  const auto prefix = [this] { return state_->who() + ": " + describe(); };
  if (progress != Progress::pending) {
    Status failure = Status::error(ErrorCode::internal, prefix() + " failed: " + error);
    finish_locked(OpState::failed, failure);
    state_->set_failed(failure);
    return true;
  }
  if (state_->failed()) {
    abandon_locked();
    finish_locked(OpState::failed, Status::error(ErrorCode::aborted,
                                                 prefix() + " abandoned: the communicator failed earlier: " +
                                                     state_->failure().message));
    return true;
  }
  if (SteadyClock::now() < deadline) return false;
  std::string hint;
  switch (info_.op) {
    case OpType::send:
      hint = "the peer did not receive it (stuck, exited or out of order)";
      break;
    case OpType::recv:
      hint = "the peer did not send it (stuck, exited or out of order)";
      break;
    default:
      hint = "a rank of the group did not issue it or died (compare the ranks' flight recorders)";
  }
  Status failure =
      Status::error(ErrorCode::timeout, strformat("%s did not complete within %lld ms; %s", prefix().c_str(),
                                                  static_cast<long long>(waited_ms), hint.c_str()));
  abandon_locked();
  finish_locked(OpState::timed_out, failure);
  state_->set_failed(failure);
  return true;
}

bool Work::test() {
  std::lock_guard<std::mutex> lock(mu_);
  return test_locked(deadline_, timeout_ms_);
}

bool Work::try_test() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return finished();
  return test_locked(deadline_, timeout_ms_);
}

Status Work::wait(int64_t timeout_ms) { return wait(timeout_ms, nullptr); }

Status Work::wait(int64_t timeout_ms, const std::function<void()>& between_polls) {
  const SteadyClock::time_point start = SteadyClock::now();
  const SteadyClock::time_point deadline =
      timeout_ms > 0 ? start + std::chrono::milliseconds(timeout_ms) : deadline_;
  const int64_t waited_ms = timeout_ms > 0 ? timeout_ms : timeout_ms_;
  const auto busy = std::chrono::milliseconds(state_->options().busy_poll_ms);
  int64_t sleep_us = 20;
  for (int64_t polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (test_locked(deadline, waited_ms)) return status_;
    }
    // Open MPI advances a non-blocking collective only inside MPI calls, so
    // poll hot while the operation is young: first spinning (a small
    // message completes within a few polls, and a sched_yield per poll
    // would double its latency), then yielding the core to oversubscribed
    // ranks. An operation this late waits on a slow peer; sleeping then
    // costs little.
    if (polls < 64) continue;
    if (between_polls && polls % 16 == 0) between_polls();
    if (SteadyClock::now() - start < busy) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(sleep_us * 2, 1000);
    }
  }
}

Status Work::wait_stream(void*) { return wait(); }

}  // namespace accel::comm
