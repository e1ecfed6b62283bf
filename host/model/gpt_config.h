// Shapes of the built-in GPT-2-architecture model, and its named presets.
#pragma once

#include <cstdint>
#include <string>

#include "host/cli/run_config.h"

namespace accel::model {

struct GptConfig {
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 64;
  int64_t seq_len = 64;
  int64_t vocab_size = 256;

  bool operator==(const GptConfig&) const = default;
  std::string describe() const;  // "n_layer=2 n_head=4 ..."
};

// gpt-tiny: fast tests; gpt-small: GPT-2 small (124M parameters).
// Throws std::invalid_argument for an unknown preset or inconsistent shapes.
GptConfig make_gpt_config(const std::string& preset, const ModelOverrides& overrides);

// Parameter count, the tied head counted once.
int64_t count_parameters(const GptConfig& config);

}  // namespace accel::model
