// Megatron-LM's .idx files, read and checked (see megatron_index.h).
#include "host/data/megatron_index.h"

#include <sys/stat.h>

#include <cstring>
#include <stdexcept>

#include "host/util/strformat.h"

namespace accel::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = bytes; b-- > 0;) v = (v << 8) | p[b];
  return v;
}

struct Dtype {
  uint8_t code;
  int bytes;
  bool is_signed;
  const char* name;
};
constexpr Dtype kDtypes[] = {{1, 1, false, "uint8"}, {2, 1, true, "int8"},   {3, 2, true, "int16"},
                             {4, 4, true, "int32"},  {5, 8, true, "int64"},  {8, 2, false, "uint16"}};

}  // namespace

MegatronIndex parse_megatron_index(std::span<const uint8_t> idx, int64_t bin_bytes, const std::string& prefix) {
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("--data megatron:" + prefix + ": " + what);
  };
  const auto size = static_cast<int64_t>(idx.size());
  if (size < kHeaderBytes || std::memcmp(idx.data(), kMagic, sizeof(kMagic)) != 0) {
    throw fail(".idx is not a Megatron indexed dataset index (no MMIDIDX header)");
  }
  const uint8_t* p = idx.data() + sizeof(kMagic);
  const uint64_t version = le(p, 8);
  if (version != 1) throw fail(strformat(".idx version %llu (this build reads version 1)",
                                         static_cast<unsigned long long>(version)));
  const uint8_t code = p[8];
  const Dtype* dtype = nullptr;
  for (const Dtype& d : kDtypes) {
    if (d.code == code) dtype = &d;
  }
  if (dtype == nullptr) {
    throw fail(strformat(".idx dtype code %d is not an integer token type (1-5 or 8)", static_cast<int>(code)));
  }
  const uint64_t sequences = le(p + 9, 8), documents = le(p + 17, 8);
  // The arrays the counts announce, exactly (a multimodal index adds one
  // int8 mode per sequence: not a token corpus the host trains on).
  const int64_t limit = (size - kHeaderBytes) / 8;
  if (sequences > static_cast<uint64_t>(limit) || documents > static_cast<uint64_t>(limit) ||
      kHeaderBytes + 12 * static_cast<int64_t>(sequences) + 8 * static_cast<int64_t>(documents) != size) {
    throw fail(strformat(".idx has %lld bytes, not the header and arrays of %llu sequences and %llu documents "
                         "(truncated, damaged or multimodal)",
                         static_cast<long long>(size), static_cast<unsigned long long>(sequences),
                         static_cast<unsigned long long>(documents)));
  }
  const auto s = static_cast<int64_t>(sequences), d = static_cast<int64_t>(documents);
  // Megatron's writer starts the document indices with 0 and appends the
  // sequence count at each document's end: there is always at least one,
  // and with sequences, at least two (a start and an end).
  if (d == 0 || (s > 0 && d < 2)) {
    throw fail(strformat(".idx has %lld sequences but %lld document indices (Megatron writes 0, then each "
                         "document's end: at least %d)",
                         static_cast<long long>(s), static_cast<long long>(d), s > 0 ? 2 : 1));
  }
  const uint8_t* lengths = idx.data() + kHeaderBytes;
  const uint8_t* pointers = lengths + 4 * s;
  const uint8_t* doc_index = pointers + 8 * s;
  int64_t expected = 0;  // byte offset of the next sequence, back to back
  for (int64_t i = 0; i < s; ++i) {
    const auto length = static_cast<int32_t>(le(lengths + 4 * i, 4));
    const auto pointer = static_cast<int64_t>(le(pointers + 8 * i, 8));
    if (length < 0) throw fail(strformat("sequence %lld has length %d", static_cast<long long>(i), length));
    if (pointer != expected) {
      throw fail(strformat("sequence %lld starts at byte %lld of the .bin, expected %lld (sequences back to back)",
                           static_cast<long long>(i), static_cast<long long>(pointer),
                           static_cast<long long>(expected)));
    }
    expected += int64_t{length} * dtype->bytes;
    // The sum can only grow toward the .bin's size: stopping past it keeps
    // billions of large lengths from overflowing the sum.
    if (expected > bin_bytes) {
      throw fail(strformat("the .idx describes more than the %lld bytes of its .bin by sequence %lld (the .idx "
                           "does not match its .bin)",
                           static_cast<long long>(bin_bytes), static_cast<long long>(i)));
    }
  }
  if (expected != bin_bytes) {
    throw fail(strformat("the .idx describes %lld bytes of %s tokens but the .bin has %lld (the .idx does not match "
                         "its .bin)",
                         static_cast<long long>(expected), dtype->name, static_cast<long long>(bin_bytes)));
  }
  int64_t previous = -1;
  for (int64_t i = 0; i < d; ++i) {
    const auto at = static_cast<int64_t>(le(doc_index + 8 * i, 8));
    if ((i == 0 && at != 0) || at < previous || at > s || (i == d - 1 && at != s)) {
      throw fail(strformat("document index %lld is %lld: the document indices must rise from 0 to the %lld sequences",
                           static_cast<long long>(i), static_cast<long long>(at), static_cast<long long>(s)));
    }
    previous = at;
  }
  MegatronIndex index;
  index.layout = TokenLayout{0, dtype->bytes, dtype->is_signed,
                             strformat("megatron indexed %s, %lld sequences", dtype->name, static_cast<long long>(s))};
  index.sequences = s;
  index.documents = d > 0 ? d - 1 : 0;
  index.tokens = expected / dtype->bytes;
  return index;
}

TokenLayout read_megatron_index(const std::string& prefix) {
  const MappedFile idx(prefix + ".idx");
  const MappedFile bin(prefix + ".bin");  // a regular file, or one line
  return parse_megatron_index(std::span<const uint8_t>(idx.data(), idx.size()), static_cast<int64_t>(bin.size()),
                              prefix)
      .layout;
}

}  // namespace accel::data
