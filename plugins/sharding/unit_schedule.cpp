// unit_schedule.cpp — the unit hooks' gather / reduce / release decisions
// (see unit_schedule.h).
#include "unit_schedule.h"

namespace accel::sharding {

void UnitSchedule::forward_pre(const AccelUnitHookArgs& args) {
  const int32_t g = group_of(args.unit);
  if (g < 0 || gathers_ == nullptr) return;
  const bool recompute = (args.flags & ACCEL_UNIT_HOOK_RECOMPUTE) != 0;
  // An evaluation forward may gather differently (the codec's answer).
  const uint32_t codec_flags = (args.flags & ACCEL_UNIT_HOOK_NO_GRAD) != 0 ? ACCEL_GATHER_CODEC_NO_GRAD : 0u;
  if (recompute && !gathers_->alive(g)) ++recompute_gathers_;
  gathers_->ensure_gathered(g, codec_flags);
  if (config_.forward_prefetch && !recompute && args.unit == group(g).first_forward()) {
    gathers_->prefetch(plan_.next_in_forward(args.unit), codec_flags);
  }
}

void UnitSchedule::forward_post(const AccelUnitHookArgs& args) {
  const int32_t g = group_of(args.unit);
  if (g < 0 || gathers_ == nullptr || (args.flags & ACCEL_UNIT_HOOK_RECOMPUTE) != 0 ||
      args.unit != group(g).last_forward()) {
    return;
  }
  const bool no_grad = (args.flags & ACCEL_UNIT_HOOK_NO_GRAD) != 0;
  const bool backward_starts_here = args.unit == num_units_ - 1;
  if (no_grad || (config_.reshard_after_forward && !group(g).keep_until_backward && !backward_starts_here))
    gathers_->release(g);
}

void UnitSchedule::backward_pre(const AccelUnitHookArgs& args) {
  const int32_t g = group_of(args.unit);
  if (g < 0) return;
  if (gathers_ != nullptr) gathers_->ensure_gathered(g);
  if (args.unit != group(g).first_backward()) return;
  for (int32_t u : group(g).units) reducer_.materialize_grads(u);
  if (gathers_ != nullptr && config_.backward_prefetch == BackwardPrefetch::backward_pre) {
    gathers_->prefetch(plan_.next_in_backward(args.unit));
  }
}

void UnitSchedule::backward_post(const AccelUnitHookArgs& args) {
  const int32_t g = group_of(args.unit);
  if (g < 0 || args.unit != group(g).last_backward()) return;
  if (gathers_ != nullptr && config_.backward_prefetch == BackwardPrefetch::backward_post) {
    gathers_->prefetch(plan_.next_in_backward(args.unit));
  }
  const bool last_micro_batch = (args.flags & ACCEL_UNIT_HOOK_LAST_MICRO_BATCH) != 0;
  for (int32_t u : group(g).units) reducer_.reduce_scatter(u, last_micro_batch);
  if (gathers_ != nullptr) gathers_->release(g);
}

}  // namespace accel::sharding
