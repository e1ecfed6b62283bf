// What Gemma 2 and Gemma 3 (text) share on the bridge side: Llama's keys
// plus sandwich norms scaled by 1 + w, GeGLU with the tanh GELU, embeddings
// scaled by sqrt(hidden_size), the softmax scale query_pre_attn_scalar^-1/2,
// final logit soft-capping, and a sliding window on the layers transformers'
// layer_types names (or the family's alternation). Internal to the bridges.
#pragma once

#include "host/checkpoint/bridges/bridge_support.h"

namespace accel::checkpoint::bridge {

struct GemmaDefaults {
  const char* family;            // "Gemma2", in messages
  int64_t sliding_pattern;       // without layer_types: every pattern-th layer full (2 for Gemma 2, 6 for Gemma 3)
  double final_logit_softcap;    // the class's default when the key is absent (0: None)
  bool own_rope;                 // the caller reads the rotary keys (Gemma 3's per layer type)
  bool reads_pattern;            // "sliding_window_pattern" sets the pattern (Gemma 3; Gemma 2 ignores it)
};

// The shape's common keys; refuses by name what Gemma's block here is not.
ModelOverrides read_gemma_shape(const JsonFields& config, const GemmaDefaults& defaults);
// A shape the Gemma bridges may write: the common choices set.
bool gemma_block(const model::GptConfig& shape);
// config.json's common keys for `shape` (the caller adds its family's own).
nlohmann::json gemma_json(const model::GptConfig& shape, const HfBridge& bridge);
// A cap as config.json has it: null for none.
nlohmann::json optional_cap(double cap);

}  // namespace accel::checkpoint::bridge
