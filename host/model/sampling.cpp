// Greedy and top-k sampling through the key/value cache (see sampling.h).
#include "host/model/sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace accel::model {
namespace {

int64_t pick(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature == 0.0) return logits.argmax().item<int64_t>();
  at::Tensor scaled = logits.to(at::kFloat) / options.temperature;
  if (options.top_k > 0 && options.top_k < scaled.size(0)) {
    // Below the k-th largest logit: never sampled (nanoGPT's and
    // transformers' TopKLogitsWarper rule; ties at the k-th all stay).
    const at::Tensor kth = std::get<0>(scaled.topk(options.top_k)).select(0, options.top_k - 1);
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(at::softmax(scaled, 0), 1, /*replacement=*/false, generator).item<int64_t>();
}

}  // namespace

std::vector<int64_t> sample_continuation(const GptModel& model, const std::vector<int64_t>& prompt,
                                         const SamplingOptions& options) {
  const GptConfig& shape = model.config();
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty: give at least one token");
  for (int64_t id : prompt) {
    if (id < 0 || id >= shape.vocab_size) {
      throw std::invalid_argument("the prompt holds token id " + std::to_string(id) + ", outside the model's vocabulary of " +
                                  std::to_string(shape.vocab_size));
    }
  }
  const auto prompt_length = static_cast<int64_t>(prompt.size());
  // Subtracted, not added: prompt + a --max-new-tokens near INT64_MAX
  // wrapped negative and passed, then failed at seq_len with another message.
  if (prompt_length > shape.seq_len || options.max_new_tokens > shape.seq_len - prompt_length) {
    throw std::invalid_argument("the prompt's " + std::to_string(prompt_length) + " tokens and " +
                                std::to_string(options.max_new_tokens) + " new ones pass the model's context of " +
                                std::to_string(shape.seq_len) + " positions");
  }
  at::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  GptModel::KvCache cache;
  // The prompt in one pass, then one position per new token.
  at::Tensor input = at::tensor(prompt, at::kLong).unsqueeze(0).to(model.device());
  std::vector<int64_t> continuation;
  const RopeScaling& rope = shape.rope_scaling;
  while (static_cast<int64_t>(continuation.size()) < options.max_new_tokens) {
    if (rope.kind == RopeScaling::Kind::longrope && cache.length > 0 && cache.length <= rope.original_max_position &&
        cache.length + input.size(1) > rope.original_max_position) {
      // longrope's long factors from here on: the cached keys were turned by
      // the short ones, so the whole sequence is computed again (transformers'
      // Phi3ForCausalLM.prepare_inputs_for_generation).
      std::vector<int64_t> all = prompt;
      all.insert(all.end(), continuation.begin(), continuation.end());
      input = at::tensor(all, at::kLong).unsqueeze(0).to(model.device());
      cache = GptModel::KvCache{};
    }
    const at::Tensor logits = model.forward_cached(input, cache);  // [T, 1, V]
    const int64_t next = pick(logits.select(0, logits.size(0) - 1).select(0, 0).cpu(), options, generator);
    continuation.push_back(next);
    if (next == options.stop_token) break;
    input = at::full({1, 1}, next, at::TensorOptions().dtype(at::kLong).device(model.device()));
  }
  return continuation;
}

}  // namespace accel::model
