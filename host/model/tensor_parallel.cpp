// Megatron's tensor-parallel operators (see tensor_parallel.h).
#include "host/model/tensor_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <stdexcept>

namespace accel::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels as an address in saved_data: the model (and its group)
// outlives every graph it builds.
int64_t address_of(const TensorGroup& group) { return reinterpret_cast<int64_t>(&group); }
const TensorGroup& group_at(AutogradContext* ctx) {
  return *reinterpret_cast<const TensorGroup*>(ctx->saved_data["group"].toInt());
}

at::Tensor all_reduced(const at::Tensor& x, const TensorGroup& group, bool max = false) {
  at::Tensor out = x.contiguous().clone();
  group.all_reduce(out, max);
  return out;
}

struct CopyToRegion : public torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], group_at(ctx)), at::Tensor()};
  }
};

struct ReduceFromRegion : public torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    return all_reduced(x, *reinterpret_cast<const TensorGroup*>(group));
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct GatherFromSequence : public torch::autograd::Function<GatherFromSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return reinterpret_cast<const TensorGroup*>(group)->all_gather(x.contiguous());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_at(ctx).reduce_scatter(grads[0].contiguous()), at::Tensor()};
  }
};

struct ReduceScatterToSequence : public torch::autograd::Function<ReduceScatterToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return reinterpret_cast<const TensorGroup*>(group)->reduce_scatter(x.contiguous());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_at(ctx).all_gather(grads[0].contiguous()), at::Tensor()};
  }
};

}  // namespace

at::Tensor gather_from_sequence_region(const at::Tensor& x, const TensorGroup& group) {
  if (!group.active()) return x;
  return GatherFromSequence::apply(x, address_of(group));
}

at::Tensor reduce_scatter_to_sequence_region(const at::Tensor& x, const TensorGroup& group) {
  if (!group.active()) return x;
  return ReduceScatterToSequence::apply(x, address_of(group));
}

at::Tensor copy_to_tensor_region(const at::Tensor& x, const TensorGroup& group) {
  if (!group.active()) return x;
  return CopyToRegion::apply(x, address_of(group));
}

at::Tensor reduce_from_tensor_region(const at::Tensor& x, const TensorGroup& group) {
  if (!group.active()) return x;
  return ReduceFromRegion::apply(x, address_of(group));
}

at::Tensor vocab_parallel_embedding(const at::Tensor& weight, const at::Tensor& tokens, int64_t vocab_start,
                                    const TensorGroup& group) {
  const int64_t rows = weight.size(0);
  const at::Tensor outside = (tokens < vocab_start).logical_or(tokens >= vocab_start + rows);
  const at::Tensor local = (tokens - vocab_start).masked_fill(outside, 0);
  const at::Tensor partial = at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
  if (group.sequence_split()) return reduce_scatter_to_sequence_region(partial, group);
  return reduce_from_tensor_region(partial, group);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t vocab_size, const TensorGroup& group) {
  const int64_t local_vocab = local_logits.size(-1);
  at::Tensor logits = local_logits.reshape({-1, local_vocab}).to(at::kFloat);
  const at::Tensor flat_targets = targets.reshape({-1});
  // Padded classes (global index >= vocab_size) take no probability.
  const int64_t real = std::max<int64_t>(0, std::min(local_vocab, vocab_size - vocab_start));
  if (real < local_vocab) {
    const at::Tensor padded = at::arange(local_vocab, at::TensorOptions().device(logits.device())) >= real;
    logits = logits.masked_fill(padded, -std::numeric_limits<float>::infinity());
  }
  // The global row maximum, for a stable softmax; a constant for autograd
  // (it cancels out of the loss, as in torch's log_softmax).
  at::Tensor row_max = std::get<0>(logits.detach().max(-1, /*keepdim=*/true)).contiguous();
  if (group.active()) group.all_reduce(row_max, /*max=*/true);
  const at::Tensor shifted = logits - row_max;
  // Each target's logit lives on exactly one rank: the others contribute 0.
  const at::Tensor outside = (flat_targets < vocab_start).logical_or(flat_targets >= vocab_start + local_vocab);
  const at::Tensor local_target = (flat_targets - vocab_start).masked_fill(outside, 0);
  const at::Tensor picked = shifted.gather(1, local_target.unsqueeze(1)).squeeze(1).masked_fill(outside, 0.0);
  const at::Tensor target_logit = reduce_from_tensor_region(picked, group);
  const at::Tensor sum_exp = reduce_from_tensor_region(shifted.exp().sum(-1), group);
  return (sum_exp.log() - target_logit).mean();
}

}  // namespace accel::model
