// Resolving the pipeline stages plugins recorded while planning
// (accel/model.h plan_stages) and the run services a pipeline schedule
// drives (run_forward / run_backward).
//
// A rank holds and runs only its stage's units (its stage is its index in
// the PIPELINE standard group), plus the units a local unit reads: the tied
// head on the last stage reads the embedding's token table, so the last
// stage holds a copy of the embedding unit (ACCEL_UNIT_FLAG_TIED_COPY). The
// host keeps its data path at the two ends: tokens enter on the stage of
// unit 0 (stage 0), the loss leaves on the stage of the last unit (the last
// stage).
//
// The run services themselves are the trainer's (it owns the units'
// autograd): it registers a ModelRunner for the span of the train_step hook.
//
// Thread-safety: loop thread only; resolve once, between plan_model and the
// host's materialisation of units.
#pragma once

#include <cstdint>

#include "host/runtime/host_context.h"

namespace accel::runtime {

// What run_forward / run_backward reach: implemented by the trainer, which
// owns the model's execution. Each throws std::exception with the reason
// (the services turn it into a status and the pending error).
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual void run_forward(AccelRunForwardArgs& args) = 0;
  virtual void run_backward(AccelRunBackwardArgs& args) = 0;
};

// Checks context.plan.unit_stage against the resolved mesh (each stage
// owns at least one unit, unit 0 on the first stage and the last unit on
// the last) and records this rank's stage and tied copies. A mesh with
// pipeline_size > 1 and no plan_stages call is refused, and so is a plan
// with stages but a pipeline size of 1 that gives a unit a stage other than
// 0. Throws std::runtime_error naming the unit or the stage.
void resolve_pipeline_plan(HostContext& context);

// Whether this rank holds unit `u`'s storage: its stage's units and their
// tied copies (every unit without a pipeline).
bool holds_unit(const HostContext& context, int32_t unit);
// Whether unit `u` is on this rank's stage.
bool unit_is_local(const HostContext& context, int32_t unit);
// Whether unit `u` is a tied copy here (ACCEL_UNIT_FLAG_TIED_COPY).
bool is_tied_copy(const HostContext& context, int32_t unit);

// The model services run_forward / run_backward: forward to
// context.runner, or ACCEL_ERROR_FAILED_PRECONDITION outside train_step.
AccelStatus run_forward(AccelHost* host, AccelRunForwardArgs* args);
AccelStatus run_backward(AccelHost* host, AccelRunBackwardArgs* args);

}  // namespace accel::runtime
