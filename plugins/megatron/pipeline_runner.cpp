// pipeline_runner.cpp — one stage's pipeline step (see pipeline_runner.h).
#include "pipeline_runner.h"

#include <accel/sdk/error.hpp>

#include <chrono>
#include <utility>

namespace accel::megatron {
namespace {

using Clock = std::chrono::steady_clock;
constexpr DLDataType kFp32{kDLFloat, 32, 1};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

PipelineRunner::PipelineRunner(const sdk::Kernels& ops, StagePlan plan, PipelineSchedule schedule,
                               AccelGroup* pipeline, std::vector<int64_t> activation_shape)
    : ops_(ops),
      plan_(std::move(plan)),
      schedule_(schedule),
      num_units_(static_cast<int32_t>(plan_.stage_of_unit.size())),
      activation_shape_(std::move(activation_shape)),
      send_buffers_(ops.services(), /*keep_per_shape=*/4) {
  const sdk::GroupShape shape = ops.shape(pipeline);
  stage_ = shape.rank;
  stages_ = shape.size;
  if (stages_ != plan_.stages) {
    throw sdk::Error(ACCEL_ERROR_INTERNAL, sdk::format("the pipeline group has %d ranks, the plan %d stages", stages_,
                                                       plan_.stages));
  }
  activations_ = ops.split_group(pipeline, 0, stage_);
  gradients_ = ops.split_group(pipeline, 0, stage_);
  if (plan_.chunks > 1) {
    activations_wrap_ = ops.split_group(pipeline, 0, stage_);
    gradients_wrap_ = ops.split_group(pipeline, 0, stage_);
  }
  received_ = ops.allocate(ACCEL_MEMORY_ACTIVATIONS, kFp32, activation_shape_, ACCEL_MEMORY_DEVICE, false,
                           "megatron pipeline receive");
}

PipelineRunner::~PipelineRunner() {
  try {
    close();
  } catch (...) {
    // Teardown already reported it; a destructor must not throw.
  }
}

void PipelineRunner::close() {
  AccelGroup* groups[] = {activations_, gradients_, activations_wrap_, gradients_wrap_};
  activations_ = gradients_ = activations_wrap_ = gradients_wrap_ = nullptr;
  // Sends still pending mean the step failed and the run is ending: leave
  // them (and their groups) to the host's own teardown rather than wait, and
  // never free memory a pending send may still read.
  if (!sends_.empty()) {
    (void)new std::vector<PendingSend>(std::move(sends_));  // deliberately never freed
    sends_.clear();
    return;
  }
  for (AccelGroup* group : groups) ops_.destroy_group(group);
}

AccelGroup* PipelineRunner::channel(bool gradient, int32_t from, int32_t to) const {
  // Activations wrap from the last stage to the first, their gradients back.
  const bool wraps = gradient ? (from == 0 && to == stages_ - 1) : (from == stages_ - 1 && to == 0);
  if (wraps && plan_.chunks > 1 && stages_ > 1) return gradient ? gradients_wrap_ : activations_wrap_;
  return gradient ? gradients_ : activations_;
}

std::string PipelineRunner::where(const char* what, const PipelineStep& step, int32_t peer) const {
  return sdk::format("megatron pipeline %s: stage %d %s stage %d, micro-batch %d, chunk %d", what, stage_,
                     what[0] == 's' ? "->" : "<-", peer, step.micro, step.chunk * stages_ + stage_);
}

void PipelineRunner::send(AccelGroup* group, const DLTensor& tensor, int32_t peer, const std::string& label) {
  PendingSend pending;
  pending.data = send_buffers_.take(ACCEL_MEMORY_ACTIVATIONS, kFp32, accel_tensor_numel(&received_.tensor()),
                                    ACCEL_MEMORY_DEVICE, "megatron pipeline send");
  if (accel_tensor_numel(&tensor) != accel_tensor_numel(&pending.data.tensor())) {
    throw sdk::Error(ACCEL_ERROR_INTERNAL, label + ": the tensor is " + sdk::describe(tensor) +
                                              ", the stages exchange " + sdk::describe(pending.data.tensor()));
  }
  const sdk::FlatView flat(tensor, 0, accel_tensor_numel(&tensor));
  const sdk::FlatView into(pending.data.tensor(), 0, accel_tensor_numel(&tensor));
  ops_.convert(flat.get(), into.get());
  pending.work = ops_.send(group, &pending.data.tensor(), peer, label.c_str(), /*async=*/true);
  sends_.push_back(std::move(pending));
  reap_sends(/*wait=*/false);
}

void PipelineRunner::reap_sends(bool wait) {
  std::vector<PendingSend> still;
  for (PendingSend& s : sends_) {
    if (wait) {
      ops_.wait_and_free(s.work);
    } else if (ops_.test(s.work)) {
      ops_.free_work(s.work);
    } else {
      still.push_back(std::move(s));
      continue;
    }
    s.work = nullptr;
  }
  sends_ = std::move(still);
}

void PipelineRunner::forward(const PipelineStep& step, uint32_t run_flags) {
  const AccelModelServices& model = *ops_.services().table()->model;
  const UnitRange& range = plan_.chunk(stage_, step.chunk);
  const int32_t previous = (stage_ + stages_ - 1) % stages_;
  AccelRunForwardArgs args{};
  args.struct_size = sizeof(args);
  args.first_unit = range.first;
  args.end_unit = range.end;
  args.micro_batch = step.micro;
  args.flags = run_flags;
  if (range.first > 0) {
    ops_.recv(channel(false, previous, stage_), &received_.tensor(), previous,
              where("receive activation", step, previous).c_str());
    args.input = &received_.tensor();
  }
  const Clock::time_point start = Clock::now();
  ops_.services().check(model.run_forward(ops_.services().host(), &args),
                        sdk::format("run_forward units [%d, %d) micro-batch %d", range.first, range.end, step.micro));
  busy_ += seconds_since(start);
  const int32_t next = (stage_ + 1) % stages_;
  if (range.end < num_units_) send(channel(false, stage_, next), *args.output, next, where("send activation", step, next));
}

void PipelineRunner::backward(const PipelineStep& step) {
  const AccelModelServices& model = *ops_.services().table()->model;
  const UnitRange& range = plan_.chunk(stage_, step.chunk);
  const int32_t next = (stage_ + 1) % stages_;
  AccelRunBackwardArgs args{};
  args.struct_size = sizeof(args);
  args.first_unit = range.first;
  args.end_unit = range.end;
  args.micro_batch = step.micro;
  if (range.end < num_units_) {
    ops_.recv(channel(true, next, stage_), &received_.tensor(), next, where("receive gradient", step, next).c_str());
    args.grad_output = &received_.tensor();
  }
  const Clock::time_point start = Clock::now();
  ops_.services().check(model.run_backward(ops_.services().host(), &args),
                        sdk::format("run_backward units [%d, %d) micro-batch %d", range.first, range.end, step.micro));
  busy_ += seconds_since(start);
  const int32_t previous = (stage_ + stages_ - 1) % stages_;
  if (range.first > 0) {
    send(channel(true, stage_, previous), *args.grad_input, previous, where("send gradient", step, previous));
  }
}

void PipelineRunner::evaluate(int32_t micro_batches) {
  for (const PipelineStep& step : forward_only_steps(micro_batches, plan_.chunks)) forward(step, ACCEL_RUN_NO_GRAD);
  reap_sends(/*wait=*/true);
}

PipelineStepStats PipelineRunner::run(int32_t micro_batches) {
  const Clock::time_point start = Clock::now();
  busy_ = 0.0;
  const std::vector<PipelineStep> steps = pipeline_steps(schedule_, stage_, stages_, micro_batches, plan_.chunks);
  PipelineStepStats stats;
  int32_t in_flight = 0;
  for (const PipelineStep& step : steps) {
    if (step.forward) {
      forward(step);
      stats.peak_in_flight = std::max(stats.peak_in_flight, ++in_flight);
    } else {
      backward(step);
      --in_flight;
    }
  }
  reap_sends(/*wait=*/true);
  stats.busy_seconds = busy_;
  stats.step_seconds = seconds_since(start);
  return stats;
}

}  // namespace accel::megatron
