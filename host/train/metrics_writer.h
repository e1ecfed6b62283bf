// --metrics-file: one JSON object per optimizer step, one per line, flushed
// as written so a run that dies keeps every step it finished. A line that
// cannot be written (full disk, I/O error) ends the run with one error
// naming the file: a metrics file with silent gaps is worse than none.
// Written by rank 0 only. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel::train {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0.0;  // mean over the whole global batch
  double lr = 0.0;
  double grad_norm = 0.0;
  double tokens_per_s = 0.0;
  int64_t peak_mem_bytes = 0;  // the process's peak resident memory (host RAM)
  // On a CUDA rank: the caching allocator's peak bytes during the step, in
  // tensors (allocated) and held from the driver (reserved). Unset on CPU.
  std::optional<int64_t> device_peak_allocated_bytes, device_peak_reserved_bytes;
  double loss_scale = 1.0;
  bool skipped = false;  // fp16 overflow: the optimizer step was skipped
  // --eval-every: the held-out mean loss after this step (perplexity is its
  // exp), when an evaluation ran.
  std::optional<double> eval_loss;
  int64_t comm_bytes = 0;  // payload bytes of the plugins' collectives in this step
  // A save after this step: how long the training thread was held (the
  // whole save, or an asynchronous save's snapshot), and the host memory an
  // asynchronous save's snapshot holds while it is written.
  std::optional<double> ckpt_blocking_ms;
  std::optional<int64_t> ckpt_host_bytes;
  // The step after an asynchronous save: how long its optimizer phase
  // waited for the save to finish copying the plugins' lent state (their
  // master weights and moments), which overlaps the forward and backward.
  std::optional<double> ckpt_staging_wait_ms;
  // An asynchronous save committed after this step: its write's time on
  // the background thread, and its step.
  std::optional<double> ckpt_write_ms;
  std::optional<int64_t> ckpt_committed_step;
  std::map<std::string, double> plugin_metrics;  // "PLUGIN.name" -> value (trace->metric)
  // A mixture of experts, on this rank over the step (every layer and
  // micro-batch): the assignments each expert took, those dropped over
  // capacity, and the auxiliary losses' mean part of `loss` (when on).
  std::vector<int64_t> moe_tokens_per_expert;
  int64_t moe_dropped = 0;
  std::optional<double> moe_aux_loss;
  // Peak accounted bytes on the rank's device during the step, by memory
  // category ("params", "grads", "optimizer", "activations", "comm",
  // "workspace", "other", "all"): the host's own buffers and every plugin's
  // (memory services). Empty without plugins' services.
  std::map<std::string, int64_t> memory_peak_bytes;
  // The same for start-up (units materialised, plugin setup, resume); only
  // on the first step a process writes.
  std::map<std::string, int64_t> memory_startup_peak_bytes;
  // The measured memory ledger at the step's end and at its peak
  // (host/runtime/memory_ledger.h): parts, "total" beside "rss" / "peak_rss".
  std::map<std::string, int64_t> memory_ledger;
  std::map<std::string, int64_t> memory_ledger_peak;
  // Per unit: the most full-parameter bytes of plugin-managed units the
  // storage pool still held right after that unit's forward (its post
  // hooks done). Empty when no plugin manages storage.
  std::map<std::string, int64_t> param_bytes_alive_after_forward;
};

class MetricsWriter {
 public:
  // Appends to `path` (a resumed run continues the same file). Empty:
  // disabled. Throws std::runtime_error naming --metrics-file and the path
  // when it cannot be opened for appending, or is a directory, FIFO or
  // socket (a FIFO without a reader would block the run); regular files and
  // character devices (/dev/null, a terminal) are accepted.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Checkpoints --resume passed over, one "step_N: why" each: written as
  // "resume_skipped" into the next line (this process's first).
  void note_resume_skipped(std::vector<std::string> lines);

  // Appends and flushes one line. Throws std::runtime_error("--metrics-file:
  // cannot write 'PATH': <errno text>") when the line did not reach the file.
  void write(const StepMetrics& m);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> resume_skipped_;
};

}  // namespace accel::train
