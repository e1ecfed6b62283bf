// send_files / receive_files (a snapshot's replicas on another node): each
// rank sends its files to the next rank round a ring and receives the
// previous rank's. What arrives equals what was sent, and the size and
// crc32 receive_files reports are those of the bytes themselves, so the
// checkpoint commit can trust them without reading the files back. A sender
// that cannot open a file tells its receiver at once.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "host/comm/file_transfer.h"
#include "host/comm/process_group.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {
namespace {

namespace fs = std::filesystem;
using testing::test_options;

class FileTransfer : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = ProcessGroup::create_world(MPI_COMM_WORLD, 0, test_options());
    dir_ = fs::temp_directory_path() /
           ("accel_file_transfer_" + std::to_string(::getpid()) + "_" + std::to_string(world_->rank()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    fs::create_directories(dir_ / "in");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  static void write(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static uint32_t crc_of(const std::string& bytes) {
    return static_cast<uint32_t>(::crc32_z(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                                           bytes.size()));
  }

  int next() const { return (world_->rank() + 1) % world_->size(); }
  int previous() const { return (world_->rank() + world_->size() - 1) % world_->size(); }

  std::unique_ptr<ProcessGroup> world_;
  fs::path dir_;
};

// The bytes rank r sends: an empty file and one of r-dependent content.
std::string payload(int rank) {
  std::string bytes(static_cast<size_t>(300000 + 7 * rank), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + static_cast<size_t>(rank)) % 251);
  return bytes;
}

TEST_F(FileTransfer, WhatArrivesIsWhatWasSentAndItsCrcIsTheBytes) {
  const int rank = world_->rank();
  const fs::path empty = dir_ / "out" / "empty.bin", mine = dir_ / "out" / ("rank" + std::to_string(rank) + ".bin");
  write(empty, "");
  write(mine, payload(rank));
  FileSend out(*world_, next(), 11, {empty, mine});
  const std::vector<ReceivedFile> got = receive_files(*world_, previous(), 11, dir_ / "in");
  out.wait();
  ASSERT_EQ(got.size(), 2u);
  const std::string expected_name = "rank" + std::to_string(previous()) + ".bin";
  EXPECT_EQ(got[0].name, "empty.bin");
  EXPECT_EQ(got[0].size, 0u);
  EXPECT_EQ(got[0].crc32, crc_of(""));
  EXPECT_EQ(got[1].name, expected_name);
  const std::string expected = payload(previous());
  EXPECT_EQ(got[1].size, expected.size());
  EXPECT_EQ(got[1].crc32, crc_of(expected));
  EXPECT_EQ(read(dir_ / "in" / expected_name), expected);
  EXPECT_NE(got[1].crc32, crc_of(payload(previous() + 1)));  // the crc tells contents apart
}

TEST_F(FileTransfer, ASenderThatCannotOpenItsFileTellsItsReceiver) {
  FileSend out(*world_, next(), 12, {dir_ / "out" / "missing.bin"});
  try {
    receive_files(*world_, previous(), 12, dir_ / "in");
    ADD_FAILURE() << "a missing file on the sender was not reported";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("could not send its files: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_THROW(out.wait(), CommError);
}

}  // namespace
}  // namespace accel::comm
