// The generation-tagged handle table behind AccelGroup* and AccelWork*
// (host/runtime/handle_table.h): handles are never NULL, find what was added,
// refuse a freed (stale), foreign-tag or made-up value, and a reused slot
// never revives an old handle.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "host/runtime/handle_table.h"

namespace accel::runtime {
namespace {

TEST(HandleTable, AddFindRemove) {
  HandleTable<int> table(0xA6);
  const uint64_t a = table.add(std::make_shared<int>(7));
  const uint64_t b = table.add(std::make_shared<int>(8));
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a >> 56, 0xA6u);
  HandleProblem problem = HandleProblem::kNull;
  ASSERT_NE(table.find(a, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kOk);
  EXPECT_EQ(*table.find(a, nullptr), 7);
  EXPECT_EQ(*table.find(b, nullptr), 8);
  EXPECT_EQ(table.live(), 2u);
  EXPECT_EQ(*table.remove(a, &problem), 7);
  EXPECT_EQ(table.live(), 1u);
  EXPECT_EQ(table.objects().size(), 1u);
}

TEST(HandleTable, FreedHandleIsStaleEvenAfterItsSlotIsReused) {
  HandleTable<int> table(0xA7);
  const uint64_t old = table.add(std::make_shared<int>(1));
  ASSERT_NE(table.remove(old, nullptr), nullptr);
  HandleProblem problem = HandleProblem::kOk;
  EXPECT_EQ(table.find(old, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kStale);
  const uint64_t reused = table.add(std::make_shared<int>(2));
  EXPECT_EQ(reused & HandleTable<int>::kIndexMask, old & HandleTable<int>::kIndexMask) << "the slot is reused";
  EXPECT_NE(reused, old) << "with a new generation";
  EXPECT_EQ(table.find(old, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kStale);
  EXPECT_EQ(*table.find(reused, nullptr), 2);
  // A second free of the old handle is refused and leaves the new one alone.
  EXPECT_EQ(table.remove(old, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kStale);
  EXPECT_EQ(table.live(), 1u);
}

TEST(HandleTable, MadeUpAndForeignValuesAreRefused) {
  HandleTable<int> groups(0xA6), works(0xA7);
  const uint64_t group = groups.add(std::make_shared<int>(1));
  const uint64_t work = works.add(std::make_shared<int>(2));
  HandleProblem problem = HandleProblem::kOk;
  EXPECT_EQ(groups.find(work, &problem), nullptr) << "a work handle is not a group handle";
  EXPECT_EQ(problem, HandleProblem::kForeign);
  EXPECT_EQ(works.find(group, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kForeign);
  EXPECT_EQ(groups.find(0, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kNull);
  int on_stack = 0;  // a real address, as a bogus handle would be
  EXPECT_EQ(groups.find(reinterpret_cast<uintptr_t>(&on_stack), &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kForeign);
  EXPECT_EQ(groups.find(0x1234, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kForeign);
  // The right tag but an index never handed out.
  EXPECT_EQ(groups.find((uint64_t{0xA6} << 56) | (uint64_t{1} << 24) | 99, &problem), nullptr);
  EXPECT_EQ(problem, HandleProblem::kForeign);
  EXPECT_EQ(groups.live(), 1u);
}

TEST(HandleTable, HandlesStayDistinctAcrossManyAddsAndRemoves) {
  HandleTable<int> table(0xA7);
  std::set<uint64_t> seen;
  for (int round = 0; round < 100; ++round) {
    const uint64_t a = table.add(std::make_shared<int>(round));
    const uint64_t b = table.add(std::make_shared<int>(round));
    EXPECT_TRUE(seen.insert(a).second);
    EXPECT_TRUE(seen.insert(b).second);
    table.remove(a, nullptr);
    table.remove(b, nullptr);
  }
  EXPECT_EQ(table.live(), 0u);
  for (uint64_t h : seen) EXPECT_EQ(table.find(h, nullptr), nullptr);
}

TEST(HandleTable, ProblemsAreDescribedInOneLine) {
  EXPECT_EQ(describe_handle_problem(HandleProblem::kStale, "group", "destroyed", 0xa600000001000000ull),
            "group handle 0xa600000001000000 is stale: its group was destroyed (a handle must not be used after "
            "that)");
  EXPECT_EQ(describe_handle_problem(HandleProblem::kForeign, "work", "freed", 0x1234),
            "work handle 0x1234 is not a work handle this host issued");
  EXPECT_EQ(describe_handle_problem(HandleProblem::kNull, "work", "freed", 0), "work handle is NULL");
}

}  // namespace
}  // namespace accel::runtime
