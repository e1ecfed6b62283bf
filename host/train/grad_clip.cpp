// Gradient norm and clipping (see grad_clip.h).
#include "host/train/grad_clip.h"


namespace accel::train {

at::Tensor global_grad_norm(const std::vector<at::Tensor>& flat_grads) {
  const at::Device device = flat_grads.empty() ? at::Device(at::kCPU) : flat_grads.front().device();
  at::Tensor sum_squares = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (const at::Tensor& g : flat_grads) {
    // Per-buffer fp32 dot product (no temporary the size of the buffer),
    // summed across buffers in double, in order.
    const at::Tensor flat = g.scalar_type() == at::kFloat ? g.reshape({-1}) : g.to(at::kFloat).reshape({-1});
    sum_squares.add_(at::dot(flat, flat).to(at::kDouble));
  }
  return sum_squares.sqrt_();
}

at::Tensor clip_grad_norm(std::vector<at::Tensor>& flat_grads, double max_norm) {
  const at::Tensor norm = global_grad_norm(flat_grads);
  // The coefficient in double, rounded to fp32 by each multiplication as a
  // host scalar would be.
  const at::Tensor coef = (max_norm / (norm + 1e-6)).clamp_max_(1.0);
  for (at::Tensor& g : flat_grads) g.mul_(coef);
  return norm;
}

}  // namespace accel::train
