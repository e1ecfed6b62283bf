// Work handles (c10d's Work): what every asynchronous operation returns, and
// the per-communicator state the handles share (identity, options, flight
// recorder, first failure).
//
// Invariants: every Work has a deadline (issue time + its timeout) and never
// blocks past it: wait() polls the backend (MPI_Test, cudaEventQuery) and
// never calls a blocking MPI_Wait or stream synchronize. A Work finishes
// exactly once: completed, failed or timed out. The first failure of any
// operation marks the communicator failed; every later (or still pending)
// operation on it then fails at once with ACCEL_ERROR_ABORTED naming that
// first failure, so ranks leave within one timeout, not one per operation.
//
// Thread-safety: a Work may be waited or tested from any thread (a mutex
// serialises them; the watchdog only try-locks). CommState is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/comm/flight_recorder.h"
#include "host/comm/types.h"

namespace accel::comm {

using SteadyClock = std::chrono::steady_clock;

// ----------------------------------------------------------- CommState --

// What a communicator and all Works it issued share; Works keep it alive, so
// a handle may outlive its communicator.
class CommState {
 public:
  // `world_ranks[i]` is the world rank of group rank i (empty: identity).
  CommState(std::string backend, std::string group_name, int rank, int size, std::vector<int> world_ranks,
            CommOptions options);

  const std::string& backend() const { return backend_; }
  const std::string& group_name() const { return group_name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int world_rank_of(int group_rank) const;
  const CommOptions& options() const { return options_; }
  FlightRecorder& recorder() { return recorder_; }
  const FlightRecorder& recorder() const { return recorder_; }

  // Sequence numbers start at 1. Called by the issuing (loop) thread only.
  uint64_t next_seq() { return ++last_seq_; }
  // Effective timeout of an operation asking for `op_timeout_ms` (0: default).
  int64_t resolve_timeout_ms(int64_t op_timeout_ms) const;
  // "rank 3 (rank 1 of 2 in group 'tp0', mpi)": how every message starts.
  std::string who() const;

  // Records the first failure; later calls are ignored. The first call logs
  // `cause` and dumps the flight recorder (to a file when configured).
  void set_failed(const Status& cause);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status failure() const;
  SteadyClock::time_point failed_at() const;

  // Writes the recorder where CommOptions says; returns where it went.
  std::string dump_flight_recorder() const;

 private:
  const std::string backend_;
  const std::string group_name_;
  const int rank_;
  const int size_;
  const std::vector<int> world_ranks_;
  const CommOptions options_;
  FlightRecorder recorder_;
  uint64_t last_seq_ = 0;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;  // guards failure_ and failed_at_
  Status failure_;
  SteadyClock::time_point failed_at_{};
};

// ---------------------------------------------------------------- Work --

// What an operation was asked to do; recorded and quoted in messages.
struct OpInfo {
  OpType op = OpType::barrier;
  DType dtype = DType::f32;
  int64_t count = 0;
  int peer = -1;  // root or peer (group rank); -1 when none
  std::string label;
};

class Work {
 public:
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation finished or its deadline passed; returns its
  // status. timeout_ms > 0 waits at most that long instead of up to the
  // operation's own deadline; running out of either is a timeout of the
  // operation (ACCEL_ERROR_TIMEOUT, and the communicator is failed).
  Status wait(int64_t timeout_ms = 0);
  // The same, calling `between_polls` every few polls once the operation
  // outlived its first fast polls (so a quick collective never pays for
  // it): the services poll the collective sequence checks there, so a rank
  // blocked in a collective its peers skipped learns it at once. An
  // exception from it leaves wait() (the operation stays pending).
  Status wait(int64_t timeout_ms, const std::function<void()>& between_polls);
  // Never blocks: true once finished (successfully or not). Past the
  // deadline it finishes the Work as timed out.
  bool test();
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // OK while pending and after success; the error once failed.
  Status status() const;

  uint64_t seq() const { return seq_; }
  const OpInfo& info() const { return info_; }
  SteadyClock::time_point deadline() const { return deadline_; }
  // "all_reduce #17 'ddp bucket 3' (f32 x1024)"
  std::string describe() const;

  // Orders `cuda_stream` after the operation without blocking the host
  // (NCCL). Host-memory operations have no stream: this is wait().
  virtual Status wait_stream(void* cuda_stream);

  // A Work that already failed with `code`: validation errors and operations
  // on a failed communicator. Recorded like any other operation.
  static std::shared_ptr<Work> make_failed(const std::shared_ptr<CommState>& state, OpInfo info,
                                           ErrorCode code, const std::string& detail);

  // Watchdog: test() unless another thread is testing it right now.
  bool try_test();

 protected:
  // Takes the next sequence number of `state` and records the issue.
  Work(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms);

  enum class Progress { pending, done, failed };
  // Checks the backend once (non-blocking). On `failed`, sets *error to the
  // cause (without the "who: what" prefix). Called with the Work's lock held.
  virtual Progress poll_locked(std::string* error) = 0;
  // Runs once after `done` (e.g. avg's division, a recv's length check);
  // a returned message fails the Work. Lock held.
  virtual std::string complete_locked() { return {}; }
  // Runs once when the Work timed out or was abandoned because the
  // communicator failed: cancel what can be cancelled. Lock held.
  virtual void abandon_locked() {}

  // Finishes a Work whose operation could not even be started.
  void fail_to_start(ErrorCode code, const std::string& detail);
  CommState& state() { return *state_; }
  const std::shared_ptr<CommState>& shared_state() const { return state_; }

 private:
  bool test_locked(SteadyClock::time_point deadline, int64_t waited_ms);
  void finish_locked(OpState state, Status status);

  const std::shared_ptr<CommState> state_;
  const OpInfo info_;
  const uint64_t seq_;
  const int64_t timeout_ms_;
  const SteadyClock::time_point deadline_;
  mutable std::mutex mu_;
  std::atomic<bool> finished_{false};
  Status status_;  // guarded by mu_
};

}  // namespace accel::comm
