// cross_entropy.h — the loss and its gradient at the logits in one pass,
// without autograd.
//
// Autograd's cross-entropy (a float copy of the logits, log-softmax,
// nll_loss) holds three logit-sized float buffers at once in backward: the
// saved log-probabilities, the gradient nll_loss hands log-softmax, and the
// gradient log-softmax hands the float copy. Beside the 16-bit logits that
// is 14 bytes per logit under bf16 autocast, where eager PyTorch's peak is
// 10; on an H100 at gpt-small (50,257 words) it was 0.19 GiB per sequence
// more than eager, the whole of accel-host's excess over it. This computes
// the same function in one float buffer: log-softmax a slice of rows at a
// time (it is per row, so the slices give the same bits), nll_loss, then the
// buffer turned into the gradient in place, 8 bytes per logit at the peak.
#pragma once

#include <ATen/ATen.h>

namespace accel::model {

struct LossAndGrad {
  at::Tensor loss;  // fp32 scalar: mean over rows of -log softmax(row)[label]
  at::Tensor grad;  // d(multiplier * loss) / d logits: the logits' shape and dtype
};

// `logits` [..., V] (any float dtype, any strides whose rows are views),
// `labels` the class of each row in the logits' row order (every one in
// [0, V)). The gradient is autograd's, (softmax - onehot) * multiplier / N,
// with the same fp32 factor float(multiplier) / float(N); it agrees with
// autograd's within the rounding of the last step (the bf16 gradient was
// bit for bit autograd's on an H100 at gpt-small). Thread-safety: any
// thread; allocates N x V floats.
LossAndGrad cross_entropy_with_grad(const at::Tensor& logits, const at::Tensor& labels, double multiplier);

}  // namespace accel::model
