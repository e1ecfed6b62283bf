// The trainer's AdamW state over units (see flat_adamw.h).
#include "host/train/flat_adamw.h"

#include <algorithm>

namespace accel::train {

void FlatAdamW::set_moment_formats(at::ScalarType exp_avg, at::ScalarType exp_avg_sq) {
  exp_avg_format_ = exp_avg;
  exp_avg_sq_format_ = exp_avg_sq;
}

void FlatAdamW::allocate_state(const std::vector<model::Unit>& units) {
  exp_avg_.clear();
  exp_avg_sq_.clear();
  exp_avg_scale_.clear();
  exp_avg_sq_scale_.clear();
  ranges_.clear();
  views_.clear();
  for (const model::Unit& unit : units) {
    if (!unit.has_params()) {
      exp_avg_.emplace_back();
      exp_avg_sq_.emplace_back();
      exp_avg_scale_.emplace_back();
      exp_avg_sq_scale_.emplace_back();
      ranges_.emplace_back();
      continue;
    }
    const at::Tensor& flat = unit.flat_params();
    exp_avg_.push_back(at::zeros_like(flat, flat.options().dtype(exp_avg_format_)));
    exp_avg_sq_.push_back(at::zeros_like(flat, flat.options().dtype(exp_avg_sq_format_)));
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const model::Param& p : unit.params()) ranges.emplace_back(p.offset, p.numel());
    exp_avg_scale_.emplace_back(ranges.size(), 1.0f);
    exp_avg_sq_scale_.emplace_back(ranges.size(), 1.0f);
    ranges_.push_back(std::move(ranges));
  }
}

namespace {

// `skip` read where it lies: a CPU tensor's value directly (the host is the
// device: nothing to wait for, nothing to count), a CUDA one through a
// synchronising read (asked by the scaled moments only, see step()).
bool skip_holds(const at::Tensor& skip) {
  if (!skip.defined()) return false;
  if (skip.is_cpu()) return *skip.to(at::kBool).contiguous().data_ptr<bool>();
  return skip.item<bool>();
}

}  // namespace

void FlatAdamW::step(std::vector<model::Unit>& units, const OptimizerOptions& o, double lr, const at::Tensor& skip) {
  const int64_t step = step_count_ + 1;
  const model::AdamWHyper hyper{lr, o.beta1, o.beta2, o.eps, o.weight_decay};
  const auto held = std::find_if(exp_avg_.begin(), exp_avg_.end(), [](const at::Tensor& t) { return t.defined(); });
  const bool fused = held != exp_avg_.end() && held->is_cuda() && !scaled();
  if (!fused && skip_holds(skip)) return;
  for (size_t i = 0; i < units.size() && i < exp_avg_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    at::Tensor& params = units[i].flat_params();
    if (fused) {
      model::adamw_step_fused_flat(params, units[i].flat_grads(), exp_avg_[i], exp_avg_sq_[i],
                                   units[i].decay_numel(), step, hyper, skip);
      continue;
    }
    if (!scaled()) {
      model::adamw_step_flat(params, units[i].flat_grads(), exp_avg_[i], exp_avg_sq_[i], units[i].decay_numel(),
                             step, hyper);
      continue;
    }
    // One call per parameter: each has its own scales. The decayed
    // parameters come first in a unit's flat layout (Unit::decay_numel).
    const int64_t decay_numel = units[i].decay_numel();
    for (size_t k = 0; k < ranges_[i].size(); ++k) {
      const auto [offset, numel] = ranges_[i][k];
      at::Tensor param = units[i].flat_params().narrow(0, offset, numel);
      const at::Tensor grad = units[i].flat_grads().narrow(0, offset, numel);
      at::Tensor m = exp_avg_[i].narrow(0, offset, numel);
      at::Tensor v = exp_avg_sq_[i].narrow(0, offset, numel);
      const int64_t decayed = std::clamp<int64_t>(decay_numel - offset, 0, numel);
      model::adamw_step_scaled_flat(param, grad, m, exp_avg_scale_[i][k], v, exp_avg_sq_scale_[i][k], decayed,
                                    step, hyper);
    }
  }
}

std::vector<at::Tensor> FlatAdamW::moment_views(size_t unit) {
  if (!exp_avg_.at(unit).defined() || !scaled()) return {exp_avg_.at(unit), exp_avg_sq_.at(unit)};
  auto found = views_.find(unit);
  if (found != views_.end()) return found->second;
  at::Tensor m = at::empty(exp_avg_[unit].sizes(), exp_avg_[unit].options().dtype(at::kFloat));
  at::Tensor v = at::empty(exp_avg_sq_[unit].sizes(), exp_avg_sq_[unit].options().dtype(at::kFloat));
  for (size_t k = 0; k < ranges_[unit].size(); ++k) {
    const auto [offset, numel] = ranges_[unit][k];
    m.narrow(0, offset, numel).copy_(model::dequantize_moment(exp_avg_[unit].narrow(0, offset, numel),
                                                              exp_avg_scale_[unit][k]));
    v.narrow(0, offset, numel).copy_(model::dequantize_moment(exp_avg_sq_[unit].narrow(0, offset, numel),
                                                              exp_avg_sq_scale_[unit][k]));
  }
  return views_[unit] = {m, v};
}

void FlatAdamW::commit_moment_views() {
  // Each parameter's scale from its amax: for values that were dequantised
  // from power-of-two scales, a power of two that represents every one of
  // them exactly (flat_adamw.h), so a resume continues bit for bit.
  for (auto& [unit, views] : views_) {
    for (size_t k = 0; k < ranges_[unit].size(); ++k) {
      const auto [offset, numel] = ranges_[unit][k];
      for (int which = 0; which < 2; ++which) {
        const at::Tensor values = views[static_cast<size_t>(which)].narrow(0, offset, numel);
        at::Tensor stored = (which == 0 ? exp_avg_ : exp_avg_sq_)[unit].narrow(0, offset, numel);
        float& scale = (which == 0 ? exp_avg_scale_ : exp_avg_sq_scale_)[unit][k];
        scale = model::moment_scale(numel == 0 ? 0.0f : values.abs().max().item<float>(), stored.scalar_type());
        model::quantize_moment(values, scale, stored);
      }
    }
  }
  views_.clear();
}

size_t FlatAdamW::state_bytes() const {
  size_t bytes = 0;
  for (const at::Tensor& t : exp_avg_) bytes += t.defined() ? t.nbytes() : 0;
  for (const at::Tensor& t : exp_avg_sq_) bytes += t.defined() ? t.nbytes() : 0;
  if (scaled()) {
    for (const auto& s : exp_avg_scale_) bytes += s.size() * sizeof(float);
    for (const auto& s : exp_avg_sq_scale_) bytes += s.size() * sizeof(float);
  }
  return bytes;
}

}  // namespace accel::train
