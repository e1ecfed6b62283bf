// ModelView (model_services.h): the ABI's model info structs (units,
// parameters, their plans once resolved) built from the host's model, and
// the storage and parameter views handed to plugins, kept until released.
// The services that use it are in model_services.cpp. Thread-safety: loop
// thread only.
#include "host/runtime/model_services.h"
#include "host/runtime/pipeline_plan.h"
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>
#include "host/runtime/memory_services.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_parallel_plan.h"
#include "host/util/strformat.h"

namespace accel::runtime {

// ---------------------------------------------------------------------------
// ModelView
// ---------------------------------------------------------------------------
namespace {

constexpr const char* kTiedHeadName = "lm_head.weight";

AccelUnitKind to_abi(model::UnitKind kind) {
  switch (kind) {
    case model::UnitKind::embedding: return ACCEL_UNIT_EMBEDDING;
    case model::UnitKind::block: return ACCEL_UNIT_BLOCK;
    case model::UnitKind::head: return ACCEL_UNIT_HEAD;
  }
  return ACCEL_UNIT_OTHER;
}

AccelParamRole to_abi(model::ParamRole role) {
  switch (role) {
    case model::ParamRole::linear_weight: return ACCEL_PARAM_LINEAR_WEIGHT;
    case model::ParamRole::bias: return ACCEL_PARAM_BIAS;
    case model::ParamRole::norm: return ACCEL_PARAM_NORM;
    case model::ParamRole::embedding: return ACCEL_PARAM_EMBEDDING;
    case model::ParamRole::router: return ACCEL_PARAM_ROUTER;
    case model::ParamRole::experts: return ACCEL_PARAM_EXPERTS;
  }
  return ACCEL_PARAM_OTHER;
}

AccelParallelHint to_abi(model::ParallelHint hint) {
  switch (hint) {
    case model::ParallelHint::replicated: return ACCEL_PARALLEL_REPLICATED;
    case model::ParallelHint::column: return ACCEL_PARALLEL_COLUMN;
    case model::ParallelHint::row: return ACCEL_PARALLEL_ROW;
    case model::ParallelHint::vocab: return ACCEL_PARALLEL_VOCAB;
  }
  return ACCEL_PARALLEL_REPLICATED;
}

}  // namespace

ModelView::ModelView(const HostContext& context) : model_(context.model) {
  const model::GptModel& model = *context.model;
  const model::GptConfig& config = model.config();
  const auto& units = model.units();

  name_ = context.model_run.name;
  activation_shape_ = {config.seq_len, context.model_run.micro_batch_size, config.n_embd};
  info_.struct_size = sizeof(AccelModelInfo);
  info_.name = name_.c_str();
  info_.num_units = static_cast<int32_t>(units.size());
  info_.activation_ndim = 3;
  info_.activation_shape = activation_shape_.data();
  info_.activation_dtype = context.model_run.compute_dtype;
  info_.param_dtype = accel_dtype(kDLFloat, 32);
  info_.compute_dtype = context.model_run.compute_dtype;
  info_.num_params = model.num_parameters();
  // nanoGPT's estimate (PaLM appendix B): 6 N per token for the matmuls of
  // forward and backward, plus attention's 12 L C T.
  info_.flops_per_token = 6 * info_.num_params + 12 * config.n_layer * config.n_embd * config.seq_len;
  info_.hidden_size = config.n_embd;
  info_.vocab_size = config.vocab_size;
  info_.seq_len = config.seq_len;
  info_.micro_batch_size = context.model_run.micro_batch_size;

  std::optional<std::pair<int32_t, int32_t>> wte;
  for (size_t u = 0; u < units.size(); ++u) {
    auto entry = std::make_unique<UnitEntry>();
    entry->name = units[u].name();
    const auto& params = units[u].params();
    for (size_t p = 0; p < params.size(); ++p) {
      const model::Param& param = params[p];
      auto pe = std::make_unique<ParamEntry>();
      pe->name = param.spec.name;
      pe->global_shape = param.spec.shape;
      pe->local_shape = param.shape;
      pe->local_offset.assign(param.spec.shape.size(), 0);
      pe->info.role = to_abi(param.spec.role);
      pe->info.hint = to_abi(param.spec.hint);
      pe->info.flat_offset = param.offset;
      pe->info.numel = param.numel();
      pe->info.tied_unit = -1;
      pe->info.tied_index = -1;
      if (model.head_tied_to_embedding() && pe->name == model.token_embedding_name()) {
        wte = std::pair{static_cast<int32_t>(u), static_cast<int32_t>(p)};
      }
      entry->params.push_back(std::move(pe));
    }
    units_.push_back(std::move(entry));
  }
  // The head's tied output projection (see model_services.h).
  for (size_t u = 0; u < units.size() && wte; ++u) {
    if (units[u].kind() != model::UnitKind::head) continue;
    const ParamEntry& owner = *units_[wte->first]->params[wte->second];
    auto pe = std::make_unique<ParamEntry>();
    pe->name = kTiedHeadName;
    pe->global_shape = owner.global_shape;
    pe->local_shape = owner.local_shape;
    pe->local_offset = owner.local_offset;
    pe->info.role = ACCEL_PARAM_EMBEDDING;
    pe->info.hint = ACCEL_PARALLEL_VOCAB;
    pe->info.flat_offset = -1;
    pe->info.numel = owner.info.numel;
    pe->info.tied_unit = wte->first;
    pe->info.tied_index = wte->second;
    units_[u]->params.push_back(std::move(pe));
  }

  for (size_t u = 0; u < units_.size(); ++u) {
    UnitEntry& entry = *units_[u];
    entry.info.struct_size = sizeof(AccelUnitInfo);
    entry.info.name = entry.name.c_str();
    entry.info.index = static_cast<int32_t>(u);
    entry.info.kind = to_abi(units[u].kind());
    entry.info.num_params = static_cast<int32_t>(entry.params.size());
    entry.info.numel = units[u].numel();
    entry.info.param_dtype = accel_dtype(kDLFloat, 32);
    for (size_t p = 0; p < entry.params.size(); ++p) {
      ParamEntry& pe = *entry.params[p];
      AccelParamInfo& info = pe.info;
      info.struct_size = sizeof(AccelParamInfo);
      info.name = pe.name.c_str();
      info.unit = static_cast<int32_t>(u);
      info.index = static_cast<int32_t>(p);
      info.ndim = static_cast<int32_t>(pe.global_shape.size());
      info.dtype = accel_dtype(kDLFloat, 32);
      info.global_shape = pe.global_shape.data();
      info.local_shape = pe.local_shape.data();
      info.local_offset = pe.local_offset.data();
      info.split_dim = -1;
      info.split_group = ACCEL_GROUP_WORLD;
      info.split_blocks = 1;
      info.split_parts = 1;
      by_name_[pe.name] = {info.unit, info.index};
    }
  }
}

int32_t ModelView::num_params(int32_t unit) const {
  return static_cast<int32_t>(units_.at(static_cast<size_t>(unit))->params.size());
}

const AccelUnitInfo* ModelView::unit(int32_t unit, const HostContext& context) {
  UnitEntry& entry = *units_.at(static_cast<size_t>(unit));
  const ModelPlan& plan = context.plan;
  const auto managed_it = plan.managed_storage.find(unit);
  const uint32_t managed = managed_it == plan.managed_storage.end() ? 0u : managed_it->second;
  const auto ckpt_it = plan.checkpointing.find(unit);
  const bool resolved = !context.planning && plan.unit_stage.size() == units_.size();
  entry.info.pipeline_stage = resolved ? plan.unit_stage[static_cast<size_t>(unit)] : 0;
  uint32_t flags = 0;
  if (entry.info.pipeline_stage == context.model_run.pipeline_stage) flags |= ACCEL_UNIT_FLAG_LOCAL;
  if (resolved && is_tied_copy(context, unit)) flags |= ACCEL_UNIT_FLAG_TIED_COPY;
  if ((managed & ACCEL_STORAGE_PARAMS) != 0) flags |= ACCEL_UNIT_FLAG_PLUGIN_PARAMS;
  if ((managed & ACCEL_STORAGE_GRADS) != 0) flags |= ACCEL_UNIT_FLAG_PLUGIN_GRADS;
  if (ckpt_it != plan.checkpointing.end() && ckpt_it->second) flags |= ACCEL_UNIT_FLAG_CHECKPOINTED;
  const model::Unit& host_unit = model_->units().at(static_cast<size_t>(unit));
  if (host_unit.has_params()) flags |= ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED;
  if (host_unit.has_grads()) flags |= ACCEL_UNIT_FLAG_GRADS_MATERIALIZED;
  entry.info.param_dtype = host_unit.has_params() ? to_dl_dtype(host_unit.flat_params().scalar_type())
                                                  : accel_dtype(kDLFloat, 32);
  entry.info.flags = flags;
  return &entry.info;
}

const AccelParamInfo* ModelView::param(int32_t unit, int32_t index) const {
  return &units_.at(static_cast<size_t>(unit))->params.at(static_cast<size_t>(index))->info;
}

std::optional<std::pair<int32_t, int32_t>> ModelView::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

const DLTensor* ModelView::storage_view(model::GptModel& model, int32_t unit, uint32_t what) {
  UnitEntry& entry = *units_.at(static_cast<size_t>(unit));
  model::Unit& host_unit = model.units().at(static_cast<size_t>(unit));
  if (what == ACCEL_STORAGE_PARAMS) {
    entry.params_view.reset(host_unit.flat_params());
    return entry.params_view.get();
  }
  entry.grads_view.reset(host_unit.flat_grads());
  return entry.grads_view.get();
}

const DLTensor* ModelView::param_view(model::GptModel& model, int32_t unit, int32_t index, uint32_t what) {
  ParamEntry& entry = *units_.at(static_cast<size_t>(unit))->params.at(static_cast<size_t>(index));
  if (entry.info.tied_unit >= 0) {
    return param_view(model, entry.info.tied_unit, entry.info.tied_index, what);
  }
  model::Unit& host_unit = model.units().at(static_cast<size_t>(unit));
  const model::Param& param = host_unit.params().at(static_cast<size_t>(index));
  if (what == ACCEL_STORAGE_PARAMS) {
    entry.value_view.reset(host_unit.flat_params().narrow(0, param.offset, entry.info.numel).view(param.shape));
    return entry.value_view.get();
  }
  entry.grad_view.reset(host_unit.flat_grads().narrow(0, param.offset, entry.info.numel).view(param.shape));
  return entry.grad_view.get();
}

void ModelView::drop_views(int32_t unit, uint32_t what) {
  UnitEntry& entry = *units_.at(static_cast<size_t>(unit));
  const bool params = (what & ACCEL_STORAGE_PARAMS) != 0;
  const bool grads = (what & ACCEL_STORAGE_GRADS) != 0;
  if (params) entry.params_view.clear();
  if (grads) entry.grads_view.clear();
  for (const auto& param : entry.params) {
    if (params) param->value_view.clear();
    if (grads) param->grad_view.clear();
  }
}

}  // namespace accel::runtime
