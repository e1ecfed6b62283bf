// Added tokens (see added_tokens.h), following `tokenizers`'
// tokenizer/added_vocabulary.rs (find_matches, extract_and_normalize).
#include "host/tokenizer/added_tokens.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "host/tokenizer/json_fields.h"
#include "host/tokenizer/normalizer.h"
#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {

AddedTokens::AddedTokens(const nlohmann::json& list, const Normalizer& normalizer) {
  if (list.is_null()) return;
  if (!list.is_array()) throw std::invalid_argument("added_tokens is not a list");
  for (const auto& entry : list) {
    const std::string part = "an added token";
    AddedToken token;
    token.id = int_field(entry, "id", part);
    if (token.id < 0) throw std::invalid_argument("an added token's id is negative");
    token.content = utf8_to_u32(string_field(entry, "content", part));
    token.lstrip = bool_field(entry, "lstrip", false, part);
    token.rstrip = bool_field(entry, "rstrip", false, part);
    token.normalized = bool_field(entry, "normalized", false, part);
    token.special = bool_field(entry, "special", false, part);
    if (bool_field(entry, "single_word", false, part)) {
      throw std::invalid_argument("the added token '" + u32_to_utf8(token.content) +
                                  "' has single_word: true, which is not supported");
    }
    by_id_[token.id] = tokens_.size();
    max_id_ = std::max(max_id_, token.id);
    token.matched = token.normalized ? normalizer.normalize(token.content) : token.content;
    (token.normalized ? normalized_ : raw_).push_back({token.matched, tokens_.size()});
    tokens_.push_back(std::move(token));
  }
}

const AddedToken* AddedTokens::by_id(int64_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int64_t> AddedTokens::id_of(const std::string& content) const {
  const std::u32string wanted = utf8_to_u32(content);
  for (const AddedToken& token : tokens_) {
    if (token.content == wanted) return token.id;
  }
  return std::nullopt;
}

std::vector<Segment> AddedTokens::split(const Piece& piece, const std::vector<Pattern>& patterns) const {
  const std::u32string& text = piece.text;
  std::vector<Segment> out;
  size_t start_offset = 0;
  const auto text_segment = [&](size_t begin, size_t end) {
    out.push_back({std::nullopt, {text.substr(begin, end - begin), piece.at_origin && begin == 0}});
  };
  for (size_t pos = 0; pos < text.size();) {
    // Leftmost-longest: the longest pattern starting at the first position where one starts.
    const Pattern* found = nullptr;
    for (const Pattern& pattern : patterns) {
      if (!pattern.text.empty() && text.compare(pos, pattern.text.size(), pattern.text) == 0 &&
          (!found || pattern.text.size() > found->text.size())) {
        found = &pattern;
      }
    }
    if (!found) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[found->token];
    size_t start = pos, stop = pos + found->text.size();
    pos = stop;
    if (token.lstrip) {
      size_t begin = start;
      while (begin > 0 && is_whitespace(text[begin - 1])) --begin;
      start = std::max(begin, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size() && is_whitespace(text[stop])) ++stop;
    }
    if (start_offset < start) text_segment(start_offset, start);
    out.push_back({token.id, {}});
    start_offset = stop;  // the search goes on after the match itself, as aho-corasick's find_iter does
  }
  if (start_offset < text.size()) text_segment(start_offset, text.size());
  return out;
}

std::vector<Segment> AddedTokens::extract_and_normalize(const std::u32string& text,
                                                        const Normalizer& normalizer) const {
  std::vector<Segment> out;
  for (Segment& raw : split({text, true}, raw_)) {
    if (raw.id) {
      out.push_back(std::move(raw));
      continue;
    }
    raw.text.text = normalizer.normalize(std::move(raw.text.text));
    for (Segment& segment : split(raw.text, normalized_)) {
      if (segment.id || !segment.text.text.empty()) out.push_back(std::move(segment));
    }
  }
  return out;
}

}  // namespace accel::tokenizer
