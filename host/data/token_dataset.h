// Datasets of fixed-length training windows. A window is seq_len + 1 tokens:
// inputs are its first seq_len, targets its last seq_len.
//
//   synthetic     deterministic and learnable, no files: each window follows a
//                 seeded token permutation with probability 3/4, else a random
//                 token, so the loss has a known floor well below ln(vocab).
//   text:PATH     the file's bytes are the tokens (vocab >= 256).
//   tokens:PATH   llm.c's .bin (a 256 x int32 header: magic 20240520 version
//                 1 for uint16 tokens, 20240801 version 7 for uint32; the
//                 header is checked, never read as tokens), else nanoGPT's
//                 headerless flat little-endian uint16 array.
// Windows of files are the contiguous, non-overlapping slices of seq_len + 1
// tokens. Files are memory-mapped, never read whole. Thread-safe for reads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace accel::data {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_windows() const = 0;
  virtual int64_t window_length() const = 0;  // seq_len + 1
  // Writes window `index` (0 <= index < num_windows()) into out.
  virtual void read_window(int64_t index, std::span<int64_t> out) const = 0;
  virtual std::string describe() const = 0;
};

// Builds the dataset named by --data. Throws std::runtime_error with one line
// naming the problem: missing/unreadable/too-short file, a FIFO or other
// non-regular file (refused before opening, so nothing blocks), an llm.c
// header with a bad version or token count, a token id outside the
// vocabulary, an odd-sized tokens file.
std::unique_ptr<TokenDataset> open_dataset(const std::string& spec, int64_t seq_len,
                                           int64_t vocab_size, uint64_t seed);

}  // namespace accel::data
