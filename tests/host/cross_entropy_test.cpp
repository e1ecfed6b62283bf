// cross_entropy_with_grad against autograd's cross-entropy: the same loss
// bit for bit and the same gradient at the logits (within the rounding of
// its last step), for fp32 and bf16 logits, a padded head's narrowed view,
// more rows than one slice, and a loss multiplier. On CPU; the CUDA case
// runs where a GPU is present (bench/gpu/run.sh).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "host/comm/cuda_backend.h"
#include "host/model/cross_entropy.h"

namespace accel::model {
namespace {

// Before any test asks torch about CUDA (see host/comm/cuda_backend.h).
[[maybe_unused]] const bool cuda_backend_loaded = comm::load_cuda_backend();

// Autograd's loss and d(multiplier * loss) / d logits, as the trainer took
// them before: cross_entropy_loss of the float logits.
LossAndGrad through_autograd(const at::Tensor& logits, const at::Tensor& labels, double multiplier) {
  const at::Tensor leaf = logits.detach().requires_grad_(true);
  const at::Tensor loss = at::cross_entropy_loss(leaf.reshape({-1, leaf.size(-1)}).to(at::kFloat), labels.reshape(-1));
  const at::Tensor grad = torch::autograd::grad({loss * multiplier}, {leaf})[0];
  return {loss.detach(), grad};
}

void expect_same(const at::Tensor& logits, const at::Tensor& labels, double multiplier) {
  const LossAndGrad fused = cross_entropy_with_grad(logits, labels, multiplier);
  const LossAndGrad reference = through_autograd(logits, labels, multiplier);
  EXPECT_TRUE(at::equal(fused.loss, reference.loss)) << fused.loss << " vs " << reference.loss;
  ASSERT_EQ(fused.grad.sizes(), logits.sizes());
  ASSERT_EQ(fused.grad.scalar_type(), logits.scalar_type());
  const at::Tensor a = fused.grad.to(at::kFloat).cpu(), b = reference.grad.to(at::kFloat).cpu();
  // fp32: a few ulp of the largest entry; bf16: one rounding step.
  const double tolerance = logits.scalar_type() == at::kFloat ? 1e-6 : 1e-2;
  EXPECT_LE((a - b).abs().max().item<double>(), tolerance * b.abs().max().item<double>());
}

TEST(CrossEntropyWithGrad, IsAutogradsLossAndGradient) {
  at::manual_seed(3);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    // [T, B, V] as the head gives them, labels in [B, T] transposed to the
    // logits' row order.
    const at::Tensor logits = (at::randn({7, 3, 50}) * 4).to(dtype);
    const at::Tensor labels = at::randint(50, {3, 7}).t();
    expect_same(logits, labels, 1.0);
    expect_same(logits, labels, 0.37);  // a micro-batch's share, a loss scale
  }
}

TEST(CrossEntropyWithGrad, TakesAPaddedHeadsViewAndManySlices) {
  at::manual_seed(4);
  // 2,100 rows: three slices of 1,024 rows; the vocabulary narrowed from 64
  // columns to 61, as the CUDA head pads it.
  const at::Tensor padded = at::randn({2100, 64}) * 3;
  const at::Tensor logits = padded.narrow(1, 0, 61);
  const at::Tensor labels = at::randint(61, {2100});
  expect_same(logits, labels, 2.0);
}

TEST(CrossEntropyWithGrad, OnAGpuAsOnTheCpu) {
  if (!comm::load_cuda_backend() || !at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(5);
  const at::Tensor padded = (at::randn({2048, 50304}) * 2).to(at::kBFloat16).to(at::Device(at::kCUDA, 0));
  const at::Tensor logits = padded.narrow(1, 0, 50257);
  const at::Tensor labels = at::randint(50257, {2048}).to(logits.device());
  expect_same(logits, labels, 1.0);
}

}  // namespace
}  // namespace accel::model
