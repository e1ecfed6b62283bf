// moment_swap_test.cpp — the NVMe swap of AdamW moments on its own: what a
// pass writes, the next pass reads, in pieces, through fewer buffers than
// pieces, with pieces never written reading as zeros, nothing left in the
// directory, and errors surfacing rather than lost. (Its use by the sharded optimizer and
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
#include <utility>
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

  // `count` slots sized for the largest piece of `numel`.
  std::vector<float*> slots(const std::vector<int64_t>& numel, int count, int64_t piece = kPiece,
                            bool with_masters = false) {
    const int64_t elements = MomentSwap::slot_elements(numel, piece);
    storage_.assign(static_cast<size_t>(count),
                    std::vector<float>(static_cast<size_t>(MomentSwap::arrays(with_masters) * elements), -1.0f));
    std::vector<float*> out;
    for (auto& s : storage_) out.push_back(s.data());
    return out;
  }

  static constexpr int64_t kPiece = 4;  // units of 5 and 7 elements come in two pieces
  std::string dir_;
  std::vector<std::vector<float>> storage_;
};

std::vector<int32_t> all_units(size_t n) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

TEST_F(MomentSwapTest, WhatAPassWritesTheNextReadsInPiecesThroughFewerBuffers) {
  // Unit 2 is not swapped (numel 0); the others differ in size, 0, 3 and 5
  // span two pieces of 4.
  const std::vector<int64_t> numel = {5, 3, 0, 7, 1, 6, 2};
  EXPECT_EQ(MomentSwap::slot_elements(numel, kPiece), 4);
  MomentSwap swap(dir_, 0, numel, kPiece, slots(numel, 2));
  EXPECT_FALSE(swap.swapped(2));
  EXPECT_TRUE(swap.swapped(3));
  std::vector<std::pair<int32_t, int64_t>> visited;
  // First pass: never written, so zeros; then each element gets a value
  // unique to its unit, moment and index within the unit.
  swap.pass(all_units(numel.size()), true, [&](int32_t u, int64_t begin, int64_t count, float* m, float* v) {
    visited.emplace_back(u, begin);
    EXPECT_EQ(count, std::min<int64_t>(kPiece, numel[static_cast<size_t>(u)] - begin));
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(m[i], 0.0f) << "unit " << u;
      EXPECT_EQ(v[i], 0.0f) << "unit " << u;
      m[i] = static_cast<float>(100 * u + begin + i);
      v[i] = static_cast<float>(-100 * u - begin - i);
    }
  });
  EXPECT_EQ(visited, (std::vector<std::pair<int32_t, int64_t>>{
                         {0, 0}, {0, 4}, {1, 0}, {3, 0}, {3, 4}, {4, 0}, {5, 0}, {5, 4}, {6, 0}}));
  // A read-only pass in another order sees every value, and leaves them.
  for (int round = 0; round < 2; ++round) {
    swap.pass({6, 5, 4, 3, 1, 0}, false, [&](int32_t u, int64_t begin, int64_t count, float* m, float* v) {
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(m[i], static_cast<float>(100 * u + begin + i)) << "unit " << u << " element " << begin + i;
        ASSERT_EQ(v[i], static_cast<float>(-100 * u - begin - i)) << "unit " << u << " element " << begin + i;
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
  MomentSwap swap(dir_, 3, numel, kPiece, slots(numel, 2));
  swap.pass(all_units(2), true, [](int32_t, int64_t, int64_t, float* m, float*) { m[0] = 1.0f; });
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "a killed run would leave it behind";
}

TEST_F(MomentSwapTest, AMissingDirectoryIsOneClearError) {
  const std::vector<int64_t> numel = {4};
  try {
    MomentSwap swap(dir_ + "/no/such", 0, numel, kPiece, slots(numel, 2));
    FAIL() << "accepted a missing directory";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find(dir_ + "/no/such"), std::string::npos) << e.what();
  }
}

TEST_F(MomentSwapTest, OneBufferIsRefused) {
  const std::vector<int64_t> numel = {4};
  EXPECT_THROW(MomentSwap(dir_, 0, numel, kPiece, slots(numel, 1)), sdk::Error);
}

TEST_F(MomentSwapTest, AVisitThatThrowsLeavesTheSwapUsable) {
  const std::vector<int64_t> numel = {3, 3, 3, 3};
  MomentSwap swap(dir_, 0, numel, kPiece, slots(numel, 3));
  swap.pass(all_units(4), true,
            [](int32_t u, int64_t, int64_t, float* m, float*) { m[0] = static_cast<float>(u + 1); });
  EXPECT_THROW(swap.pass(all_units(4), true,
                         [](int32_t u, int64_t, int64_t, float*, float*) {
                           if (u == 1) throw std::runtime_error("step failed");
                         }),
               std::runtime_error);
  // The reads queued ahead of the failure completed; unit 0's write went
  // through, and every value is intact.
  swap.pass(all_units(4), false, [](int32_t u, int64_t, int64_t, float* m, float*) {
    EXPECT_EQ(m[0], static_cast<float>(u + 1)) << "unit " << u;
  });
}

TEST_F(MomentSwapTest, MastersBesideTheMomentsWrittenAloneReadInPassesAndBack) {
  // Units of 5 and 7 elements in pieces of 4, 2 slots of 3 arrays each.
  const std::vector<int64_t> numel = {5, 0, 7};
  MomentSwap swap(dir_, 1, numel, kPiece, slots(numel, 2, kPiece, /*with_masters=*/true), /*with_masters=*/true);
  EXPECT_TRUE(swap.holds_masters());
  std::vector<float> master(7);
  // Never written: zeros.
  swap.read_masters(2, master.data());
  EXPECT_EQ(master, std::vector<float>(7, 0.0f));
  // Written alone (the initial weights): the moments of those pieces stay zero.
  std::iota(master.begin(), master.end(), 1.0f);
  swap.write_masters(0, master.data());
  swap.write_masters(2, master.data());
  swap.pass(all_units(numel.size()), true, [&](int32_t u, int64_t begin, int64_t count, float* m, float* v) {
    float* p = v + count;  // the master follows the moments in the slot
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(m[i], 0.0f);
      EXPECT_EQ(v[i], 0.0f);
      EXPECT_EQ(p[i], static_cast<float>(begin + i + 1)) << "unit " << u;
      m[i] = 10.0f * u;
      p[i] = -p[i];  // a step
    }
  });
  // What the pass wrote, read_masters reads; the moments are untouched by it.
  swap.read_masters(2, master.data());
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(master[static_cast<size_t>(i)], -static_cast<float>(i + 1));
  swap.pass({2}, false, [&](int32_t, int64_t, int64_t count, float* m, float*) {
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(m[i], 20.0f);
  });
  EXPECT_THROW(swap.read_masters(1, master.data()), sdk::Error);  // not swapped
  std::vector<float> own(2 * 2 * kPiece);  // slots of its own: storage_ backs `swap`
  MomentSwap moments_only(dir_, 2, numel, kPiece, {own.data(), own.data() + 2 * kPiece});
  EXPECT_THROW(moments_only.read_masters(0, master.data()), sdk::Error);
}

}  // namespace
}  // namespace accel::sharding
