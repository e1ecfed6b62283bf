// The tokenizer's decoders (see decoder.h), each a decode_chain of
// `tokenizers`' decoders/*.rs: a list of tokens in, a list of strings out,
// the last step's strings joined.
#include "host/tokenizer/decoder.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "host/tokenizer/byte_level.h"
#include "host/tokenizer/json_fields.h"
#include "host/tokenizer/normalizer.h"
#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

// The byte of a "<0xNN>" token (u8::from_str_radix of its two digits).
std::optional<unsigned char> byte_token(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                               : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + static_cast<unsigned>(digit);
  }
  return static_cast<unsigned char>(value);
}

}  // namespace

Decoder::Decoder(const nlohmann::json& config) {
  if (config.is_null()) return;
  present_ = true;
  add(config);
}

void Decoder::add(const nlohmann::json& config) {
  const std::string type = type_of(config, "decoder");
  const std::string part = "decoder " + type;
  Step step{};
  if (type == "Sequence") {
    for (const auto& inner : array_field(config, "decoders", part)) add(inner);
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::ByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Step::Metaspace;
    step.pattern = utf8_to_u32(string_field(config, "replacement", part));
    const auto scheme = config.find("prepend_scheme");
    step.prepend = (scheme == config.end() || scheme->is_null())
                       ? bool_field(config, "add_prefix_space", true, part)
                       : string_field(config, "prepend_scheme", part) != "never";
  } else if (type == "Replace") {
    step.kind = Step::Replace;
    step.pattern = string_pattern(config, part);
    step.content = utf8_to_u32(string_field(config, "content", part));
  } else if (type == "ByteFallback") {
    step.kind = Step::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Fuse;
  } else if (type == "Strip") {
    step.kind = Step::Strip;
    step.content = utf8_to_u32(string_field(config, "content", part));
    if (step.content.size() != 1) throw std::invalid_argument(part + "'s content is not one character");
    step.start = int_field(config, "start", part);
    step.stop = int_field(config, "stop", part);
  } else {
    throw std::invalid_argument("the decoder " + type + " is not supported (accel-host reads ByteLevel, Metaspace, "
                                "Replace, ByteFallback, Fuse, Strip and Sequence)");
  }
  steps_.push_back(std::move(step));
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string text;
  if (!present_) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const Step& step : steps_) tokens = apply(step, std::move(tokens));
  for (const std::string& token : tokens) text += token;
  return text;
}

std::vector<std::string> Decoder::apply(const Step& step, std::vector<std::string> tokens) {
  std::vector<std::string> out;
  switch (step.kind) {
    case Step::ByteLevel: {
      // A token with a character outside the byte alphabet keeps its own bytes.
      std::string bytes;
      for (const std::string& token : tokens) {
        std::string mapped;
        bool all = true;
        for (char32_t c : utf8_to_u32(token)) {
          const auto byte = char_to_byte(c);
          if (!byte) {
            all = false;
            break;
          }
          mapped.push_back(static_cast<char>(*byte));
        }
        bytes += all ? mapped : token;
      }
      out.push_back(utf8_lossy(bytes));
      break;
    }
    case Step::Metaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::u32string text;
        for (char32_t c : utf8_to_u32(tokens[i])) {
          if (c != step.pattern[0]) text.push_back(c);
          else if (i != 0 || !step.prepend) text.push_back(U' ');  // the first token loses every replacement, as there
        }
        out.push_back(u32_to_utf8(text));
      }
      break;
    case Step::Replace:
      for (const std::string& token : tokens)
        out.push_back(u32_to_utf8(replace_all(utf8_to_u32(token), step.pattern, step.content)));
      break;
    case Step::ByteFallback: {
      std::string pending;
      const auto flush = [&] {
        if (pending.empty()) return;
        if (is_valid_utf8(pending)) out.push_back(pending);
        else for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
        pending.clear();
      };
      for (std::string& token : tokens) {
        if (const auto byte = byte_token(token)) {
          pending.push_back(static_cast<char>(*byte));
          continue;
        }
        flush();
        out.push_back(std::move(token));
      }
      flush();
      break;
    }
    case Step::Fuse: {
      std::string joined;
      for (const std::string& token : tokens) joined += token;
      out.push_back(std::move(joined));
      break;
    }
    case Step::Strip:
      for (const std::string& token : tokens) {
        const std::u32string chars = utf8_to_u32(token);
        size_t begin = 0, end = chars.size();
        while (begin < static_cast<size_t>(step.start) && begin < end && chars[begin] == step.content[0]) ++begin;
        for (int64_t i = 0; i < step.stop && end > begin && chars[end - 1] == step.content[0]; ++i) --end;
        out.push_back(u32_to_utf8(chars.substr(begin, end - begin)));
      }
      break;
  }
  return out;
}

}  // namespace accel::tokenizer
