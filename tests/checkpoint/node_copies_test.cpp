// Node-local checkpoint roots (node_copies.h): who keeps a replica of whose
// files, which step the nodes of a restarted job can make whole and the
// copies that do it, and one node's assembly into a published directory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/node_copies.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;

TEST(ReplicaPartners, EachRankPairsWithTheSamePositionOnTheNextNode) {
  EXPECT_EQ(replica_partners({0, 0, 1, 1}), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(replica_partners({0, 1, 2}), (std::vector<int>{1, 2, 0}));
  // Uneven nodes: positions wrap on the smaller node.
  EXPECT_EQ(replica_partners({0, 0, 0, 1}), (std::vector<int>{3, 3, 3, 0}));
  // Nodes numbered out of rank order are taken by their lowest rank.
  EXPECT_EQ(replica_partners({5, 2, 5, 2}), (std::vector<int>{1, 0, 3, 2}));
  EXPECT_EQ(replica_partners({0, 0}), (std::vector<int>{-1, -1}));
  EXPECT_THROW(replica_partners({}), CheckpointError);
  EXPECT_TRUE(is_node_leader({0, 0, 1, 1}, 2));
  EXPECT_FALSE(is_node_leader({0, 0, 1, 1}, 3));
  EXPECT_EQ(count_nodes({3, 3, 1}), 2);
}

ManifestEntry file(const std::string& name) { return {name, name.size(), static_cast<uint32_t>(name.size() * 7)}; }

NodeHoldings node(int leader, int64_t step, std::vector<ManifestEntry> present, std::vector<ManifestEntry> all) {
  NodeHoldings held;
  held.leader = leader;
  held.steps[step] = {std::move(present), std::move(all)};
  return held;
}

TEST(PlanAssembly, ALostNodesFilesComeFromItsReplicas) {
  const std::vector<ManifestEntry> all = {file("r0"), file("r1"), file("r2")};
  // Three nodes of one rank; node 1 lost. Node 0 kept rank 2's replica, node 2 rank 1's.
  const AssemblyPlan plan =
      plan_assembly({node(0, 9, {file("r0"), file("r2")}, all), node(1, 9, {file("r1"), file("r2")}, all)});
  EXPECT_EQ(plan.step, 9);
  ASSERT_EQ(plan.copies.size(), 2u);
  EXPECT_EQ(plan.copies[0].file.file, "r1");
  EXPECT_EQ(plan.copies[0].from, 1);
  EXPECT_EQ(plan.copies[0].to, 0);
  EXPECT_EQ(plan.copies[1].file.file, "r0");
  EXPECT_EQ(plan.copies[1].from, 0);
  EXPECT_EQ(plan.copies[1].to, 1);
}

TEST(PlanAssembly, AFreshNodeReceivesEveryFileFromTheLowestHolder) {
  const std::vector<ManifestEntry> all = {file("a"), file("b")};
  NodeHoldings fresh;
  fresh.leader = 4;
  const AssemblyPlan plan = plan_assembly({node(2, 5, all, all), node(0, 5, all, all), fresh});
  EXPECT_EQ(plan.step, 5);
  ASSERT_EQ(plan.copies.size(), 2u);
  for (const FileCopy& copy : plan.copies) {
    EXPECT_EQ(copy.from, 0);
    EXPECT_EQ(copy.to, 4);
  }
}

TEST(PlanAssembly, TheNewestStepTheNodesCoverWins) {
  const std::vector<ManifestEntry> old_all = {file("x"), file("y")};
  const std::vector<ManifestEntry> new_all = {file("x1"), file("y1")};
  NodeHoldings a = node(0, 10, {file("x1")}, new_all);  // step 10: y1 lost with its node
  a.steps[5] = {old_all, old_all};
  const AssemblyPlan plan = plan_assembly({a});
  EXPECT_EQ(plan.step, 5);
  EXPECT_TRUE(plan.copies.empty());
  // Nodes that disagree on a step's whole never assemble it.
  EXPECT_EQ(plan_assembly({node(0, 3, {file("x")}, {file("x")}), node(1, 3, {file("x")}, {file("x"), file("y")})}).step,
            -1);
  // A copy whose bytes differ (another size or crc32) is no copy.
  ManifestEntry other = file("y");
  other.crc32 += 1;
  EXPECT_EQ(plan_assembly({node(0, 3, {file("x"), other}, old_all)}).step, -1);
  EXPECT_EQ(plan_assembly({}).step, -1);
}

TEST(PlanAssembly, HoldingsSurviveTheirWireForm) {
  NodeHoldings held = node(3, 7, {file("a")}, {file("a"), file("b")});
  held.steps[2] = {{file("c")}, {file("c")}};
  const NodeHoldings back = parse_holdings(holdings_json(held));
  EXPECT_EQ(back.leader, 3);
  ASSERT_EQ(back.steps.size(), 2u);
  EXPECT_EQ(back.steps.at(7).present, held.steps.at(7).present);
  EXPECT_EQ(back.steps.at(7).all, held.steps.at(7).all);
  const std::string escaping =
      R"({"leader":0,"steps":[{"step":1,"present":[{"file":"../x","size":1,"crc32":0}],"all":[]}]})";
  EXPECT_THROW(parse_holdings(escaping), CheckpointError);
  EXPECT_THROW(parse_holdings("[]"), CheckpointError);
}

class AssemblyTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::remove_all(root_); }
  void TearDown() override { fs::remove_all(root_); }

  static ManifestEntry write(const fs::path& dir, const std::string& name, const std::string& bytes) {
    fs::create_directories(dir);
    std::ofstream(dir / name) << bytes;
    return describe_file(dir / name);
  }

  fs::path root_ = fs::path(::testing::TempDir()) / ("accel_node_copies_" + std::to_string(::getpid()));
};

TEST_F(AssemblyTest, KeptFilesAreLinkedReceivedOnesCheckedAndTheWholePublished) {
  // The node's own step_4, committed as a node's directory is, holds rank
  // 0's file and a stray the whole lacks (publish replaces only a
  // committed directory).
  const ManifestEntry r0 = write(root_ / "step_4.tmp", "r0", "rank zero");
  write(root_ / "step_4.tmp", "stray", "not in the whole");
  PendingCheckpointDir::attach(root_, "step_4").commit();
  const ManifestEntry r1 = write(root_ / "elsewhere", "r1", "rank one");
  PendingCheckpointDir pending = start_assembly(root_, "step_4", {r0});
  EXPECT_EQ(fs::hard_link_count(pending.dir() / "r0"), 2u);
  fs::copy_file(root_ / "elsewhere" / "r1", pending.dir() / "r1");
  complete_assembly(pending, {r0, r1});
  std::string why;
  EXPECT_TRUE(node_checkpoint_is_whole(root_ / "step_4", &why)) << why;
  const NodeCheckpoint held = read_node_checkpoint(root_ / "step_4");
  EXPECT_EQ(held.all, (std::vector<ManifestEntry>{r0, r1}));
  EXPECT_FALSE(fs::exists(root_ / "step_4" / "stray"));
}

TEST_F(AssemblyTest, AReceivedFileThatDiffersIsRefusedAndNothingPublished) {
  const ManifestEntry r0 = write(root_ / "src", "r0", "rank zero");
  PendingCheckpointDir pending = start_assembly(root_, "step_4", {});
  std::ofstream(pending.dir() / "r0") << "rank zer0";  // same size, other bytes
  EXPECT_THROW(complete_assembly(pending, {r0}), CheckpointError);
  EXPECT_FALSE(fs::exists(root_ / "step_4"));
}

TEST_F(AssemblyTest, ANodeDirectoryMissingPartOfTheWholeIsNotWhole) {
  const ManifestEntry a = write(root_ / "step_2.tmp", "a", "aaa");
  const ManifestEntry b{"b", 3, 42};
  write_file_durably(root_ / "step_2.tmp" / std::string(kNodeFilesName), node_files_json({a, b}));
  PendingCheckpointDir pending = PendingCheckpointDir::attach(root_, "step_2");
  pending.commit();
  std::string why;
  EXPECT_FALSE(node_checkpoint_is_whole(root_ / "step_2", &why));
  EXPECT_EQ(why, "this node holds no copy of b");
}

}  // namespace
}  // namespace accel::checkpoint
