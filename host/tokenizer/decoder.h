// The decoders of a tokenizer.json that today's BPE files use: ByteLevel
// (the byte alphabet back to bytes, invalid UTF-8 as U+FFFD), Metaspace,
// Replace of a string, ByteFallback (<0xNN> tokens back to bytes), Fuse,
// Strip, and a Sequence of them; null joins the tokens with spaces, as the
// `tokenizers` package does. Anything else (WordPiece, CTC, BPEDecoder, ...)
// is refused by name (std::invalid_argument).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace accel::tokenizer {

class Decoder {
 public:
  explicit Decoder(const nlohmann::json& config);

  // The text of a sequence of tokens (each UTF-8).
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum Kind { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip } kind;
    std::u32string pattern, content;  // Replace; Metaspace's replacement in pattern, Strip's character in content
    bool prepend = true;              // Metaspace: its prepend_scheme is not "never"
    int64_t start = 0, stop = 0;      // Strip
  };
  void add(const nlohmann::json& config);
  static std::vector<std::string> apply(const Step& step, std::vector<std::string> tokens);

  bool present_ = false;
  std::vector<Step> steps_;
};

}  // namespace accel::tokenizer
