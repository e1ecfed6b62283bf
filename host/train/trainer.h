// The step loop of one rank: builds the model, data and optimizer from a
// RunConfig, optionally resumes, trains to --steps, logs progress, writes
// metrics and checkpoints.
//
// One optimizer step = grad_accum micro-steps over this rank's share of the
// global batch (data/batch_sampler.h); the loss reported is the mean over the
// whole global batch. Not thread-safe: the trainer owns its thread's autograd.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "host/cli/run_config.h"
#include "host/data/batch_sampler.h"
#include "host/data/token_dataset.h"
#include "host/model/gpt.h"
#include "host/train/flat_adamw.h"
#include "host/train/loss_scaler.h"
#include "host/train/metrics_writer.h"

namespace accel::comm {
class MpiSession;
}

namespace accel::train {

struct StepOutcome {
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  bool skipped = false;
};

class Trainer {
 public:
  Trainer(const RunConfig& config, int rank, int world_size);

  // Restores from --resume (if given), then trains steps [start, --steps).
  void run();

  // One optimizer step at index `step` (0-based). Public for tests.
  StepOutcome train_step(int64_t step);

  model::GptModel& model() { return model_; }
  FlatAdamW& optimizer() { return optimizer_; }
  int64_t completed_steps() const { return completed_steps_; }

 private:
  void resume_from(const std::string& dir);
  void save_checkpoint();
  at::Tensor load_batch(const std::vector<int64_t>& windows) const;

  RunConfig config_;
  int rank_;
  int world_size_;
  model::GptModel model_;
  std::unique_ptr<data::TokenDataset> dataset_;
  data::BatchSampler sampler_;
  FlatAdamW optimizer_;
  LossScaler loss_scaler_;
  MetricsWriter metrics_;
  int64_t completed_steps_ = 0;
};

}  // namespace accel::train
