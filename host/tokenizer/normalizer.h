// The normalizers of today's BPE tokenizer.json files: NFC (Qwen2, Qwen2.5,
// Qwen3), Prepend (Llama 2's "▁" before the text), Replace of a string
// (" " by "▁"), and a Sequence of them; null is none. Any other normalizer
// (NFKC, NFD, Lowercase, BertNormalizer, a Replace by regex, ...) is
// refused by name (std::invalid_argument).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace accel::tokenizer {

class Normalizer {
 public:
  explicit Normalizer(const nlohmann::json& config);

  std::u32string normalize(std::u32string text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum Kind { Nfc, Prepend, Replace } kind;
    std::u32string pattern, content;
  };
  void add(const nlohmann::json& config);

  std::vector<Step> steps_;
};

// Every occurrence of pattern (not empty) in text replaced by content.
std::u32string replace_all(std::u32string text, const std::u32string& pattern, const std::u32string& content);

}  // namespace accel::tokenizer
