// The BPE model (see bpe_model.h), following `tokenizers`'
// models/bpe/model.rs (merge_word) and word.rs (merge_all) step by step,
// quirks included: byte-fallback tokens go in before a pending unknown.
#include "host/tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "host/util/strformat.h"

namespace accel::tokenizer {
namespace {

uint64_t pair_key(int64_t left, int64_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
}

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument("model: " + what); }

std::pair<std::string, std::string> merge_parts(const nlohmann::json& merge) {
  if (merge.is_string()) {
    const std::string& text = merge.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      refuse("the merge '" + text + "' is not two tokens separated by one space");
    }
    return {text.substr(0, space), text.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  refuse("a merge is neither \"a b\" nor [\"a\", \"b\"]: " + merge.dump());
}

// Rust's format!("<{b:#04X}>"): "<0x0A>".
std::string byte_token(unsigned char b) { return strformat("<0x%02X>", b); }

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model) {
  const auto flag = [&](const char* key) {
    const auto it = model.find(key);
    if (it == model.end() || it->is_null()) return false;
    if (!it->is_boolean()) refuse(std::string(key) + " is not true or false");
    return it->get<bool>();
  };
  const auto empty_or_null = [&](const char* key) {
    const auto it = model.find(key);
    return it == model.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
  };
  if (!empty_or_null("dropout")) refuse("BPE dropout is not supported (sampled tokenization)");
  if (!empty_or_null("continuing_subword_prefix")) refuse("BPE continuing_subword_prefix is not supported");
  if (!empty_or_null("end_of_word_suffix")) refuse("BPE end_of_word_suffix is not supported");
  fuse_unk_ = flag("fuse_unk");
  byte_fallback_ = flag("byte_fallback");
  ignore_merges_ = flag("ignore_merges");
  if (const auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) refuse("unk_token is not a string");
    unk_token_ = it->get<std::string>();
  }
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) refuse("BPE vocab is not an object of token: id");
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1ULL << 31))
      refuse("the id of '" + token + "' is not an id");
    const auto value = id.get<int64_t>();
    vocab_[token] = value;
    tokens_[value] = token;
    max_id_ = std::max(max_id_, value);
  }
  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) refuse("BPE merges is not a list");
  int64_t rank = 0;
  for (const auto& merge : *merges) {
    if (merge.is_string() != merges->front().is_string()) refuse("BPE merges mix \"a b\" strings and [a, b] pairs");
    const auto [left, right] = merge_parts(merge);
    const auto a = vocab_.find(left), b = vocab_.find(right), joined = vocab_.find(left + right);
    if (a == vocab_.end() || b == vocab_.end() || joined == vocab_.end()) {
      refuse("the merge '" + left + " " + right + "' names a token outside the vocabulary");
    }
    merges_[pair_key(a->second, b->second)] = {rank++, joined->second};  // a repeated pair: the last wins, as there
  }
}

std::optional<int64_t> BpeModel::token_to_id(const std::string& token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int64_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(const std::string& word, std::vector<int64_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto whole = token_to_id(word)) {
      ids.push_back(*whole);
      return;
    }
  }
  std::vector<int64_t> symbols;
  std::vector<size_t> lengths;
  std::optional<std::pair<int64_t, size_t>> unk;  // a pending unknown token and its length
  const auto unk_id = [&] {
    const auto id = token_to_id(*unk_token_);
    if (!id) throw std::invalid_argument("model: the unk_token '" + *unk_token_ + "' is not in the vocabulary");
    return *id;
  };
  for (size_t pos = 0; pos < word.size();) {
    size_t length = 1;
    while (pos + length < word.size() && (static_cast<unsigned char>(word[pos + length]) & 0xC0) == 0x80) ++length;
    const std::string character = word.substr(pos, length);
    pos += length;
    if (const auto id = token_to_id(character)) {
      if (unk) symbols.push_back(unk->first), lengths.push_back(unk->second), unk.reset();
      symbols.push_back(*id);
      lengths.push_back(length);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (char c : character) {
        const auto id = token_to_id(byte_token(static_cast<unsigned char>(c)));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == character.size()) {
        for (int64_t id : bytes) symbols.push_back(id), lengths.push_back(1);
        continue;
      }
    }
    if (!unk_token_) continue;  // no unknown token: the character is dropped, as there
    if (unk && fuse_unk_) {
      unk->second += length;
    } else {
      if (unk) symbols.push_back(unk->first), lengths.push_back(unk->second);
      unk = std::make_pair(unk_id(), length);
    }
  }
  if (unk) symbols.push_back(unk->first), lengths.push_back(unk->second);
  merge_all(symbols, lengths);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

// word.rs's merge_all: a priority queue of candidate merges (lowest rank,
// then leftmost), each checked against the current pair when it comes out.
void BpeModel::merge_all(std::vector<int64_t>& ids, std::vector<size_t>& lengths) const {
  struct Symbol {
    int64_t id;
    int64_t prev, next;
    size_t length;
  };
  struct Merge {
    size_t pos;
    int64_t rank, new_id;
    bool operator<(const Merge& other) const {  // the queue's top: the lowest rank, then the lowest pos
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < ids.size(); ++i) {
    symbols.push_back({ids[i], static_cast<int64_t>(i) - 1, i + 1 < ids.size() ? static_cast<int64_t>(i) + 1 : -1,
                       lengths[i]});
  }
  std::priority_queue<Merge> queue;
  const auto candidate = [&](size_t pos, int64_t left, int64_t right) {
    const auto it = merges_.find(pair_key(left, right));
    if (it != merges_.end()) queue.push({pos, it->second.first, it->second.second});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) candidate(i, symbols[i].id, symbols[i + 1].id);
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& current = symbols[top.pos];
    if (current.length == 0 || current.next == -1) continue;
    const size_t next_pos = static_cast<size_t>(current.next);
    const Symbol right = symbols[next_pos];
    const auto it = merges_.find(pair_key(current.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;  // an expired entry
    current.id = top.new_id;
    current.length += right.length;
    current.next = right.next;
    symbols[next_pos].length = 0;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
    if (current.prev >= 0)
      candidate(static_cast<size_t>(current.prev), symbols[static_cast<size_t>(current.prev)].id, current.id);
    if (current.next >= 0) candidate(top.pos, current.id, symbols[static_cast<size_t>(current.next)].id);
  }
  ids.clear();
  for (const Symbol& symbol : symbols) {
    if (symbol.length != 0) ids.push_back(symbol.id);
  }
}

}  // namespace accel::tokenizer
