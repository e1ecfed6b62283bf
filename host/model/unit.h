// A unit is the granularity strategies work at (an FSDP wrap, a pipeline stage
// member): an ordered group of parameters whose values live in ONE contiguous
// flat buffer, with a flat gradient buffer of the same layout.
//
// Invariants:
//  - every parameter tensor is a view into flat_params(); its .grad() is the
//    matching view into flat_grads(), so autograd accumulates straight into
//    the flat buffer that a collective or optimizer consumes;
//  - parameters that AdamW decays come first: [0, decay_numel()) decays,
//    the rest (biases, norms) does not;
//  - buffers are fp32 masters; mixed precision casts happen in compute.
// Not thread-safe: one training thread owns the units.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <string>
#include <string_view>
#include <vector>

#include "host/model/parameter.h"

namespace accel::model {

enum class UnitKind : int { embedding = 0, block = 1, head = 2 };
const char* to_string(UnitKind kind);

struct Param {
  ParamSpec spec;
  int64_t offset = 0;  // element offset into the unit's flat buffers
  at::Tensor value;    // leaf view of flat_params, requires_grad
};

class Unit {
 public:
  // Buffers live on `device` (CPU, or this rank's CUDA device).
  Unit(std::string name, UnitKind kind, std::vector<ParamSpec> specs, at::Device device = at::kCPU);
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
  int64_t numel() const { return flat_params_.numel(); }
  int64_t decay_numel() const { return decay_numel_; }

  // Fills every parameter from (seed, parameter name): see seeded_init.h.
  void initialise(uint64_t seed);
  void zero_grads() { flat_grads_.zero_(); }

 private:
  std::string name_;
  UnitKind kind_;
  std::vector<Param> params_;
  at::Tensor flat_params_;
  at::Tensor flat_grads_;
  int64_t decay_numel_ = 0;
};

}  // namespace accel::model
