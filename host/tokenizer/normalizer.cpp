// The tokenizer's normalizers (see normalizer.h), as `tokenizers`'
// normalizers/unicode.rs, prepend.rs and replace.rs apply them.
#include "host/tokenizer/normalizer.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "host/tokenizer/json_fields.h"
#include "host/tokenizer/nfc.h"
#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {

std::u32string replace_all(std::u32string text, const std::u32string& pattern, const std::u32string& content) {
  if (pattern.empty()) return text;
  std::u32string out;
  size_t pos = 0;
  for (size_t found; (found = text.find(pattern, pos)) != std::u32string::npos; pos = found + pattern.size()) {
    out.append(text, pos, found - pos);
    out += content;
  }
  out.append(text, pos, std::u32string::npos);
  return out;
}

Normalizer::Normalizer(const nlohmann::json& config) {
  if (!config.is_null()) add(config);
}

void Normalizer::add(const nlohmann::json& config) {
  const std::string type = type_of(config, "normalizer");
  if (type == "Sequence") {
    for (const auto& step : array_field(config, "normalizers", "normalizer")) add(step);
  } else if (type == "NFC") {
    steps_.push_back({Step::Nfc, {}, {}});
  } else if (type == "Prepend") {
    steps_.push_back({Step::Prepend, {}, utf8_to_u32(string_field(config, "prepend", "normalizer Prepend"))});
  } else if (type == "Replace") {
    steps_.push_back({Step::Replace, string_pattern(config, "normalizer Replace"),
                      utf8_to_u32(string_field(config, "content", "normalizer Replace"))});
  } else {
    throw std::invalid_argument("the normalizer " + type +
                                " is not supported (accel-host reads NFC, Prepend, Replace of a string and Sequence)");
  }
}

std::u32string Normalizer::normalize(std::u32string text) const {
  for (const Step& step : steps_) {
    if (step.kind == Step::Nfc) {
      text = nfc(text);
    } else if (step.kind == Step::Prepend) {
      if (!text.empty()) text = step.content + text;
    } else {
      text = replace_all(std::move(text), step.pattern, step.content);
    }
  }
  return text;
}

}  // namespace accel::tokenizer
