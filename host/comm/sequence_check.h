// The cross-rank collective sequence check of one process group: every rank
// of a group must issue the same collectives on it in the same order (the
// ABI's rule), and a rank that issues a different one, or skips one, is
// caught at the step where it happened, naming both operations — instead of
// pairing silently with the wrong collective of its peers or leaving them
// blocked until the deadline (30 minutes by default).
//
// How: each rank folds what the peers must agree on (operation, dtype,
// count, reduce op, root or peer) of each collective it issues into a
// per-step hash, and keeps the step's first kMaxListed descriptors with
// their labels. The check runs over the group's ring (rank r talks to r+1
// and hears from r-1; equality is transitive, so neighbours suffice) on a
// private duplicate of the group's communicator, so its messages can never
// pair with a collective of the group:
//  - always: at step end each rank sends its step record (count, hash,
//    descriptors) to its successor and compares its predecessor's with its
//    own; and while a rank waits for a collective it polls (MPI_Test) for its
//    predecessor's step record — a predecessor that ended the step without
//    the collective this rank is blocked in is a skip, reported at once.
//    Cost: one message of at most ~5 KiB per rank, group and step, plus an
//    MPI_Test per group while waiting.
//  - verify mode (ACCEL_COMM_VERIFY=ops): additionally, before each
//    collective, the rank sends its descriptor and waits for its
//    predecessor's, so a mismatch is named before the collective is issued
//    (catches a rank blocked elsewhere too). Cost: one neighbour round trip
//    per collective.
// A mismatch throws CommError(aborted) whose message names the step, the
// group, and both operations; the host then ends the job.
//
// The same ring carries the news of a rank that failed on its own (a
// plugin hook that threw on this rank only): announce_failure sends a
// failure record to the successor, and a rank that receives one — while it
// waits in a collective (poll) or at step end — throws PeerFailed instead of
// waiting for a collective the failed rank will never issue. The host
// forwards what it learned to its own successors (runtime/comm_checks.h), so
// every rank of every ring hears it, each within one hop of the last.
//
// Thread-safety: record/before_op/end_step on the loop thread; poll from any
// thread (an internal mutex serialises the inbox).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "host/comm/flight_recorder.h"
#include "host/comm/types.h"

namespace accel::comm {

// What the ranks of a group must agree on for one collective.
struct OpDescriptor {
  OpType op = OpType::barrier;
  DType dtype = DType::f32;
  int64_t count = 0;
  int reduce = -1;  // ReduceOp value; -1: not a reduction
  int peer = -1;    // broadcast root / send-recv peer (group rank); -1: none
  std::string label;  // named in messages, not compared (labels are free text)

  bool same_shape(const OpDescriptor& other) const {
    return op == other.op && dtype == other.dtype && count == other.count && reduce == other.reduce &&
           (peer == other.peer || op == OpType::send || op == OpType::recv || op == OpType::batch_p2p);
  }
};

// "all_reduce 'ddp bucket' (f32 x1024, sum)"
std::string describe_op(const OpDescriptor& d);

// 64-bit FNV-1a of the compared fields, chained onto `hash`.
uint64_t fold_op(uint64_t hash, const OpDescriptor& d);

// A rank of the group announced that it failed on its own (announce_failure):
// what it was doing, so the others can point at its line.
struct PeerFailed : CommError {
  PeerFailed(int world_rank, std::string where, int64_t step);
  int world_rank;     // the rank that failed first
  std::string where;  // what it failed in ("step_end"); the wire keeps 47 bytes of it
  int64_t step;
};

class SequenceCheck {
 public:
  static constexpr int kMaxListed = 64;  // descriptors sent per step record

  // Duplicates `comm` (collective over it, bounded by timeout_ms).
  // `group_name` and `world_ranks` (world rank of each group rank) serve
  // messages. A group of one rank checks nothing.
  SequenceCheck(MPI_Comm comm, std::string group_name, std::vector<int> world_ranks, int64_t timeout_ms,
                bool verify_each_op);
  ~SequenceCheck();
  SequenceCheck(const SequenceCheck&) = delete;
  SequenceCheck& operator=(const SequenceCheck&) = delete;

  bool active() const { return size_ > 1; }
  bool verify_each_op() const { return verify_each_op_; }

  // Before issuing a collective of this group during step `step`: records
  // it and, in verify mode, compares it with the predecessor's first.
  // Throws CommError(aborted) on a mismatch, CommError(timeout) when the
  // predecessor never says.
  void before_op(const OpDescriptor& d, int64_t step);
  // While this rank waits for a collective: never blocks; throws
  // CommError(aborted) when the predecessor already ended the step without
  // the collectives this rank issued.
  void poll();
  // At the end of step `step` (every rank of the group calls it): exchanges
  // and compares the step records, then starts the next step afresh.
  // Throws PeerFailed when the predecessor announced a failure instead.
  void end_step(int64_t step);
  // Tells the successor that world rank `failed_rank` failed in `where`
  // during `step` (this rank itself, or one it heard of). Never blocks; not
  // sent when the successor is `failed_rank` (it knows). Loop thread.
  void announce_failure(int failed_rank, const std::string& where, int64_t step);

  uint64_t step_hash() const { return hash_; }
  int64_t step_ops() const { return count_; }

 private:
  enum Kind : int32_t { kOp = 1, kStepEnd = 2, kFailed = 3 };
  struct Record {
    Kind kind = kOp;
    int64_t step = 0;
    int64_t count = 0;  // kOp: this op's index (1-based) in the step; kStepEnd: ops in the step;
                        // kFailed: the world rank that failed (ops[0].label: what it failed in)
    uint64_t hash = 0;
    std::vector<OpDescriptor> ops;  // kOp: the op; kStepEnd: the first kMaxListed
  };

  void send(const Record& record);
  // Moves every arrived message into inbox_ (lock held).
  void pump_locked();
  // The next message from the predecessor, waiting up to the deadline.
  Record next(const std::string& waiting_for);
  void post_receive_locked();
  // Throws PeerFailed for the first failure record in the inbox (lock held).
  void throw_if_failure_locked() const;
  // Throws unless `theirs` (the predecessor's step end) agrees with ours.
  void compare_step(const Record& theirs, int64_t step, bool at_step_end) const;
  [[noreturn]] void diverged(int64_t step, const std::string& detail) const;
  std::string rank_name(int group_rank) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string group_name_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  int size_ = 1;
  int64_t timeout_ms_;
  bool verify_each_op_;

  // This step, this rank (loop thread).
  int64_t step_ = -1;
  int64_t count_ = 0;
  uint64_t hash_ = 0;
  std::vector<OpDescriptor> listed_;  // the first kMaxListed
  OpDescriptor last_;

  mutable std::mutex mu_;  // guards the receive side below
  std::vector<char> recv_buffer_;
  MPI_Request recv_request_ = MPI_REQUEST_NULL;
  std::deque<Record> inbox_;
  struct Outgoing {
    std::vector<char> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::list<Outgoing> outgoing_;  // sends in flight (their buffers must live)
};

}  // namespace accel::comm
