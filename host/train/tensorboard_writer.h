// --tensorboard-dir: the per-step metrics as TensorBoard scalars, in an event
// file (events.out.tfevents.<time>.<host>.<pid>) that the `tensorboard`
// package reads: TFRecord framing (host/util/tfrecord.h) of tensorflow.Event
// protobuf messages, encoded here by hand (four message types, a dozen
// fields: smaller than a protobuf dependency). One scalar per metric:
//   train/loss, train/lr, train/grad_norm, train/tokens_per_s,
//   memory/peak_rss_bytes, comm/bytes, train/loss_scale (fp16's scaler
//   only), memory/ledger_total (with a counting allocator),
//   plugins/<PLUGIN.name>: the --metrics-file line's values, by tag
// Every step is flushed, so a run that dies keeps what it logged. A resumed
// run writes a new file in the same directory; TensorBoard joins them.
// Written by rank 0 only. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/train/metrics_writer.h"
#include "host/util/tfrecord.h"

namespace accel::train {

// The payload of one tensorflow.Event holding scalars (exposed for tests).
std::string scalar_event(double wall_time, int64_t step,
                         const std::vector<std::pair<std::string, float>>& scalars);

// The scalars written for one step, by tag.
std::vector<std::pair<std::string, float>> step_scalars(const StepMetrics& m);

class TensorBoardWriter {
 public:
  // Empty `dir`: disabled. Creates the directory if missing. Throws
  // std::runtime_error naming --tensorboard-dir when it is not a directory
  // or the event file cannot be created.
  explicit TensorBoardWriter(const std::string& dir);

  // Appends one event with every scalar of the step and flushes it. Throws
  // std::runtime_error("--tensorboard-dir: cannot write 'PATH': ...").
  void write(const StepMetrics& m);

  bool enabled() const { return file_ != nullptr; }

 private:
  std::unique_ptr<tfrecord::TfRecordWriter> file_;
};

}  // namespace accel::train
