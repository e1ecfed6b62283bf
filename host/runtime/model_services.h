// The model as the ABI describes it (accel/model.h), built from the host's
// GptModel: the AccelModelInfo / AccelUnitInfo / AccelParamInfo structs the
// model services hand out, the arrays they point to, and the DLTensor views
// of the units' flat buffers.
//
// Mapping from host/model: units in GptModel::units() order; a unit's params
// in Unit::params() order (the flat order: decayed parameters first), so
// AccelParamInfo.index is the position in Unit::params() and flat_offset is
// Param::offset. Unit kinds and parameter roles are shifted by one (the ABI's
// 0 is OTHER); parallel hints are equal. The head reads the token embedding
// as its output projection (GPT-2 ties them), which the ABI expresses as one
// extra parameter of the head, "lm_head.weight": a tied reference
// (flat_offset -1, tied_unit/tied_index = wte) without storage of its own.
//
// Invariant: every pointer handed out (info structs, shape arrays, views)
// stays valid as long as the ModelView, which lives in HostContext until
// teardown; contents are refreshed in place (unit flags, views).
// Thread-safety: none; the model services are loop-thread only.
#pragma once

#include <accel/accel.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/model/gpt.h"
#include "host/runtime/host_context.h"
#include "host/runtime/tensor_views.h"

namespace accel::runtime {

class ModelView {
 public:
  // Builds the info structs from context.model (which must be set).
  explicit ModelView(const HostContext& context);
  ModelView(const ModelView&) = delete;
  ModelView& operator=(const ModelView&) = delete;

  const model::GptModel* model() const { return model_; }
  // The model's info; the micro-batch size is the current one (it is final
  // once the plan's data-parallel share resolved).
  const AccelModelInfo* info(const HostContext& context) {
    activation_shape_[1] = context.model_run.micro_batch_size;
    info_.micro_batch_size = context.model_run.micro_batch_size;
    return &info_;
  }
  int32_t num_units() const { return static_cast<int32_t>(units_.size()); }
  int32_t num_params(int32_t unit) const;

  // Unit `unit`'s info with flags and stage refreshed from `context`.
  const AccelUnitInfo* unit(int32_t unit, const HostContext& context);
  const AccelParamInfo* param(int32_t unit, int32_t index) const;
  std::optional<std::pair<int32_t, int32_t>> find(std::string_view name) const;

  // Views into host-kept storage, refreshed on every call; `what` is one of
  // ACCEL_STORAGE_PARAMS / _GRADS. A tied reference resolves to its owner.
  const DLTensor* storage_view(model::GptModel& model, int32_t unit, uint32_t what);
  const DLTensor* param_view(model::GptModel& model, int32_t unit, int32_t index, uint32_t what);
  // Re-reads local shapes, offsets, flat layouts and split groups from the
  // model once tensor-parallel splits resolved (tensor_parallel_plan.cpp).
  void refresh_layout();
  // Forgets the views of `unit`'s storage `what` (and of its parameters),
  // so a released buffer is not kept alive by a view handed out earlier.
  void drop_views(int32_t unit, uint32_t what);

 private:
  struct ParamEntry {
    std::string name;
    std::vector<int64_t> global_shape, local_shape, local_offset;
    AccelParamInfo info{};
    TensorView value_view, grad_view;
  };
  struct UnitEntry {
    std::string name;
    AccelUnitInfo info{};
    std::vector<std::unique_ptr<ParamEntry>> params;
    TensorView params_view, grads_view;
  };

  const model::GptModel* model_;
  std::string name_;
  std::vector<int64_t> activation_shape_;
  AccelModelInfo info_{};
  std::vector<std::unique_ptr<UnitEntry>> units_;
  std::map<std::string, std::pair<int32_t, int32_t>, std::less<>> by_name_;
};

}  // namespace accel::runtime
