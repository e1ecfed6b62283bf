// A read-only memory map of a regular file (the token datasets' storage).
// Opened by accel/sdk/input_file.hpp's rule: FIFOs, directories, sockets and
// devices are refused without blocking, with one line naming the file; a
// symlink is followed. Immutable once built: thread-safe for reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace accel::data {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
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

// Where a token file's tokens start, how wide they are (1, 2, 4 or 8 bytes,
// little-endian) and whether signed, and how to name the layout in messages.
struct TokenLayout {
  int64_t offset = 0;
  int bytes_per_token = 2;
  bool is_signed = false;
  std::string name = "headerless uint16";
};

}  // namespace accel::data
