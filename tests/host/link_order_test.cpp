// Regression test: libtorch.so exports its own std::filesystem symbols, and
// a binary that lists libtorch before libstdc++ in NEEDED calls torch's copy
// of std::filesystem::remove_all, which crashes (see cmake/AccelTorch.cmake).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

TEST(LinkOrder, StdFilesystemResolvesToLibstdcxxNotLibtorch) {
  (void)at::ones({1});  // make sure libtorch is really loaded and used
  const auto dir = std::filesystem::path(::testing::TempDir()) / "accel_link_order_test";
  std::filesystem::create_directories(dir / "nested");
  std::ofstream(dir / "nested" / "file") << "x";
  EXPECT_EQ(std::filesystem::remove_all(dir), 3u);
  EXPECT_FALSE(std::filesystem::exists(dir));
}
