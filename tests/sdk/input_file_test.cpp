// accel/sdk/input_file.hpp: the one rule every reader opens its input by.
// Regular files only, never a blocking open (a FIFO with no writer would
// block open() forever: each such case runs on a thread with a deadline),
// symlinks followed for a user's path and refused inside a directory Accel
// vouches for, one line naming the path and the problem.
#include "accel/sdk/input_file.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>

namespace {

using accel::sdk::InputFileError;
using accel::sdk::open_input_file;
using accel::sdk::read_input_file;
using accel::sdk::Symlinks;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "accel_input_XXXXXX";
    ASSERT_NE(::mkdtemp(&pattern[0]), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    const std::string command = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(command.c_str()), 0);
  }
  std::string file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The refusal of reading `path`, or "" when it reads; fails the test when
  // the read has not returned within 10 s (a blocking open).
  static std::string refusal(const std::string& path, const std::string& what = {},
                             Symlinks symlinks = Symlinks::follow) {
    auto read = std::async(std::launch::async, [=] {
      try {
        read_input_file(path, 1024, what, symlinks);
      } catch (const InputFileError& e) {
        return std::string(e.what());
      }
      return std::string();
    });
    if (read.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << path << ": the open blocked";
      std::abort();  // the thread cannot be joined: nothing else is left to do
    }
    return read.get();
  }
  std::string dir_;
};

TEST_F(InputFileTest, ReadsARegularFileWhole) {
  const std::string path = file("config.json", "{\"a\": 1}");
  EXPECT_EQ(read_input_file(path, 1024), "{\"a\": 1}");
  const accel::sdk::InputFile opened = open_input_file(path);
  EXPECT_EQ(opened.size(), 8u);
  EXPECT_EQ(::fcntl(opened.fd(), F_GETFL) & O_NONBLOCK, 0);  // blocking again for ordinary reads
}

TEST_F(InputFileTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/tokens.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(refusal(fifo, "--data"), "--data: '" + fifo + "' is a FIFO, not a regular file");
  EXPECT_EQ(refusal(fifo), fifo + ": is a FIFO, not a regular file");
  // A link to a FIFO is a FIFO.
  ASSERT_EQ(::symlink(fifo.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(refusal(dir_ + "/link"), dir_ + "/link: is a FIFO, not a regular file");
}

TEST_F(InputFileTest, DirectoriesDevicesAndMissingFilesAreOneLine) {
  EXPECT_EQ(refusal(dir_, "--config"), "--config: '" + dir_ + "' is a directory, not a regular file");
  EXPECT_EQ(refusal("/dev/null"), "/dev/null: is a character device, not a regular file");
  EXPECT_EQ(refusal(dir_ + "/missing", "--data"),
            "--data: cannot open '" + dir_ + "/missing': No such file or directory");
}

TEST_F(InputFileTest, LargerThanTheLimitIsRefused) {
  const std::string path = file("big", std::string(2000, 'x'));
  EXPECT_EQ(refusal(path), path + ": is larger than 1024 bytes (2000)");
}

// The symlink policy (input_file.hpp): a user's path is followed, as the
// Hugging Face cache needs; a file inside a directory Accel vouches for
// may not be a link.
TEST_F(InputFileTest, SymlinksAreFollowedUnlessRefused) {
  file("blob", "weights");
  ASSERT_EQ(::symlink("blob", (dir_ + "/model.safetensors").c_str()), 0);
  EXPECT_EQ(read_input_file(dir_ + "/model.safetensors", 1024), "weights");
  EXPECT_EQ(refusal(dir_ + "/model.safetensors", {}, Symlinks::refuse),
            dir_ + "/model.safetensors: is a symlink, not a regular file");
  EXPECT_EQ(read_input_file(dir_ + "/blob", 1024, {}, Symlinks::refuse), "weights");
}

}  // namespace
