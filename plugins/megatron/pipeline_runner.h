// pipeline_runner.h — one stage's side of a pipeline step: the schedule
// (pipeline_schedule.h) run through the host's model->run_forward /
// run_backward, activations and their gradients moved between stages with
// comm send/recv.
//
// Channels. Activations travel over one group, gradients over another
// (splits of the PIPELINE group, whose ranks are the stages in order), so a
// message of one kind never matches a receive of the other. Interleaved
// chunks also wrap from the last stage to the first: that link has a group
// of its own per kind, so every group's traffic flows one way along the
// stages — on NCCL, where a group's operations run in order on one stream,
// a wrap message queued behind a forward one could otherwise close a cycle
// (pipeline_schedule_test.cpp simulates that). Within a group, every stage
// sends and receives in its schedule's order, the same on both ends.
// Sends are asynchronous, each from its own copy of the tensor (the host's
// output lives only until its backward; the copies come from a pool, every
// message of a run having one shape); receives block, with the host's
// deadline: a stage that died or stopped ends the others' step with the
// host's timeout error naming the receive (stage, micro-batch, chunk).
//
// Measured per step: the most micro-batches in flight (forward run,
// backward not yet) and the fraction of the step spent outside
// run_forward / run_backward (the bubble, plus the sends and receives).
//
// Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/kernels.hpp>
#include <accel/sdk/tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline_schedule.h"

namespace accel::megatron {

struct PipelineStepStats {
  int32_t peak_in_flight = 0;
  double busy_seconds = 0.0;  // inside run_forward / run_backward
  double step_seconds = 0.0;  // the whole train_step
};

class PipelineRunner {
 public:
  // `activation_shape` is what passes between units for one micro-batch on
  // this rank ([seq (/ tensor size under sequence parallelism), micro-batch,
  // hidden]). Splits the PIPELINE group twice (collective over it).
  PipelineRunner(const sdk::Kernels& ops, StagePlan plan, PipelineSchedule schedule, AccelGroup* pipeline,
                 std::vector<int64_t> activation_shape);
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;
  ~PipelineRunner();

  int32_t stage() const { return stage_; }
  // Runs one optimizer step's micro-batches (the train_step hook).
  PipelineStepStats run(int32_t micro_batches);
  // Runs one evaluation batch's forwards (ACCEL_TRAIN_STEP_EVAL).
  void evaluate(int32_t micro_batches);
  // Destroys the channel groups (collective over the pipeline group), from
  // teardown; after a failed step (sends pending) leaves them and the
  // sends' buffers to the host's teardown instead. Idempotent.
  void close();

 private:
  struct PendingSend {
    AccelWork* work = nullptr;
    sdk::BufferPool::Lease data;
  };
  void forward(const PipelineStep& step, uint32_t run_flags = 0);
  void backward(const PipelineStep& step);
  // Copies `tensor` (fp32) and sends it to stage `peer` over `group`.
  void send(AccelGroup* group, const DLTensor& tensor, int32_t peer, const std::string& label);
  // The group of a message between `from` and `to` (adjacent stages): the
  // kind's own, or its wrap group between the last stage and the first.
  AccelGroup* channel(bool gradient, int32_t from, int32_t to) const;
  void reap_sends(bool wait);
  std::string where(const char* what, const PipelineStep& step, int32_t peer) const;

  const sdk::Kernels& ops_;
  StagePlan plan_;
  PipelineSchedule schedule_;
  int32_t stage_ = 0;
  int32_t stages_ = 1;
  int32_t num_units_ = 0;
  std::vector<int64_t> activation_shape_;
  AccelGroup* activations_ = nullptr;
  AccelGroup* gradients_ = nullptr;
  AccelGroup* activations_wrap_ = nullptr;  // interleaved only
  AccelGroup* gradients_wrap_ = nullptr;
  sdk::Buffer received_;  // the last receive, read by the host during the call
  sdk::BufferPool send_buffers_;  // outlives sends_ (declared first)
  std::vector<PendingSend> sends_;
  double busy_ = 0.0;
};

}  // namespace accel::megatron
