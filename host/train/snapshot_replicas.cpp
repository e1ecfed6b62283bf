// Snapshot replicas on another node (see snapshot_replicas.h).
#include "host/train/snapshot_replicas.h"

#include "host/checkpoint/node_copies.h"
#include "host/comm/file_transfer.h"

namespace accel::train {

namespace {
constexpr int kReplicaTag = 7301;
}  // namespace

std::unique_ptr<SnapshotReplicas> SnapshotReplicas::create(comm::ProcessGroup& world) {
  const std::shared_ptr<const std::vector<int>>& world_nodes = world.options().world_nodes;
  if (!world_nodes || world_nodes->size() != static_cast<size_t>(world.size()) ||
      checkpoint::count_nodes(*world_nodes) < 2) {
    return nullptr;
  }
  std::unique_ptr<comm::ProcessGroup> group = world.split(0, world.rank(), "snapshot replicas");
  return std::unique_ptr<SnapshotReplicas>(new SnapshotReplicas(std::move(group), *world_nodes));
}

SnapshotReplicas::SnapshotReplicas(std::unique_ptr<comm::ProcessGroup> group, std::vector<int> nodes)
    : group_(std::move(group)), nodes_(std::move(nodes)), partners_(checkpoint::replica_partners(nodes_)) {}

void SnapshotReplicas::attach(checkpoint::RankGroup& group) {
  group.nodes = nodes_;
  group.replicate = [this](const std::filesystem::path& dir, const std::vector<std::string>& files) {
    return replicate(dir, files);
  };
}

std::vector<checkpoint::ManifestEntry> SnapshotReplicas::replicate(const std::filesystem::path& dir,
                                                                   const std::vector<std::string>& files) {
  const int rank = group_->rank();
  std::vector<std::filesystem::path> paths;
  for (const std::string& file : files) paths.push_back(dir / file);
  // Every send posted before any receive: partners send to each other.
  comm::FileSend out(group_->mpi(), partners_[static_cast<size_t>(rank)], kReplicaTag, paths);
  std::vector<checkpoint::ManifestEntry> received;
  for (size_t source = 0; source < partners_.size(); ++source) {
    if (partners_[source] != rank) continue;
    for (comm::ReceivedFile& file : comm::receive_files(group_->mpi(), static_cast<int>(source), kReplicaTag, dir)) {
      received.push_back(checkpoint::ManifestEntry{std::move(file.name), file.size, file.crc32});
    }
  }
  out.wait();
  return received;
}

}  // namespace accel::train
