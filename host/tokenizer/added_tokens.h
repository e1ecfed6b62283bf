// The added tokens of a tokenizer.json ("added_tokens": special tokens such
// as <|endoftext|>, <s>, <start_of_turn>): found in the text before the
// model sees it, leftmost and longest first, as the `tokenizers` package's
// AddedVocabulary finds them; those with "normalized": false in the raw
// text, the others in the normalized text. lstrip/rstrip take the
// whitespace beside a match into the token; single_word is refused.
// Decoding gives the decoder a normalized token's normalized content, as
// `tokenizers` does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "host/tokenizer/pre_tokenizer.h"

namespace accel::tokenizer {

class Normalizer;

struct AddedToken {
  int64_t id = 0;
  std::u32string content;
  std::u32string matched;  // content, or its normalized form when normalized (also what decoding sees)
  bool lstrip = false, rstrip = false, normalized = false, special = false;
};

// A part of the input: an added token's id, or text for the model.
struct Segment {
  std::optional<int64_t> id;
  Piece text;
};

class AddedTokens {
 public:
  AddedTokens(const nlohmann::json& list, const Normalizer& normalizer);

  // The text split around the added tokens, text segments normalized.
  std::vector<Segment> extract_and_normalize(const std::u32string& text, const Normalizer& normalizer) const;

  const AddedToken* by_id(int64_t id) const;
  std::optional<int64_t> id_of(const std::string& content) const;
  int64_t max_id() const { return max_id_; }

 private:
  struct Pattern {
    std::u32string text;
    size_t token;  // an index into tokens_
  };
  std::vector<Segment> split(const Piece& piece, const std::vector<Pattern>& patterns) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int64_t, size_t> by_id_;
  std::vector<Pattern> raw_, normalized_;
  int64_t max_id_ = -1;
};

}  // namespace accel::tokenizer
