// Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py,
// the MMapIndexedDataset layout): PREFIX.bin holds every sequence's tokens
// back to back; PREFIX.idx describes them:
//   "MMIDIDX\0\0"  version <Q = 1  dtype code <B  sequence count <Q
//   document count <Q  lengths int32[sequences]  byte pointers
//   int64[sequences]  document indices int64[documents]
// (little-endian; dtype codes 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
// 8 uint16; 6/7 are floats, not tokens).
//
// `--data megatron:PREFIX` trains on the sequences in index order, read as
// one token stream cut into the host's windows (as a tokens: file is):
// users bring corpora they already preprocessed with Megatron's
// preprocess_data.py. Megatron's own sample index (documents shuffled per
// epoch, windows overlapping by one token) is not reproduced: the host's
// sampler orders the windows. Pure functions of the two files; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "host/data/mapped_file.h"

namespace accel::data {

// What PREFIX.idx says, once checked against PREFIX.bin's size.
struct MegatronIndex {
  TokenLayout layout;  // of the .bin: offset 0, the dtype's width
  int64_t sequences = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
};

// Checks the bytes of an .idx against the size of its .bin. Throws
// std::runtime_error with one line naming `prefix` and what is wrong: not an
// index (magic), another version, a float or unknown dtype, a size that
// does not hold the counted arrays, a negative length, pointers that are
// not back to back, document indices that do not partition the sequences,
// or a .bin of another size than the index describes.
MegatronIndex parse_megatron_index(std::span<const uint8_t> idx, int64_t bin_bytes, const std::string& prefix);

// Maps PREFIX.idx, stats PREFIX.bin and parses (both must be regular files).
TokenLayout read_megatron_index(const std::string& prefix);

}  // namespace accel::data
