// Where a parameter's initial values come from. By default the counter-based
// seed streams (seeded_init.h); with --init-from, weights loaded from another
// model's files (checkpoint/hf_checkpoint.h) under the host's parameter names
// and layouts. Either way any slice of a parameter can be produced on its
// own, so a sharding plugin that initialises only its shard (init_range)
// gets exactly that slice of the whole.
//
// Thread-safety: immutable after construction; fill() may run on any thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "host/model/parameter.h"

namespace accel::model {

// Whole parameters by name: fp32, contiguous, on the CPU, each of exactly
// its ParamSpec's shape (GptModel::set_initial_weights checks this).
using NamedWeights = std::map<std::string, at::Tensor>;

class ParamInit {
 public:
  // The seed streams alone. Implicit on purpose: a seed is the default
  // source, and every call site that passes one keeps reading naturally.
  ParamInit(uint64_t seed = 0) : seed_(seed) {}  // NOLINT(google-explicit-constructor)
  ParamInit(uint64_t seed, std::shared_ptr<const NamedWeights> weights)
      : seed_(seed), weights_(std::move(weights)), from_weights_(weights_ != nullptr) {}

  uint64_t seed() const { return seed_; }
  bool from_weights() const { return from_weights_; }

  // Writes elements [begin, begin + count) of the flattened parameter
  // `spec` into dst. Throws std::logic_error if the loaded weights were
  // released (a unit materialised after start-up would otherwise silently
  // take seeded values) or lack `spec.name`.
  void fill(const ParamSpec& spec, int64_t begin, int64_t count, float* dst) const;

  // Writes elements [begin, begin + count) of this rank's local slice of a
  // tensor-parallel split parameter (`split`, parameter.h) into dst: the
  // values the whole tensor holds at those positions, zeros in padded rows.
  // An inactive split is the whole parameter (fill()).
  void fill_local(const ParamSpec& spec, const ParamSplit& split, int64_t begin, int64_t count, float* dst) const;

  // Drops the loaded weights (they cost a full fp32 model per rank) once
  // every unit took its values; fill() refuses from then on.
  void release_weights() { weights_.reset(); }

 private:
  uint64_t seed_;
  std::shared_ptr<const NamedWeights> weights_;
  bool from_weights_ = false;
};

}  // namespace accel::model
