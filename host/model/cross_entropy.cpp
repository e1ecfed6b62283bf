// cross_entropy.cpp — see cross_entropy.h.
#include "host/model/cross_entropy.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace accel::model {

LossAndGrad cross_entropy_with_grad(const at::Tensor& logits, const at::Tensor& labels, double multiplier) {
  const at::NoGradGuard no_grad;
  const int64_t V = logits.size(-1);
  const at::Tensor rows = logits.reshape({-1, V});  // a view, also of the padded head's narrowed output
  const at::Tensor targets = labels.reshape({-1, 1});
  const int64_t N = rows.size(0);
  at::Tensor p = at::empty({N, V}, rows.options().dtype(at::kFloat));
  // One float copy of a slice of rows at a time beside the result, never of
  // all the logits.
  constexpr int64_t kRowsPerSlice = 1024;
  for (int64_t first = 0; first < N; first += kRowsPerSlice) {
    const int64_t n = std::min(kRowsPerSlice, N - first);
    at::Tensor slice = p.narrow(0, first, n);
    at::_log_softmax_out(slice, rows.narrow(0, first, n).to(at::kFloat), 1, false);
  }
  at::Tensor loss = at::nll_loss(p, targets.squeeze(1));
  // nll_loss's backward puts -g at each row's label (g = its grad_output
  // over the row count, in fp32); log-softmax's then gives
  // grad - exp(logp) * sum(grad) per row: exp(logp) g off the label,
  // (exp(logp) - 1) g on it.
  p.exp_();
  p.scatter_(1, targets, p.gather(1, targets) - 1);
  const float g = static_cast<float>(multiplier) / static_cast<float>(N);
  p.mul_(static_cast<double>(g));
  return {std::move(loss), p.to(logits.scalar_type()).view(logits.sizes())};
}

}  // namespace accel::model
