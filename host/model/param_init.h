// Where a parameter's initial values come from. By default the counter-based
// seed streams (seeded_init.h); with --init-from, a WeightSource: weights
// loaded from another model's files under the host's parameter names and
// layouts. Either way any slice of a parameter can be produced on its own,
// so a sharding plugin that initialises only its shard (init_range), or a
// tensor-parallel rank that holds only its split, gets exactly that slice of
// the whole, and a source that reads files (checkpoint/hf_weight_source.h)
// reads only that slice.
//
// Thread-safety: immutable after construction; fill() may run on any thread
// (a WeightSource's read_block must allow that).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/model/parameter.h"

namespace accel::model {

// Whole parameters by name: fp32, contiguous, on the CPU, each of exactly
// its ParamSpec's shape (GptModel::set_initial_weights checks this).
using NamedWeights = std::map<std::string, at::Tensor>;

// A rectangle of a parameter seen as a matrix: a parameter of shape
// [d0, d1, ...] is [d0, d1 * ...] (a 1-D one [1, d0], a scalar [1, 1]), so
// a flat range is at most three blocks and a split's slice a few.
struct WeightBlock {
  int64_t row0 = 0, rows = 0;
  int64_t col0 = 0, cols = 0;
};

// The matrix view above: {rows, columns}.
std::pair<int64_t, int64_t> weight_matrix_shape(const std::vector<int64_t>& shape);

// Initial weights by parameter name, produced a block at a time: the source
// decides whether they live in memory or are read from files on demand.
class WeightSource {
 public:
  virtual ~WeightSource() = default;

  // Every parameter it holds and its shape (the host's layout).
  virtual std::map<std::string, std::vector<int64_t>> shapes() const = 0;

  // Writes `block` of parameter `name` (a name shapes() holds; the block
  // inside its matrix view) as fp32 into dst, the block's row r starting at
  // dst + r * ld. Thread-safe.
  virtual void read_block(const std::string& name, const WeightBlock& block, float* dst, int64_t ld) const = 0;

  // One line on what producing the weights cost this rank (bytes read), for
  // the log when the weights are released; empty when there is nothing to say.
  virtual std::string summary() const { return {}; }
};

// A WeightSource over whole tensors in memory (generate's checkpoint,
// tests). Checks each is fp32, contiguous and on the CPU; throws
// std::invalid_argument naming one that is not.
class NamedWeightSource final : public WeightSource {
 public:
  explicit NamedWeightSource(std::shared_ptr<const NamedWeights> weights);
  std::map<std::string, std::vector<int64_t>> shapes() const override;
  void read_block(const std::string& name, const WeightBlock& block, float* dst, int64_t ld) const override;

 private:
  std::shared_ptr<const NamedWeights> weights_;
};

class ParamInit {
 public:
  // The seed streams alone. Implicit on purpose: a seed is the default
  // source, and every call site that passes one keeps reading naturally.
  ParamInit(uint64_t seed = 0) : seed_(seed) {}  // NOLINT(google-explicit-constructor)
  ParamInit(uint64_t seed, std::shared_ptr<const WeightSource> weights)
      : seed_(seed), weights_(std::move(weights)), from_weights_(weights_ != nullptr) {}
  ParamInit(uint64_t seed, std::shared_ptr<const NamedWeights> weights)
      : ParamInit(seed, weights ? std::make_shared<const NamedWeightSource>(std::move(weights))
                                : std::shared_ptr<const WeightSource>()) {}

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
  // An inactive split is the whole parameter (fill()). From a WeightSource
  // the slice is asked for in blocks, never the whole tensor.
  void fill_local(const ParamSpec& spec, const ParamSplit& split, int64_t begin, int64_t count, float* dst) const;

  // The source's summary() while it is held, else empty.
  std::string weights_summary() const { return weights_ ? weights_->summary() : std::string(); }

  // Drops the loaded weights (an in-memory source costs a full fp32 model
  // per rank; a file source holds the files open) once every unit took its
  // values; fill() refuses from then on.
  void release_weights() { weights_.reset(); }

 private:
  const WeightSource& source(const ParamSpec& spec) const;

  uint64_t seed_;
  std::shared_ptr<const WeightSource> weights_;
  bool from_weights_ = false;
};

}  // namespace accel::model
