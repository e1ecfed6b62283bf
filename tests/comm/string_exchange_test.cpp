// all_gather_strings (the checkpoint commit's exchange): strings of every
// length round-trip, and a peer's length is bounded before anything is
// allocated for it: a rank running another program (an MPMD mismatch),
// simulated here by a rank that joins the lengths all_gather with a raw
// value of its own, makes every other rank throw one CommError naming that
// rank, never std::bad_alloc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/comm/process_group.h"
#include "host/comm/string_exchange.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {
namespace {

using testing::test_options;

class StringExchange : public ::testing::Test {
 protected:
  void SetUp() override { world_ = ProcessGroup::create_world(MPI_COMM_WORLD, 0, test_options()); }
  std::unique_ptr<ProcessGroup> world_;
};

TEST_F(StringExchange, EveryRanksStringArrivesWhole) {
  const int rank = world_->rank();
  const std::string mine(static_cast<size_t>(rank * 3), static_cast<char>('a' + rank));  // rank 0: empty
  const std::vector<std::string> all = all_gather_strings(*world_, mine, "test exchange");
  ASSERT_EQ(all.size(), static_cast<size_t>(world_->size()));
  for (int r = 0; r < world_->size(); ++r) {
    EXPECT_EQ(all[static_cast<size_t>(r)], std::string(static_cast<size_t>(r * 3), static_cast<char>('a' + r)));
  }
}

TEST_F(StringExchange, OversizedOrNegativePeerLengthIsRefusedNamingTheRank) {
  const int size = world_->size();
  if (size < 2) GTEST_SKIP() << "needs a peer";
  const int odd_rank = size - 1;
  for (const int64_t announced : {int64_t{1} << 62, int64_t{-5}, kMaxExchangedStringBytes + 1}) {
    if (world_->rank() == odd_rank) {
      // The "other program": its first collective carries any 8 bytes.
      std::vector<int64_t> lengths(static_cast<size_t>(size), 0);
      lengths[static_cast<size_t>(odd_rank)] = announced;
      ASSERT_TRUE(world_->all_gather(host_buffer(&lengths[static_cast<size_t>(odd_rank)], 1, DType::i64),
                                     host_buffer(lengths.data(), size, DType::i64))
                      .ok());
      continue;
    }
    try {
      all_gather_strings(*world_, "{}", "host checkpoint commit");
      ADD_FAILURE() << "a peer's length of " << announced << " bytes was accepted";
    } catch (const CommError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("host checkpoint commit: rank " + std::to_string(odd_rank) + " announced a string of " +
                          std::to_string(announced) + " bytes"),
                std::string::npos)
          << what;
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    }
  }
}

}  // namespace
}  // namespace accel::comm
