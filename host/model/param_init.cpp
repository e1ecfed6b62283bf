// Initial values from the seed streams or loaded weights (see param_init.h).
#include "host/model/param_init.h"

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

}  // namespace accel::model
