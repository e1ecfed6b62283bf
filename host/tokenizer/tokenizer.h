// A Hugging Face tokenizer.json read in C++ (no LibTorch, no Python): the
// BPE tokenizers of today's model families, encoding and decoding exactly
// as the `tokenizers` package does. Byte-level BPE (GPT-2, Llama 3,
// Qwen2/2.5/3, OLMo 2, SmolLM3, Granite) and SentencePiece-style BPE with
// byte fallback (Llama 2, Mistral, Gemma, Phi-3); the pipeline is
// `tokenizers`' own: added tokens split out, normalizer, pre-tokenizer,
// model, truncation, post-processor (TemplateProcessing's single sequence,
// ByteLevel);
// decoding maps ids to tokens and runs the decoder. Any part this does not
// implement (a WordPiece or Unigram model, an NFKC normalizer, a regex
// outside split_regex.h's subset, ...) is refused when the file is read:
// std::invalid_argument, one line naming the file and the part.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accel::tokenizer {

class Tokenizer {
 public:
  // A tokenizer.json, or a directory holding one.
  static Tokenizer from_file(const std::filesystem::path& file_or_dir);
  // The JSON text of a tokenizer.json; `name` prefixes errors.
  static Tokenizer from_json(const std::string& json, const std::string& name);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // UTF-8 text to ids (std::invalid_argument for invalid UTF-8);
  // add_special_tokens: the post-processor's, such as Llama's <s>.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const;

  // Ids to text; skip_special_tokens leaves out the special added tokens.
  // An id no token has is left out, as `tokenizers` leaves it out.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const;

  // One more than the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const;

  std::optional<int64_t> token_to_id(const std::string& token) const;

 private:
  struct Parts;
  explicit Tokenizer(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace accel::tokenizer
