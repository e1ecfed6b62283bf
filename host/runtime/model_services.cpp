// The model area of the services table (accel/model.h): inspect (info,
// units, parameters), plan (splits, stages, storage, checkpointing — checked
// and recorded into HostContext::plan, resolved by the host later), and run
// (storage and parameter views).
//
// Storage a plugin took over (plan_manage_storage) is allocated by
// materialize and freed by release, for that plugin only, and accounted as
// PARAMS / GRADS in the memory ledger; host-kept storage exists from setup on
// and materialize returns it as it is. run_forward / run_backward run unit
// ranges for a pipeline schedule (pipeline_plan.h: the trainer executes).
//
// Phases: inspect needs HostContext::model; plan needs HostContext::planning;
// run needs HostContext::running. A call in the wrong phase is
// ACCEL_ERROR_FAILED_PRECONDITION. ModelView, the structs and views these
// hand out, is defined in model_view.cpp. Thread-safety: loop thread only.
#include "host/runtime/model_services.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/runtime/context_parallel_plan.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/pipeline_plan.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_parallel_plan.h"
#include "host/util/strformat.h"

namespace accel::runtime {

namespace {

constexpr uint32_t kStorageBits = ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS;

}  // namespace

// ---------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------
namespace {

// Inspect phase: the model exists. Builds the view on first use (and again
// should the trainer replace the model).
ModelView& view_of(HostContext& context) {
  if (context.model == nullptr) fail(ACCEL_ERROR_FAILED_PRECONDITION, "the model does not exist yet");
  if (!context.model_view || context.model_view->model() != context.model) {
    context.model_view = std::make_unique<ModelView>(context);
  }
  return *context.model_view;
}

void require_planning(const HostContext& context) {
  if (!context.planning) fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed only inside the plan_model hook");
}

void require_running(const HostContext& context) {
  if (!context.running) fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed only from the setup hook on");
}

void check_unit(ModelView& view, int32_t unit) {
  if (unit < 0 || unit >= view.num_units()) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unit %d does not exist (the model has %d)", unit, view.num_units()));
  }
}

void check_param(ModelView& view, int32_t unit, int32_t index) {
  check_unit(view, unit);
  if (index < 0 || index >= view.num_params(unit)) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("unit %d has no parameter %d (it has %d)", unit, index, view.num_params(unit)));
  }
}

void check_storage_bits(uint32_t what, bool exactly_one) {
  const bool valid = what != 0 && (what & ~kStorageBits) == 0 &&
                     (!exactly_one || what == ACCEL_STORAGE_PARAMS || what == ACCEL_STORAGE_GRADS);
  if (!valid) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("what = 0x%x is not %s", what,
                   exactly_one ? "ACCEL_STORAGE_PARAMS or ACCEL_STORAGE_GRADS" : "a non-empty set of ACCEL_STORAGE_* bits"));
  }
}

uint32_t managed_bits(const HostContext& context, int32_t unit) {
  const auto it = context.plan.managed_storage.find(unit);
  return it == context.plan.managed_storage.end() ? 0u : it->second;
}

const char* group_name(AccelGroupKind kind) {
  switch (kind) {
    case ACCEL_GROUP_WORLD: return "world";
    case ACCEL_GROUP_DATA: return "data";
    case ACCEL_GROUP_TENSOR: return "tensor";
    case ACCEL_GROUP_PIPELINE: return "pipeline";
    case ACCEL_GROUP_SHARDING: return "sharding";
    case ACCEL_GROUP_REPLICA: return "replica";
    case ACCEL_GROUP_NODE: return "node";
    case ACCEL_GROUP_CONTEXT: return "context";
    case ACCEL_GROUP_EXPERT: return "expert";
    case ACCEL_GROUP_EXPERT_DATA: return "expert data";
    default: return nullptr;
  }
}

// --- inspect ---

AccelStatus get_info(AccelHost* host, const AccelModelInfo** info) {
  return call_service("get_info", [&] {
    HostContext& context = context_of(host);
    ModelView& view = view_of(context);
    if (info == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "info is NULL");
    *info = view.info(context);
  });
}

AccelStatus get_unit(AccelHost* host, int32_t unit, const AccelUnitInfo** info) {
  return call_service("get_unit", [&] {
    HostContext& context = context_of(host);
    ModelView& view = view_of(context);
    check_unit(view, unit);
    if (info == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "info is NULL");
    *info = view.unit(unit, context);
  });
}

AccelStatus get_param(AccelHost* host, int32_t unit, int32_t index, const AccelParamInfo** info) {
  return call_service("get_param", [&] {
    ModelView& view = view_of(context_of(host));
    check_param(view, unit, index);
    if (info == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "info is NULL");
    *info = view.param(unit, index);
  });
}

AccelStatus find_param(AccelHost* host, const char* name, int32_t* unit, int32_t* index) {
  return call_service("find_param", [&] {
    ModelView& view = view_of(context_of(host));
    if (name == nullptr || unit == nullptr || index == nullptr) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "name, unit and index must not be NULL");
    }
    const auto found = view.find(name);
    if (!found) fail(ACCEL_ERROR_NOT_FOUND, std::string("no parameter named '") + name + "'");
    *unit = found->first;
    *index = found->second;
  });
}

// --- plan ---

AccelStatus plan_split_param(AccelHost* host, int32_t unit, int32_t index, int32_t dim, AccelGroupKind over) {
  return call_service("plan_split_param", [&] {
    HostContext& context = context_of(host);
    require_planning(context);
    ModelView& view = view_of(context);
    check_param(view, unit, index);
    const AccelParamInfo& info = *view.param(unit, index);
    if (info.tied_unit >= 0) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           std::string(info.name) + " is a tied reference; split its owner " + view.param(info.tied_unit, info.tied_index)->name);
    }
    if (dim < 0 || dim >= info.ndim) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("%s has %d dimensions; cannot split dimension %d", info.name, info.ndim, dim));
    }
    const char* group = group_name(over);
    if (group == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown group kind %d", static_cast<int>(over)));
    for (const ModelPlan::Split& split : context.plan.splits) {
      if (split.unit != unit || split.param != index) continue;
      if (split.dim == dim && split.group == group) return;  // the same request twice
      fail(ACCEL_ERROR_ALREADY_EXISTS,
           strformat("%s is already split along dimension %d over %s", info.name, split.dim, split.group.c_str()));
    }
    context.plan.splits.push_back(ModelPlan::Split{unit, index, dim, group});
  });
}

AccelStatus plan_stages(AccelHost* host, const int32_t* stage_of_unit, int32_t num_units) {
  return call_service("plan_stages", [&] {
    HostContext& context = context_of(host);
    require_planning(context);
    ModelView& view = view_of(context);
    if (stage_of_unit == nullptr || num_units != view.num_units()) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("stage_of_unit must list all %d units, got %d%s", view.num_units(), num_units,
                     stage_of_unit == nullptr ? " (NULL)" : ""));
    }
    std::vector<int32_t> stages(stage_of_unit, stage_of_unit + num_units);
    for (int32_t u = 0; u < num_units; ++u) {
      if (stages[u] < 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unit %d gets negative stage %d", u, stages[u]));
    }
    if (!context.plan.unit_stage.empty() && context.plan.unit_stage != stages) {
      fail(ACCEL_ERROR_ALREADY_EXISTS, "another plan_stages call assigned different stages");
    }
    context.plan.unit_stage = std::move(stages);
  });
}

AccelStatus plan_manage_storage(AccelHost* host, int32_t unit, uint32_t what) {
  return call_service("plan_manage_storage", [&] {
    HostContext& context = context_of(host);
    require_planning(context);
    ModelView& view = view_of(context);
    check_unit(view, unit);
    check_storage_bits(what, false);
    const std::string& me = plugin_name_of(host);
    for (uint32_t bit : {ACCEL_STORAGE_PARAMS, ACCEL_STORAGE_GRADS}) {
      if ((what & bit) == 0) continue;
      const auto it = context.plan.buffer_manager.find({unit, bit});
      if (it != context.plan.buffer_manager.end() && it->second != me) {
        fail(ACCEL_ERROR_ALREADY_EXISTS,
             strformat("the %s of unit %s are already managed by plugin %s",
                       bit == ACCEL_STORAGE_PARAMS ? "parameters" : "gradients", view.unit(unit, context)->name,
                       it->second.c_str()));
      }
    }
    for (uint32_t bit : {ACCEL_STORAGE_PARAMS, ACCEL_STORAGE_GRADS}) {
      if ((what & bit) != 0) context.plan.buffer_manager[{unit, bit}] = me;
    }
    context.plan.managed_storage[unit] |= what;
    context.plan.managed_by[unit] = me;
  });
}

AccelStatus set_checkpointing(AccelHost* host, int32_t unit, bool enabled) {
  return call_service("set_checkpointing", [&] {
    HostContext& context = context_of(host);
    if (!context.planning && !(context.running && !context.in_step)) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed inside plan_model, or between steps (step_end to step_begin)");
    }
    check_unit(view_of(context), unit);
    context.plan.checkpointing[unit] = enabled;
  });
}

// --- run ---

// Accounts a plugin-materialised buffer in the memory ledger (PARAMS /
// GRADS, on the device), so per-category peaks include gathered units.
void account(HostContext& context, const at::Tensor& buffer, AccelMemoryCategory category, bool allocated) {
  if (!context.memory || !buffer.defined()) return;
  const AccelMemoryPlace place = ACCEL_MEMORY_DEVICE;  // the rank's device (host memory on CPU runs)
  const auto bytes = static_cast<int64_t>(buffer.nbytes());
  if (allocated) {
    context.memory->record_allocate(place, category, bytes);
  } else {
    context.memory->record_free(place, category, bytes);
  }
}

// Only a buffer's manager materialises or releases it; host-kept buffers
// exist from setup on and are returned (materialize) or kept (release).
void require_manager(HostContext& context, ModelView& view, AccelHost* host, int32_t unit, uint32_t what) {
  for (uint32_t bit : {ACCEL_STORAGE_PARAMS, ACCEL_STORAGE_GRADS}) {
    if ((what & bit) == 0) continue;
    const auto it = context.plan.buffer_manager.find({unit, bit});
    if (it != context.plan.buffer_manager.end() && it->second != plugin_name_of(host)) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION,
           strformat("the %s of unit %s are managed by plugin %s", bit == ACCEL_STORAGE_PARAMS ? "parameters" : "gradients",
                     view.unit(unit, context)->name, it->second.c_str()));
    }
  }
}

at::ScalarType storage_type(DLDataType wanted, const char* what) {
  if (accel_dtype_is_unset(wanted)) return at::kFloat;
  const auto type = to_scalar_type(wanted);
  if (!type || (*type != at::kFloat && *type != at::kBFloat16 && *type != at::kHalf)) {
    fail(ACCEL_ERROR_UNSUPPORTED, std::string(what) + " " + describe_dtype(wanted) +
                                      ": unit storage is float32, bfloat16 or float16");
  }
  return *type;
}

AccelStatus materialize(AccelHost* host, AccelMaterializeArgs* args) {
  return call_service("materialize", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelMaterializeArgs, grads);
    HostContext& context = context_of(host);
    require_running(context);
    ModelView& view = view_of(context);
    check_unit(view, args->unit);
    check_storage_bits(args->what, false);
    if (args->reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "reserved must be 0");
    if (args->init < ACCEL_INIT_UNDEFINED || args->init > ACCEL_INIT_FROM_SEED) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown init %d", static_cast<int>(args->init)));
    }
    if (args->init == ACCEL_INIT_FROM_SEED && args->what != ACCEL_STORAGE_PARAMS) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "ACCEL_INIT_FROM_SEED is for ACCEL_STORAGE_PARAMS alone");
    }
    require_manager(context, view, host, args->unit, args->what);
    model::Unit& unit = context.model->units().at(static_cast<size_t>(args->unit));
    const uint32_t managed = managed_bits(context, args->unit);
    const bool params = (args->what & ACCEL_STORAGE_PARAMS) != 0;
    const bool grads = (args->what & ACCEL_STORAGE_GRADS) != 0;
    const at::ScalarType param_type = storage_type(args->param_dtype, "param_dtype");
    const at::ScalarType grad_type =
        accel_dtype_is_unset(args->grad_dtype) ? param_type : storage_type(args->grad_dtype, "grad_dtype");
    try {
      if (params && (managed & ACCEL_STORAGE_PARAMS) != 0 && !unit.has_params()) {
        const auto fill = args->init == ACCEL_INIT_FROM_SEED ? model::Unit::Fill::from_seed
                          : args->init == ACCEL_INIT_ZERO    ? model::Unit::Fill::zeros
                                                             : model::Unit::Fill::undefined;
        unit.materialize_params(param_type, fill, context.model->param_init());
        account(context, unit.flat_params(), ACCEL_MEMORY_PARAMS, true);
      }
      if (grads && (managed & ACCEL_STORAGE_GRADS) != 0 && !unit.has_grads()) {
        unit.materialize_grads(grad_type, args->init == ACCEL_INIT_ZERO);
        account(context, unit.flat_grads(), ACCEL_MEMORY_GRADS, true);
      }
    } catch (const std::logic_error& e) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, e.what());
    }
    // Whatever exists is returned as it is (accel/model.h), but never in a
    // dtype other than the one asked for.
    if (params && !accel_dtype_is_unset(args->param_dtype) && unit.flat_params().scalar_type() != param_type) {
      fail(ACCEL_ERROR_UNSUPPORTED, std::string("unit ") + unit.name() + ": parameters are materialised as " +
                                        c10::toString(unit.flat_params().scalar_type()));
    }
    if (grads && !accel_dtype_is_unset(args->grad_dtype) && unit.flat_grads().scalar_type() != grad_type) {
      fail(ACCEL_ERROR_UNSUPPORTED, std::string("unit ") + unit.name() + ": gradients are materialised as " +
                                        c10::toString(unit.flat_grads().scalar_type()));
    }
    args->params = params ? view.storage_view(*context.model, args->unit, ACCEL_STORAGE_PARAMS) : nullptr;
    args->grads = grads ? view.storage_view(*context.model, args->unit, ACCEL_STORAGE_GRADS) : nullptr;
  });
}

AccelStatus release(AccelHost* host, int32_t unit, uint32_t what, AccelStream /*stream*/) {
  return call_service("release", [&] {
    HostContext& context = context_of(host);
    require_running(context);
    ModelView& view = view_of(context);
    check_unit(view, unit);
    check_storage_bits(what, false);
    require_manager(context, view, host, unit, what);
    // CPU work is synchronous and device work is stream-ordered by the
    // caching allocator, so the buffer can go at once. Host-kept storage stays.
    model::Unit& u = context.model->units().at(static_cast<size_t>(unit));
    const uint32_t managed = managed_bits(context, unit) & what;
    // The views handed out hold the buffers' storage: without this, a
    // released gradient buffer stayed allocated until the unit was next
    // materialised (every unit's full gradients alive all step, as in ddp).
    view.drop_views(unit, managed);
    if ((managed & ACCEL_STORAGE_PARAMS) != 0 && u.has_params()) {
      account(context, u.flat_params(), ACCEL_MEMORY_PARAMS, false);
      u.release_params();
    }
    if ((managed & ACCEL_STORAGE_GRADS) != 0 && u.has_grads()) {
      account(context, u.flat_grads(), ACCEL_MEMORY_GRADS, false);
      u.release_grads();
    }
  });
}

AccelStatus get_storage(AccelHost* host, int32_t unit, const DLTensor** params, const DLTensor** grads) {
  return call_service("get_storage", [&] {
    HostContext& context = context_of(host);
    require_running(context);
    ModelView& view = view_of(context);
    check_unit(view, unit);
    const model::Unit& u = context.model->units().at(static_cast<size_t>(unit));
    if (params != nullptr) {
      *params = u.has_params() ? view.storage_view(*context.model, unit, ACCEL_STORAGE_PARAMS) : nullptr;
    }
    if (grads != nullptr) {
      *grads = u.has_grads() ? view.storage_view(*context.model, unit, ACCEL_STORAGE_GRADS) : nullptr;
    }
  });
}

AccelStatus get_param_view(AccelHost* host, int32_t unit, int32_t index, uint32_t what, const DLTensor** out) {
  return call_service("get_param_view", [&] {
    HostContext& context = context_of(host);
    require_running(context);
    ModelView& view = view_of(context);
    check_param(view, unit, index);
    check_storage_bits(what, true);
    if (out == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "view is NULL");
    const AccelParamInfo& info = *view.param(unit, index);
    const int32_t owner_unit = info.tied_unit >= 0 ? info.tied_unit : unit;
    const model::Unit& owner = context.model->units().at(static_cast<size_t>(owner_unit));
    if (what == ACCEL_STORAGE_PARAMS ? !owner.has_params() : !owner.has_grads()) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION,
           std::string(info.name) + ": its unit's " + (what == ACCEL_STORAGE_PARAMS ? "parameters" : "gradients") +
               " are not materialised");
    }
    *out = view.param_view(*context.model, unit, index, what);
  });
}

AccelStatus init_range(AccelHost* host, int32_t unit, int64_t flat_begin, const DLTensor* out) {
  return call_service("init_range", [&] {
    HostContext& context = context_of(host);
    require_running(context);
    ModelView& view = view_of(context);
    check_unit(view, unit);
    if (flat_begin < 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("flat_begin %lld is negative", static_cast<long long>(flat_begin)));
    at::Tensor target = to_aten(out, "out");
    if (target.dim() != 1 || !target.is_contiguous()) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "out must be a contiguous 1-D tensor, got " + describe_shape(target.sizes()));
    }
    const at::ScalarType type = target.scalar_type();
    if (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "out must be float32, bfloat16 or float16, got " + describe_dtype(out->dtype));
    }
    const model::Unit& u = context.model->units().at(static_cast<size_t>(unit));
    const int64_t begin = flat_begin, end = flat_begin + target.numel();
    // Generated in fp32 on the CPU (the counter-based streams are CPU code),
    // parameter by parameter over the part of the range each one covers.
    at::Tensor staging = at::zeros({target.numel()}, at::kFloat);
    float* dst = staging.data_ptr<float>();
    for (const model::Param& p : u.params()) {
      const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
      if (lo >= hi) continue;
      context.model->param_init().fill_local(p.spec, p.split, lo - p.offset, hi - lo, dst + (lo - begin));
    }
    target.copy_(staging);
  });
}

}  // namespace

// run_forward / run_backward (since 1.7) reach the trainer's unit-range
// execution through pipeline_plan.h.
const AccelModelServices* model_services_table() {
  static const AccelModelServices table{sizeof(AccelModelServices),
                                        nullptr,
                                        &get_info,
                                        &get_unit,
                                        &get_param,
                                        &find_param,
                                        &plan_split_param,
                                        &plan_stages,
                                        &plan_manage_storage,
                                        &set_checkpointing,
                                        &materialize,
                                        &release,
                                        &get_storage,
                                        &get_param_view,
                                        &run_forward,
                                        &run_backward,
                                        &init_range,
                                        &plan_sequence_parallel,
                                        &plan_context_parallel};
  return &table;
}

}  // namespace accel::runtime
