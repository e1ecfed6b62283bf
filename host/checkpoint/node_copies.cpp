// Node-local checkpoint roots: partners, node manifests, assembly (see node_copies.h).
#include "host/checkpoint/node_copies.h"

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "host/checkpoint/checkpoint_json.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;

bool by_name(const ManifestEntry& a, const ManifestEntry& b) { return a.file < b.file; }

// Nodes in order of their lowest rank, each with its ranks in order.
std::vector<std::vector<int>> ranks_by_node(const std::vector<int>& nodes) {
  std::vector<std::vector<int>> grouped;
  std::map<int, size_t> index;
  for (size_t r = 0; r < nodes.size(); ++r) {
    const auto [it, added] = index.emplace(nodes[r], grouped.size());
    if (added) grouped.emplace_back();
    grouped[it->second].push_back(static_cast<int>(r));
  }
  return grouped;
}

}  // namespace

int count_nodes(const std::vector<int>& nodes) { return static_cast<int>(ranks_by_node(nodes).size()); }

bool is_node_leader(const std::vector<int>& nodes, int rank) {
  const auto first = std::find(nodes.begin(), nodes.end(), nodes.at(static_cast<size_t>(rank)));
  return first - nodes.begin() == rank;
}

std::vector<int> replica_partners(const std::vector<int>& nodes) {
  if (nodes.empty()) throw CheckpointError("replica_partners: no ranks");
  const std::vector<std::vector<int>> grouped = ranks_by_node(nodes);
  std::vector<int> partners(nodes.size(), -1);
  if (grouped.size() == 1) return partners;
  for (size_t n = 0; n < grouped.size(); ++n) {
    const std::vector<int>& next = grouped[(n + 1) % grouped.size()];
    for (size_t i = 0; i < grouped[n].size(); ++i) {
      partners[static_cast<size_t>(grouped[n][i])] = next[i % next.size()];
    }
  }
  return partners;
}

std::string node_files_json(std::vector<ManifestEntry> all) {
  std::sort(all.begin(), all.end(), by_name);
  return manifest_json(all);
}

std::vector<ManifestEntry> parse_node_files(std::string_view text, const fs::path& path) {
  return parse_manifest(text, path).files;
}

NodeCheckpoint read_node_checkpoint(const fs::path& dir) {
  NodeCheckpoint held;
  for (ManifestEntry& entry : read_manifest(dir).files) {
    if (entry.file != kNodeFilesName) held.present.push_back(std::move(entry));
  }
  const fs::path whole = dir / kNodeFilesName;
  std::error_code ec;
  held.all = fs::exists(whole, ec) ? parse_node_files(read_regular_file(whole, uint64_t{64} << 20), whole)
                                   : held.present;
  return held;
}

std::string holdings_json(const NodeHoldings& holdings) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& [step, held] : holdings.steps) {
    steps.push_back({{"step", step},
                     {"present", manifest_entries_json(held.present)},
                     {"all", manifest_entries_json(held.all)}});
  }
  return nlohmann::json{{"leader", holdings.leader}, {"steps", std::move(steps)}}.dump();
}

NodeHoldings parse_holdings(std::string_view text) {
  return read_checkpoint_json([&] {
    const std::string where = "a node's snapshot holdings";
    const nlohmann::json root = sdk::parse_json(text, where);
    const sdk::JsonFields fields(root, where);
    NodeHoldings holdings;
    holdings.leader = static_cast<int>(fields.integer("leader", 0, 1 << 30));
    size_t index = 0;
    for (const nlohmann::json& item : fields.array("steps")) {
      const sdk::JsonFields step(item, where, "steps[" + std::to_string(index++) + "].");
      holdings.steps[step.integer("step", 0)] = {parse_manifest_entries(step, "present", /*required=*/true),
                                                 parse_manifest_entries(step, "all", /*required=*/true)};
    }
    return holdings;
  });
}

AssemblyPlan plan_assembly(const std::vector<NodeHoldings>& nodes) {
  std::set<int64_t> steps;
  for (const NodeHoldings& node : nodes) {
    for (const auto& [step, held] : node.steps) steps.insert(step);
  }
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    // Every node that has the step must describe the same whole.
    std::optional<std::vector<ManifestEntry>> whole;
    bool agreed = true;
    for (const NodeHoldings& node : nodes) {
      const auto it = node.steps.find(*step);
      if (it == node.steps.end()) continue;
      std::vector<ManifestEntry> all = it->second.all;
      std::sort(all.begin(), all.end(), by_name);
      if (whole && *whole != all) agreed = false;
      if (!whole) whole = std::move(all);
    }
    if (!agreed || !whole || whole->empty()) continue;
    AssemblyPlan plan{*step, {}};
    bool covered = true;
    for (const NodeHoldings& to : nodes) {
      const auto mine = to.steps.find(*step);
      for (const ManifestEntry& file : *whole) {
        const auto holds = [&](const NodeHoldings& node) {
          const auto it = node.steps.find(*step);
          return it != node.steps.end() &&
                 std::find(it->second.present.begin(), it->second.present.end(), file) != it->second.present.end();
        };
        if (mine != to.steps.end() && holds(to)) continue;
        const NodeHoldings* from = nullptr;
        for (const NodeHoldings& node : nodes) {
          if (holds(node) && (!from || node.leader < from->leader)) from = &node;
        }
        if (!from) {
          covered = false;
          break;
        }
        plan.copies.push_back({file, from->leader, to.leader});
      }
      if (!covered) break;
    }
    if (covered) return plan;
  }
  return {};
}

PendingCheckpointDir start_assembly(const fs::path& root, const std::string& name,
                                    const std::vector<ManifestEntry>& keep) {
  PendingCheckpointDir pending = PendingCheckpointDir::create(root, name);
  for (const ManifestEntry& file : keep) {
    const fs::path from = root / name / file.file;
    const fs::path to = pending.dir() / file.file;
    std::error_code ec;
    fs::create_hard_link(from, to, ec);
    if (ec) throw CheckpointError("cannot link " + from.string() + " to " + to.string() + ": " + ec.message());
  }
  return pending;
}

void complete_assembly(PendingCheckpointDir& pending, std::vector<ManifestEntry> all) {
  for (const ManifestEntry& file : all) {
    const ManifestEntry found = describe_file(pending.dir() / file.file);
    if (found != file) {
      throw CheckpointError(pending.dir().string() + ": " + file.file + " is not the file the checkpoint wrote (" +
                            std::to_string(found.size) + " bytes, crc32 " + std::to_string(found.crc32) + ")");
    }
  }
  const fs::path whole = pending.dir() / kNodeFilesName;
  write_file_durably(whole, node_files_json(all));
  for (const ManifestEntry& file : all) fsync_path(pending.dir() / file.file);
  all.push_back(describe_file(whole));
  pending.finalize(std::move(all));
}

bool node_checkpoint_is_whole(const fs::path& dir, std::string* why) {
  try {
    const NodeCheckpoint held = read_node_checkpoint(dir);
    for (const ManifestEntry& file : held.all) {
      if (std::find(held.present.begin(), held.present.end(), file) == held.present.end()) {
        if (why) *why = "this node holds no copy of " + file.file;
        return false;
      }
    }
  } catch (const CheckpointError& e) {
    if (why) *why = e.what();
    return false;
  }
  return true;
}

}  // namespace accel::checkpoint
