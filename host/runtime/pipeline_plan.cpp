// Pipeline stages and the run services (see pipeline_plan.h).
#include "host/runtime/pipeline_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/runtime/service_support.h"
#include "host/util/strformat.h"

namespace accel::runtime {

void resolve_pipeline_plan(HostContext& context) {
  const model::GptModel& model = *context.model;
  const auto num_units = static_cast<int32_t>(model.units().size());
  const int32_t stages = std::max(1, context.mesh.pipeline_size);
  std::vector<int32_t>& unit_stage = context.plan.unit_stage;
  if (unit_stage.empty()) {
    if (stages > 1) {
      throw std::runtime_error(strformat("the plugins' mesh has %d pipeline stages but no plugin assigned units to "
                                         "them (model->plan_stages)", stages));
    }
    unit_stage.assign(static_cast<size_t>(num_units), 0);
  }
  std::vector<int32_t> owned(static_cast<size_t>(stages), 0);
  for (int32_t u = 0; u < num_units; ++u) {
    const int32_t s = unit_stage[static_cast<size_t>(u)];
    if (s >= stages) {
      throw std::runtime_error(strformat("plan_stages puts unit %s on stage %d, but the mesh has %d pipeline stage(s)",
                                         model.units()[static_cast<size_t>(u)].name().c_str(), s, stages));
    }
    ++owned[static_cast<size_t>(s)];
  }
  for (int32_t s = 0; s < stages; ++s) {
    if (owned[static_cast<size_t>(s)] == 0) {
      throw std::runtime_error(strformat("plan_stages leaves pipeline stage %d without a unit", s));
    }
  }
  if (unit_stage.front() != 0 || unit_stage.back() != stages - 1) {
    throw std::runtime_error(strformat("plan_stages puts unit %s on stage %d and unit %s on stage %d: the tokens enter "
                                       "on the first stage and the loss leaves on the last (0 and %d)",
                                       model.units().front().name().c_str(), unit_stage.front(),
                                       model.units().back().name().c_str(), unit_stage.back(), stages - 1));
  }
  // transformers' load-balancing loss couples every layer's routing
  // (trainer_ranges.cpp): the stage with the loss would need the others'.
  if (stages > 1 && model.moe_losses_on()) {
    throw std::runtime_error(strformat("--moe-aux-loss-coef and --moe-z-loss-coef need every block on the stage with "
                                       "the loss; with %d pipeline stages set both to 0",
                                       stages));
  }
  // r = (pipeline_index * data_size + data_index) * tensor_size + tensor_index (accel/comm.h).
  const int32_t per_stage = context.identity.world_size / stages;
  context.model_run.pipeline_size = stages;
  context.model_run.pipeline_stage = context.identity.rank / std::max(1, per_stage);
  context.model_run.tied_copies.clear();
  const int32_t mine = context.model_run.pipeline_stage;
  const auto last = static_cast<size_t>(num_units - 1);
  if (model.head_tied_to_embedding() && unit_stage[last] == mine && unit_stage[0] != mine) {
    context.model_run.tied_copies.push_back(0);
  }
}

bool unit_is_local(const HostContext& context, int32_t unit) {
  const std::vector<int32_t>& unit_stage = context.plan.unit_stage;
  if (unit_stage.empty()) return true;
  return unit_stage.at(static_cast<size_t>(unit)) == context.model_run.pipeline_stage;
}

bool is_tied_copy(const HostContext& context, int32_t unit) {
  const std::vector<int32_t>& copies = context.model_run.tied_copies;
  return std::find(copies.begin(), copies.end(), unit) != copies.end();
}

bool holds_unit(const HostContext& context, int32_t unit) {
  return unit_is_local(context, unit) || is_tied_copy(context, unit);
}

namespace {

// A run service: forwarded to the trainer's runner, which exists only while
// a train_step hook runs.
template <typename Args, typename Run>
AccelStatus through_runner(const char* service, AccelHost* host, Args* args, Run run) {
  return call_service(service, [&] {
    HostContext& context = context_of(host);
    if (args == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "args is NULL");
    if (context.runner == nullptr) fail(ACCEL_ERROR_FAILED_PRECONDITION, "only inside the train_step hook");
    run(*context.runner, *args);
  });
}

}  // namespace

AccelStatus run_forward(AccelHost* host, AccelRunForwardArgs* args) {
  return through_runner("run_forward", host, args,
                        [](ModelRunner& runner, AccelRunForwardArgs& a) { runner.run_forward(a); });
}

AccelStatus run_backward(AccelHost* host, AccelRunBackwardArgs* args) {
  return through_runner("run_backward", host, args,
                        [](ModelRunner& runner, AccelRunBackwardArgs& a) { runner.run_backward(a); });
}

}  // namespace accel::runtime
