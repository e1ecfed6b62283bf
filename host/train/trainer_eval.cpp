// Evaluation on held-out windows (--eval-every; see trainer.h). Split from
// the step loop (trainer.cpp) so each file keeps one purpose.
//
// Each evaluation reads the same windows: global batch k of K is positions
// [k*B, (k+1)*B) of the held-out set in order (wrapping when it is smaller),
// shared among the data-parallel ranks and micro-steps exactly as a training
// batch is, so the figure is the same at any world size and accumulation.
// Every plugin sees each batch as a step flagged ACCEL_STEP_EVAL whose unit
// hooks carry ACCEL_UNIT_HOOK_NO_GRAD: sharding plugins gather and release
// as in forward, nothing is reduced, no optimizer state moves. With
// pipeline stages the train_step owner runs each batch's forwards through
// the stages (ACCEL_TRAIN_STEP_EVAL, run_forward with ACCEL_RUN_NO_GRAD).
#include <cmath>
#include <stdexcept>

#include "host/plugin/hook_dispatch.h"
#include "host/runtime/host_context.h"
#include "host/runtime/tensor_views.h"
#include "host/runtime/trace_scope.h"
#include "host/train/autocast_scope.h"
#include "host/train/linear_chain.h"
#include "host/train/trainer.h"
#include "host/util/strformat.h"

namespace accel::train {

double Trainer::evaluate() {
  // Pipeline stages split the units over ranks: the train_step owner runs
  // each batch's forwards through them (ACCEL_TRAIN_STEP_EVAL).
  const int32_t stages = context_ ? context_->model_run.pipeline_size : 1;
  if (context_) {
    // Its trace events and collectives count towards the next training
    // step, as code between two torch.profiler steps does.
    context_->step = completed_steps_;
    context_->in_step = true;
  }
  const runtime::TraceRange range(context_, "evaluate");
  memory_watch_.begin_step(/*sampled=*/false);  // the training step's samples are already taken
  at::NoGradGuard no_grad;
  const int64_t micro_steps = config_.grad_accum;
  const int64_t T = model_.config().seq_len;
  double loss_sum = 0.0;
  for (int64_t batch = 0; batch < config_.eval.steps; ++batch) {
    AccelStepArgs step_args{};
    step_args.struct_size = sizeof(step_args);
    step_args.step = optimizer_.step_count();
    step_args.num_micro_batches = static_cast<int32_t>(micro_steps);
    step_args.flags = ACCEL_STEP_EVAL;
    if (hooks_) hooks_->step_begin(step_args);
    double batch_loss = 0.0;
    if (stages > 1) {
      AccelTrainStepArgs pipeline{};
      pipeline.struct_size = sizeof(pipeline);
      pipeline.step = batch;
      pipeline.num_micro_batches = static_cast<int32_t>(micro_steps);
      pipeline.flags = ACCEL_TRAIN_STEP_EVAL;
      at::Tensor pipeline_loss;
      run_taken_over_step(pipeline, pipeline_loss);
      batch_loss = pipeline_loss.item<double>() * static_cast<double>(stages);  // weighted as in train_step
    }
    for (int64_t micro = 0; stages == 1 && micro < micro_steps; ++micro) {
      const at::Tensor windows =
          load_batch(*data_.eval, eval_sampler_.micro_batch(batch, config_.batch_size, data_rank_, data_size_, micro,
                                                            micro_steps))
              .to(model_.device());
      if (linear_chain_) linear_chain_->set_micro_batch(static_cast<int32_t>(micro));
      at::Tensor x = windows.narrow(1, 0, T);
      for (size_t u = 0; u < model_.units().size(); ++u) {
        x = run_unit_forward(u, micro, ACCEL_UNIT_HOOK_NO_GRAD, x);
      }
      const runtime::TraceRange loss_range(context_, "loss", "host", -1, static_cast<int32_t>(micro));
      AutocastScope autocast(config_.mixed_precision, config_.autocast, model_.device().type());
      batch_loss += model_.loss_from_logits(x, windows.narrow(1, 1, T)).item<double>();
    }
    batch_loss = average_over_ranks(batch_loss / static_cast<double>(micro_steps), "host eval loss average");
    loss_sum += batch_loss;
    if (hooks_) {
      const at::Tensor loss = at::full({}, batch_loss, at::kFloat);
      const runtime::TensorView loss_view(loss);
      step_args.loss = loss_view.get();
      hooks_->step_end(step_args);
    }
  }
  if (context_) {
    context_->in_step = false;
    // Every rank issued the same collectives in the evaluation too.
    runtime::check_collective_sequences(*context_, context_->step);
  }
  return loss_sum / static_cast<double>(config_.eval.steps);
}

}  // namespace accel::train
