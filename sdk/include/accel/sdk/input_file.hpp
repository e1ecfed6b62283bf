// accel/sdk/input_file.hpp — the one way Accel opens a file it reads: the
// host's readers (configs, checkpoints, data, Hugging Face directories) and
// the plugins' (a DeepSpeed JSON) alike.
//
// The rule: only a regular file is read, and opening never blocks. open() of
// a FIFO blocks until a writer appears, so the file is opened O_NONBLOCK (a
// FIFO then opens at once) and its type is checked on the descriptor, not on
// the name, so a swap between a check and the open changes nothing; a
// regular file's descriptor is then made blocking again for ordinary reads.
// A symlink is followed (datasets and checkpoints are symlinked on shared
// file systems all the time); what it names must itself be a regular file.
// Trust is the plugin loader's business, not a reader's: code is loaded only
// through host/plugin/trusted_file.h, whose symlink rules are stricter.
//
// Errors: InputFileError, one line naming the path and the problem.
// Header only, POSIX. Thread-safety: every function is reentrant.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace accel::sdk {

// A path that cannot be read as an input file; what() is the whole line.
class InputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a non-regular file is, for messages ("a FIFO", "a directory").
inline const char* file_kind(mode_t mode) noexcept {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

// An open input file: owns the descriptor, closes it once.
class InputFile {
 public:
  InputFile() = default;
  InputFile(int fd, uint64_t size) noexcept : fd_(fd), size_(size) {}
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  InputFile& operator=(InputFile&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.fd_;
      size_ = other.size_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~InputFile() { reset(); }

  int fd() const noexcept { return fd_; }
  // The size fstat reported when the file was opened.
  uint64_t size() const noexcept { return size_; }
  // Hands the descriptor to the caller, who closes it.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Opens `path` for reading under the rule above. `what` names the file's
// role in messages ("config.json", "--data"); empty: the path alone.
inline InputFile open_input_file(const std::string& path, const std::string& what = {}) {
  const std::string name = what.empty() ? path : what + " " + path;
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw InputFileError(name + ": cannot open: " + std::strerror(errno));
  InputFile file(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputFileError(name + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw InputFileError(name + ": is " + file_kind(st.st_mode) + ", not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    throw InputFileError(name + ": cannot make the descriptor blocking: " + std::strerror(errno));
  }
  return InputFile(file.release(), static_cast<uint64_t>(st.st_size));
}

// The whole content of a small input file (configs, indexes, manifests):
// refused beyond `max_bytes`, whether fstat says so or the reads find more.
inline std::string read_input_file(const std::string& path, uint64_t max_bytes, const std::string& what = {}) {
  const std::string name = what.empty() ? path : what + " " + path;
  const InputFile file = open_input_file(path, what);
  if (file.size() > max_bytes) {
    throw InputFileError(name + ": larger than " + std::to_string(max_bytes) + " bytes (" +
                         std::to_string(file.size()) + ")");
  }
  std::string text;
  text.reserve(static_cast<size_t>(file.size()));
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = ::read(file.fd(), buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputFileError(name + ": cannot read: " + std::strerror(errno));
    }
    if (got == 0) return text;
    text.append(buffer, static_cast<size_t>(got));
    if (text.size() > max_bytes) throw InputFileError(name + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
}

}  // namespace accel::sdk
