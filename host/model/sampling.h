// Sampling continuations from a model (accel-host generate): greedy or
// temperature / top-k sampling, one new token at a time through the model's
// key/value cache, so each step costs one position, not the whole prefix.
//
// Thread-safety: one call at a time per model (the cache is per call).
#pragma once

#include <cstdint>
#include <vector>

#include "host/model/gpt.h"

namespace accel::model {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0: greedy (argmax, the first on ties as torch.argmax)
  int64_t top_k = 0;         // keep the k most likely tokens before sampling; 0: all
  uint64_t seed = 1234;      // the same seed and options give the same tokens
  int64_t stop_token = -1;   // ends the continuation once generated (kept); < 0: none
};

// The tokens that follow `prompt` (ids below the vocabulary, at least one),
// at most max_new_tokens. Throws std::invalid_argument when the prompt is
// empty, holds an id outside the vocabulary, or prompt plus continuation
// would pass the model's seq_len (its learned positions end there).
std::vector<int64_t> sample_continuation(const GptModel& model, const std::vector<int64_t>& prompt,
                                         const SamplingOptions& options);

}  // namespace accel::model
