// What the host knows about one parameter: its name, role, parallel hint,
// shape and how it is initialised. Strategies shard by these descriptions
// (DESIGN.md "Model"); the model code itself knows no strategy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::model {

enum class ParamRole : int { linear_weight = 0, bias = 1, norm = 2, embedding = 3 };
// How a tensor-parallel strategy may split it: column (output dim), row (input
// dim), vocab (rows of an embedding), or not at all.
enum class ParallelHint : int { replicated = 0, column = 1, row = 2, vocab = 3 };

enum class InitKind : int { normal = 0, zeros = 1, ones = 2 };

struct ParamSpec {
  std::string name;
  ParamRole role = ParamRole::linear_weight;
  ParallelHint hint = ParallelHint::replicated;
  std::vector<int64_t> shape;
  InitKind init = InitKind::normal;
  double init_std = 0.02;

  int64_t numel() const;
  // AdamW decays linear weights and embeddings, never biases or norms.
  bool decays() const { return role == ParamRole::linear_weight || role == ParamRole::embedding; }
};

const char* to_string(ParamRole role);
const char* to_string(ParallelHint hint);

}  // namespace accel::model
