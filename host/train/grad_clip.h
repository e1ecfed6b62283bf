// Global gradient norm and clipping over flat gradient buffers, with
// torch.nn.utils.clip_grad_norm_'s rule: coef = max_norm / (norm + 1e-6),
// applied only when below 1.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace accel::train {

// Both stay on the buffers' device and read nothing back to the host: the
// step reads the norm once, after the optimizer step is queued (a CUDA
// rank's one synchronisation for it). The sum is fp32 per buffer, in double
// across buffers; the result is a 0-dim double tensor (CPU for no buffers).

// sqrt of the sum of squares over all buffers.
at::Tensor global_grad_norm(const std::vector<at::Tensor>& flat_grads);

// Multiplies the buffers by min(1, max_norm / (norm + 1e-6)) (by exactly 1,
// which changes no bit, when under the threshold); returns the norm before
// clipping.
at::Tensor clip_grad_norm(std::vector<at::Tensor>& flat_grads, double max_norm);

}  // namespace accel::train
