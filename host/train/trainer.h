// The step loop of one rank: builds the model, data and optimizer from a
// RunConfig, optionally resumes, trains to --steps, logs progress, writes
// metrics and checkpoints.
//
// One optimizer step = grad_accum micro-steps over this rank's share of the
// global batch (data/batch_sampler.h); the loss reported is the mean over the
// whole global batch. Not thread-safe: the trainer owns its thread's autograd.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <functional>
#include <memory>
#include <optional>

#include "host/cli/run_config.h"
#include "host/data/batch_sampler.h"
#include "host/data/held_out.h"
#include "host/data/token_dataset.h"
#include "host/model/gpt.h"
#include "host/train/async_checkpoint.h"
#include "host/train/flat_adamw.h"
#include "host/train/loss_scaler.h"
#include "host/runtime/memory_ledger.h"
#include "host/runtime/pipeline_plan.h"
#include "host/runtime/tensor_views.h"
#include "host/train/metrics_writer.h"
#include "host/train/snapshot_replicas.h"
#include "host/train/step_values.h"
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
  bool stop_requested = false;  // some rank holds a stop signal: every rank stops after this step
  bool async_save_written = false;  // every rank's background checkpoint write has finished
};

// How run() ended: every step done, or stopped after a step on a signal
// (train/stop_request.h) with the checkpoint written when --save is given.
enum class RunEnd { completed, stopped_by_signal };

class Trainer final : public runtime::ModelRunner {
 public:
  // `hooks` and `context` are the run's plugins (both null: none). The
  // trainer calls every hook at the points accel/plugin.h defines.
  Trainer(const RunConfig& config, int rank, int world_size, plugin::HookDispatcher* hooks = nullptr,
          runtime::HostContext* context = nullptr);
  ~Trainer() override;

  // Restores from --resume (if given), then trains steps [start, --steps).
  // A stop signal ends it early after a step (every rank after the same
  // one): the checkpoint is written under --save and run() returns
  // RunEnd::stopped_by_signal. `started`, when given, is called once
  // start-up (plans, resume, the plugins' setup) is done, before the first
  // step: a failure before it would repeat on a rerun (app/supervise.h).
  RunEnd run(const std::function<void()>& started = nullptr);

  // --init-from: every parameter starts from `weights` (host names and
  // layouts, model/param_init.h) instead of the seed. Before run(); throws
  // std::invalid_argument naming a missing or misshapen weight. The source
  // is released (its summary logged) once the host's units and every
  // plugin's shards took their values.
  void start_from_weights(std::shared_ptr<const model::WeightSource> weights) {
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
  // Resolves the plan's tensor-parallel splits into the model.
  void use_precision_policy();
  void use_tensor_parallel_plan();
  void use_expert_parallel_plan();
  // The data-parallel rank and size once splits and stages resolved
  // (world = stages x data x tensor), checked against the batch.
  void use_data_parallel_share();
  void create_plugins_together();
  // setup of every plugin (after a resume restored the host's state), then
  // load_state when resuming.
  void setup_plugins();
  void load_plugin_state();
  // Saves ROOT/step_<completed steps> (trainer_checkpoints.cpp). `periodic`
  // (a --save-every save) under --save-async: a snapshot written in the
  // background; otherwise blocking. A save in flight is committed first.
  // Its costs go into `metrics` when given. `snapshot` (--snapshot-every):
  // in the background into --snapshot-dir instead.
  void save_checkpoint(bool periodic = false, StepMetrics* metrics = nullptr, bool snapshot = false);
  // Commits the background save once every rank wrote it (collective); a
  // snapshot's commit removes the older snapshots (rank 0).
  void commit_async_save(StepMetrics* metrics);
  // Waits for the background save in flight to copy the plugins' lent
  // state (ACCEL_CHECKPOINT_PUT_STABLE) before a hook that may change it:
  // optimizer_step, train_step. The wait is this step's ckpt_staging_wait_ms.
  void wait_for_staging();
  // The run completed: its snapshots' memory is given back (rank 0).
  void remove_snapshots() const;
  // Removes the snapshots of steps before `step` (rank 0): superseded by a
  // newer snapshot or by a checkpoint on disk.
  void drop_snapshots_before(int64_t step) const;
  // Whether this rank prunes its node's snapshot root (the lowest rank of
  // the node: the root is each node's own).
  bool prunes_snapshots() const;
  // A snapshot failed on every rank (say its root is full): no more
  // snapshots this run, and its partial directory is removed.
  void suspend_snapshots(const std::string& why);
  static int64_t completed_step_of(const std::filesystem::path& checkpoint);
  // After the step a stop signal ended: the checkpoint (under --save) and
  // the line that says how to go on.
  void stop_on_signal();
  at::Tensor load_batch(const data::TokenDataset& dataset, const std::vector<int64_t>& windows) const;
  // Forward and backward of one micro-batch, unit by unit (so unit hooks run
  // at unit boundaries); returns the unscaled loss, a 0-dim fp64 tensor on
  // the device (read by no one here).
  at::Tensor forward_backward(const at::Tensor& batch, int64_t micro, double loss_multiplier, bool last_micro);

  // --- unit ranges (trainer_ranges.cpp): the host's loop and a pipeline
  // schedule's run_forward / run_backward run the same code ---
  // One micro-batch's forward over units [first, end), kept for backward.
  struct RangeRun {
    size_t first = 0, end = 0;
    std::vector<at::Tensor> inputs, outputs;  // per unit of the range
    at::Tensor grad_logits;  // d(loss x multiplier)/d(logits), when the range ends with the last unit
    at::Tensor loss;         // detached fp32 scalar, likewise
    // With a mixture of experts' auxiliary losses (GptModel::moe_losses_on):
    // per unit of the range, the router logits its forward kept and
    // d(aux x multiplier)/d(logits), which its backward adds (undefined for
    // units without experts).
    std::vector<at::Tensor> router_logits, router_grads;
    runtime::TensorView output_view, loss_view;  // what run_forward hands out
  };
  // Units' forward in order; `input` is the token ids (first 0) or the
  // previous range's output. With the last unit, the loss on `targets`
  // and its gradient (scaled by `loss_multiplier`) at the logits.
  std::unique_ptr<RangeRun> forward_range(size_t first, size_t end, int64_t micro, uint32_t flags,
                                          const at::Tensor& input, const at::Tensor& targets,
                                          double loss_multiplier);
  // Units' backward, newest first, from `grad_output` (undefined: the
  // range's own loss gradient); returns the gradient of the range's input
  // (undefined when first is 0). Frees what the forward kept.
  at::Tensor backward_range(RangeRun& run, int64_t micro, uint32_t flags, at::Tensor grad_output);
  // ModelRunner: a train_step take-over's run_forward / run_backward.
  void run_forward(AccelRunForwardArgs& args) override;
  void run_backward(AccelRunBackwardArgs& args) override;
  // The micro-batch `micro` of step `step` on the model's device (this
  // rank's share), read once per step.
  const at::Tensor& micro_batch_on_device(int64_t step, int64_t micro);
  // Runs the train_step take-over with this trainer as the model runner
  // (flagged ACCEL_TRAIN_STEP_EVAL: an evaluation batch `args.step` of the
  // held-out windows); returns whether a plugin took the step, and sets
  // `loss_sum` to the sum of its micro-batches' losses (a 0-dim fp64 tensor
  // on the device; 0 off the last stage); throws when the schedule left a forward without its backward or
  // did not reach every micro-batch's loss.
  bool run_taken_over_step(const AccelTrainStepArgs& args, at::Tensor& loss_sum);
  // Throws naming the range when a run_* call does not fit this rank's stage.
  void check_range(int32_t first, int32_t end, int32_t micro, const char* service) const;
  // Throws naming `what` unless `activation` is what passes between units.
  void check_activation(const at::Tensor& activation, const char* what) const;
  // Every rank learns whether any failed (`why` non-empty on it), through
  // one collective labelled `label`: all then throw AgreedError, each with
  // its own reason or a line saying another rank failed.
  // `code`: the exit code of the AgreedError (1 a run failure, 2 a bad
  // option value).
  void agree_on_failure(const std::string& why, const char* label, int code = 1);
  // Rank 0 opens --metrics-file and --tensorboard-dir; every rank learns
  // whether it could (a path that cannot be opened is every rank's usage
  // error, exit 2, not rank 0's alone).
  void open_outputs_together();
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
  // collective labelled `label`; `value` itself with one rank. Polls the
  // sequence checks while it waits, as the plugins' collectives do, so a
  // rank that failed alone is heard of here too.
  double average_over_ranks(double value, const char* label);
  // The same for a contiguous tensor's values, in place, on its device: a
  // CUDA tensor's all-reduce is ordered before the compute stream's next
  // work, with nothing read back to the host.
  void average_over_ranks(at::Tensor& values, const char* label);
  // {the step's loss, a stop signal, this rank's background write done} on
  // the device, averaged over the ranks in one all-reduce (StepValues).
  at::Tensor average_step_values(const at::Tensor& loss);
  // Runs `body` (a step or an evaluation at step `step`, 0-based) so that a
  // failure of one rank alone inside a plugin hook stops every rank
  // together: the failing rank prints its line and tells the others over
  // the sequence checks' rings (runtime/comm_checks.h) instead of leaving
  // them in the step's collectives until the deadline; each of them prints
  // "rank R failed in HOOK at step S: see its line"; all throw AgreedError.
  // A communication failure inside a hook is not agreed (the job is ended).
  template <typename Body>
  auto stopping_together(int64_t step, Body&& body) -> decltype(body());
  // Whether an evaluation follows step `step` (1-based).
  bool evaluates_after(int64_t step) const {
    return config_.eval.every > 0 && (step % config_.eval.every == 0 || step == config_.steps);
  }
  // Clips the gradients (--grad-clip; measures only without it) and gives
  // `values` their norm, on the device: no read.
  void clip_or_measure(std::vector<at::Tensor>& grads, StepValues& values);
  // The clip_gradients take-over with `max_norm` (+inf: measure only);
  // returns the global norm it wrote, a 0-dim fp32 tensor on the device
  // (NaN when no plugin took it).
  at::Tensor plugin_clip(double max_norm);
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
  int data_rank_;  // this rank's share of the batch (use_data_parallel_share)
  int data_size_;  // ranks reading distinct data: world / (tensor x stages)
  model::GptModel model_;
  data::RunDatasets data_;  // training windows, and held-out ones under --eval-every
  data::BatchSampler sampler_;
  data::BatchSampler eval_sampler_;  // sequential: every evaluation reads the same windows
  FlatAdamW optimizer_;
  LossScaler loss_scaler_;
  // Rank 0's, opened by open_outputs_together; disabled on the other ranks.
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  plugin::HookDispatcher* hooks_;
  runtime::HostContext* context_;
  std::string resumed_from_;  // the checkpoint directory, when resuming
  std::string saved_plugins_;  // the plugins of the run that wrote it
  int32_t saved_world_size_ = 1;  // the ranks of the run that wrote it
  // config.json keys beyond the shape that export-hf writes back: the
  // resumed checkpoint's, else --init-from's (RunConfig::init_hf_keys).
  HfConfigKeys hf_keys_;
  // The resumed checkpoint's reader, from resume_from until the plugins'
  // load_state has read it too.
  std::unique_ptr<runtime::CheckpointReader> resume_reader_;
  std::unique_ptr<LinearChain> linear_chain_;  // when a plugin joins the linear chain
  runtime::StepMemoryWatch memory_watch_;  // gathered bytes and the ledger, sampled per unit
  const runtime::MemoryAccounting* accounted_memory() const { return context_ ? context_->memory.get() : nullptr; }
  // A take-over step's ranges in flight, by (first unit, micro-batch); the
  // last backward's input gradient of each micro-batch, valid until the
  // next run call for it; the step's micro-batches read so far; the losses
  // the schedule's last ranges computed.
  std::map<std::pair<size_t, int64_t>, std::unique_ptr<RangeRun>> ranges_;
  std::map<int64_t, std::unique_ptr<runtime::TensorView>> grad_inputs_;
  std::map<int64_t, at::Tensor> step_batches_;
  int64_t runner_step_ = 0;  // the step, or the evaluation batch
  bool runner_eval_ = false;  // an evaluation batch (ACCEL_TRAIN_STEP_EVAL)
  std::unique_ptr<RangeRun> eval_run_;  // its last forward, until the next call
  at::Tensor runner_loss_sum_;  // on the device, read once per step
  int64_t runner_losses_ = 0;
  int64_t completed_steps_ = 0;
  // A mixture of experts, over the step in hand: this rank's assignments
  // per expert (every layer, every micro-batch), those dropped, and the sum
  // of the micro-batches' auxiliary losses (trainer_ranges.cpp).
  void count_routing(const model::MoeRouting& routing);
  at::Tensor add_auxiliary_loss(RangeRun& run, double loss_multiplier);
  struct MoeStepStats {
    std::vector<int64_t> tokens_per_expert;
    int64_t dropped = 0;
    at::Tensor aux_loss_sum;
  };
  MoeStepStats moe_step_;
  int64_t nonfinite_loss_steps_ = 0;  // skipped so far (--nonfinite-loss-skips)
  // --snapshot-every on a job spanning nodes: each rank's snapshot files
  // copied to a rank of another node. Before async_save_, which may use it.
  std::unique_ptr<SnapshotReplicas> snapshot_replicas_;
  // --save-async's save in flight. Last, so it is destroyed first: a failing
  // run waits here for its write (uncommitted) before anything else goes.
  AsyncCheckpointWriter async_save_;
  bool async_save_is_snapshot_ = false;  // the save in flight goes to --snapshot-dir
  bool snapshots_suspended_ = false;     // a snapshot failed: --snapshot-every is off for this run
  // This step's wait for the save in flight to copy the plugins' lent
  // state (wait_for_staging), for its metrics line.
  std::optional<double> staging_wait_ms_;
};

}  // namespace accel::train
