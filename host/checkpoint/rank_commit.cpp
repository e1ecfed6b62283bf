// The multi-rank commit protocol (see rank_commit.h).
#include "host/checkpoint/rank_commit.h"

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <exception>
#include <optional>

#include "host/checkpoint/atomic_dir.h"

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

// A round in which only rank 0 acts: "" for success, else its error.
void agree_on_root_outcome(const RankGroup& group, const std::string& root_error, const std::string& failed) {
  const std::vector<std::string> all = exchange_round(group, group.rank == 0 ? root_error : std::string());
  if (!all[0].empty()) throw CheckpointError(failed + "rank 0: " + all[0]);
}

}  // namespace

RankCommit::RankCommit(RankGroup group, fs::path final_dir, std::string failed)
    : group_(std::move(group)), final_dir_(std::move(final_dir)), failed_(std::move(failed)) {}

RankCommit RankCommit::begin(const fs::path& root, const std::string& name, const RankGroup& group) {
  RankCommit commit(group, root / name, "checkpoint " + (root / name).string() + " not saved: ");
  // 1. Rank 0 makes the pending directory; the others wait for its outcome.
  std::string root_error;
  if (group.rank == 0) {
    try {
      commit.pending_.emplace(PendingCheckpointDir::create(root, name));
    } catch (...) {
      root_error = current_error();
    }
  }
  agree_on_root_outcome(group, root_error, commit.failed_);
  return commit;
}

void RankCommit::write(const RankFilesWriter& write) {
  // 2. Every rank writes and syncs its files; the entries (or the error) are
  // its message to the others.
  nlohmann::json mine;
  try {
    if (group_.rank != 0) {
      pending_.emplace(PendingCheckpointDir::attach(final_dir_.parent_path(), final_dir_.filename().string()));
    }
    RankContribution contribution = write(pending_->dir());
    nlohmann::json entries = nlohmann::json::array();
    for (const ManifestEntry& e : pending_->sync_files(contribution.files)) {
      entries.push_back({{"file", e.file}, {"size", e.size}, {"crc32", e.crc32}});
    }
    mine = {{"entries", std::move(entries)}, {"note", std::move(contribution.note)}};
  } catch (...) {
    mine = {{"error", current_error()}};
  }
  message_ = mine.dump();
}

fs::path RankCommit::finish(const CommitCheck& check) {
  if (message_.empty()) message_ = nlohmann::json{{"error", "it never wrote its files"}}.dump();
  const std::vector<std::string> all = exchange_round(group_, message_);

  std::vector<ManifestEntry> entries;
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
      size_t index = 0;
      for (const nlohmann::json& e : message.array("entries")) {
        const sdk::JsonFields entry(e, where, "entries[" + std::to_string(index++) + "].");
        entries.push_back({entry.string("file"), entry.unsigned_integer("size"),
                           static_cast<uint32_t>(entry.integer("crc32", 0, 0xffffffff))});
      }
      notes.push_back(message.string("note"));
    } catch (const sdk::JsonInputError& e) {
      // Every rank parses the same strings, so every rank lands here alike.
      if (group_.rank == 0) abandon_quietly(pending_);
      throw CheckpointError(failed_ + e.what());
    }
  }
  if (const auto failure = first_failure(failures)) {
    if (group_.rank == 0) abandon_quietly(pending_);
    throw CheckpointError(failed_ + *failure);
  }

  // 3. Rank 0 checks the whole and publishes it; the others wait for that.
  std::string root_error;
  if (group_.rank == 0) {
    try {
      if (check) check(notes);
      pending_->finalize(std::move(entries));
    } catch (...) {
      root_error = current_error();
      abandon_quietly(pending_);
    }
  }
  agree_on_root_outcome(group_, root_error, failed_);
  return final_dir_;
}

fs::path commit_from_all_ranks(const fs::path& root, const std::string& name, const RankGroup& group,
                               const RankFilesWriter& write, const CommitCheck& check) {
  RankCommit commit = RankCommit::begin(root, name, group);
  commit.write(write);
  return commit.finish(check);
}

}  // namespace accel::checkpoint
