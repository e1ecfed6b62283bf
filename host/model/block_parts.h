// What the GPT-2 (gpt.cpp) and Llama (llama.cpp) blocks share: the padded
// linears, RMSNorm, finding a block parameter by name suffix once, and
// appending a chunk's keys and values to the decoding cache. Internal to
// host/model.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "host/model/unit.h"

namespace accel::model {

// x W^T with W's rows (the output features) zero-padded to a multiple of
// `multiple` for the GEMM and the padding cut off the result: the same
// values, and autograd gives W the same gradient (the padding's is dropped).
inline at::Tensor padded_linear(const at::Tensor& x, const at::Tensor& weight, int64_t multiple) {
  const int64_t rows = weight.size(0);
  const int64_t pad = (multiple - rows % multiple) % multiple;
  if (pad == 0) return at::linear(x, weight);
  return at::linear(x, at::constant_pad_nd(weight, {0, 0, 0, pad})).narrow(-1, 0, rows);
}

// The head's vocabulary projection. On a CUDA device an odd vocabulary
// (GPT-2's 50,257) gives cuBLAS leading dimensions that are not 16-byte
// multiples, and it falls back to old kernels: on an H100 gpt-small's three
// head GEMMs ran CUTLASS sm75 kernels at about 100 TFLOP/s, the largest
// GEMMs of the step. Padded to 64 they take Hopper's (torch.compile pads
// likewise). The CPU keeps at::linear, whose bits the parity tests pin.
inline at::Tensor vocab_projection(const at::Tensor& x, const at::Tensor& weight) {
  return weight.is_cuda() ? padded_linear(x, weight, 64) : at::linear(x, weight);
}

// transformers' LlamaRMSNorm: the statistics in fp32, the product in the
// input's dtype.
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

// Gemma's RMSNorm (Gemma2RMSNorm): the weight as 1 + w, the product in
// fp32 and then cast to the input's dtype.
inline at::Tensor rms_norm_plus_one(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * (1.0 + weight.to(at::kFloat))).to(x.scalar_type());
}

// Gemma's scaled embeddings: x * sqrt(width), the factor a float32 tensor
// rounded to x's dtype first (Gemma2TextScaledWordEmbedding's embed_scale).
inline at::Tensor scaled_embeddings(const at::Tensor& x, int64_t width) {
  const at::Tensor factor = at::scalar_tensor(std::pow(static_cast<double>(width), 0.5),
                                              at::TensorOptions().dtype(at::kFloat).device(x.device()));
  return x * factor.to(x.scalar_type());
}

// The index in block.params() of the parameter whose name ends in `suffix`.
inline size_t param_index_by_suffix(const Unit& block, const char* suffix) {
  const auto& params = block.params();
  const size_t n = std::strlen(suffix);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].spec.name;
    if (name.size() > n && name.compare(name.size() - n, std::string::npos, suffix) == 0) return i;
  }
  throw std::logic_error(std::string("block has no parameter ") + suffix);
}

// Prepends the cached keys/values ([B, heads, past, D]) to this chunk's T
// and caches the result. Returns the attention mask: none with is_causal
// for a first chunk, none for one new query (it sees every key), else the
// bottom-right causal mask (SDPA's is_causal aligns top-left) with
// `causal` set false.
inline std::optional<at::Tensor> append_to_cache(at::Tensor& cached_keys, at::Tensor& cached_values, at::Tensor& keys,
                                                 at::Tensor& values, bool& causal) {
  const int64_t T = keys.size(2);
  if (cached_keys.defined()) {
    keys = at::cat({cached_keys, keys}, 2);
    values = at::cat({cached_values, values}, 2);
  }
  cached_keys = keys;
  cached_values = values;
  const int64_t past = keys.size(2) - T;
  if (past == 0) return std::nullopt;
  causal = false;
  if (T == 1) return std::nullopt;
  return at::ones({T, past + T}, at::TensorOptions().dtype(at::kBool).device(keys.device())).tril(past);
}

}  // namespace accel::model
