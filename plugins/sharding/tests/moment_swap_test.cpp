// moment_swap_test.cpp — the NVMe swap of AdamW moments on its own: what a
// pass writes, the next pass reads, through fewer buffers than units, with
// units never written reading as zeros, nothing left in the directory, and
// errors surfacing rather than lost. (Its use by the sharded optimizer and
// checkpoints runs under python.deepspeed_zero.)
#include <gtest/gtest.h>

#include <accel/sdk/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "../moment_swap.h"

namespace accel::sharding {
namespace {

class MomentSwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "accel_swap_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `count` slots sized for the largest of `numel`.
  std::vector<float*> slots(const std::vector<int64_t>& numel, int count) {
    const int64_t largest = *std::max_element(numel.begin(), numel.end());
    storage_.assign(static_cast<size_t>(count), std::vector<float>(static_cast<size_t>(2 * largest), -1.0f));
    std::vector<float*> out;
    for (auto& s : storage_) out.push_back(s.data());
    return out;
  }

  std::string dir_;
  std::vector<std::vector<float>> storage_;
};

std::vector<int32_t> all_units(size_t n) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

TEST_F(MomentSwapTest, WhatAPassWritesTheNextReadsThroughFewerBuffersThanUnits) {
  // Unit 2 is not swapped (numel 0); the others differ in size.
  const std::vector<int64_t> numel = {5, 3, 0, 7, 1, 6, 2};
  MomentSwap swap(dir_, 0, numel, slots(numel, 2));
  EXPECT_FALSE(swap.swapped(2));
  EXPECT_TRUE(swap.swapped(3));
  std::vector<int32_t> visited;
  // First pass: never written, so zeros; then each element gets a value
  // unique to its unit, moment and index.
  swap.pass(all_units(numel.size()), true, [&](int32_t u, float* m, float* v) {
    visited.push_back(u);
    const int64_t n = numel[static_cast<size_t>(u)];
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(m[i], 0.0f) << "unit " << u;
      EXPECT_EQ(v[i], 0.0f) << "unit " << u;
      m[i] = static_cast<float>(100 * u + i);
      v[i] = static_cast<float>(-100 * u - i);
    }
  });
  EXPECT_EQ(visited, (std::vector<int32_t>{0, 1, 3, 4, 5, 6}));
  // A read-only pass in another order sees every value, and leaves them.
  for (int round = 0; round < 2; ++round) {
    swap.pass({6, 5, 4, 3, 1, 0}, false, [&](int32_t u, float* m, float* v) {
      for (int64_t i = 0; i < numel[static_cast<size_t>(u)]; ++i) {
        ASSERT_EQ(m[i], static_cast<float>(100 * u + i)) << "unit " << u << " element " << i;
        ASSERT_EQ(v[i], static_cast<float>(-100 * u - i)) << "unit " << u << " element " << i;
      }
      m[0] = 12345.0f;  // not written back
    });
  }
  const MomentSwap::Traffic io = swap.take_traffic();
  const int64_t pair_bytes = 2 * (5 + 3 + 7 + 1 + 6 + 2) * 4;
  EXPECT_EQ(io.written, pair_bytes);
  EXPECT_EQ(io.read, 2 * pair_bytes);
  EXPECT_EQ(swap.take_traffic().read, 0);
}

TEST_F(MomentSwapTest, TheFileHasNoNameFromTheStart) {
  const std::vector<int64_t> numel = {4, 4};
  MomentSwap swap(dir_, 3, numel, slots(numel, 2));
  swap.pass(all_units(2), true, [](int32_t, float* m, float*) { m[0] = 1.0f; });
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "a killed run would leave it behind";
}

TEST_F(MomentSwapTest, AMissingDirectoryIsOneClearError) {
  const std::vector<int64_t> numel = {4};
  try {
    MomentSwap swap(dir_ + "/no/such", 0, numel, slots(numel, 2));
    FAIL() << "accepted a missing directory";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find(dir_ + "/no/such"), std::string::npos) << e.what();
  }
}

TEST_F(MomentSwapTest, OneBufferIsRefused) {
  const std::vector<int64_t> numel = {4};
  EXPECT_THROW(MomentSwap(dir_, 0, numel, slots(numel, 1)), sdk::Error);
}

TEST_F(MomentSwapTest, AVisitThatThrowsLeavesTheSwapUsable) {
  const std::vector<int64_t> numel = {3, 3, 3, 3};
  MomentSwap swap(dir_, 0, numel, slots(numel, 3));
  swap.pass(all_units(4), true, [](int32_t u, float* m, float*) { m[0] = static_cast<float>(u + 1); });
  EXPECT_THROW(swap.pass(all_units(4), true,
                         [](int32_t u, float*, float*) {
                           if (u == 1) throw std::runtime_error("step failed");
                         }),
               std::runtime_error);
  // The reads queued ahead of the failure completed; unit 0's write went
  // through, and every value is intact.
  swap.pass(all_units(4), false,
            [](int32_t u, float* m, float*) { EXPECT_EQ(m[0], static_cast<float>(u + 1)) << "unit " << u; });
}

}  // namespace
}  // namespace accel::sharding
