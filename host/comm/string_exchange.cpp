// All-gather of strings (see string_exchange.h).
#include "host/comm/string_exchange.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace accel::comm {

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine, std::string_view label,
                                            int64_t max_bytes) {
  const int size = comm.size();
  const int rank = comm.rank();
  const auto check = [](const Status& status) {
    if (!status.ok()) throw CommError(status.code, status.message);
  };
  std::vector<int64_t> lengths(static_cast<size_t>(size), 0);
  lengths[static_cast<size_t>(rank)] = static_cast<int64_t>(mine.size());
  check(comm.all_gather(host_buffer(&lengths[static_cast<size_t>(rank)], 1, DType::i64),
                        host_buffer(lengths.data(), size, DType::i64), {0, label}));
  // Every rank sees the same lengths, so every rank refuses alike.
  for (int r = 0; r < size; ++r) {
    const int64_t length = lengths[static_cast<size_t>(r)];
    if (length < 0 || length > max_bytes) {
      throw CommError(ErrorCode::invalid_argument,
                      std::string(label) + ": rank " + std::to_string(r) + " announced a string of " +
                          std::to_string(length) + " bytes (limit " + std::to_string(max_bytes) +
                          "); do all ranks run the same program?");
    }
  }
  // At least one byte each: a zero-count collective is legal but pointless.
  const int64_t width = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
  std::vector<char> bytes(static_cast<size_t>(width * size), '\0');
  std::memcpy(bytes.data() + rank * width, mine.data(), mine.size());
  check(comm.all_gather(host_buffer(bytes.data() + rank * width, width, DType::u8),
                        host_buffer(bytes.data(), width * size, DType::u8), {0, label}));
  std::vector<std::string> all;
  all.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all.emplace_back(bytes.data() + r * width, static_cast<size_t>(lengths[static_cast<size_t>(r)]));
  return all;
}

}  // namespace accel::comm
