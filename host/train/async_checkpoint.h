// --save-async: a checkpoint's files written on a thread of their own while
// training goes on.
//
// At a save step the trainer takes a snapshot (checkpoint_format.h's
// PreparedSave with snapshot: the host's tensors copied to host memory, the
// plugins' puts, ROOT/step_N.tmp made) and hands it here; the thread first
// copies what the plugins lent (their stable puts: master weights and
// moments, unchanged until their next optimizer step), then writes and
// fsyncs this rank's files. The copy overlaps the next step's forward and
// backward; the trainer calls wait_staged() before that step's optimizer
// phase (a pipelined snapshot, as CheckFreq takes it). The commit (every rank's outcome, the
// manifest, the rename) is collective, so it stays on the trainer's thread:
// at the first step end at which every rank's write has finished (the
// step's loss all-reduce carries the bit, no collective of its own), or
// before the next save, or at the end of the run. The commit protocol is
// the synchronous save's (rank_commit.h): a crash before the rename leaves
// ROOT/step_N.tmp, which resume ignores, and the previous checkpoint whole.
//
// Thread-safety: the owner's thread calls every member; the write runs on
// a thread this object owns.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "host/train/checkpoint_format.h"

namespace accel::train {

class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  // Waits for a write in flight and drops it uncommitted (a failing run:
  // no collective can run here); its ROOT/step_N.tmp stays, as after a crash.
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Blocks until the save in flight has copied what the plugins lent (at
  // once when nothing is in flight or it is done). Returns the time it
  // waited, in ms, at the first call after start(); nothing at later calls
  // or with nothing started. Before every optimizer step and train_step.
  std::optional<double> wait_staged();

  // Whether a save was started and not yet committed.
  bool in_flight() const { return save_ != nullptr; }
  // Whether the save in flight has all its files written (never blocks).
  bool written() const { return in_flight() && written_.load(std::memory_order_acquire); }

  // Starts writing `save` (a snapshot) on the writer's thread. Only when
  // nothing is in flight (throws std::logic_error otherwise).
  void start(checkpoint::PreparedSave save);

  // Waits for the write in flight, then commits it: collective, every rank
  // at the same point. Returns ROOT/step_N, or throws CheckpointError on
  // every rank (nothing published; the next save starts afresh).
  std::filesystem::path commit();

  // The last committed save, kept for its buffers (the next save's
  // PreparedSave recycles them), or null. Its memory (last_host_bytes)
  // stays held between saves: the price of copies that cost no page faults.
  std::unique_ptr<checkpoint::PreparedSave> take_spent() { return std::move(spent_); }

  // Of the last committed save: how long its write took on the thread, and
  // the host memory its snapshot held.
  double last_write_ms() const { return last_write_ms_; }
  int64_t last_host_bytes() const { return last_host_bytes_; }

 private:
  void join();

  std::unique_ptr<checkpoint::PreparedSave> save_;
  std::unique_ptr<checkpoint::PreparedSave> spent_;
  std::thread thread_;
  std::atomic<bool> written_{false};
  std::mutex staged_mutex_;
  std::condition_variable staged_changed_;
  bool staged_ = true;  // under staged_mutex_: no lent memory is being read
  bool wait_reported_ = true;  // the owner's: wait_staged returned since start
  double write_ms_ = 0.0;  // set by the thread before written_
  double last_write_ms_ = 0.0;
  int64_t last_host_bytes_ = 0;
};

}  // namespace accel::train
