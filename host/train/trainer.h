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
#include "host/data/held_out.h"
#include "host/data/token_dataset.h"
#include "host/model/gpt.h"
#include "host/train/flat_adamw.h"
#include "host/train/loss_scaler.h"
#include "host/runtime/memory_ledger.h"
#include "host/train/metrics_writer.h"
#include "host/train/tensorboard_writer.h"

namespace accel::plugin {
class HookDispatcher;
}
namespace accel::runtime {
class HostContext;
class CheckpointReader;
}

namespace accel::train {

class LinearChain;

struct StepOutcome {
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  bool skipped = false;
  bool nonfinite_loss = false;  // skipped because the global loss was NaN/inf
};

class Trainer {
 public:
  // `hooks` and `context` are the run's plugins (both null: none). The
  // trainer calls every hook at the points accel/plugin.h defines.
  Trainer(const RunConfig& config, int rank, int world_size, plugin::HookDispatcher* hooks = nullptr,
          runtime::HostContext* context = nullptr);
  ~Trainer();

  // Restores from --resume (if given), then trains steps [start, --steps).
  void run();

  // --init-from: every parameter starts from `weights` (host names and
  // layouts, model/param_init.h) instead of the seed. Before run(); throws
  // std::invalid_argument naming a missing or misshapen weight. The copy is
  // freed once the host's units and every plugin's shards took their values.
  void start_from_weights(std::shared_ptr<const model::NamedWeights> weights) {
    model_.set_initial_weights(std::move(weights));
  }

  // One optimizer step at index `step` (0-based). Public for tests.
  StepOutcome train_step(int64_t step);

  model::GptModel& model() { return model_; }
  FlatAdamW& optimizer() { return optimizer_; }
  int64_t completed_steps() const { return completed_steps_; }

 private:
  void resume_from(const std::string& dir);
  // create and plan_model of every plugin, the standard groups, then the
  // host's own storage (every unit no plugin took over) and optimizer state.
  void plan_plugins();
  void materialize_host_units();
  // Resolves the plan's tensor-parallel splits into the model, and the data
  // parallel rank and size that follow (world = tensor x data).
  void use_tensor_parallel_plan();
  void create_plugins_together();
  // setup of every plugin (after a resume restored the host's state), then
  // load_state when resuming.
  void setup_plugins();
  void load_plugin_state();
  void save_checkpoint();
  at::Tensor load_batch(const data::TokenDataset& dataset, const std::vector<int64_t>& windows) const;
  // Forward and backward of one micro-batch, unit by unit (so unit hooks run
  // at unit boundaries); returns the unscaled loss.
  double forward_backward(const at::Tensor& batch, int64_t micro, double loss_multiplier, bool last_micro);
  // Unit `u`'s forward between its hooks. `input` is what the unit reads
  // (the token ids for unit 0, else the previous unit's output, as a leaf
  // when gradients flow). No graph is kept for an evaluation
  // (ACCEL_UNIT_HOOK_NO_GRAD) or a recomputing unit's first pass.
  at::Tensor run_unit_forward(size_t u, int64_t micro, uint32_t hook_flags, const at::Tensor& input);
  // --eval-every (trainer_eval.cpp): the mean loss over --eval-steps global
  // batches of held-out windows, averaged over the ranks; every plugin sees
  // each batch as an ACCEL_STEP_EVAL step. Changes no weight or state.
  double evaluate();
  // The mean of `value` over every rank (each holds an equal share), one
  // collective labelled `label`; `value` itself with one rank.
  double average_over_ranks(double value, const char* label);
  // Whether an evaluation follows step `step` (1-based).
  bool evaluates_after(int64_t step) const {
    return config_.eval.every > 0 && (step % config_.eval.every == 0 || step == config_.steps);
  }
  double clip_or_measure(std::vector<at::Tensor>& grads);
  // The clip_gradients take-over with `max_norm` (+inf: measure only);
  // returns the global norm it wrote.
  double plugin_clip(double max_norm);
  // Throws naming the unit when storage unit `u` computes with is not
  // materialised (a managing plugin forgot it).
  void require_storage(size_t u, bool backward) const;
  // Whether unit `u` recomputes its activations in backward.
  bool recomputes(size_t u) const;
  // Whether step `step` (1-based) is logged: the first, every --log-every-th
  // and the last. Its metrics line also carries the per-unit memory samples.
  bool logged_step(int64_t step) const {
    return step == 1 || step % config_.log_every == 0 || step == config_.steps;
  }

  RunConfig config_;
  int rank_;
  int world_size_;
  int data_rank_;  // this rank's share of the batch: rank / tensor size
  int data_size_;  // ranks reading distinct data: world / tensor size
  model::GptModel model_;
  data::RunDatasets data_;  // training windows, and held-out ones under --eval-every
  data::BatchSampler sampler_;
  data::BatchSampler eval_sampler_;  // sequential: every evaluation reads the same windows
  FlatAdamW optimizer_;
  LossScaler loss_scaler_;
  MetricsWriter metrics_;
  TensorBoardWriter tensorboard_;
  plugin::HookDispatcher* hooks_;
  runtime::HostContext* context_;
  std::string resumed_from_;  // the checkpoint directory, when resuming
  std::string saved_plugins_;  // the plugins of the run that wrote it
  int32_t saved_world_size_ = 1;  // the ranks of the run that wrote it
  // The resumed checkpoint's reader, from resume_from until the plugins'
  // load_state has read it too.
  std::unique_ptr<runtime::CheckpointReader> resume_reader_;
  std::unique_ptr<LinearChain> linear_chain_;  // when a plugin joins the linear chain
  runtime::StepMemoryWatch memory_watch_;  // gathered bytes and the ledger, sampled per unit
  const runtime::MemoryAccounting* accounted_memory() const { return context_ ? context_->memory.get() : nullptr; }
  int64_t completed_steps_ = 0;
  int64_t nonfinite_loss_steps_ = 0;  // skipped so far (--nonfinite-loss-skips)
};

}  // namespace accel::train
