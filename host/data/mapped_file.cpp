// Read-only memory maps of regular files (see mapped_file.h). The file is
// opened by the SDK's one rule for inputs (accel/sdk/input_file.hpp), so a
// FIFO or a device is refused without blocking, on the descriptor mapped.
#include "host/data/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "accel/sdk/input_file.hpp"

namespace accel::data {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // InputFileError is a runtime_error whose line already names --data.
  const sdk::InputFile file = sdk::open_input_file(path, "--data");
  size_ = static_cast<size_t>(file.size());
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (mapped == MAP_FAILED) {
      throw std::runtime_error("--data: cannot map '" + path + "': " + std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(mapped);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace accel::data
