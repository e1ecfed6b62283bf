// Checkpoints whose root is each node's own (snapshots in /dev/shm): which
// node holds which rank's files, and how the nodes of a restarted job make
// one of them whole again. Pure logic over names and manifests (the bytes
// move through comm/file_transfer.h); see docs/checkpoint_format.md,
// "Snapshots across nodes".
//
// With a node-local root, rank r's files land in its own node's directory
// and, as a replica, in the directory of its partner's node (the next node,
// the same position among that node's ranks). Each node publishes a
// directory holding the files it has, its manifest listing exactly those,
// plus kNodeFilesName: every file of the checkpoint as a whole. A node lost
// with its memory leaves each of its files on the next node.
//
// Thread-safety: free functions over values; none shares state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "host/checkpoint/atomic_dir.h"  // ManifestEntry

namespace accel::checkpoint {

// In each node's directory: the entries of every file of the checkpoint
// (its manifest lists the ones that node holds).
inline constexpr std::string_view kNodeFilesName = "checkpoint_files.json";

// The number of distinct nodes in `nodes` (node of each rank, index = rank).
int count_nodes(const std::vector<int>& nodes);

// Whether `rank` is the lowest rank of its node: the one that creates,
// publishes and prunes the node's directory.
bool is_node_leader(const std::vector<int>& nodes, int rank);

// The rank that keeps a replica of each rank's files (index = rank): the
// rank at the same position (modulo its count) among the next node's ranks,
// nodes taken in order of their lowest rank. -1 for every rank when there
// is one node. Throws CheckpointError when `nodes` is empty.
std::vector<int> replica_partners(const std::vector<int>& nodes);

// kNodeFilesName's text and its parse. The parse throws CheckpointError
// naming `path` for anything malformed (a file is input like any other).
std::string node_files_json(std::vector<ManifestEntry> all);
std::vector<ManifestEntry> parse_node_files(std::string_view text, const std::filesystem::path& path);

// What a node holds of one checkpoint: the entries its manifest lists
// (without kNodeFilesName) and the entries of the whole.
struct NodeCheckpoint {
  std::vector<ManifestEntry> present;
  std::vector<ManifestEntry> all;
};

// What one node of a restarted job reports: its committed checkpoints by
// step, and the rank that speaks for it.
struct NodeHoldings {
  int leader = 0;
  std::map<int64_t, NodeCheckpoint> steps;
};

// `dir`'s holdings as its manifest states them (nothing else read but
// kNodeFilesName). A directory without kNodeFilesName is whole by its
// manifest: `all` equals `present`. Throws CheckpointError.
NodeCheckpoint read_node_checkpoint(const std::filesystem::path& dir);

// Serialised for the exchange between nodes, and back. The parse throws
// CheckpointError for anything malformed (the text came from a peer).
std::string holdings_json(const NodeHoldings& holdings);
NodeHoldings parse_holdings(std::string_view text);

// One file a node lacks and another has: `from` sends, `to` receives (both
// leaders, world ranks).
struct FileCopy {
  ManifestEntry file;
  int from = 0;
  int to = 0;
};

// The newest step whose files the nodes hold between them (every node that
// has the step agrees on its whole), and the copies that make it whole on
// every node, ordered by receiving node then file name (every rank computes
// the same list). step -1 when no step can be made whole.
struct AssemblyPlan {
  int64_t step = -1;
  std::vector<FileCopy> copies;
};
AssemblyPlan plan_assembly(const std::vector<NodeHoldings>& nodes);

// Assembly on one node, by its leader: root/<name>.tmp holding hard links
// to the files of root/<name> that are in `keep` (the node's copies, none
// when it lacks the step), for the missing files to be received into.
PendingCheckpointDir start_assembly(const std::filesystem::path& root, const std::string& name,
                                    const std::vector<ManifestEntry>& keep);

// Checks that the pending directory holds every file of `all` with its
// size and crc32, writes kNodeFilesName and the manifest, and publishes
// it over root/<name>. Throws CheckpointError naming the first file that
// differs.
void complete_assembly(PendingCheckpointDir& pending, std::vector<ManifestEntry> all);

// Whether `dir` holds every file of the whole (kNodeFilesName) by its
// manifest (read, not verified: the resume verifies what it loads); `why`
// receives the first problem.
bool node_checkpoint_is_whole(const std::filesystem::path& dir, std::string* why = nullptr);

}  // namespace accel::checkpoint
