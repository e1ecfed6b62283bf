// A one-process run's private Open MPI session directory (see session_root.h).
#include "host/comm/session_root.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace accel::comm {

SessionRoot::SessionRoot(const std::string& base) {
  remove_abandoned_session_roots(base);
  std::string dir = base + "/" + kSessionRootPrefix + "XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return;
  path_ = dir;
  // Locked under a staging name, then renamed: a sweeper finds the lock
  // file only once it is held, so it never takes a live run's directory
  // for an abandoned one. Without a lock (a file system without flock) the
  // directory is still used and removed after MPI_Init; sweepers skip it.
  const std::string staging = dir + "/.staging.lock";
  const int fd = ::open(staging.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::rename(staging.c_str(), (dir + "/" + kSessionRootLock).c_str()) == 0) {
    lock_fd_ = fd;
    return;
  }
  ::close(fd);
  ::unlink(staging.c_str());
}

void SessionRoot::remove() {
  if (!path_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    path_.clear();
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);  // after the removal: no sweeper races the owner
    lock_fd_ = -1;
  }
}

int remove_abandoned_session_roots(const std::string& base) {
  // The candidates first, removed after: no removal under a live iterator.
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(kSessionRootPrefix, 0) == 0) candidates.push_back(it->path());
  }
  int removed = 0;
  for (const std::filesystem::path& dir : candidates) {
    struct stat st {};
    // A real directory of this user's (never a link to elsewhere).
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const int fd = ::open((dir / kSessionRootLock).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // not Accel's, or an owner without a lock
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // its owner is gone: the kernel dropped the lock
      std::error_code ignored;
      if (std::filesystem::remove_all(dir, ignored) > 0) ++removed;
    }
    ::close(fd);
  }
  return removed;
}

}  // namespace accel::comm
