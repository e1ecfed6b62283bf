// Attention with its logits soft-capped (Gemma 2's attn_logit_softcapping):
// the scores computed explicitly, as transformers' eager_attention_forward
// does, because no fused or SDPA kernel caps them. Operation for operation
// as transformers (scale, then tanh(s / cap) * cap, then the mask, the
// softmax in fp32 cast back), so fp32 bits agree. Internal to host/model;
// a pure function, any thread.
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <optional>

namespace accel::model {

// q [B, H, Tq, D], k and v [B, H, Tk, D] (key/value heads already repeated);
// `mask` [Tq, Tk] true where a query sees a key, else `causal` masks
// top-left aligned (Tq == Tk), else every key is seen.
inline at::Tensor softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const std::optional<at::Tensor>& mask, bool causal, double scale,
                                       double softcap) {
  at::Tensor scores = at::matmul(q, k.transpose(2, 3)) * scale;
  scores = at::tanh(scores / softcap) * softcap;
  const double hidden = -std::numeric_limits<double>::infinity();
  if (mask) {
    scores = scores.masked_fill(mask->logical_not(), hidden);
  } else if (causal) {
    const at::Tensor future =
        at::ones({q.size(2), k.size(2)}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(future, hidden);
  }
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), v);
}

}  // namespace accel::model
