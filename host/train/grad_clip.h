// Global gradient norm and clipping over flat gradient buffers, with
// torch.nn.utils.clip_grad_norm_'s rule: coef = max_norm / (norm + 1e-6),
// applied only when below 1.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace accel::train {

// sqrt of the sum of squares over all buffers (fp32 accumulation in double at the end).
double global_grad_norm(const std::vector<at::Tensor>& flat_grads);

// Scales the buffers in place when norm > max_norm; returns the norm before clipping.
double clip_grad_norm(std::vector<at::Tensor>& flat_grads, double max_norm);

}  // namespace accel::train
