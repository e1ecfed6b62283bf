// The step loop (see trainer.h).
#include "host/train/trainer.h"

#include "host/cli/options.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "host/train/checkpoint_format.h"
#include "host/plugin/hook_dispatch.h"
#include "host/plugin/loaded_plugin.h"
#include "host/plugin/plugin_error.h"
#include "host/comm/link_bytes.h"
#include "host/comm/process_group.h"
#include "host/runtime/aten_buffer.h"
#include "host/runtime/comm_checks.h"
#include "host/runtime/host_context.h"
#include "host/model/tensor_memory.h"
#include "host/runtime/memory_ledger.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/pipeline_plan.h"
#include "host/runtime/plugin_state.h"
#include "host/runtime/context_parallel_plan.h"
#include "host/runtime/expert_parallel_plan.h"
#include "host/runtime/tensor_parallel_plan.h"
#include "host/runtime/tensor_views.h"
#include "host/runtime/trace_scope.h"
#include "host/train/linear_chain.h"
#include "host/train/stop_request.h"
#include "host/train/autocast_scope.h"
#include "host/train/grad_clip.h"
#include "host/train/lr_schedule.h"
#include "host/util/agreed_error.h"
#include "host/util/log.h"
#include "host/util/device_memory.h"
#include "host/util/memory_stats.h"
#include "host/util/strformat.h"

namespace accel::train {
namespace {

// --device: auto trains on this rank's GPU (cuda:<local rank>) when CUDA is
// available, else on the CPU; cuda insists, and fails clearly without one.
at::Device resolve_device(const std::string& choice, int local_rank) {
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (choice == "cpu" || (choice == "auto" && gpus == 0)) return at::kCPU;
  if (gpus == 0) throw std::invalid_argument("--device cuda: no CUDA device is available on this machine");
  return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(local_rank % gpus));
}

// No unit has storage yet: the plugins plan first, then the host
// materialises the units it keeps (materialize_host_units).
model::GptModel build_model(const RunConfig& config, at::Device device) {
  model::GptModel model(model::make_gpt_config(config.model, config.model_overrides), device, /*allocate=*/false);
  model.set_moe_training(config.moe);
  model.set_fused_kernels(config.fused_kernels ? model::GptModel::FusedKernels::automatic
                                               : model::GptModel::FusedKernels::off);
  return model;
}

// The gradient buffers the host holds (a plugin managing a unit's storage
// clips and steps it itself).
std::vector<at::Tensor> flat_grads_of(model::GptModel& model) {
  std::vector<at::Tensor> grads;
  for (model::Unit& unit : model.units()) {
    if (unit.has_grads()) grads.push_back(unit.flat_grads());
  }
  return grads;
}

// Peak accounted bytes on the rank's device since the last reset, by
// category (the metrics' memory_peak_bytes).
std::map<std::string, int64_t> device_memory_peaks(const runtime::MemoryAccounting& memory) {
  static constexpr std::pair<AccelMemoryCategory, const char*> kCategories[] = {
      {ACCEL_MEMORY_PARAMS, "params"},       {ACCEL_MEMORY_GRADS, "grads"},
      {ACCEL_MEMORY_OPTIMIZER, "optimizer"}, {ACCEL_MEMORY_ACTIVATIONS, "activations"},
      {ACCEL_MEMORY_COMM, "comm"},           {ACCEL_MEMORY_WORKSPACE, "workspace"},
      {ACCEL_MEMORY_OTHER, "other"},         {ACCEL_MEMORY_ALL, "all"}};
  std::map<std::string, int64_t> peaks;
  for (const auto& [category, name] : kCategories) peaks[name] = memory.counters(ACCEL_MEMORY_DEVICE, category).peak_bytes;
  return peaks;
}

}  // namespace

Trainer::Trainer(const RunConfig& config, int rank, int world_size, plugin::HookDispatcher* hooks,
                 runtime::HostContext* context)
    : config_(config),
      rank_(rank),
      world_size_(world_size),
      data_rank_(rank),
      data_size_(world_size),
      model_(build_model(config, resolve_device(config.device, context ? context->identity.local_rank : 0))),
      data_(data::open_run_datasets(config.data,
                                    data::HeldOutSpec{config.eval.every > 0, config.eval.data, config.eval.fraction},
                                    model_.config().seq_len, model_.config().vocab_size, config.seed)),
      sampler_(data_.train->num_windows(), config.data_order, config.seed),
      eval_sampler_(data_.eval ? data_.eval->num_windows() : 1, DataOrder::sequential, config.seed),
      loss_scaler_(config.grad_scaler, config.mixed_precision == MixedPrecision::fp16),
      hooks_(hooks && !hooks->empty() ? hooks : nullptr),
      context_(context),
      hf_keys_(config.init_hf_keys) {
  open_outputs_together();
  if (context_ && context_->world && config_.snapshot_every > 0) {
    snapshot_replicas_ = SnapshotReplicas::create(*context_->world);
  }
  if (context_) {
    context_->model = &model_;
    if (model_.device().is_cuda()) context_->identity.device = DLDevice{kDLCUDA, model_.device().index()};
    context_->model_run.name = config_.model;
    context_->model_run.micro_batch_size = config_.batch_size / (world_size_ * config_.grad_accum);
    context_->model_run.compute_dtype = config_.mixed_precision == MixedPrecision::bf16   ? DLDataType{kDLBfloat, 16, 1}
                                        : config_.mixed_precision == MixedPrecision::fp16 ? DLDataType{kDLFloat, 16, 1}
                                                                                          : DLDataType{kDLFloat, 32, 1};
  }
}

// Plugins tear down after the trainer (the registry outlives it) and may
// still call services then (the profiler's closing clock sync sends): the
// context must not point at a model that no longer exists, or the
// collective checks would read freed units.
Trainer::~Trainer() {
  if (context_ && context_->model == &model_) context_->model = nullptr;
}

at::Tensor Trainer::load_batch(const data::TokenDataset& dataset, const std::vector<int64_t>& windows) const {
  const int64_t length = dataset.window_length();
  at::Tensor batch = at::empty({static_cast<int64_t>(windows.size()), length}, at::kLong);
  int64_t* out = batch.data_ptr<int64_t>();
  for (size_t i = 0; i < windows.size(); ++i) {
    dataset.read_window(windows[i], {out + static_cast<int64_t>(i) * length, static_cast<size_t>(length)});
  }
  return batch;
}

at::Tensor Trainer::plugin_clip(double max_norm) {
  at::Tensor total_norm = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(model_.device()));
  runtime::TensorView norm_view(total_norm);
  AccelClipArgs args{};
  args.struct_size = sizeof(args);
  args.max_norm = max_norm;
  args.norm_type = 2.0;
  args.total_norm = norm_view.get();
  if (!hooks_->clip_gradients(args)) return at::full({}, std::numeric_limits<float>::quiet_NaN(), at::kFloat);
  return total_norm;
}

void Trainer::clip_or_measure(std::vector<at::Tensor>& grads, StepValues& values) {
  const double max_norm = config_.optimizer.grad_clip;
  if (hooks_ && hooks_->owns_clip_gradients()) {
    values.set_grad_norm(plugin_clip(max_norm > 0 ? max_norm : std::numeric_limits<double>::infinity()));
    return;
  }
  values.set_grad_norm(max_norm > 0 ? clip_grad_norm(grads, max_norm) : global_grad_norm(grads));
}

void Trainer::open_outputs_together() {
  std::string why;
  try {
    metrics_ = std::make_unique<MetricsWriter>(rank_ == 0 ? config_.metrics_file : std::string());
    tensorboard_ = std::make_unique<TensorBoardWriter>(rank_ == 0 ? config_.tensorboard_dir : std::string());
  } catch (const std::exception& e) {
    why = e.what();
  }
  agree_on_failure(why, "host output files", /*code=*/2);
}

void Trainer::agree_on_failure(const std::string& why, const char* label, int code) {
  double failed = why.empty() ? 0.0 : 1.0;
  if (world_size_ > 1) {
    const comm::Status status =
        context_->world->all_reduce(comm::host_buffer(&failed, 1, comm::DType::f64), comm::ReduceOp::max, {0, label});
    if (!status.ok()) throw std::runtime_error(status.message);
  }
  if (failed == 0.0) return;
  const std::string line = why.empty() ? std::string("another rank failed (") + label + "): see its line" : why;
  log::error(line);
  throw AgreedError(code, line, /*logged_on_every_rank=*/true);
}

double Trainer::average_over_ranks(double value, const char* label) {
  at::Tensor values = at::full({1}, value, at::kDouble);
  average_over_ranks(values, label);
  return *values.data_ptr<double>();  // host memory: no device read
}

void Trainer::average_over_ranks(at::Tensor& values, const char* label) {
  if (world_size_ == 1) return;
  const runtime::TraceRange range(context_, "all_reduce", "comm", "host", [&] {
    std::string ranks;
    for (int r = 0; r < world_size_; ++r) ranks += (r ? "," : "") + std::to_string(r);
    return "label=" + std::string(label) + "; group_ranks=" + ranks;
  }, -1, -1, static_cast<int64_t>(values.nbytes()));
  const comm::Buffer buffer = runtime::buffer_of(values);
  const std::shared_ptr<comm::Work> work =
      context_->world->all_reduce_async(buffer, buffer, comm::ReduceOp::avg, {0, label});
  // NCCL's all-reduce: the compute stream (the default one) waits for it,
  // the host does not (the watchdog still holds its deadline). MPI's: the
  // host waits, polling the sequence checks.
  const comm::Status status = values.is_cuda() ? work->wait_stream(nullptr)
                                               : work->wait(0, [this] { runtime::poll_sequences(*context_); });
  if (!status.ok()) throw std::runtime_error(status.message);
}

at::Tensor Trainer::average_step_values(const at::Tensor& loss) {
  // The loss of the global batch: every data-parallel rank's share, averaged.
  // With pipeline stages only the last holds it: it counts P times, the
  // others nothing, so the world's mean is the mean over its data ranks.
  const int32_t stages = context_ ? context_->model_run.pipeline_size : 1;
  // A stop signal rides on the same all-reduce (no collective of its own):
  // its mean is above 0 on every rank when any rank holds one. So does
  // whether this rank's background checkpoint write is done: its mean is 1
  // only when every rank's is. Both are fills on the device, not copies.
  const at::TensorOptions options = loss.options();
  at::Tensor shared = at::stack({stages > 1 ? loss * static_cast<double>(stages) : loss,
                                 at::full({}, pending_stop_signal() != 0 ? 1.0 : 0.0, options),
                                 at::full({}, async_save_.written() ? 1.0 : 0.0, options)});
  average_over_ranks(shared, "host loss average");
  return shared;
}

template <typename Body>
auto Trainer::stopping_together(int64_t step, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (!context_ || !context_->world || world_size_ == 1) throw;
    if (!context_->rank_failure) {
      // A hook's communication failure (a timeout, a diverged sequence)
      // leaves peers where no message reaches them: not agreed here.
      const auto* hook = dynamic_cast<const plugin::HookError*>(&e);
      if (hook == nullptr || hook->status == ACCEL_ERROR_TIMEOUT || hook->status == ACCEL_ERROR_ABORTED ||
          context_->world->failure()) {
        throw;
      }
      log::error(e.what());
      runtime::announce_rank_failure(*context_, hook->hook, step);
      throw AgreedError(1, e.what(), /*logged_on_every_rank=*/true);
    }
    if (context_->rank_failure->rank == rank_) throw;  // announced already: the line is out
    const runtime::HostContext::RankFailure& heard = *context_->rank_failure;
    const std::string line = comm::PeerFailed(heard.rank, heard.where, heard.step).what();
    log::error(line);
    throw AgreedError(1, line, /*logged_on_every_rank=*/true);
  }
}

StepOutcome Trainer::train_step(int64_t step) {
  StepOutcome outcome;
  if (context_) {
    context_->step = step;
    context_->in_step = true;
  }
  const runtime::TraceRange step_range(context_, "step");
  outcome.lr = learning_rate_at(config_.optimizer, step, config_.steps);
  {
    const runtime::TraceRange range(context_, "zero_grad");
    model_.zero_grads();
  }
  const int64_t micro_steps = config_.grad_accum;

  AccelStepArgs step_args{};
  step_args.struct_size = sizeof(step_args);
  step_args.step = optimizer_.step_count();
  step_args.num_micro_batches = static_cast<int32_t>(micro_steps);
  step_args.lr = outcome.lr;
  if (hooks_) hooks_->step_begin(step_args);

  AccelTrainStepArgs take_over{};
  take_over.struct_size = sizeof(take_over);
  take_over.step = step_args.step;
  take_over.num_micro_batches = step_args.num_micro_batches;
  at::Tensor loss_sum;  // on the device, read at the step's end
  // A pipeline schedule runs the micro-batches through run_forward /
  // run_backward; the losses it reached on the last stage are the step's.
  const bool taken_over = run_taken_over_step(take_over, loss_sum);
  if (!taken_over) {
    for (int64_t micro = 0; micro < micro_steps; ++micro) {
      at::Tensor batch;
      {
        const runtime::TraceRange range(context_, "data", "host", -1, static_cast<int32_t>(micro));
        batch = load_batch(*data_.train, sampler_.micro_batch(step, config_.batch_size, data_rank_, data_size_, micro, micro_steps));
      }
      // Each micro-batch holds an equal share, so the mean of micro-step means
      // is the global-batch mean, and so is the accumulated gradient.
      const at::Tensor loss = forward_backward(batch, micro, loss_scaler_.scale() / static_cast<double>(micro_steps),
                                               micro + 1 == micro_steps);
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    }
  }
  // Nothing below reads a device value before the optimizer step is queued
  // (StepValues), but for fp16 under a plugin that steps the optimizer.
  StepValues values(average_step_values(loss_sum / static_cast<double>(micro_steps)));

  at::NoGradGuard no_grad;
  if (hooks_) hooks_->gradients_finalize(step_args);
  // A NaN or infinite global loss skips the step (StepValues::skip); every
  // rank holds the same averaged loss, so all skip, or stop, together. The
  // verdict stays on the device, where the optimizer (the host's, or a
  // plugin's as found_inf) honours it. fp16 under a plugin that steps reads
  // it before (the loss scale's bookkeeping is the host's), and so does a
  // plugin built before ABI 1.14, which never got a found_inf to honour.
  const bool plugin_steps = hooks_ && hooks_->owns_optimizer_step();
  const bool verdict_on_host =
      plugin_steps && (loss_scaler_.active() || hooks_->optimizer_owner()->abi_version().minor < 14);
  if (verdict_on_host) values.read(context_);
  bool skipped_on_host = verdict_on_host && values.skipped();
  std::vector<at::Tensor> grads = flat_grads_of(model_);
  float grad_scale = 1.0f;  // the optimizer multiplies the gradients by it
  if (skipped_on_host) {
    // no clipping, no update
  } else if (verdict_on_host && hooks_->owns_clip_gradients()) {
    // A plugin that takes over clipping and the optimizer holds every
    // gradient (a sharding strategy's shards), still multiplied by the loss
    // scale S. Its norm tells overflow; clipping then runs in scaled space
    // (max_norm * S gives the same coefficient) and AdamW unscales (1/S).
    const double scale = loss_scaler_.scale();
    const double max_norm = config_.optimizer.grad_clip;
    const double scaled_norm = plugin_clip(std::numeric_limits<double>::infinity()).item<double>();
    skipped_on_host = !std::isfinite(scaled_norm);
    if (!skipped_on_host) {
      values.set_grad_norm(scaled_norm / scale);
      if (max_norm > 0) plugin_clip(max_norm * scale);
      grad_scale = static_cast<float>(1.0 / scale);
    }
  } else {
    const runtime::TraceRange range(context_, "clip_gradients");
    const at::Tensor overflow = loss_scaler_.unscale(grads);
    if (verdict_on_host) {
      skipped_on_host = overflow.defined() && overflow.item<bool>();
    } else {
      values.skip_if(overflow);
    }
    if (!skipped_on_host) clip_or_measure(grads, values);
  }
  wait_for_staging();  // the last save's copy of what optimizer_step changes
  bool stepped = false;  // an optimizer was called: its count moves unless the step was skipped
  if (!skipped_on_host) {
    const runtime::TraceRange range(context_, "optimizer_step");
    bool stepped_by_plugin = false;
    if (plugin_steps) {
      AccelOptimizerStepArgs args{};
      args.struct_size = sizeof(args);
      args.step = optimizer_.step_count() + 1;
      args.kind = ACCEL_OPTIMIZER_ADAMW;
      args.no_decay_roles = (1u << ACCEL_PARAM_BIAS) | (1u << ACCEL_PARAM_NORM);
      args.lr = outcome.lr;
      args.beta1 = config_.optimizer.beta1;
      args.beta2 = config_.optimizer.beta2;
      args.eps = config_.optimizer.eps;
      args.weight_decay = config_.optimizer.weight_decay;
      const runtime::TensorView scale_view(at::full({}, grad_scale, at::kFloat));
      if (grad_scale != 1.0f) args.grad_scale = scale_view.get();
      const runtime::TensorView found_inf_view(values.skip().to(at::kFloat));
      if (!verdict_on_host) args.found_inf = found_inf_view.get();
      stepped_by_plugin = hooks_->optimizer_step(args);
    }
    // On the device, the step is skipped where the verdict says so.
    if (!stepped_by_plugin) optimizer_.step(model_.units(), config_.optimizer, outcome.lr, values.skip());
    stepped = true;
  }
  values.read(context_);  // the step's one read (or what came after the early one)
  outcome.loss = values.loss();
  outcome.stop_requested = values.stop_mean() > 0.0;
  outcome.async_save_written = values.written_mean() > 1.0 - 0.5 / static_cast<double>(world_size_);
  outcome.nonfinite_loss = !std::isfinite(outcome.loss);
  outcome.skipped = skipped_on_host || values.skipped();
  if (!outcome.skipped) outcome.grad_norm = values.grad_norm();
  if (stepped && !outcome.skipped) optimizer_.count_step();
  if (outcome.nonfinite_loss) {
    // The weights would be lost: skipped, up to --nonfinite-loss-skips times.
    if (nonfinite_loss_steps_ >= config_.nonfinite_loss_skips) {
      throw AgreedError(kExitDiverged,
                        strformat("step %lld: the loss averaged over every rank is %g; stopping after %lld "
                                  "skipped non-finite step(s) (--nonfinite-loss-skips %lld)",
                                  static_cast<long long>(step + 1), outcome.loss,
                                  static_cast<long long>(nonfinite_loss_steps_),
                                  static_cast<long long>(config_.nonfinite_loss_skips)));
    }
    ++nonfinite_loss_steps_;
  }
  loss_scaler_.update(outcome.skipped);

  if (hooks_) {
    const at::Tensor loss = at::full({}, outcome.loss, at::kFloat);
    const at::Tensor norm = at::full({}, outcome.grad_norm, at::kFloat);
    runtime::TensorView loss_view(loss), norm_view(norm);
    step_args.flags = outcome.skipped ? ACCEL_STEP_SKIPPED : 0;
    step_args.loss = loss_view.get();
    step_args.grad_norm = outcome.skipped ? nullptr : norm_view.get();
    hooks_->step_end(step_args);
  }
  if (context_) {
    context_->in_step = false;
    const runtime::TraceRange range(context_, "sequence_check", "comm");
    runtime::check_collective_sequences(*context_, step);  // every rank issued the same collectives
  }
  return outcome;
}

// Every rank creates the same plugins from the same options, but a plugin
// may refuse on one rank only (fp8's state_log is rank 0's). The ranks agree before anyone
// exits: each prints its own line, then all exit with the code — no rank's
// MPI_Abort kills another before it has said why.
void Trainer::create_plugins_together() {
  const auto classify = [](std::exception_ptr failure, std::string& message) {
    try {
      std::rethrow_exception(failure);
    } catch (const cli::UsageError& e) {
      message = e.what();
      return 2;
    } catch (const std::exception& e) {
      message = e.what();
      return 1;
    }
  };
  if (!context_->world || world_size_ == 1) {
    hooks_->create_all();
    return;
  }
  // Agreed after each plugin, not once after all: a rank whose fp8 refused
  // its options must not leave the others holding a profiler it never
  // created, whose teardown would wait for it in a collective.
  hooks_->create_all([&](std::exception_ptr failure) {
    std::string message;
    const int code = failure ? classify(failure, message) : 0;
    double worst = code;
    const comm::Status status =
        context_->world->all_reduce(comm::host_buffer(&worst, 1, comm::DType::f64), comm::ReduceOp::max,
                                    {0, "host plugin creation agreement"});
    if (!status.ok()) throw std::runtime_error(status.message);
    if (worst == 0) return;
    log::error(message.empty() ? std::string("a plugin refused its options on another rank") : message);
    throw AgreedError(static_cast<int>(worst), message, /*logged_on_every_rank=*/true);
  });
}

void Trainer::plan_plugins() {
  if (!hooks_) {
    materialize_host_units();
    return;
  }
  create_plugins_together();
  use_precision_policy();
  if (!hooks_->linear_links().empty()) {
    linear_chain_ = std::make_unique<LinearChain>(hooks_->linear_links(), *context_);
    model_.set_linear([chain = linear_chain_.get()](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                                    int32_t unit, int32_t param) {
      return chain->apply(x, w, b, unit, param);
    });
  }
  hooks_->plan_model();
  if (context_->world) runtime::resolve_standard_groups(*context_);
  const runtime::ModelPlan& plan = context_->plan;
  runtime::resolve_pipeline_plan(*context_);
  if (!plan.splits.empty()) use_tensor_parallel_plan();
  runtime::resolve_context_parallel_plan(*context_);
  use_expert_parallel_plan();
  use_data_parallel_share();
  if (context_->model_run.pipeline_size > 1) {
    // Each stage holds its units' gradients only: the host's norm and step
    // would miss the other stages' and the tied copies' sums.
    if (!hooks_->owns_clip_gradients() || !hooks_->owns_optimizer_step() || !hooks_->train_step_owner()) {
      throw std::runtime_error("the plugins' model plan assigns pipeline stages, but no plugin takes over "
                               "clip_gradients, optimizer_step and train_step (a pipeline strategy does all three)");
    }
    const AccelAbiVersion abi = hooks_->train_step_owner()->abi_version();
    if (config_.eval.every > 0 && abi.major == 1 && abi.minor < 7) {
      // Evaluating through the stages is a 1.7 flag an older owner ignores.
      throw std::runtime_error("--eval-every with pipeline stages: plugin " + hooks_->train_step_owner()->name() +
                               " was built for ABI " + std::to_string(abi.major) + "." + std::to_string(abi.minor) +
                               ", before train_step could evaluate (1.7); leave --eval-every out");
    }
  }
  for (const auto& [unit, what] : plan.managed_storage) {
    if (what == ACCEL_STORAGE_PARAMS) {
      // Parameters without their gradients would have autograd write into
      // host gradients of a unit whose parameters come and go; no strategy
      // asks for it (ZeRO-2 takes the gradients alone, FSDP and ZeRO-3 both).
      throw std::runtime_error("plugin " + plan.managed_by.at(unit) +
                               " takes over a unit's parameters without its gradients, which this host version "
                               "does not resolve (it resolves gradients alone, or both)");
    }
    if (what == ACCEL_STORAGE_GRADS && !hooks_->owns_optimizer_step()) {
      // The host would step parameters whose gradients it never holds.
      throw std::runtime_error("plugin " + plan.managed_by.at(unit) +
                               " takes over a unit's gradients alone but not the optimizer step: the host cannot "
                               "step parameters whose gradients it does not keep");
    }
  }
  materialize_host_units();
}

// The moment formats a precision plugin asked for (accel/precision.h), for
// the host's own AdamW; a plugin that takes the step over reads them itself
// (the dispatcher refused one that does not declare it).
void Trainer::use_precision_policy() {
  const AccelPrecisionPolicy& policy = context_->precision_policy;
  const auto format = [](DLDataType t) {
    if (t.bits == 0) return at::kFloat;
    if (t.code == ACCEL_DL_FLOAT8_E4M3FN) return at::ScalarType::Float8_e4m3fn;
    return at::kHalf;  // the only other moment dtype set_policy accepts
  };
  optimizer_.set_moment_formats(format(policy.exp_avg_dtype), format(policy.exp_avg_sq_dtype));
}

void Trainer::use_tensor_parallel_plan() {
  runtime::resolve_tensor_parallel_plan(*context_);
  if (!hooks_->owns_clip_gradients()) {
    throw std::runtime_error("the plugins' model plan splits parameters, but no plugin takes over clip_gradients: "
                             "the host's norm would count split parameters once per rank");
  }
}

void Trainer::use_expert_parallel_plan() {
  runtime::resolve_expert_parallel_plan(*context_);
  if (context_->expert_parallel_size > 1 && (!hooks_->owns_clip_gradients() || !hooks_->owns_optimizer_step())) {
    throw std::runtime_error("the plugins' mesh splits the experts, but no plugin takes over clip_gradients and "
                             "optimizer_step: the host's norm and step would treat other ranks' experts as these");
  }
}

void Trainer::use_data_parallel_share() {
  // The ranks of a tensor group, of a context group, and the stages of a
  // pipeline read the same micro-batches: the data loader's rank is the
  // rank's index between them (accel/comm.h's rank layout: r = (stage x D +
  // data) x T + tensor, the context index the innermost part of data).
  const auto tensor = static_cast<int>(runtime::tensor_parallel_size(*context_));
  const auto context = static_cast<int>(context_->context_parallel_size);
  const int stages = context_->model_run.pipeline_size;
  data_size_ = world_size_ / (tensor * stages * context);
  data_rank_ = (rank_ / tensor) % (data_size_ * context) / context;
  cli::validate_for_world(config_, data_size_);  // deferred by run.cpp: the data group splits the batch
  context_->model_run.micro_batch_size = config_.batch_size / (data_size_ * config_.grad_accum);
}

void Trainer::materialize_host_units() {
  std::vector<model::Unit>& units = model_.units();
  for (size_t u = 0; u < units.size(); ++u) {
    // Another pipeline stage's unit has no storage here.
    if (context_ && !runtime::holds_unit(*context_, static_cast<int32_t>(u))) continue;
    // A plugin that took over only the gradients (ZeRO-2) leaves the
    // parameters to the host: kept, initialised, saved as any host unit's.
    uint32_t what = 0;  // the ACCEL_STORAGE_* bits a plugin manages
    if (context_) {
      const auto managed = context_->plan.managed_storage.find(static_cast<int32_t>(u));
      if (managed != context_->plan.managed_storage.end()) what = managed->second;
    }
    if ((what & ACCEL_STORAGE_PARAMS) == 0) units[u].materialize_params(at::kFloat, model::Unit::Fill::undefined);
    if ((what & ACCEL_STORAGE_GRADS) == 0) units[u].materialize_grads(at::kFloat, /*zero=*/true);
  }
  model_.initialise(config_.seed);
  const bool host_steps = !hooks_ || !hooks_->owns_optimizer_step();
  if (host_steps) optimizer_.allocate_state(units);
  // The host's own buffers in the memory ledger, beside the plugins'.
  if (context_ && context_->memory) {
    for (const model::Unit& unit : units) {
      if (!unit.has_params()) continue;
      const auto bytes = static_cast<int64_t>(unit.flat_params().nbytes());
      context_->memory->record_allocate(ACCEL_MEMORY_DEVICE, ACCEL_MEMORY_PARAMS, bytes);
      if (unit.has_grads()) context_->memory->record_allocate(ACCEL_MEMORY_DEVICE, ACCEL_MEMORY_GRADS, bytes);
    }
    // The moments as stored: 8 bytes per parameter in fp32, 1 + 2 plus the
    // per-parameter scales when they are scaled (MS-AMP O2).
    if (host_steps) {
      context_->memory->record_allocate(ACCEL_MEMORY_DEVICE, ACCEL_MEMORY_OPTIMIZER,
                                        static_cast<int64_t>(optimizer_.state_bytes()));
    }
  }
}

void Trainer::setup_plugins() {
  if (!hooks_) return;
  const bool resuming = !resumed_from_.empty();
  hooks_->setup(completed_steps_, static_cast<int32_t>(config_.grad_accum), resuming);
  if (resuming) load_plugin_state();
}

RunEnd Trainer::run(const std::function<void()>& started) {
  plan_plugins();
  if (!config_.resume.empty()) resume_from(config_.resume);
  setup_plugins();
  // What loading cost this rank (a file source: the bytes it read, which a
  // rank keeping a shard keeps near its share).
  if (const std::string loaded = model_.param_init().weights_summary(); !loaded.empty()) log::info(loaded);
  model_.release_initial_weights();
  // What start-up (materialising, plugin setup, resume) peaked at, reported
  // with the first step: how a sharding plugin shows that no rank ever held
  // the whole model.
  std::map<std::string, int64_t> startup_memory_peaks;
  if (context_ && context_->memory) startup_memory_peaks = device_memory_peaks(*context_->memory);
  log::info(strformat("model %s: %s, %lld parameters, on %s", config_.model.c_str(),
                      model_.config().describe().c_str(), static_cast<long long>(model_.num_parameters()),
                      model_.device().str().c_str()));
  log::info(strformat("data %s, order %s; %lld steps of %lld sequences (x%lld accumulation), %s precision",
                      data_.train->describe().c_str(), to_string(config_.data_order),
                      static_cast<long long>(config_.steps), static_cast<long long>(config_.batch_size),
                      static_cast<long long>(config_.grad_accum), to_string(config_.mixed_precision)));

  const double tokens_per_step = static_cast<double>(config_.batch_size * model_.config().seq_len);
  // The progress line's elapsed time and ETA count this process's steps
  // (a resumed run estimates from its own pace).
  const auto loop_start = std::chrono::steady_clock::now();
  const int64_t first_step = completed_steps_;
  // Stop signals are recorded from the process's start (main.cpp): one that
  // came during start-up stops the run after its first step.
  if (started) started();
  while (completed_steps_ < config_.steps) {
    const auto start = std::chrono::steady_clock::now();
    if (context_ && context_->memory) context_->memory->reset_peak();
    model::reset_tensor_memory_peak();
    if (model_.device().is_cuda()) reset_device_memory_peak(model_.device());
    memory_watch_.begin_step(logged_step(completed_steps_ + 1));
    const StepOutcome outcome = stopping_together(completed_steps_, [&] { return train_step(completed_steps_); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++completed_steps_;

    StepMetrics m;
    m.step = completed_steps_;
    m.loss = outcome.loss;
    m.lr = outcome.lr;
    m.grad_norm = outcome.grad_norm;
    m.tokens_per_s = tokens_per_step / seconds;
    m.peak_mem_bytes = peak_rss_bytes();
    m.ckpt_staging_wait_ms = std::exchange(staging_wait_ms_, std::nullopt);
    if (model_.device().is_cuda()) {
      const DeviceMemoryPeak device = device_memory_peak(model_.device());
      m.device_peak_allocated_bytes = device.allocated;
      m.device_peak_reserved_bytes = device.reserved;
    }
    m.loss_scale = loss_scaler_.scale();
    m.skipped = outcome.skipped;
    if (!moe_step_.tokens_per_expert.empty()) {
      m.moe_tokens_per_expert = std::move(moe_step_.tokens_per_expert);
      m.moe_dropped = moe_step_.dropped;
      if (moe_step_.aux_loss_sum.defined()) {
        m.moe_aux_loss = moe_step_.aux_loss_sum.item<double>() / static_cast<double>(config_.grad_accum);
      }
    }
    moe_step_ = MoeStepStats{};
    if (context_) {
      std::lock_guard<std::mutex> lock(context_->mutex);
      m.plugin_metrics.swap(context_->step_metrics);
      m.comm_bytes = context_->comm_bytes.exchange(0);
      if (context_->identity.world_size > 1) {
        // What this rank sent, by link (host/comm/link_bytes.h).
        const comm::LinkBytes sent = comm::take_link_bytes_sent();
        m.plugin_metrics["host.bytes_sent_intra_node"] = static_cast<double>(sent.intra_node);
        m.plugin_metrics["host.bytes_sent_inter_node"] = static_cast<double>(sent.inter_node);
        m.plugin_metrics["host.bytes_sent_mpi_collectives"] = static_cast<double>(sent.mpi_collectives);
      }
      if (context_->tensor_parallel_size > 1) {
        m.plugin_metrics["host.tensor_parallel_bytes"] =
            static_cast<double>(runtime::take_tensor_parallel_bytes(*context_));
      }
      if (context_->context_parallel_size > 1) {
        m.plugin_metrics["host.context_parallel_bytes"] =
            static_cast<double>(runtime::take_context_parallel_bytes(*context_));
      }
      if (context_->expert_parallel_size > 1) {
        m.plugin_metrics["host.expert_parallel_bytes"] =
            static_cast<double>(runtime::take_expert_parallel_bytes(*context_));
      }
      if (context_->memory) m.memory_peak_bytes = device_memory_peaks(*context_->memory);
      m.memory_startup_peak_bytes.swap(startup_memory_peaks);
    }
    m.param_bytes_alive_after_forward = memory_watch_.take_alive_after_forward();
    if (model::counting_cpu_allocator_installed()) {
      m.memory_ledger = runtime::ledger_now(accounted_memory());
      m.memory_ledger_peak = memory_watch_.take_peak(accounted_memory());
    }
    if (evaluates_after(completed_steps_)) {
      m.eval_loss = stopping_together(completed_steps_ - 1, [&] { return evaluate(); });
      log::info(strformat("eval  step %5lld/%lld  loss %.4f  ppl %.3f  (%lld batches of %lld held-out sequences)",
                          static_cast<long long>(completed_steps_), static_cast<long long>(config_.steps),
                          *m.eval_loss, std::exp(*m.eval_loss), static_cast<long long>(config_.eval.steps),
                          static_cast<long long>(config_.batch_size)));
      if (context_) {
        // Evaluation's traffic and plugin metrics belong to no training step.
        std::lock_guard<std::mutex> lock(context_->mutex);
        context_->step_metrics.clear();
        context_->comm_bytes.exchange(0);
        comm::take_link_bytes_sent();
        if (context_->tensor_parallel_size > 1) runtime::take_tensor_parallel_bytes(*context_);
        if (context_->context_parallel_size > 1) runtime::take_context_parallel_bytes(*context_);
        if (context_->expert_parallel_size > 1) runtime::take_expert_parallel_bytes(*context_);
      }
    }
    if (logged_step(completed_steps_)) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
      const double eta = elapsed / static_cast<double>(completed_steps_ - first_step) *
                         static_cast<double>(config_.steps - completed_steps_);
      // On a GPU the device's peak comes first: it is the memory that runs out.
      const std::string memory =
          m.device_peak_allocated_bytes
              ? strformat("gpu %s (reserved %s)  host %s",
                          format_bytes(static_cast<double>(*m.device_peak_allocated_bytes)).c_str(),
                          format_bytes(static_cast<double>(*m.device_peak_reserved_bytes)).c_str(),
                          format_bytes(static_cast<double>(m.peak_mem_bytes)).c_str())
              : format_bytes(static_cast<double>(m.peak_mem_bytes));
      log::info(strformat("step %5lld/%lld  loss %.4f  lr %.3e  grad_norm %.3f  %.0f tok/s  mem %s  elapsed %s  eta %s%s",
                          static_cast<long long>(completed_steps_), static_cast<long long>(config_.steps), m.loss,
                          m.lr, m.grad_norm, m.tokens_per_s, memory.c_str(),
                          format_duration(elapsed).c_str(), format_duration(eta).c_str(),
                          outcome.nonfinite_loss ? "  (skipped: non-finite loss)"
                          : outcome.skipped      ? "  (skipped: inf/nan gradients)"
                                                 : ""));
    }
    // A save's costs go on this step's metrics line: the saves come first.
    const bool stopping = outcome.stop_requested && completed_steps_ != config_.steps;
    if (outcome.async_save_written) commit_async_save(&m);
    const bool last = completed_steps_ == config_.steps;
    if (!stopping && !config_.save_dir.empty() && config_.save_every > 0 && completed_steps_ % config_.save_every == 0 &&
        !last) {
      save_checkpoint(/*periodic=*/true, &m);
    } else if (!stopping && config_.snapshot_every > 0 && !snapshots_suspended_ &&
               completed_steps_ % config_.snapshot_every == 0 && !last) {
      save_checkpoint(/*periodic=*/true, &m, /*snapshot=*/true);
    }
    metrics_->write(m);
    tensorboard_->write(m);
    if (stopping) {
      stop_on_signal();
      return RunEnd::stopped_by_signal;
    }
  }
  if (!config_.save_dir.empty()) save_checkpoint();
  remove_snapshots();
  return RunEnd::completed;
}

void Trainer::stop_on_signal() {
  const int signal = pending_stop_signal();
  const std::string why = signal != 0 ? strformat("on %s", stop_signal_name(signal))
                                      : std::string("because another rank was asked to stop");
  if (config_.save_dir.empty()) {
    if (rank_ == 0) {
      log::warn(strformat("step %lld: stopped %s; without --save there is nothing to resume from",
                          static_cast<long long>(completed_steps_), why.c_str()));
    }
    return;
  }
  save_checkpoint();
  if (rank_ == 0) {
    log::info(strformat("step %lld: stopped %s; the checkpoint is written: `--resume auto` (or --resume %s) goes on "
                        "from it",
                        static_cast<long long>(completed_steps_), why.c_str(), config_.save_dir.c_str()));
  }
}

}  // namespace accel::train
