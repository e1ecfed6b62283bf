// The flight recorder: a ring buffer of the last N operations a communicator
// issued (sequence number, operation, dtype, count, peer or root, label, and
// whether and when it finished). When a job hangs, every rank's dump shows
// the last sequence number it completed and the first one it is stuck in:
// the first collective where the ranks diverged (PyTorch's NCCL flight
// recorder, TORCH_NCCL_TRACE_BUFFER_SIZE, serves the same purpose).
//
// Invariant: records are kept in issue order and sequence numbers increase;
// a record overwritten by newer ones is simply gone (finish() of it is a
// no-op). Thread-safe: the loop thread records issues while a waiter or the
// watchdog records completions; one mutex guards the ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "host/comm/types.h"

namespace accel::comm {

enum class OpType : int {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  all_to_all,
  send,
  recv,
  batch_p2p,
  barrier,
  all_to_all_v,  // appended: the recorder's dumps name it, never number it
};

const char* op_name(OpType op);

enum class OpState : int { issued, completed, failed, timed_out };

const char* op_state_name(OpState state);

struct OpRecord {
  uint64_t seq = 0;
  OpType op = OpType::barrier;
  DType dtype = DType::f32;
  int64_t count = 0;
  int peer = -1;  // broadcast: root; send/recv: the peer; otherwise -1
  std::string label;
  OpState state = OpState::issued;
  int64_t issued_us = 0;    // wall clock, microseconds since the epoch, so
  int64_t finished_us = 0;  // dumps of different ranks line up; 0: pending
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);

  size_t capacity() const { return capacity_; }

  // Appends (overwriting the oldest record when full). `record.seq` must be
  // larger than every seq recorded before.
  void record_issue(OpRecord record);
  // Marks record `seq` finished now, if it is still in the ring.
  void record_finish(uint64_t seq, OpState state);

  // Up to `last_n` most recent records (0: all), oldest first.
  std::vector<OpRecord> snapshot(size_t last_n = 0) const;
  // Number of operations recorded since construction.
  uint64_t total_recorded() const;

  // One line per record, oldest first, under a `header` line.
  std::string dump(const std::string& header, size_t last_n = 0) const;
  // Writes dump(header) to `path`; false (and *error set) if it could not.
  bool dump_to_file(const std::string& path, const std::string& header, std::string* error) const;

  static int64_t now_us();

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<OpRecord> ring_;  // slot of seq s: (s - 1) % capacity_ for s >= 1
  uint64_t total_ = 0;
};

// One line of a dump: "seq=17 all_reduce f32 x1024 peer=- label='ddp bucket 3' completed 12.5 ms".
std::string format_record(const OpRecord& record);

}  // namespace accel::comm
