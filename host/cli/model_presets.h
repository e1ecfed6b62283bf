// The names --model takes (model/gpt_config.h builds each), in the order
// --help lists them: one list for the option's help, its check and the
// model's own refusal of an unknown name. Header-only, constant data.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>

namespace accel {

inline constexpr const char* kModelPresets[] = {
    "gpt-tiny",    "gpt-small",  "llama-tiny", "llama-small",  "moe-tiny",
    "moe-small",   "llama3-tiny", "qwen2-tiny", "qwen3-tiny", "mistral-tiny",
    "gemma2-tiny", "gemma3-tiny", "olmo2-tiny",  "olmo3-tiny", "phi3-tiny",  "smollm3-tiny", "granite-tiny"};

inline bool is_model_preset(const std::string& name) {
  return std::find(std::begin(kModelPresets), std::end(kModelPresets), name) != std::end(kModelPresets);
}

// "a, b, c" (or "a|b|c" with separator "|").
inline std::string model_preset_list(const char* separator = ", ") {
  std::string text;
  for (const char* name : kModelPresets) text += (text.empty() ? "" : separator) + std::string(name);
  return text;
}

}  // namespace accel
