// read_elf_dynamic (host/plugin/elf_dynamic.h) on the test plugin that ships
// a helper beside itself (tests/plugins/origin_plugin.c), and on damaged
// copies of it: what the dynamic loader would read, or one error, never a
// read outside the file.
#include "host/plugin/elf_dynamic.h"

#include <gtest/gtest.h>

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using accel::plugin::ElfDynamic;
using accel::plugin::read_elf_dynamic;

const fs::path kOrigin = fs::path(ACCEL_TEST_PLUGIN_ROOT) / "origin";

ElfDynamic read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  try {
    ElfDynamic dynamic = read_elf_dynamic(fd);
    ::close(fd);
    return dynamic;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

fs::path write_temp(const std::string& name, const std::string& bytes) {
  const fs::path path = fs::path(::testing::TempDir()) / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ElfDynamic, ReadsWhatTheDynamicLoaderReads) {
  const ElfDynamic plugin = read_file(kOrigin / "libaccel_origin.so");
  EXPECT_NE(std::find(plugin.needed.begin(), plugin.needed.end(), "libvendor_origin_helper.so"),
            plugin.needed.end());
  EXPECT_EQ(plugin.search_path, std::vector<std::string>{"$ORIGIN"});
  const ElfDynamic helper = read_file(kOrigin / "libvendor_origin_helper.so");
  EXPECT_EQ(helper.soname, "libvendor_origin_helper.so");
}

TEST(ElfDynamic, NotAnElfIsEmpty) {
  const ElfDynamic dynamic =
      read_file(write_temp("not_elf.so", "not an ELF file at all, but long enough to read a header from: 64 bytes+"));
  EXPECT_TRUE(dynamic.needed.empty() && dynamic.search_path.empty() && dynamic.soname.empty());
}

TEST(ElfDynamic, HeadersPointingOutsideTheFileAreOneError) {
  std::string bytes = bytes_of(kOrigin / "libaccel_origin.so");
  ASSERT_GT(bytes.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  header.e_phoff = bytes.size() - 8;  // the program headers run off the end
  std::string damaged = bytes;
  std::memcpy(damaged.data(), &header, sizeof(header));
  try {
    read_file(write_temp("phoff.so", damaged));
    ADD_FAILURE() << "a program header table outside the file was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("program header table lies outside the file"), std::string::npos)
        << e.what();
  }
  // Cut short: whatever is left is read within the file, or refused.
  try {
    read_file(write_temp("cut.so", bytes.substr(0, bytes.size() / 4)));
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the file"), std::string::npos) << e.what();
  }
}

}  // namespace
