// scaling_state.cpp — histories, scales and the delayed-scaling update (see
// scaling_state.h).
#include "scaling_state.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace accel::fp8 {

const char* to_string(TensorClass c) {
  switch (c) {
    case TensorClass::input: return "input";
    case TensorClass::weight: return "weight";
    case TensorClass::grad: return "grad";
  }
  return "?";
}

std::vector<LinearSlot> find_block_linears(const sdk::Services& s) {
  const AccelModelServices& model = *s.table()->model;
  const AccelModelInfo* info = nullptr;
  s.check(model.get_info(s.host(), &info), "model get_info");
  std::vector<LinearSlot> out;
  for (int32_t u = 0; u < info->num_units; ++u) {
    const AccelUnitInfo* unit = nullptr;
    s.check(model.get_unit(s.host(), u, &unit), "model get_unit");
    if (unit->kind != ACCEL_UNIT_BLOCK) continue;  // the chain carries block linears only
    for (int32_t p = 0; p < unit->num_params; ++p) {
      const AccelParamInfo* param = nullptr;
      s.check(model.get_param(s.host(), u, p, &param), "model get_param");
      if (param->role == ACCEL_PARAM_LINEAR_WEIGHT || param->role == ACCEL_PARAM_EXPERTS) {
        out.push_back(LinearSlot{u, p, param->name, param->role == ACCEL_PARAM_EXPERTS});
      }
    }
  }
  return out;
}

ScaleGroup ScalingState::make_group(int64_t columns, DLDataType dtype, const char* label) const {
  ScaleGroup g;
  g.fp8_dtype = dtype;
  g.columns = columns;
  g.history = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {config_.amax_history_len, columns}, ACCEL_MEMORY_DEVICE,
                            false, label);
  g.scale = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {columns}, ACCEL_MEMORY_DEVICE, false, label);
  g.scale_inv = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {columns}, ACCEL_MEMORY_DEVICE, false, label);
  g.spare = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {columns}, ACCEL_MEMORY_DEVICE, false, label);
  ops_.fill(&g.history.tensor(), 0.0);
  ops_.fill(&g.scale.tensor(), 1.0);
  ops_.fill(&g.scale_inv.tensor(), 1.0);
  ops_.fill(&g.spare.tensor(), 1.0);
  return g;
}

ScalingState::ScalingState(const sdk::Kernels& ops, const Fp8Config& config, std::vector<LinearSlot> linears)
    : ops_(ops), config_(config), linears_(std::move(linears)) {
  const auto n = static_cast<int64_t>(linears_.size());
  forward_ = make_group(2 * n, config_.forward_dtype(), "fp8 forward scaling state");
  backward_ = make_group(n, config_.backward_dtype(), "fp8 backward scaling state");
  readback_[0] = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {2, 2 * n}, ACCEL_MEMORY_HOST_PINNED, true,
                               "fp8 forward metrics");
  readback_[1] = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {2, n}, ACCEL_MEMORY_HOST_PINNED, true,
                               "fp8 backward metrics");
  for (int c = 0; c < kNumClasses; ++c) {
    const auto cls = static_cast<TensorClass>(c);
    const ScaleGroup& g = group(cls);
    const sdk::Buffer* fields[3] = {&g.scale, &g.scale_inv, &g.history};
    for (int f = 0; f < 3; ++f) {
      for (int32_t slot = 0; slot < n; ++slot) {
        // Row 0 of the history is its first `columns` elements.
        cells_[c][f].push_back(std::make_unique<sdk::FlatView>(fields[f]->tensor(), column(cls, slot), 1));
      }
    }
  }
}

int32_t ScalingState::slot(int32_t unit, int32_t param) const {
  for (size_t i = 0; i < linears_.size(); ++i) {
    if (linears_[i].unit == unit && linears_[i].param == param) return static_cast<int32_t>(i);
  }
  return -1;
}

int64_t ScalingState::column(TensorClass c, int32_t slot) const {
  return c == TensorClass::weight ? static_cast<int64_t>(linears_.size()) + slot : slot;
}

const DLTensor* ScalingState::cell(TensorClass c, int32_t slot, Field f) const {
  return cells_[static_cast<int>(c)][f].at(static_cast<size_t>(slot))->get();
}

std::array<ClassSummary, kNumClasses> ScalingState::summarise() const {
  std::array<ClassSummary, kNumClasses> out{};
  const size_t n = linears_.size();
  for (int c = 0; c < kNumClasses; ++c) {
    const auto cls = static_cast<TensorClass>(c);
    const int which = cls == TensorClass::grad ? 1 : 0;
    const auto* copied = static_cast<const float*>(accel_tensor_begin(&readback_[which].tensor()));
    const float* row = copied;
    const float* scale = copied + (which == 1 ? backward_ : forward_).columns;
    double amax = 0.0;
    double min_scale = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i) {
      const auto col = static_cast<size_t>(column(cls, static_cast<int32_t>(i)));
      amax = std::max(amax, static_cast<double>(row[col]));
      min_scale = std::min(min_scale, static_cast<double>(scale[col]));
    }
    out[static_cast<size_t>(c)] = ClassSummary{amax, n == 0 ? 0.0 : min_scale};
  }
  return out;
}

void ScalingState::finish_rows(AccelGroup* world, int32_t grad_divisor) {
  ScaleGroup* groups[2] = {&forward_, &backward_};
  for (int i = 0; i < 2; ++i) {
    const sdk::FlatView row0(groups[i]->history.tensor(), 0, groups[i]->columns);
    if (groups[i] == &backward_ && grad_divisor > 1) ops_.scale(row0.get(), 1.0 / grad_divisor);
    if (world != nullptr) ops_.all_reduce(world, row0.get(), ACCEL_REDUCE_MAX, "fp8 amax all_reduce");
    // Into pinned memory, queued on the compute stream: read in step_end,
    // after the host's read or a synchronisation (scaling_state.h).
    const sdk::FlatView row_copy(readback_[i].tensor(), 0, groups[i]->columns);
    const sdk::FlatView scale_copy(readback_[i].tensor(), groups[i]->columns, groups[i]->columns);
    ops_.copy(row0.get(), row_copy.get(), ACCEL_COPY_DEFERRED_READ);
    ops_.copy(&groups[i]->scale.tensor(), scale_copy.get(), ACCEL_COPY_DEFERRED_READ);
    if (world == nullptr) ops_.fill(row0.get(), 0.0);  // current scaling keeps no history
  }
  rows_finished_ = true;
}

std::array<ClassSummary, kNumClasses> ScalingState::take_rows() {
  if (!rows_finished_) throw sdk::Error(ACCEL_ERROR_INTERNAL, "fp8: step end before finish_rows");
  rows_finished_ = false;
  for (int i = 0; i < 2; ++i) {
    const auto* row = static_cast<const float*>(accel_tensor_begin(&readback_[i].tensor()));
    last_rows_[i].assign(row, row + (i == 0 ? forward_ : backward_).columns);
  }
  return summarise();
}

std::array<ClassSummary, kNumClasses> ScalingState::end_step(int64_t step) {
  const std::array<ClassSummary, kNumClasses> summary = take_rows();
  const bool recompute = (step + 1) % config_.interval == 0;
  const AccelAmaxAlgo algo = config_.algo == AmaxAlgo::max ? ACCEL_AMAX_MAX : ACCEL_AMAX_MOST_RECENT;
  for (ScaleGroup* g : {&forward_, &backward_}) {
    if (recompute) {
      ops_.fp8_scale_update(&g->history.tensor(), &g->scale.tensor(), &g->scale_inv.tensor(), g->fp8_dtype,
                            config_.margin, algo, /*roll=*/true);
    } else {
      // Between recomputations the history still records every step; the
      // update lands in `spare`, which nothing reads.
      ops_.fp8_scale_update(&g->history.tensor(), &g->spare.tensor(), nullptr, g->fp8_dtype, config_.margin, algo,
                            /*roll=*/true);
    }
  }
  return summary;
}

std::array<ClassSummary, kNumClasses> ScalingState::end_step_current() {
  std::array<ClassSummary, kNumClasses> summary = take_rows();
  // Current scaling has no standing scale: report the one the step's largest
  // amax gives.
  for (int c = 0; c < kNumClasses; ++c) {
    const DLDataType dtype = c == static_cast<int>(TensorClass::grad) ? backward_.fp8_dtype : forward_.fp8_dtype;
    const double amax = summary[static_cast<size_t>(c)].amax;
    summary[static_cast<size_t>(c)].min_scale =
        amax > 0 && std::isfinite(amax) ? accel_fp8_max(dtype) / amax / std::ldexp(1.0, config_.margin) : 1.0;
  }
  return summary;
}

void ScalingState::refresh_inverse() {
  for (ScaleGroup* g : {&forward_, &backward_}) {
    // fp8_scale_update with a zero one-row history keeps every scale and
    // writes scale_inv = 1 / scale, on the device, without a kernel of our own.
    sdk::Buffer zeros =
        ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {1, g->columns}, ACCEL_MEMORY_DEVICE, false, "fp8 scale_inv");
    ops_.fill(&zeros.tensor(), 0.0);
    ops_.fp8_scale_update(&zeros.tensor(), &g->scale.tensor(), &g->scale_inv.tensor(), g->fp8_dtype, config_.margin,
                          ACCEL_AMAX_MOST_RECENT, /*roll=*/false);
  }
}

namespace {

void append_floats(std::string& out, const std::vector<float>& values) {
  out += '[';
  char text[32];
  for (size_t i = 0; i < values.size(); ++i) {
    // %.9g round-trips every float32 exactly.
    std::snprintf(text, sizeof(text), "%s%.9g", i ? "," : "", static_cast<double>(values[i]));
    out += text;
  }
  out += ']';
}

}  // namespace

std::string ScalingState::to_json_line(int64_t step) const {
  std::string out = sdk::format("{\"step\":%lld", static_cast<long long>(step));
  const std::pair<const char*, const ScaleGroup*> groups[2] = {{"forward", &forward_}, {"backward", &backward_}};
  for (int i = 0; i < 2; ++i) {
    out += sdk::format(",\"%s_amax\":", groups[i].first);
    append_floats(out, last_rows_[i]);
  }
  for (const auto& [name, g] : groups) {
    out += sdk::format(",\"%s_scale\":", name);
    append_floats(out, ops_.read_floats(g->scale.tensor()));
    out += sdk::format(",\"%s_history\":", name);
    append_floats(out, ops_.read_floats(g->history.tensor()));
  }
  return out + "}";
}

}  // namespace accel::fp8
