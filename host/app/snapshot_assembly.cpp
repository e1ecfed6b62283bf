// Snapshots across nodes at start (see snapshot_assembly.h).
#include "host/app/snapshot_assembly.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "host/checkpoint/node_copies.h"
#include "host/cli/options.h"
#include "host/comm/file_transfer.h"
#include "host/comm/process_group.h"
#include "host/comm/string_exchange.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

namespace fs = std::filesystem;
using checkpoint::ManifestEntry;
using checkpoint::NodeHoldings;

constexpr int kAssemblyTag = 7302;
constexpr std::string_view kProbePrefix = ".accel-node-";

bool leads_node(const comm::MpiSession& mpi) { return checkpoint::is_node_leader(*mpi.world_nodes(), mpi.rank()); }

// What this node holds under `root` above `newer_than`: committed step
// directories whose manifest verifies (a damaged one is left out, so an
// older snapshot serves instead, as on one node).
NodeHoldings scan_node(const fs::path& root, int64_t newer_than, int rank) {
  NodeHoldings held;
  held.leader = rank;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::optional<uint64_t> step = checkpoint::checkpoint_step(entry.path().filename().string());
    if (!step || static_cast<int64_t>(*step) <= newer_than) continue;
    std::string why;
    if (!checkpoint::verify_manifest(entry.path(), &why)) {
      log::warn("--resume auto: the snapshot " + entry.path().string() + " is damaged (" + why + "); not used");
      continue;
    }
    try {
      held.steps[static_cast<int64_t>(*step)] = checkpoint::read_node_checkpoint(entry.path());
    } catch (const std::exception& e) {
      log::debug(std::string("snapshot assembly: ") + e.what());
    }
  }
  return held;
}

}  // namespace

void check_snapshot_root_is_per_node(const std::string& root, const comm::MpiSession& mpi) {
  if (mpi.num_nodes() < 2) return;
  const bool leader = leads_node(mpi);
  // A name no earlier job left behind.
  const std::string job = mpi.broadcast_from_root(strformat(
      "%d-%lld", static_cast<int>(::getpid()),
      static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count())));
  const std::string prefix = std::string(kProbePrefix) + job + "-";
  const fs::path probe = fs::path(root) / (prefix + std::to_string(mpi.rank()));
  std::string error;
  if (leader) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) {
      error = "cannot create " + root + ": " + ec.message();
    } else if (!std::ofstream(probe)) {
      error = "cannot write in " + root;
    }
  }
  if (!mpi.all_succeeded(error.empty())) {
    throw cli::UsageError("--snapshot-dir " + (error.empty() ? root + ": another node cannot write in it" : error));
  }
  std::string other;
  if (leader) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && entry.path() != probe) other = name.substr(prefix.size());
    }
  }
  const bool per_node = mpi.all_succeeded(other.empty());
  if (leader) {
    std::error_code ignored;
    fs::remove(probe, ignored);
  }
  if (!per_node) {
    throw cli::UsageError("--snapshot-dir " + root +
                          " is one directory for several nodes (a shared filesystem); snapshots live in each "
                          "node's own memory or local disk, with a copy on another node: give a node-local "
                          "directory (the default is under /dev/shm)");
  }
}

int64_t assemble_newest_snapshot(const std::string& root, int64_t newer_than, const comm::MpiSession& mpi,
                                 int64_t timeout_ms) {
  const int rank = mpi.rank();
  const bool leader = leads_node(mpi);
  NodeHoldings mine = leader ? scan_node(root, newer_than, rank) : NodeHoldings{};
  std::vector<NodeHoldings> nodes;
  std::unique_ptr<comm::ProcessGroup> group;
  std::string error;
  try {
    if (mpi.world_size() == 1) {
      nodes.push_back(mine);
    } else {
      comm::CommOptions options;
      options.backend = comm::Backend::mpi;
      options.timeout_ms = timeout_ms;
      options.world_nodes = mpi.world_nodes();
      group = comm::ProcessGroup::create_world(MPI_COMM_WORLD, mpi.local_rank(), options, "snapshot assembly");
      const std::string held = leader ? checkpoint::holdings_json(mine) : std::string();
      const std::vector<std::string> all = comm::all_gather_strings(*group, held, "snapshot holdings");
      // Every rank parses the same strings: all fail alike or none does.
      for (const std::string& text : all) {
        if (!text.empty()) nodes.push_back(checkpoint::parse_holdings(text));
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!mpi.all_succeeded(error.empty())) {
    if (!error.empty()) log::warn("--resume auto: the snapshots' nodes could not compare what they hold: " + error);
    return -1;
  }
  const checkpoint::AssemblyPlan plan = checkpoint::plan_assembly(nodes);
  if (plan.step < 0) return -1;
  const std::string name = "step_" + std::to_string(plan.step);
  std::vector<ManifestEntry> whole;
  for (const NodeHoldings& node : nodes) {
    if (const auto it = node.steps.find(plan.step); it != node.steps.end()) whole = it->second.all;
  }
  std::optional<checkpoint::PendingCheckpointDir> pending;
  const bool receives =
      std::any_of(plan.copies.begin(), plan.copies.end(), [&](const checkpoint::FileCopy& c) { return c.to == rank; });
  if (receives) {
    try {
      std::vector<ManifestEntry> keep;
      if (const auto it = mine.steps.find(plan.step); it != mine.steps.end()) {
        for (const ManifestEntry& file : it->second.present) {
          if (std::find(whole.begin(), whole.end(), file) != whole.end()) keep.push_back(file);
        }
      }
      pending.emplace(checkpoint::start_assembly(root, name, keep));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // The copies in one order on every rank, each between its two leaders: a
  // rank that failed still takes its part (receiving into nothing), so no
  // peer waits on it.
  for (const checkpoint::FileCopy& copy : plan.copies) {
    try {
      if (copy.from == rank) {
        comm::send_files(*group, copy.to, kAssemblyTag, {fs::path(root) / name / copy.file.file});
      } else if (copy.to == rank) {
        comm::receive_files(*group, copy.from, kAssemblyTag, pending ? pending->dir() : fs::path());
      }
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (pending && error.empty()) {
    try {
      checkpoint::complete_assembly(*pending, whole);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (pending && !error.empty()) {
    try {
      pending->abandon();
    } catch (...) {
    }
  }
  if (!mpi.all_succeeded(error.empty())) {
    if (!error.empty()) {
      log::warn("--resume auto: the snapshot " + name + " could not be made whole on this node: " + error);
    }
    return -1;
  }
  if (rank == 0 && !plan.copies.empty()) {
    log::info(strformat("--resume auto: the snapshot %s made whole on every node (%zu file(s) copied between nodes)",
                        name.c_str(), plan.copies.size()));
  }
  return plan.step;
}

}  // namespace accel::app
