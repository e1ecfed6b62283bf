// The trainer's AdamW: moment buffers per unit and the step count, stepped
// with host/model/adamw_step.h's update (torch.optim.AdamW's exact
// semantics), one call per unit instead of one per parameter.
//
// Moment formats (the precision policy, accel/precision.h; fp8's MS-AMP O2):
// fp32 by default; with set_moment_formats(E4M3FN, f16) each unit's moments
// are stored scaled in those dtypes, one power-of-two scale per parameter
// and moment, stepped per parameter with adamw_step_scaled_flat. Checkpoints
// see fp32 either way, through moment_views(): the moments themselves (fp32)
// or dequantised copies (scaled), which commit_moment_views() quantises back
// after a load (exactly: the scales are powers of two) and
// drop_moment_views() forgets after a save.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <vector>

#include "host/cli/run_config.h"
#include "host/model/adamw_step.h"
#include "host/model/unit.h"

namespace accel::train {

// The optimizer state of a whole model: moment buffers per unit, and the step
// count. Units without host storage (a plugin manages them) have no state:
// their moment_views() entries are undefined and step() skips them.
class FlatAdamW {
 public:
  FlatAdamW() = default;
  explicit FlatAdamW(const std::vector<model::Unit>& units) { allocate_state(units); }
  // Before allocate_state: the moments' storage dtypes (kFloat, kFloat by
  // default; Float8_e4m3fn and kHalf for MS-AMP O2).
  void set_moment_formats(at::ScalarType exp_avg, at::ScalarType exp_avg_sq);
  bool scaled() const { return exp_avg_format_ != at::kFloat || exp_avg_sq_format_ != at::kFloat; }
  // Zeroed moments for every unit whose parameters are materialised.
  void allocate_state(const std::vector<model::Unit>& units);
  bool has_state() const { return !exp_avg_.empty(); }

  // Steps every unit with state as step number step_count() + 1; the count
  // moves with count_step() once the caller knows the step was taken.
  // `skip` (a 0-dim bool on the buffers' device, or undefined): true makes
  // the step change nothing. The trainer decides it on the device (a
  // non-finite loss, fp16's overflow), so queuing the step reads nothing
  // back: a CUDA rank's fused kernel takes it as found_inf, and on the CPU
  // the host is the device and reads it where it lies. Scaled moments read
  // their amax per parameter on the host anyway, and read it too.
  void step(std::vector<model::Unit>& units, const OptimizerOptions& options, double lr,
            const at::Tensor& skip = at::Tensor());
  void count_step() { ++step_count_; }

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }

  // The stored moments per unit (in their storage dtypes).
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

  // Unit `unit`'s moments as fp32 flat tensors {exp_avg, exp_avg_sq} (see
  // the file comment); undefined tensors for a unit without state.
  std::vector<at::Tensor> moment_views(size_t unit);
  void commit_moment_views();
  void drop_moment_views() { views_.clear(); }

  // Bytes of the stored moments and their scales.
  size_t state_bytes() const;

 private:
  at::ScalarType exp_avg_format_ = at::kFloat;
  at::ScalarType exp_avg_sq_format_ = at::kFloat;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  // Scaled formats: per unit, per parameter (in Unit::params() order).
  std::vector<std::vector<float>> exp_avg_scale_;
  std::vector<std::vector<float>> exp_avg_sq_scale_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges_;  // per unit: each parameter's (offset, numel)
  std::map<size_t, std::vector<at::Tensor>> views_;                // scaled: dequantised copies lent out
  int64_t step_count_ = 0;
};

}  // namespace accel::train
