// Synthetic and file-backed datasets (see token_dataset.h).
#include "host/data/token_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "host/data/mapped_file.h"
#include "host/data/megatron_index.h"
#include "host/util/random.h"
#include "host/util/strformat.h"

namespace accel::data {
namespace {

// ---------------------------------------------------------------------------
// synthetic

class SyntheticDataset final : public TokenDataset {
 public:
  SyntheticDataset(int64_t seq_len, int64_t vocab_size, uint64_t seed)
      : window_length_(seq_len + 1), vocab_(vocab_size), key_(splitmix64(seed ^ 0x5EEDDA7Aull)) {
    successor_.resize(static_cast<size_t>(vocab_size));
    for (int64_t i = 0; i < vocab_size; ++i) successor_[static_cast<size_t>(i)] = i;
    CounterRng rng(key_);
    shuffle(successor_, rng);
  }
  // Large enough never to repeat within any sensible run; windows are generated.
  int64_t num_windows() const override { return int64_t{1} << 24; }
  int64_t window_length() const override { return window_length_; }
  void read_window(int64_t index, std::span<int64_t> out) const override {
    CounterRng rng(splitmix64(key_ ^ splitmix64(static_cast<uint64_t>(index))));
    int64_t token = static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab_)));
    for (int64_t& slot : out) {
      slot = token;
      const bool follow_rule = rng.below(4) != 0;
      token = follow_rule ? successor_[static_cast<size_t>(token)]
                          : static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab_)));
    }
  }
  std::string describe() const override {
    return strformat("synthetic (vocab %lld)", static_cast<long long>(vocab_));
  }

 private:
  int64_t window_length_;
  int64_t vocab_;
  uint64_t key_;
  std::vector<int64_t> successor_;
};

// ---------------------------------------------------------------------------
// memory-mapped token files

// llm.c's token files (dev/data/data_common.py write_datafile): a header of
// 256 little-endian int32 (magic, version, token count, zeros), then the
// tokens. Two layouts exist, each a fixed (magic, version) pair.
constexpr int64_t kLlmcHeaderBytes = 256 * 4;
struct LlmcLayout {
  int32_t magic;
  int32_t version;
  int bytes_per_token;
};
constexpr LlmcLayout kLlmcLayouts[] = {{20240520, 1, 2},   // GPT-2: uint16 tokens
                                       {20240801, 7, 4}};  // Llama 3: uint32 tokens

int32_t int32_at(const uint8_t* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                              (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
}


// tokens:PATH: an llm.c file when it opens with a known magic (its header
// must then be exactly right: a bad version or count is an error, never
// tokens), else nanoGPT's headerless uint16. A file that has the shape of
// an llm.c header (256 int32 whose count matches the file's size and whose
// reserved words are zero) but an unknown magic is refused rather than
// trained on as tokens.
TokenLayout detect_token_layout(const MappedFile& file) {
  const std::string& path = file.path();
  const int64_t size = static_cast<int64_t>(file.size());
  if (size < kLlmcHeaderBytes) return {};
  const uint8_t* h = file.data();
  const int32_t magic = int32_at(h);
  const int32_t version = int32_at(h + 4);
  const int32_t count = int32_at(h + 8);
  const int64_t payload = size - kLlmcHeaderBytes;
  for (const LlmcLayout& layout : kLlmcLayouts) {
    if (magic != layout.magic) continue;
    if (version != layout.version) {
      throw std::runtime_error(strformat("--data: '%s' has llm.c magic %d but version %d (this build reads version %d "
                                         "for magic %d)",
                                         path.c_str(), magic, version, layout.version, magic));
    }
    if (count <= 0 || static_cast<int64_t>(count) * layout.bytes_per_token != payload) {
      throw std::runtime_error(strformat("--data: '%s': the llm.c header says %d tokens of %d bytes, but %lld bytes "
                                         "follow the header (truncated or damaged file)",
                                         path.c_str(), count, layout.bytes_per_token, static_cast<long long>(payload)));
    }
    return {kLlmcHeaderBytes, layout.bytes_per_token, false,
            strformat("llm.c v%d uint%d", version, layout.bytes_per_token * 8)};
  }
  bool reserved_zero = true;
  for (int64_t i = 3; i < 256 && reserved_zero; ++i) reserved_zero = int32_at(h + 4 * i) == 0;
  const bool count_fits = count > 0 && (int64_t{count} * 2 == payload || int64_t{count} * 4 == payload);
  if (reserved_zero && count_fits) {
    throw std::runtime_error(strformat("--data: '%s' starts with an llm.c-style header of unknown magic %d (known: "
                                       "20240520 version 1 for uint16 tokens, 20240801 version 7 for uint32)",
                                       path.c_str(), magic));
  }
  return {};
}

class FileDataset final : public TokenDataset {
 public:
  // Text files: one byte per token from offset 0. Token files: see
  // detect_token_layout. A Megatron .bin: the layout its .idx gave.
  enum class Kind { text, tokens, given };
  FileDataset(const std::string& path, Kind kind, int64_t seq_len, int64_t vocab_size, TokenLayout given = {})
      : file_(path), window_length_(seq_len + 1) {
    switch (kind) {
      case Kind::text: layout_ = {0, 1, false, "bytes"}; break;
      case Kind::tokens: layout_ = detect_token_layout(file_); break;
      case Kind::given: layout_ = given; break;
    }
    const size_t payload = file_.size() - static_cast<size_t>(layout_.offset);
    if (payload % static_cast<size_t>(layout_.bytes_per_token) != 0) {
      throw std::runtime_error(strformat("--data: '%s' has %zu bytes, not a whole number of %s tokens",
                                         path.c_str(), file_.size(), layout_.name.c_str()));
    }
    num_tokens_ = static_cast<int64_t>(payload) / layout_.bytes_per_token;
    if (num_tokens_ < window_length_) {
      throw std::runtime_error(strformat("--data: '%s' holds %lld tokens, fewer than one window of %lld",
                                         path.c_str(), static_cast<long long>(num_tokens_),
                                         static_cast<long long>(window_length_)));
    }
    // One pass to reject ids the model cannot embed, before any step runs.
    int64_t max_token = 0, min_token = 0;
    for (int64_t i = 0; i < num_tokens_; ++i) {
      const int64_t t = token_at(i);
      max_token = std::max(max_token, t);
      min_token = std::min(min_token, t);
    }
    if (min_token < 0) {
      throw std::runtime_error(strformat("--data: '%s' (%s) contains the negative token id %lld", path.c_str(),
                                         layout_.name.c_str(), static_cast<long long>(min_token)));
    }
    if (max_token >= vocab_size) {
      throw std::runtime_error(strformat("--data: '%s' (%s) contains token id %lld but the model's vocab_size is %lld",
                                         path.c_str(), layout_.name.c_str(), static_cast<long long>(max_token),
                                         static_cast<long long>(vocab_size)));
    }
  }
  int64_t num_windows() const override { return num_tokens_ / window_length_; }
  int64_t window_length() const override { return window_length_; }
  void read_window(int64_t index, std::span<int64_t> out) const override {
    const int64_t start = index * window_length_;
    for (int64_t i = 0; i < window_length_; ++i) out[static_cast<size_t>(i)] = token_at(start + i);
  }
  std::string describe() const override {
    return strformat("%s (%s, %lld tokens, %lld windows)", file_.path().c_str(), layout_.name.c_str(),
                     static_cast<long long>(num_tokens_), static_cast<long long>(num_windows()));
  }

 private:
  // Little-endian, of the layout's width and signedness.
  int64_t token_at(int64_t i) const {
    const uint8_t* p = file_.data() + layout_.offset + i * layout_.bytes_per_token;
    uint64_t bits = 0;
    for (int b = layout_.bytes_per_token; b-- > 0;) bits = (bits << 8) | p[b];
    if (layout_.is_signed && layout_.bytes_per_token < 8) {
      const uint64_t sign = uint64_t{1} << (8 * layout_.bytes_per_token - 1);
      return static_cast<int64_t>((bits ^ sign) - sign);
    }
    return static_cast<int64_t>(bits);
  }
  MappedFile file_;
  TokenLayout layout_;
  int64_t window_length_;
  int64_t num_tokens_ = 0;
};

}  // namespace

std::unique_ptr<TokenDataset> open_dataset(const std::string& spec, int64_t seq_len,
                                           int64_t vocab_size, uint64_t seed) {
  if (spec == "synthetic") return std::make_unique<SyntheticDataset>(seq_len, vocab_size, seed);
  if (spec.rfind("text:", 0) == 0) {
    if (vocab_size < 256) {
      throw std::runtime_error(strformat("--data text: needs --vocab-size >= 256 (bytes), the model has %lld",
                                         static_cast<long long>(vocab_size)));
    }
    return std::make_unique<FileDataset>(spec.substr(5), FileDataset::Kind::text, seq_len, vocab_size);
  }
  if (spec.rfind("tokens:", 0) == 0) {
    return std::make_unique<FileDataset>(spec.substr(7), FileDataset::Kind::tokens, seq_len, vocab_size);
  }
  if (spec.rfind("megatron:", 0) == 0) {
    const std::string prefix = spec.substr(9);
    const TokenLayout layout = read_megatron_index(prefix);
    return std::make_unique<FileDataset>(prefix + ".bin", FileDataset::Kind::given, seq_len, vocab_size, layout);
  }
  throw std::runtime_error("--data: '" + spec + "' is not synthetic, text:PATH, tokens:PATH or megatron:PREFIX");
}

}  // namespace accel::data
