// The rotary decoder's position embedding (model/llama.cpp): inverse
// frequencies of every rope_type transformers' ROPE_INIT_FUNCTIONS know
// (default, linear, dynamic, yarn, longrope, llama3; cli/run_config.h's
// RopeScaling), the attention factor that scales cos and sin (yarn,
// longrope), and cos/sin for a run of positions. Computed operation for
// operation as transformers does, in fp32 where it is, so the bits agree.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>

#include "host/cli/run_config.h"

namespace accel::model {

struct RotaryFrequencies {
  at::Tensor inverse;             // [rotary_dim / 2], fp32
  double attention_factor = 1.0;  // cos and sin are multiplied by it
};

// The frequencies of `scaling` for `rotary_dim` rotated features with base
// `theta`, when the longest sequence seen so far is `seq_len` positions
// (the largest position + 1): dynamic grows its base beyond
// original_max_position, longrope switches to long_factor there; the other
// types do not depend on it.
RotaryFrequencies rotary_frequencies(int64_t rotary_dim, double theta, const RopeScaling& scaling, int64_t seq_len,
                                     at::Device device);

// cos and sin [T, rotary_dim] of `positions` (T of them, fp32), multiplied by
// the attention factor, in fp32 as transformers' rotary embeddings give them.
std::pair<at::Tensor, at::Tensor> rotary_angles(const at::Tensor& positions, int64_t rotary_dim, double theta,
                                                const RopeScaling& scaling, int64_t seq_len);

}  // namespace accel::model
