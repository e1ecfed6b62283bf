// One checkpoint directory written by every rank: the multi-rank form of the
// commit protocol of atomic_dir.h, with failures agreed on by all ranks.
//
//   rank 0: create root/<name>.tmp      --- exchange #1 (rank 0's outcome)
//   others: attach
//   every rank: write its files, sync_files
//                                        --- exchange #2 (entries or error)
//   rank 0: check(notes), finalize      --- exchange #3 (rank 0's outcome)
//
// Invariant: either every rank returns the published directory, or every
// rank throws the same one-line CheckpointError naming the failing rank, and
// nothing is published (rank 0 deletes the pending directory when it can;
// one left behind is a `.tmp` that resume ignores). A rank that dies or
// never arrives makes the exchange itself fail by its timeout, so no rank
// waits forever.
//
// A root of each node's own (RankGroup::nodes spanning nodes): each node's
// lowest rank plays rank 0's part for its node's directory (create; then
// finalize with its ranks' files, their replicas and kNodeFilesName), every
// rank sends its files to its partner node between write and sync, and
// rank 0's check has a round of its own before any node publishes, so a
// refused checkpoint is published nowhere. A node whose publish fails after
// another's succeeded leaves the step on some nodes only: every rank throws,
// and the next start's assembly (node_copies.h) judges what the nodes hold.
//
// The exchange is injected (the seam for tests, and it keeps this library
// free of MPI): any all-gather of one string per rank will do.
//
// Thread-safety: one call per rank; the callbacks run on the calling thread.
// A RankCommit is used by one thread at a time (write may be another
// thread's than begin's and finish's, handed over with a happens-before).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/safetensors.h"  // CheckpointError

namespace accel::checkpoint {

// Every rank passes its string and receives every rank's, index = rank. A
// collective: every rank calls it at the same point. Throws (anything) when
// the communication fails or times out.
using ExchangeStrings = std::function<std::vector<std::string>(const std::string& mine)>;

// What one rank contributed to the checkpoint.
struct RankContribution {
  std::vector<std::string> files;  // plain names of the files it wrote into the pending directory
  // Files whose writer computed their size and crc32 as it wrote them
  // (SafetensorsWriter::write): synced and checked for size, not read back.
  std::vector<ManifestEntry> described;
  std::string note;  // opaque; rank 0's check receives every rank's
};

// Writes this rank's files into `pending_dir`; throws (anything) to fail the save.
using RankFilesWriter = std::function<RankContribution(const std::filesystem::path& pending_dir)>;

// Runs on rank 0 after every rank's files are written and synced, with
// notes[r] from rank r; throws (anything) to refuse the checkpoint.
using CommitCheck = std::function<void(const std::vector<std::string>& notes)>;

// Copies this rank's `files` (in `pending_dir`) to its partner on another
// node, and writes the files the ranks whose partner it is send into
// `pending_dir` (or drops them when it is empty: this rank's own write
// failed before it had a directory); returns them with the size and crc32
// of the bytes received (the commit syncs them and checks their sizes, not
// reading them back). Pairwise communication between ranks of different
// nodes, made by every rank (with no files when its own write failed) on
// the thread that writes. Throws (anything) when a transfer fails.
using ReplicateFiles = std::function<std::vector<ManifestEntry>(const std::filesystem::path& pending_dir,
                                                                const std::vector<std::string>& files)>;

struct RankGroup {
  int rank = 0;
  int world_size = 1;
  ExchangeStrings exchange;  // may be empty when world_size == 1
  // A root of each node's own (snapshots in /dev/shm): the node of every
  // rank, index = rank. With more than one node, the lowest rank of each
  // node creates, checks and publishes its node's directory, which holds
  // its ranks' files and their partners' replicas (node_copies.h), and
  // `replicate` makes the replicas. Empty: one root every rank shares.
  std::vector<int> nodes;
  ReplicateFiles replicate;
};

// Writes and publishes root/<name> from every rank of `group` (see above);
// returns root/<name>. Throws CheckpointError("checkpoint root/<name> not
// saved: rank R: <what failed>") on every rank when any rank failed; an
// exception of the exchange itself propagates unchanged.
// RankCommit's three calls in a row.
std::filesystem::path commit_from_all_ranks(const std::filesystem::path& root, const std::string& name,
                                            const RankGroup& group, const RankFilesWriter& write,
                                            const CommitCheck& check = {});

// The same protocol in three calls, for a caller that writes its files
// while it goes on with other work (asynchronous checkpoints): begin is
// exchange #1, write is the local part (no communication, so it may run on
// another thread), finish is exchanges #2 and #3. The errors are those of
// commit_from_all_ranks.
class RankCommit {
 public:
  // Exchange #1: rank 0 creates root/<name>.tmp, the others wait for its
  // outcome. Collective over `group` (copied: finish uses it again).
  static RankCommit begin(const std::filesystem::path& root, const std::string& name, const RankGroup& group);

  RankCommit(RankCommit&&) noexcept = default;
  RankCommit& operator=(RankCommit&&) noexcept = default;
  ~RankCommit() = default;

  // Writes and syncs this rank's files. Never throws: a failure becomes
  // this rank's message of exchange #2, so every rank learns it in finish.
  // Call once, before finish, from any one thread.
  void write(const RankFilesWriter& write);

  // Exchanges #2 and #3: every rank's outcome, rank 0's check and publish.
  // Collective. Returns root/<name> on every rank or throws on every rank.
  std::filesystem::path finish(const CommitCheck& check = {});

  const std::filesystem::path& final_dir() const { return final_dir_; }

 private:
  RankCommit(RankGroup group, std::filesystem::path final_dir, std::string failed);

  // A round in which the ranks that `act` run `step`: every rank throws the
  // first failure, each directory's creator abandoning its pending one.
  void act_and_agree(bool act, const std::function<void()>& step);
  // A node leader's finalize: its ranks' files and replicas, each equal to
  // its original in `entries` (every rank's own), and kNodeFilesName.
  void publish_node_part(const std::vector<std::vector<ManifestEntry>>& held, std::vector<ManifestEntry> entries);

  RankGroup group_;
  std::filesystem::path final_dir_;
  std::string failed_;  // "checkpoint DIR not saved: "
  std::optional<PendingCheckpointDir> pending_;  // leaders from begin; the others from write
  std::string message_;  // this rank's message of exchange #2, set by write
};

}  // namespace accel::checkpoint
