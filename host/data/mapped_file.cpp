// Read-only memory maps of regular files (see mapped_file.h).
#include "host/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace accel::data {
namespace {

std::runtime_error not_regular(const std::string& path, mode_t mode) {
  const char* kind = S_ISFIFO(mode) ? "a FIFO" : S_ISDIR(mode) ? "a directory" : S_ISSOCK(mode) ? "a socket"
                     : (S_ISCHR(mode) || S_ISBLK(mode)) ? "a device" : "not a regular file";
  return std::runtime_error("--data: '" + path + "' is " + std::string(kind) + "; token files must be regular files");
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // The type is checked before opening: open() of a FIFO blocks until a
  // writer appears. O_NONBLOCK covers one swapped in between; the
  // descriptor is checked again below.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::runtime_error("--data: cannot open '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) throw not_regular(path, st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("--data: cannot open '" + path + "': " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw not_regular(path, st.st_mode);
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

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace accel::data
