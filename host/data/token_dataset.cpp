// Synthetic and file-backed datasets (see token_dataset.h).
#include "host/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

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

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("--data: cannot open '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw std::runtime_error("--data: '" + path + "' is not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped == MAP_FAILED) {
        ::close(fd);
        throw std::runtime_error("--data: cannot map '" + path + "': " + std::strerror(errno));
      }
      data_ = static_cast<const uint8_t*>(mapped);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class FileDataset final : public TokenDataset {
 public:
  // bytes_per_token: 1 for text, 2 for uint16 tokens.
  FileDataset(const std::string& path, int bytes_per_token, int64_t seq_len, int64_t vocab_size)
      : file_(path), bytes_per_token_(bytes_per_token), window_length_(seq_len + 1) {
    if (file_.size() % static_cast<size_t>(bytes_per_token) != 0) {
      throw std::runtime_error(strformat("--data: '%s' has %zu bytes, not a whole number of uint16 tokens",
                                         path.c_str(), file_.size()));
    }
    num_tokens_ = static_cast<int64_t>(file_.size()) / bytes_per_token;
    if (num_tokens_ < window_length_) {
      throw std::runtime_error(strformat("--data: '%s' holds %lld tokens, fewer than one window of %lld",
                                         path.c_str(), static_cast<long long>(num_tokens_),
                                         static_cast<long long>(window_length_)));
    }
    // One pass to reject ids the model cannot embed, before any step runs.
    int64_t max_token = 0;
    for (int64_t i = 0; i < num_tokens_; ++i) max_token = std::max(max_token, token_at(i));
    if (max_token >= vocab_size) {
      throw std::runtime_error(strformat("--data: '%s' contains token id %lld but the model's vocab_size is %lld",
                                         path.c_str(), static_cast<long long>(max_token),
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
    return strformat("%s (%lld tokens, %lld windows)", file_.path().c_str(),
                     static_cast<long long>(num_tokens_), static_cast<long long>(num_windows()));
  }

 private:
  int64_t token_at(int64_t i) const {
    const uint8_t* p = file_.data() + i * bytes_per_token_;
    return bytes_per_token_ == 1 ? p[0] : static_cast<int64_t>(p[0] | (p[1] << 8));
  }
  MappedFile file_;
  int bytes_per_token_;
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
    return std::make_unique<FileDataset>(spec.substr(5), 1, seq_len, vocab_size);
  }
  if (spec.rfind("tokens:", 0) == 0) return std::make_unique<FileDataset>(spec.substr(7), 2, seq_len, vocab_size);
  throw std::runtime_error("--data: '" + spec + "' is not synthetic, text:PATH or tokens:PATH");
}

}  // namespace accel::data
