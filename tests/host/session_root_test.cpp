// SessionRoot (host/comm/session_root.h): a one-process run's Open MPI
// session directory is locked while it exists, removed on request, and a
// root whose owner died is removed by the next one; nothing else is. The
// killed run itself: tests/python/test_launch.py, EmbeddedDefault.
#include "host/comm/session_root.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace accel::comm {
namespace {

namespace fs = std::filesystem;

struct TempBase {
  fs::path path;
  TempBase() {
    std::string pattern = (fs::temp_directory_path() / "session-root-test-XXXXXX").string();
    path = mkdtemp(pattern.data());
  }
  ~TempBase() { fs::remove_all(path); }
};

bool locked_by_someone(const fs::path& lock_file) {
  const int fd = ::open(lock_file.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return busy;
}

TEST(SessionRoot, IsLockedWhileItExistsAndRemovedOnRequest) {
  TempBase base;
  SessionRoot root(base.path.string());
  ASSERT_FALSE(root.path().empty());
  EXPECT_EQ(fs::path(root.path()).parent_path(), base.path);
  EXPECT_TRUE(locked_by_someone(fs::path(root.path()) / kSessionRootLock));
  // Another run starting now takes it for a live one.
  EXPECT_EQ(remove_abandoned_session_roots(base.path.string()), 0);
  EXPECT_TRUE(fs::exists(root.path()));
  const std::string path = root.path();
  root.remove();
  EXPECT_FALSE(fs::exists(path));
  root.remove();  // idempotent
}

TEST(SessionRoot, OnlyAbandonedRootsAreRemoved) {
  TempBase base;
  const fs::path dead = base.path / "accel-mpi-dead00", held = base.path / "accel-mpi-held00",
                 unlocked = base.path / "accel-mpi-nolock", other = base.path / "ompi.host.0",
                 linked = base.path / "accel-mpi-link00";
  fs::create_directories(dead / "ompi.host.0" / "jf.0");
  std::ofstream(dead / kSessionRootLock).put('\n');
  fs::create_directory(held);
  std::ofstream(held / kSessionRootLock).put('\n');
  const int holder = ::open((held / kSessionRootLock).c_str(), O_RDONLY);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  fs::create_directory(unlocked);  // not provably Accel's
  fs::create_directory(other);
  std::ofstream(other / kSessionRootLock).put('\n');  // Accel's file, not its name
  fs::create_directory_symlink(dead, linked);          // a link is never followed
  EXPECT_EQ(remove_abandoned_session_roots(base.path.string()), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(held / kSessionRootLock));
  EXPECT_TRUE(fs::exists(unlocked));
  EXPECT_TRUE(fs::exists(other / kSessionRootLock));
  EXPECT_TRUE(fs::is_symlink(linked));
  ::close(holder);
  EXPECT_EQ(remove_abandoned_session_roots(base.path.string()), 1);  // its owner gone now
  EXPECT_FALSE(fs::exists(held));
  EXPECT_EQ(remove_abandoned_session_roots((base.path / "missing").string()), 0);
}

}  // namespace
}  // namespace accel::comm
