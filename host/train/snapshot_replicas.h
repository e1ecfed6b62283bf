// The copies of each rank's snapshot files on a rank of another node
// (checkpoint/node_copies.h): a job spanning nodes keeps its snapshots in
// each node's own memory, so a node lost with its memory leaves each of its
// files on the next node, and the next start assembles the whole.
//
// The copies travel on a process group of their own, used by the
// background writer's thread alone (comm/file_transfer.h), so they never
// interleave with the training thread's collectives.
//
// Thread-safety: create() on the training thread (collective over the
// world); replicate() on the one thread that writes the save.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "host/checkpoint/rank_commit.h"
#include "host/comm/process_group.h"

namespace accel::train {

class SnapshotReplicas {
 public:
  // Over every rank of `world` when it spans nodes (collective over it);
  // nullptr on every rank when it does not.
  static std::unique_ptr<SnapshotReplicas> create(comm::ProcessGroup& world);

  // Sets `group`'s nodes and replicate (rank_commit.h) for a save into the
  // node-local snapshot root. The group must outlive the save.
  void attach(checkpoint::RankGroup& group);

 private:
  SnapshotReplicas(std::unique_ptr<comm::ProcessGroup> group, std::vector<int> nodes);

  std::vector<checkpoint::ManifestEntry> replicate(const std::filesystem::path& dir,
                                                  const std::vector<std::string>& files);

  std::unique_ptr<comm::ProcessGroup> group_;
  std::vector<int> nodes_;
  std::vector<int> partners_;  // checkpoint::replica_partners(nodes_)
};

}  // namespace accel::train
