// RAII autocast for --mixed-precision bf16|fp16: inside the scope, matmuls and
// attention run in the reduced dtype while parameters stay fp32 masters.
// Restores the previous state on exit. Thread-local, like torch.autocast.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "host/cli/run_config.h"

namespace accel::train {

class AutocastScope {
 public:
  AutocastScope(MixedPrecision precision, const AutocastOptions& options, at::DeviceType device) : device_(device) {
    if (precision == MixedPrecision::no || !options.enabled) return;
    active_ = true;
    previous_enabled_ = at::autocast::is_autocast_enabled(device);
    previous_dtype_ = at::autocast::get_autocast_dtype(device);
    previous_cache_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(options.cache_enabled);
    at::autocast::set_autocast_dtype(device, precision == MixedPrecision::bf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_autocast_enabled(device, true);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, previous_enabled_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
    at::autocast::set_autocast_cache_enabled(previous_cache_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType device_;
  bool active_ = false;
  bool previous_enabled_ = false;
  bool previous_cache_ = true;
  at::ScalarType previous_dtype_ = at::kFloat;
};

}  // namespace accel::train
