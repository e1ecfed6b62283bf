// The tokenizer's pre-tokenizers (see pre_tokenizer.h), following
// `tokenizers`' pre_tokenizers/{byte_level,split,metaspace,digits}.rs and
// the split behaviours of NormalizedString::split.
#include "host/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "host/tokenizer/byte_level.h"
#include "host/tokenizer/json_fields.h"
#include "host/tokenizer/normalizer.h"
#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Span = std::pair<size_t, size_t>;

// The spans of every occurrence of a string.
std::vector<Span> find_literal(const std::u32string& text, const std::u32string& literal) {
  std::vector<Span> spans;
  if (literal.empty()) return spans;
  for (size_t found = 0; (found = text.find(literal, found)) != std::u32string::npos; found += literal.size()) {
    spans.emplace_back(found, found + literal.size());
  }
  return spans;
}

// Consecutive runs of characters that satisfy a predicate, one span per
// character when `each` is set.
template <typename Predicate>
std::vector<Span> find_chars(const std::u32string& text, bool each, Predicate matches) {
  std::vector<Span> spans;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!matches(text[i])) continue;
    if (!each && !spans.empty() && spans.back().second == i) {
      spans.back().second = i + 1;
    } else {
      spans.emplace_back(i, i + 1);
    }
  }
  return spans;
}

}  // namespace

PreTokenizer::PreTokenizer(const nlohmann::json& config) {
  if (!config.is_null()) add(config);
}

void PreTokenizer::add(const nlohmann::json& config) {
  const std::string type = type_of(config, "pre_tokenizer");
  const std::string part = "pre_tokenizer " + type;
  Step step{};
  if (type == "Sequence") {
    for (const auto& inner : array_field(config, "pretokenizers", part)) add(inner);
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::ByteLevel;
    step.flag = bool_field(config, "add_prefix_space", true, part);
    if (bool_field(config, "use_regex", true, part)) step.regex = std::make_shared<SplitRegex>(kGpt2Pattern);
  } else if (type == "Split") {
    step.kind = Step::Split;
    if (bool_field(config, "invert", false, part))
      throw std::invalid_argument(part + " with invert: true is not supported");
    const nlohmann::json& pattern = config.at("pattern");
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.regex = std::make_shared<SplitRegex>(pattern["Regex"].get<std::string>());
    } else {
      step.literal = string_pattern(config, part);
    }
    const std::string& behavior = string_field(config, "behavior", part);
    if (behavior == "Removed") step.behavior = Behavior::Removed;
    else if (behavior == "Isolated") step.behavior = Behavior::Isolated;
    else if (behavior == "MergedWithPrevious") step.behavior = Behavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = Behavior::MergedWithNext;
    else if (behavior == "Contiguous") step.behavior = Behavior::Contiguous;
    else throw std::invalid_argument(part + ": the behavior '" + behavior + "' is unknown");
  } else if (type == "Metaspace") {
    step.kind = Step::Metaspace;
    step.literal = utf8_to_u32(string_field(config, "replacement", part));
    if (step.literal.size() != 1) throw std::invalid_argument(part + "'s replacement is not one character");
    step.flag = bool_field(config, "split", true, part);
    const auto scheme = config.find("prepend_scheme");
    if (scheme == config.end() || scheme->is_null()) {  // files older than tokenizers 0.15
      step.prepend = bool_field(config, "add_prefix_space", true, part) ? Step::Always : Step::Never;
    } else {
      const std::string& name = string_field(config, "prepend_scheme", part);
      if (name == "always") step.prepend = Step::Always;
      else if (name == "first") step.prepend = Step::First;
      else if (name == "never") step.prepend = Step::Never;
      else throw std::invalid_argument(part + ": the prepend_scheme '" + name + "' is unknown");
    }
  } else if (type == "Digits") {
    step.kind = Step::Digits;
    step.flag = bool_field(config, "individual_digits", false, part);
  } else {
    throw std::invalid_argument(
        "the pre_tokenizer " + type +
        " is not supported (accel-host reads ByteLevel, Split, Metaspace, Digits and Sequence)");
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  for (const Step& step : steps_) apply(step, pieces);
}

void PreTokenizer::apply(const Step& step, std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    std::u32string& text = piece.text;
    Behavior behavior = step.behavior;
    std::vector<Span> spans;
    switch (step.kind) {
      case Step::ByteLevel:
        if (step.flag && (text.empty() || text.front() != U' ')) text.insert(text.begin(), U' ');
        if (step.regex) spans = step.regex->find_all(text);
        behavior = Behavior::Isolated;
        break;
      case Step::Split:
        spans = step.regex ? step.regex->find_all(text) : find_literal(text, step.literal);
        break;
      case Step::Metaspace: {
        const char32_t mark = step.literal[0];
        text = replace_all(std::move(text), U" ", step.literal);
        const bool prepend = step.prepend == Step::Always || (step.prepend == Step::First && piece.at_origin);
        if (prepend && (text.empty() || text.front() != mark)) text.insert(text.begin(), mark);
        if (step.flag) spans = find_literal(text, step.literal);
        behavior = Behavior::MergedWithNext;
        break;
      }
      case Step::Digits:
        spans = find_chars(text, step.flag, is_number);
        behavior = step.flag ? Behavior::Isolated : Behavior::Contiguous;
        break;
    }
    // NormalizedString::split: the matches and the gaps between them, in
    // order, then folded by the behaviour.
    std::vector<std::pair<Span, bool>> parts;
    size_t pos = 0;
    for (const Span& span : spans) {
      if (span.first > pos) parts.push_back({{pos, span.first}, false});
      parts.push_back({span, true});
      pos = span.second;
    }
    if (pos < text.size()) parts.push_back({{pos, text.size()}, false});
    std::vector<Span> kept;
    bool previous_match = false;
    if (behavior == Behavior::MergedWithNext) {
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous_match && !kept.empty()) kept.back().first = it->first.first;
        else kept.push_back(it->first);
        previous_match = it->second;
      }
      std::reverse(kept.begin(), kept.end());
    } else {
      for (const auto& [span, is_match] : parts) {
        if (behavior == Behavior::Removed && is_match) continue;
        const bool merge = (behavior == Behavior::MergedWithPrevious && is_match && !previous_match) ||
                           (behavior == Behavior::Contiguous && is_match == previous_match);
        if (merge && !kept.empty()) kept.back().second = span.second;
        else kept.push_back(span);
        previous_match = is_match;
      }
    }
    for (const Span& span : kept) {
      if (span.second == span.first) continue;
      std::u32string part = text.substr(span.first, span.second - span.first);
      if (step.kind == Step::ByteLevel) part = bytes_to_chars(u32_to_utf8(part));
      out.push_back({std::move(part), piece.at_origin && span.first == 0});
    }
  }
  pieces = std::move(out);
}

}  // namespace accel::tokenizer
