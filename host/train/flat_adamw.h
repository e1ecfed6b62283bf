// The trainer's AdamW: moment buffers per unit and the step count, stepped
// with host/model/adamw_step.h's update (torch.optim.AdamW's exact
// semantics), one call per unit instead of one per parameter.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "host/cli/run_config.h"
#include "host/model/adamw_step.h"
#include "host/model/unit.h"

namespace accel::train {

// The optimizer state of a whole model: moment buffers per unit, and the step
// count. Units without host storage (a plugin manages them) have no state:
// their exp_avg()/exp_avg_sq() entries are undefined and step() skips them.
class FlatAdamW {
 public:
  FlatAdamW() = default;
  explicit FlatAdamW(const std::vector<model::Unit>& units) { allocate_state(units); }
  // Zeroed moments for every unit whose parameters are materialised.
  void allocate_state(const std::vector<model::Unit>& units);
  bool has_state() const { return !exp_avg_.empty(); }

  void step(std::vector<model::Unit>& units, const OptimizerOptions& options, double lr);

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  size_t state_bytes() const;

 private:
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  int64_t step_count_ = 0;
};

}  // namespace accel::train
