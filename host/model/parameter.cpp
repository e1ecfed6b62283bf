// Parameter descriptions (see parameter.h).
#include "host/model/parameter.h"

namespace accel::model {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> ParamSplit::local_shape(const std::vector<int64_t>& global) const {
  std::vector<int64_t> local = global;
  if (!active()) return local;
  const int64_t size = padded > 0 ? padded : global.at(static_cast<size_t>(dim));
  local[static_cast<size_t>(dim)] = size / parts;
  return local;
}

int64_t ParamSplit::local_offset(const std::vector<int64_t>& global) const {
  if (!active()) return 0;
  const int64_t size = padded > 0 ? padded : global.at(static_cast<size_t>(dim));
  return index * (size / stride / parts);
}

const char* to_string(ParamRole role) {
  switch (role) {
    case ParamRole::linear_weight: return "linear_weight";
    case ParamRole::bias: return "bias";
    case ParamRole::norm: return "norm";
    case ParamRole::embedding: return "embedding";
    case ParamRole::router: return "router";
    case ParamRole::experts: return "experts";
  }
  return "?";
}

const char* to_string(ParallelHint hint) {
  switch (hint) {
    case ParallelHint::replicated: return "replicated";
    case ParallelHint::column: return "column";
    case ParallelHint::row: return "row";
    case ParallelHint::vocab: return "vocab";
  }
  return "?";
}

}  // namespace accel::model
