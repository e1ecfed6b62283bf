// The pre-tokenizers of a tokenizer.json that today's BPE files use, each a
// step that splits (and may rewrite) the pieces of text the model then
// tokenizes one by one: ByteLevel (GPT-2's regex and byte alphabet), Split
// by a regex (split_regex.h) or a string with any of its five behaviours,
// Metaspace (" " as "▁", the prefix "▁" always, on the first piece or
// never), Digits, and a Sequence of them; null is none. Anything else
// (Whitespace, BertPreTokenizer, Punctuation, an inverted Split, ...) is
// refused by name (std::invalid_argument).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "host/tokenizer/split_regex.h"

namespace accel::tokenizer {

// A piece of the text on its way to the model; at_origin: it starts where
// the whole input starts (Metaspace's prepend_scheme "first" asks).
struct Piece {
  std::u32string text;
  bool at_origin = false;
};

class PreTokenizer {
 public:
  explicit PreTokenizer(const nlohmann::json& config);

  // Replaces each piece by its parts, empty parts dropped.
  void pre_tokenize(std::vector<Piece>& pieces) const;

 private:
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  struct Step {
    enum Kind { ByteLevel, Split, Metaspace, Digits } kind;
    std::shared_ptr<const SplitRegex> regex;  // ByteLevel (use_regex), Split by a regex
    std::u32string literal;                   // Split by a string; Metaspace's replacement
    Behavior behavior = Behavior::Isolated;
    bool flag = false;  // ByteLevel add_prefix_space; Metaspace split; Digits individual_digits
    enum Prepend { Always, First, Never } prepend = Always;
  };
  void add(const nlohmann::json& config);
  void apply(const Step& step, std::vector<Piece>& pieces) const;

  std::vector<Step> steps_;
};

}  // namespace accel::tokenizer
