// Gradient norm and clipping (see grad_clip.h).
#include "host/train/grad_clip.h"

#include <cmath>

namespace accel::train {

double global_grad_norm(const std::vector<at::Tensor>& flat_grads) {
  double sum_squares = 0.0;
  for (const at::Tensor& g : flat_grads) {
    // Per-buffer fp32 dot product (no temporary the size of the buffer),
    // summed across buffers in double.
    const at::Tensor flat = g.scalar_type() == at::kFloat ? g.reshape({-1}) : g.to(at::kFloat).reshape({-1});
    sum_squares += at::dot(flat, flat).item<double>();
  }
  return std::sqrt(sum_squares);
}

double clip_grad_norm(std::vector<at::Tensor>& flat_grads, double max_norm) {
  const double norm = global_grad_norm(flat_grads);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (at::Tensor& g : flat_grads) g.mul_(coef);
  }
  return norm;
}

}  // namespace accel::train
