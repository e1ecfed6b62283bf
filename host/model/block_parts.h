// What the GPT-2 (gpt.cpp) and Llama (llama.cpp) blocks share: finding a
// block parameter by name suffix once, and appending a chunk's keys and
// values to the decoding cache. Internal to host/model.
#pragma once

#include <ATen/ATen.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "host/model/unit.h"

namespace accel::model {

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
