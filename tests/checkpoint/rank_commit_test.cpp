// The multi-rank commit protocol (rank_commit.h) with ranks as threads and
// an in-process all-gather: every rank's files in one published checkpoint,
// and a failure on any rank — its writer, rank 0's create, rank 0's check —
// failing every rank with the same line and publishing nothing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/node_copies.h"
#include "host/checkpoint/rank_commit.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;

// An all-gather of strings among `size` threads: each round, every thread
// deposits its string and leaves with all of them once the last arrived.
class ThreadExchange {
 public:
  explicit ThreadExchange(int size) : size_(size), slots_(static_cast<size_t>(size)) {}

  std::vector<std::string> all_gather(int rank, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t round = round_;
    slots_[static_cast<size_t>(rank)] = mine;
    if (++arrived_ == size_) {
      result_ = slots_;
      arrived_ = 0;
      ++round_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<std::string> slots_, result_;
  int arrived_ = 0;
  uint64_t round_ = 0;
};

// Rank r of n whose exchange is `exchange`.
RankGroup thread_group(int r, int n, ThreadExchange& exchange) {
  RankGroup group;
  group.rank = r;
  group.world_size = n;
  group.exchange = [&exchange, r](const std::string& mine) { return exchange.all_gather(r, mine); };
  return group;
}

struct RankOutcome {
  fs::path published;
  std::string error;
};

class RankCommitTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::remove_all(root_); }
  void TearDown() override { fs::remove_all(root_); }

  // Runs the protocol on `n` threads; `write(rank, dir)` is each rank's writer.
  std::vector<RankOutcome> run_ranks(int n, const std::function<RankContribution(int, const fs::path&)>& write,
                                     const CommitCheck& check = {}) {
    ThreadExchange exchange(n);
    std::vector<RankOutcome> outcomes(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        RankGroup group = thread_group(r, n, exchange);
        try {
          outcomes[static_cast<size_t>(r)].published = commit_from_all_ranks(
              root_, "step_3", group, [&, r](const fs::path& dir) { return write(r, dir); }, check);
        } catch (const CheckpointError& e) {
          outcomes[static_cast<size_t>(r)].error = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return outcomes;
  }

  static RankContribution write_file(int rank, const fs::path& dir) {
    const std::string name = "rank" + std::to_string(rank) + ".bin";
    std::ofstream(dir / name) << "bytes of rank " << rank;
    RankContribution contribution;
    contribution.files = {name};
    contribution.note = "note " + std::to_string(rank);
    return contribution;
  }

  fs::path root_ = fs::path(::testing::TempDir()) / ("accel_rank_commit_" + std::to_string(::getpid()));
};

TEST_F(RankCommitTest, EveryRanksFilesArePublishedTogether) {
  std::vector<std::string> seen_notes;
  const auto outcomes = run_ranks(3, write_file, [&](const std::vector<std::string>& notes) { seen_notes = notes; });
  for (const RankOutcome& o : outcomes) {
    EXPECT_EQ(o.error, "");
    EXPECT_EQ(o.published, root_ / "step_3");
  }
  EXPECT_EQ(seen_notes, (std::vector<std::string>{"note 0", "note 1", "note 2"}));
  std::string why;
  EXPECT_TRUE(verify_manifest(root_ / "step_3", &why)) << why;
  std::vector<std::string> listed;
  for (const ManifestEntry& e : read_manifest(root_ / "step_3").files) listed.push_back(e.file);
  EXPECT_EQ(listed, (std::vector<std::string>{"rank0.bin", "rank1.bin", "rank2.bin"}));
  EXPECT_FALSE(fs::exists(root_ / "step_3.tmp"));
}

TEST_F(RankCommitTest, AFailingRankFailsEveryRankAndPublishesNothing) {
  const auto outcomes = run_ranks(3, [](int rank, const fs::path& dir) {
    if (rank == 1) throw std::runtime_error("disk full");
    return write_file(rank, dir);
  });
  for (const RankOutcome& o : outcomes) {
    EXPECT_EQ(o.error, "checkpoint " + (root_ / "step_3").string() + " not saved: rank 1: disk full");
  }
  EXPECT_FALSE(fs::exists(root_ / "step_3"));
  EXPECT_FALSE(fs::exists(root_ / "step_3.tmp"));
  EXPECT_EQ(find_newest_complete(root_), std::nullopt);
}

TEST_F(RankCommitTest, SeveralFailingRanksReportTheFirst) {
  const auto outcomes = run_ranks(4, [](int rank, const fs::path&) -> RankContribution {
    throw std::runtime_error("rank " + std::to_string(rank) + " broke");
  });
  for (const RankOutcome& o : outcomes) {
    EXPECT_NE(o.error.find("rank 0: rank 0 broke (and 3 more rank(s) failed)"), std::string::npos) << o.error;
  }
}

TEST_F(RankCommitTest, RankZerosCheckRefusesTheWholeCheckpoint) {
  const auto outcomes = run_ranks(2, write_file, [](const std::vector<std::string>&) {
    throw CheckpointError("'@model/w': the slices saved by all ranks cover 4 of 8 elements");
  });
  for (const RankOutcome& o : outcomes) {
    EXPECT_NE(o.error.find("rank 0: '@model/w': the slices saved by all ranks cover 4 of 8"), std::string::npos)
        << o.error;
  }
  EXPECT_FALSE(fs::exists(root_ / "step_3"));
  EXPECT_FALSE(fs::exists(root_ / "step_3.tmp"));
}

TEST_F(RankCommitTest, ACreateThatFailsOnRankZeroStopsEveryRankBeforeWriting) {
  std::ofstream(root_) << "a file where the save root should be";
  int writes = 0;
  std::mutex mutex;
  const auto outcomes = run_ranks(2, [&](int rank, const fs::path& dir) {
    std::lock_guard<std::mutex> lock(mutex);
    ++writes;
    return write_file(rank, dir);
  });
  EXPECT_EQ(writes, 0);
  for (const RankOutcome& o : outcomes) EXPECT_NE(o.error.find("not saved: rank 0: "), std::string::npos) << o.error;
}

// What a peer sends is read by the one JSON rule (accel/sdk/json_input.hpp):
// a message nested 300,000 deep, or one whose entry is a huge wrong-typed
// value, is refused as one bounded line and nothing is published. Rank 0
// runs here; "rank 1" is the exchange, which sends `peer` in the round of
// entries.
TEST_F(RankCommitTest, AMalformedPeerMessageIsOneBoundedLine) {
  std::string many(2 * (1 << 19), ',');
  for (size_t i = 0; i < many.size(); i += 2) many[i] = '7';
  many.pop_back();
  const std::pair<std::string, std::string> cases[] = {
      {"{\"entries\":" + std::string(300000, '[') + std::string(300000, ']') + "}", "deeper than 64 levels"},
      {R"({"entries":[{"file":"a","size":[)" + many + R"(],"crc32":0}],"note":""})",
       "\"entries[0].size\" must be an integer >= 0, got an array of 524288 element(s)"},
      {R"({"entries":[{"file":"a","size":1,"crc32":4294967296}],"note":""})",
       "\"entries[0].crc32\" must be at most 4294967295"},
      {R"({"entries":[],"note":)" + std::string("[") + many + "]}", "\"note\" must be a string, got an array"},
      {"not json", "not valid JSON"},
      {R"({"entries":[{"file":"../x","size":1,"crc32":0}],"note":""})", "entries names an invalid file \"../x\""},
  };
  for (const auto& [peer, expected] : cases) {
    fs::remove_all(root_);
    int round = 0;
    RankGroup group;
    group.world_size = 2;
    group.exchange = [&](const std::string& mine) -> std::vector<std::string> {
      return {mine, ++round == 2 ? peer : std::string()};
    };
    std::string error;
    try {
      commit_from_all_ranks(root_, "step_3", group, [](const fs::path& dir) { return write_file(0, dir); });
    } catch (const CheckpointError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("malformed commit message from rank 1: "), std::string::npos) << error.substr(0, 300);
    EXPECT_NE(error.find(expected), std::string::npos) << error.substr(0, 300);
    EXPECT_LT(error.size(), 400u) << error.substr(0, 300);
    EXPECT_FALSE(fs::exists(root_ / "step_3"));
  }
}

// Node-local roots (snapshots in each node's memory): ranks as threads,
// node n's root at root_/node<n>, and a replication that copies a rank's
// files into its partner's pending directory.
class NodeLocalCommitTest : public RankCommitTest {
 protected:
  fs::path node_root(int node) const { return root_ / ("node" + std::to_string(node)); }

  // `failing_replica`: that rank's transfer throws; `short_replica`: that
  // rank received fewer bytes than its transfer reported.
  std::vector<RankOutcome> run_nodes(const std::vector<int>& nodes, int failing_replica = -1,
                                     int short_replica = -1) {
    const int n = static_cast<int>(nodes.size());
    const std::vector<int> partners = replica_partners(nodes);
    ThreadExchange exchange(n), copied(n);
    std::vector<RankOutcome> outcomes(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        RankGroup group = thread_group(r, n, exchange);
        group.nodes = nodes;
        group.replicate = [&, r](const fs::path& dir, const std::vector<std::string>& files) {
          const fs::path to = node_root(nodes[static_cast<size_t>(partners[static_cast<size_t>(r)])]) / "step_3.tmp";
          std::string sent;
          for (const std::string& f : files) {
            fs::copy_file(dir / f, to / f);
            sent += f;
          }
          const std::vector<std::string> all = copied.all_gather(r, sent);
          if (r == failing_replica) throw std::runtime_error("connection reset by peer");
          // As the transfer reports them: size and crc32 of the bytes received.
          std::vector<ManifestEntry> received;
          for (size_t s = 0; s < all.size(); ++s) {
            if (partners[s] == r && !all[s].empty()) received.push_back(describe_file(dir / all[s]));
          }
          if (r == short_replica && !received.empty()) received.front().size += 1;
          return received;
        };
        try {
          outcomes[static_cast<size_t>(r)].published = commit_from_all_ranks(
              node_root(nodes[static_cast<size_t>(r)]), "step_3", group,
              [&, r](const fs::path& dir) { return write_file(r, dir); });
        } catch (const CheckpointError& e) {
          outcomes[static_cast<size_t>(r)].error = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return outcomes;
  }

  static std::vector<std::string> names(const std::vector<ManifestEntry>& entries) {
    std::vector<std::string> out;
    for (const ManifestEntry& e : entries) out.push_back(e.file);
    return out;
  }
};

TEST_F(NodeLocalCommitTest, TwoNodesEachHoldTheWholeThroughTheirReplicas) {
  for (const RankOutcome& o : run_nodes({0, 0, 1, 1})) EXPECT_EQ(o.error, "");
  const std::vector<std::string> every = {"rank0.bin", "rank1.bin", "rank2.bin", "rank3.bin"};
  for (const int node : {0, 1}) {
    std::string why;
    EXPECT_TRUE(node_checkpoint_is_whole(node_root(node) / "step_3", &why)) << why;
    const NodeCheckpoint held = read_node_checkpoint(node_root(node) / "step_3");
    EXPECT_EQ(names(held.present), every);
    EXPECT_EQ(names(held.all), every);
  }
}

TEST_F(NodeLocalCommitTest, ThreeNodesHoldTheirOwnAndAPeersFilesAndTheSurvivorsOfALostOneAssemble) {
  for (const RankOutcome& o : run_nodes({0, 1, 2})) EXPECT_EQ(o.error, "");
  // Rank r's partner is on the next node: node n keeps its own file and node n-1's.
  EXPECT_EQ(names(read_node_checkpoint(node_root(0) / "step_3").present),
            (std::vector<std::string>{"rank0.bin", "rank2.bin"}));
  EXPECT_EQ(names(read_node_checkpoint(node_root(1) / "step_3").present),
            (std::vector<std::string>{"rank0.bin", "rank1.bin"}));
  std::string why;
  EXPECT_TRUE(verify_manifest(node_root(1) / "step_3", &why)) << why;
  EXPECT_FALSE(node_checkpoint_is_whole(node_root(1) / "step_3"));
  // Node 1 lost: nodes 0 and 2 hold every file between them.
  std::vector<NodeHoldings> survivors(2);
  survivors[0].leader = 0;
  survivors[0].steps[3] = read_node_checkpoint(node_root(0) / "step_3");
  survivors[1].leader = 1;
  survivors[1].steps[3] = read_node_checkpoint(node_root(2) / "step_3");
  const AssemblyPlan plan = plan_assembly(survivors);
  EXPECT_EQ(plan.step, 3);
  ASSERT_EQ(plan.copies.size(), 2u);
  EXPECT_EQ(plan.copies[0].file.file, "rank1.bin");
  EXPECT_EQ(plan.copies[1].file.file, "rank0.bin");
}

TEST_F(NodeLocalCommitTest, AFailedReplicaFailsEveryRankAndNoNodePublishes) {
  for (const RankOutcome& o : run_nodes({0, 0, 1, 1}, /*failing_replica=*/2)) {
    EXPECT_NE(o.error.find("not saved: rank 2: replicating its files to another node: connection reset by peer"),
              std::string::npos)
        << o.error;
  }
  for (const int node : {0, 1}) {
    EXPECT_FALSE(fs::exists(node_root(node) / "step_3"));
    EXPECT_FALSE(fs::exists(node_root(node) / "step_3.tmp"));
  }
}

// A replica whose received bytes are not what the transfer reported (its
// size on disk differs) fails the save on every rank, as a failed transfer.
TEST_F(NodeLocalCommitTest, AReplicaThatIsNotWhatWasReceivedFailsEveryRank) {
  for (const RankOutcome& o : run_nodes({0, 0, 1, 1}, /*failing_replica=*/-1, /*short_replica=*/3)) {
    EXPECT_NE(o.error.find("not saved: rank 3: replicating its files to another node"), std::string::npos) << o.error;
  }
  for (const int node : {0, 1}) EXPECT_FALSE(fs::exists(node_root(node) / "step_3"));
}

// A writer that computed its files' entries as it wrote them: the entries
// go into the manifest as given (no read-back), after a size check that
// refuses a file which is not what its writer wrote.
TEST_F(RankCommitTest, DescribedFilesAreSyncedWithoutReadingThemBack) {
  const auto write_described = [](int rank, const fs::path& dir, uint64_t claimed_extra) {
    const std::string name = "described" + std::to_string(rank) + ".bin";
    std::ofstream(dir / name) << "bytes of rank " << rank;
    ManifestEntry entry = describe_file(dir / name);
    entry.size += claimed_extra;
    RankContribution contribution = write_file(rank, dir);
    contribution.described.push_back(entry);
    return contribution;
  };
  for (const RankOutcome& o : run_ranks(2, [&](int r, const fs::path& d) { return write_described(r, d, 0); })) {
    EXPECT_EQ(o.error, "");
  }
  std::string why;
  EXPECT_TRUE(verify_manifest(root_ / "step_3", &why)) << why;
  EXPECT_EQ(read_manifest(root_ / "step_3").files.size(), 4u);
  fs::remove_all(root_);
  for (const RankOutcome& o : run_ranks(2, [&](int r, const fs::path& d) { return write_described(r, d, r); })) {
    EXPECT_NE(o.error.find("rank 1: "), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("described1.bin: holds 15 bytes where its writer wrote 16"), std::string::npos) << o.error;
  }
  EXPECT_FALSE(fs::exists(root_ / "step_3"));
}

TEST_F(RankCommitTest, OneProcessNeedsNoExchange) {
  const fs::path dir = commit_from_all_ranks(root_, "step_3", RankGroup{}, [](const fs::path& d) {
    return write_file(0, d);
  });
  EXPECT_EQ(dir, root_ / "step_3");
  EXPECT_TRUE(verify_manifest(dir));
}

}  // namespace
// The protocol in three calls (asynchronous saves): each rank writes on a
// thread of its own between begin and finish, and the pending directory is
// unpublished until every rank has finished; a rank whose background write
// failed fails the save on every rank.
TEST_F(RankCommitTest, BeginWriteFinishWithTheWritesOnOtherThreads) {
  for (const int failing : {-1, 1}) {
    fs::remove_all(root_);
    const int n = 3;
    ThreadExchange exchange(n);
    std::vector<RankOutcome> outcomes(static_cast<size_t>(n));
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        RankGroup group = thread_group(r, n, exchange);
        try {
          RankCommit commit = RankCommit::begin(root_, "step_3", group);
          std::thread background([&] {
            commit.write([&](const fs::path& dir) {
              if (r == failing) throw std::runtime_error("no space left on device");
              return write_file(r, dir);
            });
          });
          background.join();
          EXPECT_FALSE(fs::exists(root_ / "step_3"));  // no rank publishes before finish
          outcomes[static_cast<size_t>(r)].published = commit.finish();
        } catch (const CheckpointError& e) {
          outcomes[static_cast<size_t>(r)].error = e.what();
        }
      });
    }
    for (std::thread& t : ranks) t.join();
    for (const RankOutcome& o : outcomes) {
      if (failing < 0) {
        EXPECT_EQ(o.error, "");
        EXPECT_EQ(o.published, root_ / "step_3");
      } else {
        EXPECT_NE(o.error.find("not saved: rank 1: no space left on device"), std::string::npos) << o.error;
      }
    }
    std::string why;
    EXPECT_EQ(verify_manifest(root_ / "step_3", &why), failing < 0) << why;
    EXPECT_FALSE(fs::exists(root_ / "step_3.tmp"));
  }
}

}  // namespace accel::checkpoint
