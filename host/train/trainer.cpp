// The step loop (see trainer.h).
#include "host/train/trainer.h"

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "host/checkpoint/trainer_checkpoint.h"
#include "host/train/autocast_scope.h"
#include "host/train/grad_clip.h"
#include "host/train/lr_schedule.h"
#include "host/util/log.h"
#include "host/util/memory_stats.h"
#include "host/util/strformat.h"

namespace accel::train {
namespace {

model::GptModel build_model(const RunConfig& config) {
  model::GptModel model(model::make_gpt_config(config.model, config.model_overrides));
  model.initialise(config.seed);
  return model;
}

std::vector<at::Tensor> flat_grads_of(model::GptModel& model) {
  std::vector<at::Tensor> grads;
  for (model::Unit& unit : model.units()) grads.push_back(unit.flat_grads());
  return grads;
}

}  // namespace

Trainer::Trainer(const RunConfig& config, int rank, int world_size)
    : config_(config),
      rank_(rank),
      world_size_(world_size),
      model_(build_model(config)),
      dataset_(data::open_dataset(config.data, model_.config().seq_len, model_.config().vocab_size, config.seed)),
      sampler_(dataset_->num_windows(), config.data_order, config.seed),
      optimizer_(model_.units()),
      loss_scaler_(config.grad_scaler, config.mixed_precision == MixedPrecision::fp16),
      metrics_(rank == 0 ? config.metrics_file : std::string()) {}

at::Tensor Trainer::load_batch(const std::vector<int64_t>& windows) const {
  const int64_t length = dataset_->window_length();
  at::Tensor batch = at::empty({static_cast<int64_t>(windows.size()), length}, at::kLong);
  int64_t* out = batch.data_ptr<int64_t>();
  for (size_t i = 0; i < windows.size(); ++i) {
    dataset_->read_window(windows[i], {out + static_cast<int64_t>(i) * length, static_cast<size_t>(length)});
  }
  return batch;
}

StepOutcome Trainer::train_step(int64_t step) {
  StepOutcome outcome;
  outcome.lr = learning_rate_at(config_.optimizer, step, config_.steps);
  model_.zero_grads();

  const int64_t micro_steps = config_.grad_accum;
  double loss_sum = 0.0;
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    const at::Tensor batch =
        load_batch(sampler_.micro_batch(step, config_.batch_size, rank_, world_size_, micro, micro_steps));
    const int64_t T = batch.size(1) - 1;
    const at::Tensor inputs = batch.narrow(1, 0, T);
    const at::Tensor targets = batch.narrow(1, 1, T);
    at::Tensor loss;
    {
      AutocastScope autocast(config_.mixed_precision, at::kCPU);
      loss = model_.loss(inputs, targets);
    }
    // Each micro-batch holds an equal share, so the mean of micro-step means
    // is the global-batch mean, and so is the accumulated gradient.
    (loss * (loss_scaler_.scale() / static_cast<double>(micro_steps))).backward();
    loss_sum += loss.item<double>();
  }
  outcome.loss = loss_sum / static_cast<double>(micro_steps);

  std::vector<at::Tensor> grads = flat_grads_of(model_);
  at::NoGradGuard no_grad;
  outcome.skipped = loss_scaler_.unscale_and_check(grads);
  if (!outcome.skipped) {
    outcome.grad_norm = config_.optimizer.grad_clip > 0 ? clip_grad_norm(grads, config_.optimizer.grad_clip)
                                                        : global_grad_norm(grads);
    optimizer_.step(model_.units(), config_.optimizer, outcome.lr);
  }
  loss_scaler_.update(outcome.skipped);
  return outcome;
}

void Trainer::resume_from(const std::string& dir) {
  const std::filesystem::path checkpoint = checkpoint::resolve_resume_dir(dir);
  const checkpoint::TrainerState state = checkpoint::load_trainer_checkpoint(checkpoint, model_, optimizer_);
  if (state.data_seed != config_.seed) {
    log::warn(strformat("--seed %llu differs from the checkpoint's %llu; the checkpoint's data order is kept",
                        static_cast<unsigned long long>(config_.seed),
                        static_cast<unsigned long long>(state.data_seed)));
    config_.seed = state.data_seed;
    sampler_ = data::BatchSampler(dataset_->num_windows(), config_.data_order, config_.seed);
  }
  loss_scaler_.restore(state.loss_scale, state.loss_scale_growth_tracker);
  completed_steps_ = state.step;
  log::info(strformat("resumed from %s at step %lld", checkpoint.c_str(), static_cast<long long>(state.step)));
}

void Trainer::save_checkpoint() {
  checkpoint::TrainerState state;
  state.step = completed_steps_;
  state.data_position = completed_steps_ * config_.batch_size;
  state.optimizer_steps = optimizer_.step_count();
  state.data_seed = config_.seed;
  state.loss_scale = loss_scaler_.scale();
  state.loss_scale_growth_tracker = loss_scaler_.growth_tracker();
  state.model = model_.config();
  const auto path = checkpoint::save_trainer_checkpoint(config_.save_dir, model_, optimizer_, state);
  log::info("saved checkpoint " + path.string());
}

void Trainer::run() {
  if (!config_.resume.empty()) resume_from(config_.resume);
  log::info(strformat("model %s: %s, %lld parameters", config_.model.c_str(), model_.config().describe().c_str(),
                      static_cast<long long>(model_.num_parameters())));
  log::info(strformat("data %s, order %s; %lld steps of %lld sequences (x%lld accumulation), %s precision",
                      dataset_->describe().c_str(), to_string(config_.data_order),
                      static_cast<long long>(config_.steps), static_cast<long long>(config_.batch_size),
                      static_cast<long long>(config_.grad_accum), to_string(config_.mixed_precision)));

  const double tokens_per_step = static_cast<double>(config_.batch_size * model_.config().seq_len);
  while (completed_steps_ < config_.steps) {
    const auto start = std::chrono::steady_clock::now();
    const StepOutcome outcome = train_step(completed_steps_);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++completed_steps_;

    StepMetrics m;
    m.step = completed_steps_;
    m.loss = outcome.loss;
    m.lr = outcome.lr;
    m.grad_norm = outcome.grad_norm;
    m.tokens_per_s = tokens_per_step / seconds;
    m.peak_mem_bytes = peak_rss_bytes();
    m.loss_scale = loss_scaler_.scale();
    m.skipped = outcome.skipped;
    metrics_.write(m);
    if (completed_steps_ % config_.log_every == 0 || completed_steps_ == config_.steps || completed_steps_ == 1) {
      log::info(strformat("step %5lld/%lld  loss %.4f  lr %.3e  grad_norm %.3f  %.0f tok/s  mem %s%s",
                          static_cast<long long>(completed_steps_), static_cast<long long>(config_.steps), m.loss,
                          m.lr, m.grad_norm, m.tokens_per_s, format_bytes(static_cast<double>(m.peak_mem_bytes)).c_str(),
                          outcome.skipped ? "  (skipped: inf/nan gradients)" : ""));
    }
    if (!config_.save_dir.empty() && config_.save_every > 0 && completed_steps_ % config_.save_every == 0 &&
        completed_steps_ != config_.steps) {
      save_checkpoint();
    }
  }
  if (!config_.save_dir.empty()) save_checkpoint();
}

}  // namespace accel::train
