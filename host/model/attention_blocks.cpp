// Attention blocks with their log-sum-exp (see attention_blocks.h).
#include "host/model/attention_blocks.h"

#include <ATen/ops/_scaled_dot_product_efficient_attention.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>

namespace accel::model {
namespace {

// Grouped-query attention: key/value heads repeated for the kernels, which
// want one per query head; their gradients summed back over each group.
at::Tensor expand_heads(const at::Tensor& kv, int64_t heads) {
  const int64_t groups = heads / kv.size(1);
  return groups == 1 ? kv : kv.repeat_interleave(groups, 1);
}
at::Tensor fold_heads(const at::Tensor& grad, int64_t kv_heads) {
  const int64_t groups = grad.size(1) / kv_heads;
  if (groups == 1) return grad;
  return grad.unflatten(1, {kv_heads, groups}).sum(2);
}

// The memory-efficient kernel stores the log-sum-exp padded to a multiple
// of 32 queries.
constexpr int64_t kCudaLseAlign = 32;

}  // namespace

AttentionBlock attention_block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const int64_t H = q.size(1);
  const at::Tensor keys = expand_heads(k, H), values = expand_heads(v, H);
  if (q.is_cuda()) {
    auto [out, lse, seed, offset] = at::_scaled_dot_product_efficient_attention(
        q, keys, values, std::nullopt, /*compute_log_sumexp=*/true, /*dropout_p=*/0.0, causal);
    return {out, lse.narrow(2, 0, q.size(2))};
  }
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, keys, values, /*dropout_p=*/0.0, causal);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_block_backward(const at::Tensor& grad_out, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        bool causal) {
  const int64_t H = q.size(1), KV = k.size(1);
  const at::Tensor keys = expand_heads(k, H), values = expand_heads(v, H);
  at::Tensor dq, dk, dv;
  if (q.is_cuda()) {
    const int64_t Tq = q.size(2);
    const int64_t padded = (Tq + kCudaLseAlign - 1) / kCudaLseAlign * kCudaLseAlign;
    const at::Tensor lse_padded = at::constant_pad_nd(lse.contiguous(), {0, padded - Tq});
    const at::Tensor no_rng = at::zeros({}, q.options().dtype(at::kLong));  // dropout 0: unused
    std::tie(dq, dk, dv, std::ignore) = at::_scaled_dot_product_efficient_attention_backward(
        grad_out.contiguous(), q, keys, values, at::Tensor(), out.contiguous(), lse_padded, no_rng, no_rng,
        /*dropout_p=*/0.0, {true, true, true, false}, causal);
  } else {
    std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out.contiguous(), q, keys, values, out.contiguous(), lse.contiguous(), /*dropout_p=*/0.0, causal);
  }
  return {dq, fold_heads(dk, KV), fold_heads(dv, KV)};
}

void merge_attention_block(at::Tensor& out, at::Tensor& lse, const AttentionBlock& block) {
  const at::Tensor block_out = block.out.to(at::kFloat);
  if (!out.defined()) {
    out = block_out.clone();
    lse = block.lse.to(at::kFloat).clone();
    return;
  }
  // out = out * exp(lse - merged) + block * exp(block_lse - merged)
  const at::Tensor merged = at::logaddexp(lse, block.lse);
  out.mul_((lse - merged).exp_().unsqueeze(-1)).add_(block_out * (block.lse - merged).exp_().unsqueeze(-1));
  lse.copy_(merged);
}

}  // namespace accel::model
