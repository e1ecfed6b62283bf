// The trainer's unit-range execution (see trainer.h): one unit's forward
// between its hooks, a range of units forward and backward, the host's own
// micro-batch loop on top of them, and the run_forward / run_backward
// services a pipeline schedule drives (accel/model.h). Split from the step
// loop (trainer.cpp) so each file keeps one purpose.
#include <torch/csrc/autograd/autograd.h>

#include <optional>
#include <stdexcept>

#include "host/plugin/hook_dispatch.h"
#include "host/plugin/loaded_plugin.h"
#include "host/runtime/host_context.h"
#include "host/runtime/memory_ledger.h"
#include "host/runtime/service_support.h"
#include "host/runtime/trace_scope.h"
#include "host/train/autocast_scope.h"
#include "host/train/linear_chain.h"
#include "host/train/trainer.h"
#include "host/util/agreed_error.h"
#include "host/util/strformat.h"

namespace accel::train {
namespace {

// Units unit `u`'s computation touches: itself, and for a tied head the
// token embedding (gpt.h).
std::vector<size_t> units_read_by(const model::GptModel& model, size_t u) {
  if (model.units()[u].kind() == model::UnitKind::head && model.head_tied_to_embedding()) return {u, 0};
  return {u};
}

AccelUnitHookArgs unit_args(size_t unit, int64_t micro, uint32_t flags, const DLTensor* activation) {
  AccelUnitHookArgs args{};
  args.struct_size = sizeof(args);
  args.unit = static_cast<int32_t>(unit);
  args.micro_batch = static_cast<int32_t>(micro);
  args.flags = flags;
  args.activation = activation;
  return args;
}

// A service failure the caller made (a range the schedule never ran, a unit
// of another stage): ACCEL_ERROR_FAILED_PRECONDITION with `message`.
[[noreturn]] void refuse(const std::string& message) {
  throw runtime::ServiceError(ACCEL_ERROR_FAILED_PRECONDITION, message);
}

}  // namespace

void Trainer::require_storage(size_t u, bool backward) const {
  for (size_t touched : units_read_by(model_, u)) {
    const model::Unit& unit = model_.units()[touched];
    const char* missing = !unit.has_params() ? "parameters" : (backward && !unit.has_grads()) ? "gradients" : nullptr;
    if (missing == nullptr) continue;
    throw std::runtime_error(strformat("unit %s: its %s are not materialised when %s %s runs (the plugin managing "
                                       "its storage must materialize it in the unit's %s hook)",
                                       unit.name().c_str(), missing, model_.units()[u].name().c_str(),
                                       backward ? "backward" : "forward", backward ? "backward_pre" : "forward_pre"));
  }
}

bool Trainer::recomputes(size_t u) const {
  // The last unit's output feeds the loss directly: it is never recomputed.
  if (context_ == nullptr || u + 1 == model_.units().size()) return false;
  const auto it = context_->plan.checkpointing.find(static_cast<int32_t>(u));
  return it != context_->plan.checkpointing.end() && it->second;
}

at::Tensor Trainer::run_unit_forward(size_t u, int64_t micro, uint32_t hook_flags, const at::Tensor& input) {
  const runtime::TraceRange range(context_, (hook_flags & ACCEL_UNIT_HOOK_RECOMPUTE) ? "recompute" : "forward", "host",
                                  static_cast<int32_t>(u), static_cast<int32_t>(micro));
  if (hooks_ && hooks_->has_unit_hooks()) {
    std::optional<runtime::TensorView> view;
    if (u > 0) view.emplace(input);
    AccelUnitHookArgs args = unit_args(u, micro, hook_flags, view ? view->get() : nullptr);
    hooks_->unit_forward_pre(args);
  }
  require_storage(u, /*backward=*/false);
  if (linear_chain_) linear_chain_->set_recompute((hook_flags & ACCEL_UNIT_HOOK_RECOMPUTE) != 0);
  AutocastScope autocast(config_.mixed_precision, config_.autocast, model_.device().type());
  // Units may hold different dtypes (a plugin's bf16 units beside the
  // host's fp32 ones): the input enters in the unit's own dtype, as
  // PyTorch FSDP's cast_forward_inputs does; the cast is differentiable.
  at::Tensor typed = input;
  const at::ScalarType unit_dtype = model_.units()[u].flat_params().scalar_type();
  if (typed.is_floating_point() && typed.scalar_type() != unit_dtype) typed = typed.to(unit_dtype);
  const bool keeps_graph = (hook_flags & ACCEL_UNIT_HOOK_NO_GRAD) == 0 &&
                           (!recomputes(u) || (hook_flags & ACCEL_UNIT_HOOK_RECOMPUTE) != 0);
  at::Tensor output;
  if (keeps_graph) {
    output = model_.forward_unit(u, typed);
  } else {
    at::NoGradGuard no_grad;
    output = model_.forward_unit(u, typed);
  }
  if (hooks_ && hooks_->has_unit_hooks()) {
    runtime::TensorView view(output);
    AccelUnitHookArgs args = unit_args(u, micro, hook_flags, view.get());
    hooks_->unit_forward_post(args);
  }
  memory_watch_.after_forward(model_, context_ ? &context_->plan : nullptr, u, accounted_memory());
  return output;
}

std::unique_ptr<Trainer::RangeRun> Trainer::forward_range(size_t first, size_t end, int64_t micro, uint32_t flags,
                                                          const at::Tensor& input, const at::Tensor& targets,
                                                          double loss_multiplier) {
  auto run = std::make_unique<RangeRun>();
  run->first = first;
  run->end = end;
  if (linear_chain_) linear_chain_->set_micro_batch(static_cast<int32_t>(micro));
  // Each unit's input is a detached leaf, so backward runs unit by unit,
  // newest first, and the range's input gradient is its first leaf's. An
  // evaluation (NO_GRAD) keeps nothing.
  const bool no_grad = (flags & ACCEL_UNIT_HOOK_NO_GRAD) != 0;
  at::Tensor x = input;
  const bool experts = model_.config().has_experts() && !no_grad;
  for (size_t u = first; u < end; ++u) {
    run->inputs.push_back(u == 0 || no_grad ? x : x.detach().requires_grad_(true));
    run->outputs.push_back(run_unit_forward(u, micro, flags, run->inputs.back()));
    x = run->outputs.back();
    if (experts) {
      count_routing(model_.latest_routing(u));
      run->router_logits.push_back(model_.take_router_logits(u));
    }
  }
  if (end != model_.units().size()) return run;
  // The loss, forward and backward, is one trace range.
  const runtime::TraceRange range(context_, "loss", "host", -1, static_cast<int32_t>(micro));
  at::Tensor loss;
  {
    std::optional<at::NoGradGuard> no_graph;
    if (no_grad) no_graph.emplace();
    AutocastScope autocast(config_.mixed_precision, config_.autocast, model_.device().type());
    // On CUDA the loss and its gradient at the logits come together, in one
    // float buffer (gpt.h); elsewhere through autograd, below.
    std::optional<model::LossAndGrad> fused;
    if (!no_grad) fused = model_.loss_and_logit_grad(run->outputs.back(), targets, loss_multiplier);
    if (fused) {
      loss = std::move(fused->loss);
      run->grad_logits = std::move(fused->grad);
    } else {
      loss = model_.loss_from_logits(run->outputs.back(), targets);
    }
  }
  // The reported loss is the cross-entropy plus the auxiliary losses, as transformers reports it.
  const at::Tensor aux = experts && model_.moe_losses_on() ? add_auxiliary_loss(*run, loss_multiplier) : at::Tensor();
  auto reported = [&aux](const at::Tensor& cross_entropy) {
    const at::Tensor value = cross_entropy.detach().to(at::kFloat);
    return aux.defined() ? value + aux : value;
  };
  if (no_grad || run->grad_logits.defined()) {
    run->loss = reported(loss);
    return run;
  }
  // The loss's own graph (cross-entropy's saved log-softmax: batch x seq x
  // vocab floats, as large as the logits) is done with once its gradient at
  // the logits is known: drop it now, not at the end of backward, where it
  // would sit on top of every unit's peak.
  run->grad_logits = torch::autograd::grad({loss * loss_multiplier}, {run->outputs.back()}, /*grad_outputs=*/{},
                                           /*retain_graph=*/true)[0];
  run->loss = reported(loss);
  return run;
}

at::Tensor Trainer::backward_range(RangeRun& run, int64_t micro, uint32_t flags, at::Tensor grad_output) {
  if (!grad_output.defined()) grad_output = run.grad_logits;
  run.grad_logits = at::Tensor();
  if (linear_chain_) linear_chain_->set_micro_batch(static_cast<int32_t>(micro));
  const bool unit_hooks = hooks_ && hooks_->has_unit_hooks();
  const bool last_micro = (flags & ACCEL_UNIT_HOOK_LAST_MICRO_BATCH) != 0;
  for (size_t u = run.end; u-- > run.first;) {
    const size_t k = u - run.first;
    const bool router_gradient = k < run.router_grads.size() && run.router_grads[k].defined();
    if (recomputes(u)) {
      run.outputs[k] = run_unit_forward(u, micro, flags | ACCEL_UNIT_HOOK_RECOMPUTE, run.inputs[k]);
      // The recomputed graph's logits take the gradient the loss gave the first ones.
      if (router_gradient) run.router_logits[k] = model_.take_router_logits(u);
    }
    const runtime::TraceRange range(context_, "backward", "host", static_cast<int32_t>(u), static_cast<int32_t>(micro));
    if (unit_hooks) {
      runtime::TensorView view(grad_output);
      AccelUnitHookArgs args = unit_args(u, micro, flags, view.get());
      hooks_->unit_backward_pre(args);
    }
    require_storage(u, /*backward=*/true);
    if (router_gradient) {
      torch::autograd::backward({run.outputs[k], run.router_logits[k]}, {grad_output, run.router_grads[k]});
      run.router_logits[k] = run.router_grads[k] = at::Tensor();
    } else {
      run.outputs[k].backward(grad_output);
    }
    run.outputs[k] = at::Tensor();  // frees the unit's graph and activations
    const at::Tensor grad_input = u > 0 ? run.inputs[k].grad() : at::Tensor();
    run.inputs[k] = at::Tensor();
    if (unit_hooks) {
      std::optional<runtime::TensorView> view;
      if (grad_input.defined()) view.emplace(grad_input);
      AccelUnitHookArgs args = unit_args(u, micro, flags, view ? view->get() : nullptr);
      hooks_->unit_backward_post(args);
      if (last_micro) {
        const model::Unit& unit = model_.units()[u];
        std::optional<runtime::TensorView> grads;
        if (unit.has_grads()) grads.emplace(unit.flat_grads());
        AccelGradientsReadyArgs ready{};
        ready.struct_size = sizeof(ready);
        ready.unit = static_cast<int32_t>(u);
        ready.micro_batch = static_cast<int32_t>(micro);
        ready.grads = grads ? grads->get() : nullptr;
        hooks_->gradients_ready(ready);
      }
    }
    memory_watch_.after_backward(accounted_memory());
    grad_output = grad_input;
  }
  return grad_output;
}

void Trainer::count_routing(const model::MoeRouting& routing) {
  if (routing.tokens_per_expert.empty()) return;  // a unit without experts
  std::vector<int64_t>& total = moe_step_.tokens_per_expert;
  total.resize(routing.tokens_per_expert.size(), 0);
  for (size_t e = 0; e < total.size(); ++e) total[e] += routing.tokens_per_expert[e];
  moe_step_.dropped += routing.dropped;
}

// transformers' MixtralForCausalLM adds router_aux_loss_coef x the
// load-balancing loss over every layer's router logits to each forward's
// loss; so does this, with the z-loss beside it. Its gradient reaches the
// logits here and the blocks in their backward (backward_range), scaled as
// the cross-entropy's. Returns its value (detached fp32).
at::Tensor Trainer::add_auxiliary_loss(RangeRun& run, double loss_multiplier) {
  if (run.first != 0) {
    throw std::logic_error("the auxiliary losses need every block's router logits on the rank with the loss");
  }
  std::vector<at::Tensor> logits;
  std::vector<size_t> index;
  for (size_t k = 0; k < run.router_logits.size(); ++k) {
    if (!run.router_logits[k].defined()) continue;
    logits.push_back(run.router_logits[k]);
    index.push_back(k);
  }
  if (logits.empty()) return {};
  // The loss depends on the logits' values alone: its gradient is taken at
  // leaves of them, so a block whose forward kept no graph (recomputed in
  // backward) gets it as well.
  const at::AutoGradMode grad_mode(true);
  for (at::Tensor& l : logits) l = l.detach().requires_grad_(true);
  const at::Tensor aux = model_.moe_auxiliary_loss(logits);
  const std::vector<at::Tensor> grads = torch::autograd::grad({aux * loss_multiplier}, logits);
  run.router_grads.assign(run.router_logits.size(), at::Tensor());
  for (size_t i = 0; i < index.size(); ++i) run.router_grads[index[i]] = grads[i];
  const at::Tensor value = aux.detach();
  moe_step_.aux_loss_sum = moe_step_.aux_loss_sum.defined() ? moe_step_.aux_loss_sum + value : value;
  return value;
}

at::Tensor Trainer::forward_backward(const at::Tensor& batch, int64_t micro, double loss_multiplier,
                                    bool last_micro) {
  const int64_t T = batch.size(1) - 1;
  at::Tensor on_device;
  {
    const runtime::TraceRange range(context_, "data", "host", -1, static_cast<int32_t>(micro));
    on_device = batch.to(model_.device());
  }
  const uint32_t flags = last_micro ? ACCEL_UNIT_HOOK_LAST_MICRO_BATCH : 0;
  std::unique_ptr<RangeRun> run = forward_range(0, model_.units().size(), micro, flags, on_device.narrow(1, 0, T),
                                                on_device.narrow(1, 1, T), loss_multiplier);
  backward_range(*run, micro, flags, at::Tensor());
  return run->loss.detach().to(at::kDouble);
}

// ---------------------------------------------------------------------------
// run_forward / run_backward: a pipeline schedule's calls
// ---------------------------------------------------------------------------

void Trainer::check_activation(const at::Tensor& activation, const char* what) const {
  // [seq (this rank's part under context parallelism, its slice of that
  // under sequence parallelism), micro-batch, hidden]
  const model::TensorGroup& tp = model_.tensor_group();
  const int64_t seq =
      model_.config().seq_len / model_.context_group().size / (tp.sequence_split() ? tp.size : 1);
  const int64_t batch = context_->model_run.micro_batch_size;
  if (activation.dim() != 3 || activation.size(0) != seq || activation.size(1) != batch ||
      activation.size(2) != model_.config().n_embd || !activation.is_floating_point()) {
    throw runtime::ServiceError(ACCEL_ERROR_INVALID_ARGUMENT,
                                strformat("%s is %s, not a floating-point [%lld, %lld, %lld] activation", what,
                                          c10::str(activation.sizes()).c_str(), static_cast<long long>(seq),
                                          static_cast<long long>(batch),
                                          static_cast<long long>(model_.config().n_embd)));
  }
}

const at::Tensor& Trainer::micro_batch_on_device(int64_t step, int64_t micro) {
  auto it = step_batches_.find(micro);
  if (it != step_batches_.end()) return it->second;
  const runtime::TraceRange range(context_, "data", "host", -1, static_cast<int32_t>(micro));
  // An evaluation batch reads the held-out windows (trainer_eval.cpp).
  data::BatchSampler& sampler = runner_eval_ ? eval_sampler_ : sampler_;
  const at::Tensor batch =
      load_batch(runner_eval_ ? *data_.eval : *data_.train,
                 sampler.micro_batch(step, config_.batch_size, data_rank_, data_size_, micro, config_.grad_accum));
  return step_batches_.emplace(micro, batch.to(model_.device())).first->second;
}

void Trainer::check_range(int32_t first, int32_t end, int32_t micro, const char* service) const {
  const auto num_units = static_cast<int32_t>(model_.units().size());
  if (first < 0 || end > num_units || first >= end) {
    throw runtime::ServiceError(ACCEL_ERROR_INVALID_ARGUMENT,
                                strformat("units [%d, %d) are not a range of the model's %d units", first, end,
                                          num_units));
  }
  if (micro < 0 || micro >= config_.grad_accum) {
    throw runtime::ServiceError(ACCEL_ERROR_INVALID_ARGUMENT,
                                strformat("micro-batch %d is not one of this step's %lld", micro,
                                          static_cast<long long>(config_.grad_accum)));
  }
  for (int32_t u = first; u < end; ++u) {
    if (!runtime::unit_is_local(*context_, u)) {
      refuse(strformat("%s of unit %s: it belongs to pipeline stage %d, this rank runs stage %d", service,
                       model_.units()[static_cast<size_t>(u)].name().c_str(),
                       context_->plan.unit_stage[static_cast<size_t>(u)], context_->model_run.pipeline_stage));
    }
  }
}

void Trainer::run_forward(AccelRunForwardArgs& args) {
  check_range(args.first_unit, args.end_unit, args.micro_batch, "run_forward");
  const auto first = static_cast<size_t>(args.first_unit);
  const auto end = static_cast<size_t>(args.end_unit);
  const int64_t micro = args.micro_batch;
  const bool no_grad = (args.flags & ACCEL_RUN_NO_GRAD) != 0;
  if (no_grad != runner_eval_) {
    refuse(runner_eval_ ? "an evaluation batch (ACCEL_TRAIN_STEP_EVAL) runs forward only, with ACCEL_RUN_NO_GRAD"
                        : "ACCEL_RUN_NO_GRAD outside an evaluation batch (ACCEL_TRAIN_STEP_EVAL)");
  }
  const auto key = std::make_pair(first, micro);
  if (!no_grad && ranges_.count(key) != 0) {
    refuse(strformat("units [%zu, %zu) already ran forward for micro-batch %lld without their backward", first, end,
                     static_cast<long long>(micro)));
  }
  grad_inputs_.erase(micro);  // valid until the next run call for the micro-batch
  const bool last_unit = end == model_.units().size();
  // Only the stages at the two ends read the micro-batch: tokens, targets.
  at::Tensor batch;
  if (first == 0 || last_unit) batch = micro_batch_on_device(runner_step_, micro);
  const int64_t T = model_.config().seq_len;
  at::Tensor input;
  if (first == 0) {
    input = batch.narrow(1, 0, T);
  } else {
    if (args.input == nullptr) {
      throw runtime::ServiceError(ACCEL_ERROR_INVALID_ARGUMENT,
                                  strformat("input is NULL for units [%zu, %zu): only unit 0 reads the tokens", first,
                                            end));
    }
    // Borrowed for the call only: the schedule reuses its receive buffers.
    input = runtime::to_aten(args.input, "input").to(model_.device()).clone();
    check_activation(input, "input");
  }
  const uint32_t flags = no_grad ? ACCEL_UNIT_HOOK_NO_GRAD
                         : micro + 1 == config_.grad_accum ? ACCEL_UNIT_HOOK_LAST_MICRO_BATCH
                                                           : 0;
  std::optional<at::NoGradGuard> no_graph;
  if (no_grad) no_graph.emplace();
  std::unique_ptr<RangeRun> run =
      forward_range(first, end, micro, flags, input, last_unit ? batch.narrow(1, 1, T) : at::Tensor(),
                    loss_scaler_.scale() / static_cast<double>(config_.grad_accum));
  run->output_view.reset(run->outputs.back());
  args.output = run->output_view.get();
  args.loss = nullptr;
  if (last_unit) {
    // Summed where it lives: reading it now would stall a device's pipeline.
    runner_loss_sum_ = runner_losses_ == 0 ? run->loss.clone() : runner_loss_sum_ + run->loss;
    ++runner_losses_;
    run->loss_view.reset(run->loss);
    args.loss = run->loss_view.get();
  }
  if (no_grad) {
    eval_run_ = std::move(run);  // valid until the next run call
  } else {
    ranges_.emplace(key, std::move(run));
  }
}

void Trainer::run_backward(AccelRunBackwardArgs& args) {
  check_range(args.first_unit, args.end_unit, args.micro_batch, "run_backward");
  if (runner_eval_) refuse("an evaluation batch (ACCEL_TRAIN_STEP_EVAL) runs no backward");
  const auto first = static_cast<size_t>(args.first_unit);
  const int64_t micro = args.micro_batch;
  const auto it = ranges_.find(std::make_pair(first, micro));
  if (it == ranges_.end() || it->second->end != static_cast<size_t>(args.end_unit)) {
    refuse(strformat("units [%d, %d) did not run forward for micro-batch %lld", args.first_unit, args.end_unit,
                     static_cast<long long>(micro)));
  }
  const bool last_unit = it->second->end == model_.units().size();
  at::Tensor grad_output;
  if (!last_unit) {
    if (args.grad_output == nullptr) {
      throw runtime::ServiceError(ACCEL_ERROR_INVALID_ARGUMENT,
                                  "grad_output is NULL for a range that does not end with the last unit");
    }
    grad_output = runtime::to_aten(args.grad_output, "grad_output").to(model_.device());
    const at::Tensor& output = it->second->outputs.back();
    if (grad_output.sizes() != output.sizes()) {
      throw runtime::ServiceError(ACCEL_ERROR_INVALID_ARGUMENT,
                                  "grad_output's shape differs from the range's output");
    }
    grad_output = grad_output.to(output.scalar_type());
  }
  const uint32_t flags = micro + 1 == config_.grad_accum ? ACCEL_UNIT_HOOK_LAST_MICRO_BATCH : 0;
  std::unique_ptr<RangeRun> run = std::move(it->second);
  ranges_.erase(it);
  const at::Tensor grad_input = backward_range(*run, micro, flags, grad_output);
  args.grad_input = nullptr;
  if (grad_input.defined()) {
    auto view = std::make_unique<runtime::TensorView>(grad_input);
    args.grad_input = view->get();
    grad_inputs_[micro] = std::move(view);
  }
}

bool Trainer::run_taken_over_step(const AccelTrainStepArgs& args, at::Tensor& loss_sum) {
  if (!hooks_ || !hooks_->train_step_owner()) return false;
  wait_for_staging();  // the whole step is the plugin's, its optimizer step included
  runner_step_ = args.step;
  runner_eval_ = (args.flags & ACCEL_TRAIN_STEP_EVAL) != 0;
  runner_loss_sum_ = at::Tensor();
  runner_losses_ = 0;
  context_->runner = this;
  struct Reset {
    Trainer& t;
    ~Reset() {
      t.context_->runner = nullptr;
      t.runner_eval_ = false;
      t.ranges_.clear();
      t.eval_run_.reset();
      t.grad_inputs_.clear();
      t.step_batches_.clear();
    }
  } reset{*this};
  hooks_->train_step(args);
  // The schedule's protocol, checked on every rank and agreed on (one
  // all-reduce), so a rank that broke it does not leave the others waiting
  // in the loss's average until the timeout.
  std::string broken;
  const std::string owner = hooks_->train_step_owner()->name();
  const bool last_stage = runtime::unit_is_local(*context_, static_cast<int32_t>(model_.units().size() - 1));
  if (!ranges_.empty()) {
    const auto& [key, run] = *ranges_.begin();
    broken = strformat("plugin %s: train_step returned with %zu forward(s) lacking their backward (units [%zu, %zu) "
                       "of micro-batch %lld)",
                       owner.c_str(), ranges_.size(), key.first, run->end, static_cast<long long>(key.second));
  } else if (last_stage && runner_losses_ != config_.grad_accum) {
    broken = strformat("plugin %s: train_step ran the loss for %lld of the step's %lld micro-batches", owner.c_str(),
                       static_cast<long long>(runner_losses_), static_cast<long long>(config_.grad_accum));
  }
  agree_on_failure(broken, "host train_step protocol agreement");
  loss_sum = last_stage ? runner_loss_sum_.detach().to(at::kDouble)
                        : at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model_.device()));
  return true;
}

}  // namespace accel::train
