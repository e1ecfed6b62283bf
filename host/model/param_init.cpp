// Initial values from the seed streams or loaded weights (see param_init.h).
#include "host/model/param_init.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "host/model/seeded_init.h"

namespace accel::model {

void ParamInit::fill(const ParamSpec& spec, int64_t begin, int64_t count, float* dst) const {
  if (!from_weights_) {
    init_parameter_slice(spec, seed_, begin, count, dst);
    return;
  }
  if (!weights_) {
    throw std::logic_error("parameter " + spec.name +
                           ": the weights the run was initialised from were already released");
  }
  const auto found = weights_->find(spec.name);
  if (found == weights_->end()) throw std::logic_error("the initial weights hold no parameter " + spec.name);
  const at::Tensor& whole = found->second;
  if (begin < 0 || count < 0 || begin + count > whole.numel()) {
    throw std::logic_error("parameter " + spec.name + ": slice out of range");
  }
  std::memcpy(dst, whole.const_data_ptr<float>() + begin, static_cast<size_t>(count) * sizeof(float));
}

void ParamInit::fill_local(const ParamSpec& spec, const ParamSplit& split, int64_t begin, int64_t count,
                           float* dst) const {
  if (!split.active()) {
    fill(spec, begin, count, dst);
    return;
  }
  // The local tensor is, along `dim`, `stride` runs of `rows` slices each;
  // a slice (everything after `dim`) is contiguous in both tensors.
  const auto d = static_cast<size_t>(split.dim);
  const std::vector<int64_t>& global = spec.shape;
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= global[i];
  for (size_t i = d + 1; i < global.size(); ++i) inner *= global[i];
  const int64_t size = global[d];
  const int64_t padded = split.padded > 0 ? split.padded : size;
  const int64_t local_size = padded / split.parts;
  const int64_t rows = local_size / split.stride;  // per fused block
  const int64_t block = size / split.stride;       // a fused block's global rows
  const int64_t end = begin + count;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < split.stride; ++k) {
      const int64_t local_row0 = k * rows;
      const int64_t global_row0 = k * block + split.index * rows;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t lo = ((o * local_size) + local_row0 + r) * inner;
        const int64_t a = std::max(lo, begin), b = std::min(lo + inner, end);
        if (a >= b) continue;
        const int64_t g_row = global_row0 + r;
        if (g_row >= size) {
          std::fill(dst + (a - begin), dst + (b - begin), 0.0f);  // padding
          continue;
        }
        const int64_t g = (o * size + g_row) * inner + (a - lo);
        fill(spec, g, b - a, dst + (a - begin));
      }
    }
  }
}

}  // namespace accel::model
