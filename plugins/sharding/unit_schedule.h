// unit_schedule.h — when a sharding plugin gathers, prefetches, reduces and releases,
// driven by the host's four unit hooks.
//
// For a wrap group G (wrap_plan.h):
//   forward   first unit's forward_pre: gather G (or complete its prefetch);
//             with forward_prefetch, prefetch the next group in forward.
//             last unit's forward_post: release G when resharding after
//             forward — except after the model's last unit (backward starts
//             right there, as PyTorch's root unit keeps its parameters) and
//             always in evaluation (NO_GRAD: no backward follows).
//   recompute (activation checkpointing) forward_pre gathers again if G was
//             released; forward_post(RECOMPUTE) never releases.
//   backward  first unit's backward_pre: gather G if released, materialise
//             zeroed gradients for all its units (tied units write each
//             other's), prefetch the next group with BACKWARD_PRE.
//             last unit's backward_post: prefetch with BACKWARD_POST, then
//             reduce-scatter every unit's gradients and release G.
// Units in no group (host-owned) are left to the host. Without a gather
// engine (ZeRO-2: the host keeps the parameters, the plugin only the
// gradients) the forward hooks do nothing and backward only materialises,
// reduce-scatters and releases gradients, per group so that tied units'
// gradients are complete before they are reduced. A group marked
// keep_until_backward (ZeRO-3's stage3_max_reuse_distance) is not released
// after its forward. Thread-safety: loop thread only.
#pragma once

#include <accel/accel.h>

#include "sharding_options.h"
#include "gather_engine.h"
#include "grad_reducer.h"
#include "gather_plan.h"

namespace accel::sharding {

class UnitSchedule {
 public:
  UnitSchedule(const ShardingOptions& config, const GatherPlan& plan, GatherEngine* gathers, GradReducer& reducer,
               int32_t num_units)
      : config_(config), plan_(plan), gathers_(gathers), reducer_(reducer), num_units_(num_units) {}

  void forward_pre(const AccelUnitHookArgs& args);
  void forward_post(const AccelUnitHookArgs& args);
  void backward_pre(const AccelUnitHookArgs& args);
  void backward_post(const AccelUnitHookArgs& args);

  // Groups gathered again for an activation-checkpointing recompute since
  // the last call.
  int64_t take_recompute_gathers() {
    const int64_t n = recompute_gathers_;
    recompute_gathers_ = 0;
    return n;
  }

 private:
  // The unit's group, or -1 for a host-owned unit.
  int32_t group_of(int32_t unit) const { return plan_.group_of.at(static_cast<size_t>(unit)); }
  const GatherGroup& group(int32_t g) const { return plan_.groups.at(static_cast<size_t>(g)); }

  const ShardingOptions& config_;
  const GatherPlan& plan_;
  GatherEngine* gathers_;  // nullptr: parameters are the host's
  GradReducer& reducer_;
  int32_t num_units_;
  int64_t recompute_gathers_ = 0;
};

}  // namespace accel::sharding
