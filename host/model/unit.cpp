// Units with flat parameter and gradient storage (see unit.h).
#include "host/model/unit.h"

#include <algorithm>
#include <stdexcept>

#include "host/model/seeded_init.h"

namespace accel::model {

const char* to_string(UnitKind kind) {
  switch (kind) {
    case UnitKind::embedding: return "embedding";
    case UnitKind::block: return "block";
    case UnitKind::head: return "head";
  }
  return "?";
}

Unit::Unit(std::string name, UnitKind kind, std::vector<ParamSpec> specs, at::Device device)
    : name_(std::move(name)), kind_(kind) {
  // Decayed parameters first, each group in declaration order, so AdamW's
  // weight decay is one contiguous range of the flat buffer.
  std::stable_partition(specs.begin(), specs.end(), [](const ParamSpec& s) { return s.decays(); });
  int64_t total = 0;
  for (const ParamSpec& spec : specs) {
    if (spec.decays()) decay_numel_ += spec.numel();
    total += spec.numel();
  }
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  flat_params_ = at::zeros({total}, options);
  flat_grads_ = at::zeros({total}, options);

  int64_t offset = 0;
  for (ParamSpec& spec : specs) {
    const int64_t n = spec.numel();
    Param param;
    param.offset = offset;
    param.value = flat_params_.narrow(0, offset, n).view(spec.shape);
    param.value.requires_grad_(true);
    // Pre-assigned gradient: autograd accumulates in place into this view.
    param.value.mutable_grad() = flat_grads_.narrow(0, offset, n).view(spec.shape);
    param.spec = std::move(spec);
    params_.push_back(std::move(param));
    offset += n;
  }
}

const Param& Unit::param(std::string_view name) const {
  for (const Param& p : params_) {
    if (p.spec.name == name) return p;
  }
  throw std::out_of_range("unit '" + name_ + "' has no parameter '" + std::string(name) + "'");
}

void Unit::initialise(uint64_t seed) {
  at::NoGradGuard no_grad;
  // Generated on the CPU (the counter-based streams are CPU code), then copied.
  at::Tensor host = flat_params_.is_cpu() ? flat_params_ : at::empty_like(flat_params_, at::kCPU);
  float* base = host.data_ptr<float>();
  for (const Param& p : params_) {
    init_parameter_slice(p.spec, seed, 0, p.spec.numel(), base + p.offset);
  }
  if (!flat_params_.is_cpu()) flat_params_.copy_(host);
}

}  // namespace accel::model
