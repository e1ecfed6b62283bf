// The bounds a stored model shape is read against: trainer_state.json
// (host/checkpoint/trainer_state.cpp) and a Hugging Face config.json
// (host/checkpoint/hf_config.cpp) share them, so a model loaded from one
// can be saved and resumed through the other.
#pragma once

#include <cstdint>

namespace accel::model {

// The largest dimension (layers, heads, width, sequence, vocabulary, MLP
// width) a stored shape may name: far above any real model, and a product
// of two stays far below int64 overflow.
inline constexpr int64_t kMaxModelDimension = int64_t{1} << 32;

}  // namespace accel::model
