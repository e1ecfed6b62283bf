// A unit is the granularity strategies work at (an FSDP wrap, a pipeline stage
// member): an ordered group of parameters whose values live in ONE contiguous
// flat buffer, with a flat gradient buffer of the same layout.
//
// Invariants:
//  - while the parameters are materialised, every parameter tensor is a view
//    into flat_params(); while the gradients are too, its .grad() is the
//    matching view into flat_grads(), so autograd accumulates straight into
//    the flat buffer that a collective or optimizer consumes;
//  - parameters that AdamW decays come first: [0, decay_numel()) decays,
//    the rest (biases, norms) does not;
//  - host-kept buffers are fp32 masters; a plugin that manages a unit's
//    storage (FSDP) may materialise it in bf16/fp16, gradients in the same
//    dtype as the parameters (autograd accumulates into .grad in place).
//
// Storage can come and go (materialize_* / release_*) while the Param
// objects stay: each parameter is ONE autograd leaf for the unit's lifetime,
// and materialising rebinds its data (Variable::set_data) to the new buffer.
// Autograd graphs saved in forward (a linear saves its weight) therefore see
// the re-gathered values in backward, and gradients land in the buffer that
// is current when backward runs. A released parameter holds a 0-element
// tensor; a released gradient is undefined.
//
// Releasing really frees the bytes, even while autograd holds views of the
// parameters (a linear saves weight.t(), a view that shares the flat
// buffer's storage): release_params() empties that storage in place (its
// DataPtr is cleared, as PyTorch FSDP2 resizes an unsharded parameter's
// storage to 0), and materialising again in the same dtype refills the same
// storage, so those saved views read the re-gathered values in backward.
// CPU storage comes from the storage pool (storage_pool.h), tagged
// "<unit> params" / "<unit> grads"; CUDA storage from the caching allocator.
// Not thread-safe: one training thread owns the units.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <string>
#include <string_view>
#include <vector>

#include "host/model/param_init.h"
#include "host/model/parameter.h"

namespace accel::model {

enum class UnitKind : int { embedding = 0, block = 1, head = 2 };
const char* to_string(UnitKind kind);

struct Param {
  ParamSpec spec;            // global shape
  ParamSplit split;          // how this rank holds it (tensor parallelism)
  std::vector<int64_t> shape;  // local shape: the global one unless split
  int64_t offset = 0;  // element offset into the unit's flat buffers
  at::Tensor value;    // leaf view of flat_params, requires_grad

  int64_t numel() const;  // local elements
};

class Unit {
 public:
  // Buffers live on `device` (CPU, or this rank's CUDA device). With
  // `allocate`, both fp32 buffers are materialised (zeros); without, neither.
  Unit(std::string name, UnitKind kind, std::vector<ParamSpec> specs, at::Device device = at::kCPU,
       bool allocate = true);
  Unit(Unit&&) = default;
  Unit& operator=(Unit&&) = default;

  const std::string& name() const { return name_; }
  UnitKind kind() const { return kind_; }
  const std::vector<Param>& params() const { return params_; }
  const Param& param(std::string_view name) const;  // throws std::out_of_range

  at::Tensor& flat_params() { return flat_params_; }
  at::Tensor& flat_grads() { return flat_grads_; }
  const at::Tensor& flat_params() const { return flat_params_; }
  const at::Tensor& flat_grads() const { return flat_grads_; }
  int64_t numel() const { return numel_; }
  int64_t decay_numel() const { return decay_numel_; }
  at::Device device() const { return device_; }

  bool has_params() const { return flat_params_.defined(); }
  bool has_grads() const { return flat_grads_.defined(); }

  // Applies tensor-parallel splits (one per parameter, inactive ones keep it
  // whole) before any storage exists: local shapes, offsets and numel follow.
  // Throws std::logic_error when storage is materialised.
  void split_params(const std::vector<ParamSplit>& splits);
  bool is_split() const;

  // How freshly materialised parameters are filled.
  enum class Fill { undefined, zeros, from_seed };
  // Allocates the flat parameter buffer in `dtype` and rebinds every
  // parameter to its view; from_seed fills the initial values `init` gives
  // (computed in fp32, then cast). Throws std::logic_error when already
  // materialised in another dtype; a no-op when in the same one.
  void materialize_params(at::ScalarType dtype, Fill fill, const ParamInit& init = ParamInit());
  // Allocates the flat gradient buffer (dtype must equal the parameters'
  // when they are materialised) and points every parameter's .grad at it.
  void materialize_grads(at::ScalarType dtype, bool zero);
  void release_params();
  void release_grads();
  // The pool tags of this unit's buffers (storage_pool.h).
  std::string params_tag() const { return name_ + " params"; }
  std::string grads_tag() const { return name_ + " grads"; }

  // Fills every parameter with its initial values (param_init.h; a seed
  // alone: seeded_init.h). Only a unit whose parameters are materialised.
  void initialise(const ParamInit& init);
  void zero_grads() {
    if (has_grads()) flat_grads_.zero_();
  }

 private:
  std::string name_;
  UnitKind kind_;
  std::vector<Param> params_;
  // A fresh flat buffer of numel_ elements: pooled on CPU (tagged `tag`).
  at::Tensor allocate_flat(at::ScalarType dtype, const std::string& tag) const;

  at::Tensor flat_params_;
  at::Tensor flat_grads_;
  // The parameters' storage object across releases: empty (no bytes) while
  // released, refilled by the next materialisation in the same dtype.
  at::Tensor params_home_;
  at::Device device_;
  int64_t numel_ = 0;
  int64_t decay_numel_ = 0;
};

}  // namespace accel::model
