// TrustedFile (host/plugin/trusted_file.h) on the cases the end-to-end tests
// in tests/python/test_plugins.py do not reach: symlink loops, FIFOs (which
// must not block the open), "..", directories, and what is reported as the
// resolved path.
#include "host/plugin/trusted_file.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "host/plugin/plugin_error.h"

namespace {

namespace fs = std::filesystem;
using accel::plugin::PluginError;
using accel::plugin::TrustedFile;

class TrustedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "accel_trusted_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = fs::canonical(pattern);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(dir_ / "open", fs::perms::owner_all, ignored);
    fs::remove_all(dir_, ignored);
  }
  fs::path file(const fs::path& relative) {
    fs::create_directories((dir_ / relative).parent_path());
    std::ofstream(dir_ / relative) << "not really ELF";
    ::chmod((dir_ / relative).c_str(), 0644);
    return dir_ / relative;
  }
  // The message of the PluginError that opening `path` throws ("" if none).
  static std::string refusal(const fs::path& path) {
    try {
      TrustedFile::open(path);
    } catch (const PluginError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(TrustedFileTest, OpensATrustedFileAndReportsItsResolvedPath) {
  const fs::path real = file("real/libaccel_x.so");
  fs::create_directories(dir_ / "links");
  fs::create_symlink("../real/libaccel_x.so", dir_ / "links" / "libaccel_x.so");
  const TrustedFile opened = TrustedFile::open(dir_ / "links" / "libaccel_x.so");
  EXPECT_EQ(opened.resolved(), real);
  struct stat by_fd {}, by_name {};
  ASSERT_EQ(::fstat(opened.fd(), &by_fd), 0);
  ASSERT_EQ(::stat(opened.proc_path().c_str(), &by_name), 0);
  EXPECT_EQ(by_fd.st_ino, by_name.st_ino);  // /proc/self/fd/N is that very file
}

TEST_F(TrustedFileTest, SymlinkLoopsAreRefused) {
  fs::create_symlink("b", dir_ / "a");
  fs::create_symlink("a", dir_ / "b");
  EXPECT_NE(refusal(dir_ / "a").find("too many levels of symbolic links"), std::string::npos);
}

TEST_F(TrustedFileTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir_ / "libaccel_fifo.so").c_str(), 0644), 0);
  EXPECT_NE(refusal(dir_ / "libaccel_fifo.so").find("is not a regular file"), std::string::npos);
}

TEST_F(TrustedFileTest, ADirectoryIsNotAPluginFile) {
  fs::create_directories(dir_ / "libaccel_dir.so");
  EXPECT_NE(refusal(dir_ / "libaccel_dir.so").find("refused"), std::string::npos);
}

TEST_F(TrustedFileTest, DotDotInALinkTargetIsWalkedAndChecked) {
  file("open/libaccel_x.so");
  ASSERT_EQ(::chmod((dir_ / "open").c_str(), 0777), 0);
  fs::create_directories(dir_ / "links");
  fs::create_symlink("../open/libaccel_x.so", dir_ / "links" / "libaccel_x.so");
  const std::string why = refusal(dir_ / "links" / "libaccel_x.so");
  EXPECT_NE(why.find("directory " + (dir_ / "open").string() + " is writable by other users (mode 0777)"),
            std::string::npos)
      << why;
}

TEST_F(TrustedFileTest, AMissingFileNamesTheMissingPath) {
  const std::string why = refusal(dir_ / "nope" / "libaccel_x.so");
  EXPECT_NE(why.find("cannot open " + (dir_ / "nope").string()), std::string::npos) << why;
}

// Issue 30: a sticky world-writable directory was accepted as the one
// holding the plugin. Passing through one (/tmp) is fine: its sticky bit
// keeps others from swapping our entry; holding the plugin is not: others
// may add files there, and so choose what sits under a plugin's name.
TEST_F(TrustedFileTest, AStickyDirectoryMayBePassedThroughButNotHoldThePlugin) {
  file("sticky/mine/libaccel_x.so");
  ASSERT_EQ(::chmod((dir_ / "sticky").c_str(), 01777), 0);
  EXPECT_NO_THROW(TrustedFile::open(dir_ / "sticky" / "mine" / "libaccel_x.so"));
  file("sticky/libaccel_y.so");
  ASSERT_EQ(::chmod((dir_ / "sticky").c_str(), 01777), 0);
  const std::string why = refusal(dir_ / "sticky" / "libaccel_y.so");
  EXPECT_NE(why.find("directory " + (dir_ / "sticky").string() + " is writable by other users (mode 1777"),
            std::string::npos)
      << why;
}

// Issue 30: a symlink's own owner went unchecked; whoever owns a link
// chooses where it points, and so which file is loaded.
TEST_F(TrustedFileTest, ASymlinkOfAnotherUserIsNotFollowed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a symlink to another user";
  file("real/libaccel_x.so");
  fs::create_directories(dir_ / "links");
  const fs::path link = dir_ / "links" / "libaccel_x.so";
  fs::create_symlink("../real/libaccel_x.so", link);
  ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
  const std::string why = refusal(link);
  EXPECT_NE(why.find("symbolic link " + link.string() + " is owned by uid 65534"), std::string::npos) << why;
  ASSERT_EQ(::lchown(link.c_str(), 0, 0), 0);
  EXPECT_NO_THROW(TrustedFile::open(link));
}

}  // namespace
