// accel/sdk/input_file.hpp — the one way Accel opens a file it reads: the
// host's readers (configs, checkpoints, data, Hugging Face directories) and
// the plugins' (a DeepSpeed JSON) alike.
//
// The rule: only a regular file is read, and opening never blocks. open() of
// a FIFO blocks until a writer appears, and opening a device can act (a tape
// rewinds, a watchdog arms), so the name is stat'ed first and anything but a
// regular file is refused unopened; the file is then opened O_NONBLOCK (a
// FIFO swapped in meanwhile opens at once) and its type is checked again on
// the descriptor, so a swap between the check and the open changes nothing
// that is read; a regular file's descriptor is then made blocking again for
// ordinary reads.
//
// Symlinks: the plugin loader's policy, less the part that is about code.
// The loader follows a symlink by hand and checks every directory it
// passes through and the owner of the link, because whoever can choose what
// a name points to chooses the code that runs with our privileges
// (host/plugin/trusted_file.h). A data or checkpoint input runs nothing: a
// token file or a weight file owned by another user, in a directory others
// may write, is an everyday thing on a shared cluster (a team's datasets,
// the Hugging Face cache, whose snapshots/ are all symlinks into blobs/),
// and what such a file can do is be read as the input the user named.
// So a path the user gave (Symlinks::follow) is followed as the kernel
// follows it, and no owner or mode is checked; what the link names must
// still be a regular file, checked on the descriptor that is read. Inside a
// directory Accel itself wrote and vouches for (a committed checkpoint,
// whose manifest lists the files it holds), a symlink is never something
// Accel put there, and would make the manifest vouch for a file outside
// the directory: those files are opened with Symlinks::refuse (O_NOFOLLOW).
//
// Errors: InputFileError, one line naming the path and the problem:
// "<what>: cannot open '<path>': <reason>" / "<what>: '<path>' is a FIFO, not
// a regular file", or, with no `what`, "<path>: cannot open: <reason>" /
// "<path>: is a FIFO, not a regular file".
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

// Whether the last component of a path may be a symlink (see above).
enum class Symlinks {
  follow,  // a path the user gave: followed, the target must be a regular file
  refuse,  // a file inside a directory Accel wrote and vouches for
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

namespace input_file_detail {

// "<what>: '<path>' <problem>" or "<path>: <problem>".
inline std::string describe(const std::string& path, const std::string& what, const std::string& problem) {
  return what.empty() ? path + ": " + problem : what + ": '" + path + "' " + problem;
}

// "<what>: cannot <action> '<path>': <reason>" or "<path>: cannot <action>: <reason>".
inline std::string cannot(const std::string& path, const std::string& what, const char* action, int error) {
  const std::string reason = std::strerror(error);
  return what.empty() ? path + ": cannot " + action + ": " + reason
                      : what + ": cannot " + action + " '" + path + "': " + reason;
}

inline std::string not_regular(const std::string& path, const std::string& what, mode_t mode) {
  return describe(path, what, std::string("is ") + file_kind(mode) + ", not a regular file");
}

}  // namespace input_file_detail

// Opens `path` for reading under the rules above. `what` names the file's
// role in messages ("--data", "config.json"); empty: the path leads.
inline InputFile open_input_file(const std::string& path, const std::string& what = {},
                                 Symlinks symlinks = Symlinks::follow) {
  using namespace input_file_detail;
  struct stat st {};
  // Before opening: a device or a FIFO is refused without an open().
  const int looked = symlinks == Symlinks::follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (looked != 0) throw InputFileError(cannot(path, what, "open", errno));
  if (!S_ISREG(st.st_mode)) throw InputFileError(not_regular(path, what, st.st_mode));
  int fd;
  const int no_follow = symlinks == Symlinks::refuse ? O_NOFOLLOW : 0;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | no_follow);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    // O_NOFOLLOW on a symlink swapped in since the lstat: ELOOP.
    if (errno == ELOOP && symlinks == Symlinks::refuse) throw InputFileError(not_regular(path, what, S_IFLNK));
    throw InputFileError(cannot(path, what, "open", errno));
  }
  InputFile file(fd, 0);
  // On the descriptor: whatever the name names now, this is what is read.
  if (::fstat(fd, &st) != 0) throw InputFileError(cannot(path, what, "stat", errno));
  if (!S_ISREG(st.st_mode)) throw InputFileError(not_regular(path, what, st.st_mode));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    throw InputFileError(cannot(path, what, "clear O_NONBLOCK on", errno));
  }
  return InputFile(file.release(), static_cast<uint64_t>(st.st_size));
}

// The whole content of a small input file (configs, indexes, manifests):
// refused beyond `max_bytes`, whether fstat says so or the reads find more.
inline std::string read_input_file(const std::string& path, uint64_t max_bytes, const std::string& what = {},
                                   Symlinks symlinks = Symlinks::follow) {
  using namespace input_file_detail;
  const InputFile file = open_input_file(path, what, symlinks);
  const std::string too_large = "is larger than " + std::to_string(max_bytes) + " bytes";
  if (file.size() > max_bytes) {
    throw InputFileError(describe(path, what, too_large + " (" + std::to_string(file.size()) + ")"));
  }
  std::string text;
  text.reserve(static_cast<size_t>(file.size()));
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = ::read(file.fd(), buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputFileError(cannot(path, what, "read", errno));
    }
    if (got == 0) return text;
    text.append(buffer, static_cast<size_t>(got));
    if (text.size() > max_bytes) throw InputFileError(describe(path, what, too_large));
  }
}

}  // namespace accel::sdk
