// A one-process run's private directory for Open MPI's session files
// (mpi_session.cpp says why it needs one), made so that nothing of it
// outlives the process, SIGKILL included. Open MPI reads it in MPI_Init
// only, so the owner removes it right after (remove()); until then the
// owner holds an advisory lock (flock) on a file in it, which the kernel
// drops when the process dies however it dies, and the next one-process
// run on the same base removes any such directory whose lock is free.
// A directory is removed only when it carries Accel's name and lock file
// and nobody holds that lock: never one Accel cannot prove is its own.
// Not thread-safe; one per process.
#pragma once

#include <string>

namespace accel::comm {

class SessionRoot {
 public:
  // Removes the abandoned roots under `base` (remove_abandoned_session_roots),
  // then makes and locks base/accel-mpi-XXXXXX. path() is "" when none
  // could be made (Open MPI's default then).
  explicit SessionRoot(const std::string& base);
  ~SessionRoot() { remove(); }
  SessionRoot(const SessionRoot&) = delete;
  SessionRoot& operator=(const SessionRoot&) = delete;

  const std::string& path() const { return path_; }
  // Removes the directory and everything in it, then drops the lock;
  // idempotent. Errors are ignored: a leftover is no reason to fail a run.
  void remove();

 private:
  std::string path_;
  int lock_fd_ = -1;
};

// Directory names and the lock file inside each root.
inline constexpr const char* kSessionRootPrefix = "accel-mpi-";
inline constexpr const char* kSessionRootLock = "accel-owner.lock";

// Removes every base/accel-mpi-* directory that holds kSessionRootLock
// nobody has locked (its owner died before removing it). Returns how many.
int remove_abandoned_session_roots(const std::string& base);

}  // namespace accel::comm
