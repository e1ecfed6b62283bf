// checkpoint_io.cpp — saving and loading fp8's scaling state (see
// checkpoint_io.h).
#include "checkpoint_io.h"

#include <accel/sdk/error.hpp>

#include <string>
#include <vector>

namespace accel::fp8 {

namespace {

struct Entry {
  const char* name;
  const DLTensor* tensor;
};

std::vector<Entry> entries(const ScalingState& state) {
  return {{"forward_amax_history", &state.forward().history.tensor()},
          {"forward_scale", &state.forward().scale.tensor()},
          {"backward_amax_history", &state.backward().history.tensor()},
          {"backward_scale", &state.backward().scale.tensor()}};
}

std::string shape_text(int32_t ndim, const int64_t* shape) {
  std::string text = "[";
  for (int32_t i = 0; i < ndim; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

AccelCheckpointSliceArgs whole(const Entry& e, const std::vector<int64_t>& zeros) {
  AccelCheckpointSliceArgs args{};
  args.struct_size = sizeof(args);
  args.space = ACCEL_CHECKPOINT_PLUGIN;
  args.ndim = e.tensor->ndim;
  args.name = e.name;
  args.global_shape = e.tensor->shape;
  args.global_offset = zeros.data();
  args.local = e.tensor;
  return args;
}

}  // namespace

void save_state(const sdk::Kernels& ops, const Fp8Config& config, const ScalingState& state, int32_t rank) {
  if (rank != 0) return;  // identical on every rank after the amax all-reduce
  const sdk::Services& s = ops.services();
  const AccelCheckpointServices& checkpoint = *s.table()->checkpoint;
  const std::vector<int64_t> zeros(2, 0);
  for (const Entry& e : entries(state)) {
    const AccelCheckpointSliceArgs args = whole(e, zeros);
    s.check(checkpoint.put(s.host(), &args), std::string("put ") + e.name);
  }
  const std::string recipe = to_json(config);
  s.check(checkpoint.put_string(s.host(), ACCEL_CHECKPOINT_PLUGIN, "recipe", recipe.c_str()), "put_string recipe");
}

bool load_state(const sdk::Kernels& ops, const Fp8Config& config, ScalingState& state) {
  const sdk::Services& s = ops.services();
  const AccelCheckpointServices& checkpoint = *s.table()->checkpoint;
  const std::vector<Entry> all = entries(state);
  AccelCheckpointTensorInfo info{};
  info.struct_size = sizeof(info);
  if (checkpoint.info(s.host(), ACCEL_CHECKPOINT_PLUGIN, all.front().name, &info) == ACCEL_ERROR_NOT_FOUND) {
    (void)s.last_error();  // optional state: absent is fine
    return false;
  }
  const std::vector<int64_t> zeros(2, 0);
  for (const Entry& e : all) {
    info = AccelCheckpointTensorInfo{};
    info.struct_size = sizeof(info);
    s.check(checkpoint.info(s.host(), ACCEL_CHECKPOINT_PLUGIN, e.name, &info), std::string("info ") + e.name);
    bool same = info.ndim == e.tensor->ndim;
    for (int32_t i = 0; same && i < info.ndim; ++i) same = info.global_shape[i] == e.tensor->shape[i];
    if (!same) {
      throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT,
                       std::string("checkpoint fp8 state ") + e.name + " is " +
                           shape_text(info.ndim, info.global_shape) + ", this run's is " +
                           shape_text(e.tensor->ndim, e.tensor->shape) +
                           " (amax_history_len or the model's linears differ)");
    }
    const AccelCheckpointSliceArgs args = whole(e, zeros);
    s.check(checkpoint.get(s.host(), &args), std::string("get ") + e.name);
  }
  const char* saved_recipe = nullptr;
  if (checkpoint.get_string(s.host(), ACCEL_CHECKPOINT_PLUGIN, "recipe", &saved_recipe) == ACCEL_OK &&
      saved_recipe != nullptr && to_json(config) != saved_recipe && s.rank() == 0) {
    s.warn() << "fp8: resuming a checkpoint saved with another recipe (" << saved_recipe
             << "); its histories and scales are kept and follow this run's recipe from the next update";
  }
  state.refresh_inverse();
  return true;
}

}  // namespace accel::fp8
