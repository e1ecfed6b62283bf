// Units with flat parameter and gradient storage (see unit.h).
#include "host/model/unit.h"

#include <algorithm>
#include <stdexcept>

#include "host/model/storage_pool.h"

namespace accel::model {

const char* to_string(UnitKind kind) {
  switch (kind) {
    case UnitKind::embedding: return "embedding";
    case UnitKind::block: return "block";
    case UnitKind::head: return "head";
  }
  return "?";
}

Unit::Unit(std::string name, UnitKind kind, std::vector<ParamSpec> specs, at::Device device, bool allocate)
    : name_(std::move(name)), kind_(kind), device_(device) {
  // Decayed parameters first, each group in declaration order, so AdamW's
  // weight decay is one contiguous range of the flat buffer.
  std::stable_partition(specs.begin(), specs.end(), [](const ParamSpec& s) { return s.decays(); });
  for (ParamSpec& spec : specs) {
    Param param;
    param.shape = spec.shape;
    // The parameter's autograd leaf for the unit's lifetime; materialising
    // rebinds its data (see unit.h).
    param.value = at::empty({0}, at::TensorOptions().dtype(at::kFloat).device(device));
    param.value.requires_grad_(true);
    param.spec = std::move(spec);
    params_.push_back(std::move(param));
  }
  split_params(std::vector<ParamSplit>(params_.size()));
  if (allocate) {
    materialize_params(at::kFloat, Fill::zeros);
    materialize_grads(at::kFloat, /*zero=*/true);
  }
}

int64_t Param::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void Unit::split_params(const std::vector<ParamSplit>& splits) {
  if (has_params() || has_grads()) throw std::logic_error("unit " + name_ + ": cannot split materialised parameters");
  if (splits.size() != params_.size()) throw std::logic_error("unit " + name_ + ": one split per parameter");
  int64_t offset = 0;
  decay_numel_ = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    p.split = splits[i];
    p.shape = p.split.local_shape(p.spec.shape);
    p.offset = offset;
    offset += p.numel();
    if (p.spec.decays()) decay_numel_ += p.numel();
  }
  numel_ = offset;
}

bool Unit::is_split() const {
  return std::any_of(params_.begin(), params_.end(), [](const Param& p) { return p.split.active(); });
}

void Unit::materialize_params(at::ScalarType dtype, Fill fill, const ParamInit& init) {
  if (has_params()) {
    if (flat_params_.scalar_type() != dtype) {
      throw std::logic_error("unit " + name_ + ": parameters are materialised as " +
                             std::string(c10::toString(flat_params_.scalar_type())) + ", not " + c10::toString(dtype));
    }
    return;
  }
  if (has_grads() && flat_grads_.scalar_type() != dtype) {
    throw std::logic_error("unit " + name_ + ": parameters must have their gradients' dtype " +
                           std::string(c10::toString(flat_grads_.scalar_type())));
  }
  at::NoGradGuard no_grad;
  const auto bytes = static_cast<size_t>(numel_) * c10::elementSize(dtype);
  if (params_home_.defined() && params_home_.scalar_type() == dtype) {
    // Refill the storage autograd's saved views still point at (unit.h).
    c10::StorageImpl* storage = params_home_.storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(device_.is_cpu() ? storage_pool().allocate(bytes, params_tag())
                                                  : storage->allocator()->allocate(bytes));
    storage->set_nbytes(bytes);
  } else {
    params_home_ = allocate_flat(dtype, params_tag());
  }
  flat_params_ = params_home_;
  if (fill == Fill::zeros) flat_params_.zero_();
  for (Param& p : params_) p.value.set_data(flat_params_.narrow(0, p.offset, p.numel()).view(p.shape));
  if (fill == Fill::from_seed) initialise(init);
}

void Unit::materialize_grads(at::ScalarType dtype, bool zero) {
  if (has_grads()) {
    if (flat_grads_.scalar_type() != dtype) {
      throw std::logic_error("unit " + name_ + ": gradients are materialised as " +
                             std::string(c10::toString(flat_grads_.scalar_type())) + ", not " + c10::toString(dtype));
    }
    return;
  }
  if (has_params() && flat_params_.scalar_type() != dtype) {
    throw std::logic_error("unit " + name_ + ": gradients must have the parameters' dtype " +
                           std::string(c10::toString(flat_params_.scalar_type())) + " (autograd accumulates into "
                           "them), not " + c10::toString(dtype));
  }
  flat_grads_ = allocate_flat(dtype, grads_tag());
  if (zero) flat_grads_.zero_();
  // Pre-assigned gradients: autograd accumulates in place into these views.
  for (Param& p : params_) p.value.mutable_grad() = flat_grads_.narrow(0, p.offset, p.numel()).view(p.shape);
}

void Unit::release_params() {
  if (!has_params()) return;
  at::NoGradGuard no_grad;
  for (Param& p : params_) p.value.set_data(at::empty({0}, flat_params_.options()));
  flat_params_ = at::Tensor();
  // Frees the bytes now, whoever else still holds the storage object
  // (autograd's saved views): they are refilled by the next materialisation.
  params_home_.storage().unsafeGetStorageImpl()->reset();
}

at::Tensor Unit::allocate_flat(at::ScalarType dtype, const std::string& tag) const {
  const auto options = at::TensorOptions().dtype(dtype).device(device_);
  if (!device_.is_cpu()) return at::empty({numel_}, options);
  const auto bytes = static_cast<size_t>(numel_) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, storage_pool().allocate(bytes, tag),
                       /*allocator=*/nullptr, /*resizable=*/false);
  at::NoGradGuard no_grad;
  return at::empty({0}, options).set_(storage, 0, {numel_}, {1});
}

void Unit::release_grads() {
  if (!has_grads()) return;
  for (Param& p : params_) p.value.mutable_grad() = at::Tensor();
  flat_grads_ = at::Tensor();
}

const Param& Unit::param(std::string_view name) const {
  for (const Param& p : params_) {
    if (p.spec.name == name) return p;
  }
  throw std::out_of_range("unit '" + name_ + "' has no parameter '" + std::string(name) + "'");
}

void Unit::initialise(const ParamInit& init) {
  if (!has_params()) throw std::logic_error("unit " + name_ + ": cannot initialise parameters that are not materialised");
  at::NoGradGuard no_grad;
  // Generated in fp32 on the CPU (the counter-based streams are CPU code),
  // then copied (and cast).
  const bool direct = flat_params_.is_cpu() && flat_params_.scalar_type() == at::kFloat;
  at::Tensor host = direct ? flat_params_ : at::empty({numel_}, at::kFloat);
  float* base = host.data_ptr<float>();
  for (const Param& p : params_) {
    init.fill_local(p.spec, p.split, 0, p.numel(), base + p.offset);
  }
  if (!direct) flat_params_.copy_(host);
}

}  // namespace accel::model
