// What the host knows about one parameter: its name, role, parallel hint,
// shape and how it is initialised. Strategies shard by these descriptions
// (DESIGN.md "Model"); the model code itself knows no strategy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::model {

// router: a mixture of experts' [experts, hidden] scorer; experts: every
// expert's weights of one projection stacked on dim 0 (model/moe.h). Both
// are applied by the model's own code, never through GptModel::LinearFn.
enum class ParamRole : int { linear_weight = 0, bias = 1, norm = 2, embedding = 3, router = 4, experts = 5 };
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
  // AdamW decays weight matrices (linear, router, experts) and embeddings,
  // never biases or norms.
  bool decays() const { return role != ParamRole::bias && role != ParamRole::norm; }
};

// How this rank holds a parameter that tensor parallelism splits: part
// `index` of `parts` along dimension `dim` of the global shape. `stride`
// fused blocks stacked along `dim` are each split the same way (GPT-2's
// c_attn stacks Q, K and V: stride 3 gives every rank the same heads of
// all three). `padded` is `dim`'s size rounded up to a multiple of parts
// (Megatron's make-vocab-size-divisible-by); the padded rows hold zeros.
struct ParamSplit {
  int32_t dim = -1;  // -1: not split
  int64_t parts = 1;
  int64_t index = 0;
  int64_t stride = 1;
  int64_t padded = 0;  // 0: the global size (no padding)

  bool active() const { return dim >= 0; }
  // The local shape of a parameter of `global` shape under this split.
  std::vector<int64_t> local_shape(const std::vector<int64_t>& global) const;
  // Where this rank's first element lies along `dim` (within each fused block).
  int64_t local_offset(const std::vector<int64_t>& global) const;
};

const char* to_string(ParamRole role);
const char* to_string(ParallelHint hint);

}  // namespace accel::model
