// The multi-rank commit protocol (see rank_commit.h).
#include "host/checkpoint/rank_commit.h"

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <exception>
#include <optional>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/checkpoint_json.h"
#include "host/checkpoint/node_copies.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;

// The one line of the exception being handled (call inside a catch block).
std::string current_error() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what()[0] != '\0' ? e.what() : "unknown error";
  } catch (...) {
    return "unknown error";
  }
}

// Every rank's string; the exchange of a group of one is the identity.
std::vector<std::string> exchange_round(const RankGroup& group, const std::string& mine) {
  if (group.world_size == 1 && !group.exchange) return {mine};
  std::vector<std::string> all = group.exchange(mine);
  if (all.size() != static_cast<size_t>(group.world_size)) {
    throw CheckpointError("checkpoint commit: the exchange returned " + std::to_string(all.size()) +
                          " strings for " + std::to_string(group.world_size) + " ranks");
  }
  return all;
}

// The failure to report from a round where rank r sent `failures[r]`
// (nullopt: succeeded), or nullopt when every rank succeeded.
std::optional<std::string> first_failure(const std::vector<std::optional<std::string>>& failures) {
  std::optional<std::string> first;
  size_t others = 0;
  for (size_t r = 0; r < failures.size(); ++r) {
    if (!failures[r]) continue;
    if (first) {
      ++others;
    } else {
      first = "rank " + std::to_string(r) + ": " + *failures[r];
    }
  }
  if (first && others > 0) *first += " (and " + std::to_string(others) + " more rank(s) failed)";
  return first;
}

// Deletes the pending directory of a failed save, if it can: one left
// behind is a `.tmp` that resume never reads and the next save clears.
void abandon_quietly(std::optional<PendingCheckpointDir>& pending) {
  if (!pending) return;
  try {
    pending->abandon();
  } catch (...) {
  }
}

// A round in which only some ranks act (rank 0, or each node's leader):
// "" for success, else the error of the first that failed.
void agree_on_outcome(const RankGroup& group, const std::string& error, const std::string& failed) {
  const std::vector<std::string> all = exchange_round(group, error);
  std::vector<std::optional<std::string>> failures(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) failures[r] = all[r];
  }
  if (const auto failure = first_failure(failures)) throw CheckpointError(failed + *failure);
}

// Whether the group's root is each node's own (RankGroup::nodes).
bool per_node(const RankGroup& group) { return !group.nodes.empty() && count_nodes(group.nodes) > 1; }

// The rank that creates and publishes this rank's directory.
bool creates_directory(const RankGroup& group) {
  return per_node(group) ? is_node_leader(group.nodes, group.rank) : group.rank == 0;
}

}  // namespace

RankCommit::RankCommit(RankGroup group, fs::path final_dir, std::string failed)
    : group_(std::move(group)), final_dir_(std::move(final_dir)), failed_(std::move(failed)) {}

RankCommit RankCommit::begin(const fs::path& root, const std::string& name, const RankGroup& group) {
  RankCommit commit(group, root / name, "checkpoint " + (root / name).string() + " not saved: ");
  // 1. Rank 0 (each node's leader) makes the pending directory; the others
  // wait for the outcome.
  std::string error;
  if (creates_directory(group)) {
    try {
      commit.pending_.emplace(PendingCheckpointDir::create(root, name));
    } catch (...) {
      error = current_error();
    }
  }
  agree_on_outcome(group, error, commit.failed_);
  return commit;
}

void RankCommit::write(const RankFilesWriter& write) {
  // 2. Every rank writes and syncs its files; the entries (or the error) are
  // its message to the others.
  nlohmann::json mine;
  std::vector<std::string> files;
  try {
    if (!creates_directory(group_)) {
      pending_.emplace(PendingCheckpointDir::attach(final_dir_.parent_path(), final_dir_.filename().string()));
    }
    RankContribution contribution = write(pending_->dir());
    std::vector<ManifestEntry> entries = pending_->sync_files(contribution.files);
    for (const ManifestEntry& e : pending_->sync_described(contribution.described)) {
      entries.push_back(e);
      contribution.files.push_back(e.file);
    }
    mine = {{"entries", manifest_entries_json(entries)}, {"note", std::move(contribution.note)}};
    files = std::move(contribution.files);
  } catch (...) {
    mine = {{"error", current_error()}};
  }
  // Every rank takes part in the replication, failed or not, so no partner
  // waits on it; a failed rank sends nothing.
  if (per_node(group_) && group_.replicate) {
    try {
      const bool failed = mine.contains("error");
      const std::vector<ManifestEntry> replicas =
          group_.replicate(pending_ ? pending_->dir() : fs::path(), failed ? std::vector<std::string>{} : files);
      if (!failed) mine["replicas"] = manifest_entries_json(pending_->sync_described(replicas));
    } catch (...) {
      if (!mine.contains("error")) mine = {{"error", "replicating its files to another node: " + current_error()}};
    }
  }
  message_ = mine.dump();
}

fs::path RankCommit::finish(const CommitCheck& check) {
  if (message_.empty()) message_ = nlohmann::json{{"error", "it never wrote its files"}}.dump();
  const std::vector<std::string> all = exchange_round(group_, message_);

  std::vector<ManifestEntry> entries;
  std::vector<std::vector<ManifestEntry>> held(all.size());  // each rank's own files and replicas
  std::vector<std::string> notes;
  std::vector<std::optional<std::string>> failures(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    // The one JSON rule (accel/sdk/json_input.hpp): what a peer sent is input
    // like any file, and a message quotes none of it unbounded.
    const std::string where = "malformed commit message from rank " + std::to_string(r);
    try {
      const nlohmann::json j = sdk::parse_json(all[r], where);
      const sdk::JsonFields message(j, where);
      if (message.contains("error")) {
        failures[r] = message.string("error");
        continue;
      }
      const std::vector<ManifestEntry> own = parse_manifest_entries(message, "entries", /*required=*/true);
      entries.insert(entries.end(), own.begin(), own.end());
      held[r] = own;
      const std::vector<ManifestEntry> replicas = parse_manifest_entries(message, "replicas", /*required=*/false);
      held[r].insert(held[r].end(), replicas.begin(), replicas.end());
      notes.push_back(message.string("note"));
    } catch (const sdk::JsonInputError& e) {
      // Every rank parses the same strings, so every rank lands here alike.
      if (creates_directory(group_)) abandon_quietly(pending_);
      throw CheckpointError(failed_ + e.what());
    }
  }
  if (const auto failure = first_failure(failures)) {
    if (creates_directory(group_)) abandon_quietly(pending_);
    throw CheckpointError(failed_ + *failure);
  }

  // 3. Rank 0 checks the whole and publishes it; the others wait for that.
  // With a root per node, rank 0's check is a round of its own, then each
  // node's leader publishes its node's part.
  if (!per_node(group_)) {
    act_and_agree(group_.rank == 0, [&] {
      if (check) check(notes);
      pending_->finalize(std::move(entries));
    });
    return final_dir_;
  }
  act_and_agree(group_.rank == 0 && check, [&] { check(notes); });
  act_and_agree(creates_directory(group_), [&] { publish_node_part(held, std::move(entries)); });
  return final_dir_;
}

void RankCommit::act_and_agree(bool act, const std::function<void()>& step) {
  std::string error;
  if (act) {
    try {
      step();
    } catch (...) {
      error = current_error();
    }
  }
  try {
    agree_on_outcome(group_, error, failed_);
  } catch (...) {
    if (creates_directory(group_)) abandon_quietly(pending_);
    throw;
  }
}

void RankCommit::publish_node_part(const std::vector<std::vector<ManifestEntry>>& held,
                                   std::vector<ManifestEntry> entries) {
  std::vector<ManifestEntry> node_files;
  for (size_t r = 0; r < held.size(); ++r) {
    if (group_.nodes[r] == group_.nodes[static_cast<size_t>(group_.rank)]) {
      node_files.insert(node_files.end(), held[r].begin(), held[r].end());
    }
  }
  // A replica is the original's bytes or the checkpoint is refused.
  for (const ManifestEntry& file : node_files) {
    if (std::find(entries.begin(), entries.end(), file) == entries.end()) {
      throw CheckpointError("the copy of " + file.file + " on this node differs from the file its rank wrote");
    }
  }
  const fs::path whole = pending_->dir() / kNodeFilesName;
  write_file_durably(whole, node_files_json(std::move(entries)));
  node_files.push_back(describe_file(whole));
  pending_->finalize(std::move(node_files));
}

fs::path commit_from_all_ranks(const fs::path& root, const std::string& name, const RankGroup& group,
                               const RankFilesWriter& write, const CommitCheck& check) {
  RankCommit commit = RankCommit::begin(root, name, group);
  commit.write(write);
  return commit.finish(check);
}

}  // namespace accel::checkpoint
