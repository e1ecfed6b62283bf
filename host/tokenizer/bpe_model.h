// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE"}):
// a word's characters merged pair by pair, the lowest-ranked merge first
// and the leftmost among equals, exactly as the `tokenizers` package's
// Word::merge_all does it; characters outside the vocabulary become
// <0xNN> byte tokens (byte_fallback, SentencePiece's BPE) or the unknown
// token (fused with the one before it under fuse_unk); ignore_merges
// (Llama 3) takes a word found whole in the vocabulary as one token.
// Merges come as "a b" strings or ["a", "b"] pairs. Dropout, a
// continuing-subword prefix and an end-of-word suffix are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace accel::tokenizer {

class BpeModel {
 public:
  // std::invalid_argument naming the field that cannot be read.
  explicit BpeModel(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word (UTF-8).
  void tokenize(const std::string& word, std::vector<int64_t>& ids) const;

  std::optional<int64_t> token_to_id(const std::string& token) const;
  const std::string* id_to_token(int64_t id) const;
  int64_t max_id() const { return max_id_; }

 private:
  void merge_all(std::vector<int64_t>& ids, std::vector<size_t>& lengths) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> tokens_;  // by id (a map: a file's ids need not be dense)
  int64_t max_id_ = -1;
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;  // (left, right) -> (rank, new id)
  std::optional<std::string> unk_token_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace accel::tokenizer
