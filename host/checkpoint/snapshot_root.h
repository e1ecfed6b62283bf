// Who owns a --snapshot-dir. Snapshots are pruned as training goes and the
// whole set is removed when the run ends, so Accel must be able to prove a
// root is its own before it deletes anything there, and that a snapshot it
// resumes belongs to this job. The rules:
//   - the root is not the --save directory, does not contain it and does not
//     lie inside it (refused before anything is created);
//   - a root holds only what Accel writes there (step_N, step_N.tmp,
//     step_N.old.tmp directories, its identity file, its lock file, the
//     multi-node probes); anything else, a symlink named step_N included,
//     refuses the root;
//   - the identity file names the one job the root belongs to: the absolute
//     --save path and the job's run id (kept in --save, accel-job.json, so
//     every restart of the job finds the same one); another job is refused;
//   - a job holds an advisory lock on the root for its whole life (flock: a
//     crashed job's lock goes with its process), so a second job running at
//     the same time is refused even when it names the same --save.
// On several nodes each node's lowest rank claims its node's root.
//
// Thread-safety: free functions only touch the filesystem; a claim is used
// by one thread.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace accel::checkpoint {

inline constexpr std::string_view kSnapshotIdentityFile = "accel-snapshot-root.json";
inline constexpr std::string_view kSnapshotLockFile = ".accel-snapshot.lock";
inline constexpr std::string_view kJobIdentityFile = "accel-job.json";
inline constexpr std::string_view kNodeProbePrefix = ".accel-node-";

// Why `snapshot_root` cannot serve a job whose checkpoints go to `save_dir`
// (the same directory, one inside the other, by their canonical paths), or
// nothing. Reads nothing but the paths' symlinks.
std::optional<std::string> snapshot_root_conflict(const std::filesystem::path& snapshot_root,
                                                  const std::filesystem::path& save_dir);

// The run id of the job whose checkpoints go to `save_dir`: read from
// save_dir/accel-job.json, which is written (durably, with a fresh random
// id) when it is missing. Call on one rank. Throws CheckpointError.
std::string job_run_id(const std::filesystem::path& save_dir);

// Whether `name` is an entry Accel writes directly under a snapshot root.
bool is_snapshot_root_entry(std::string_view name);

// This job's hold on a snapshot root (see above). Movable; the destructor
// releases the lock and removes nothing.
class SnapshotRootClaim {
 public:
  // Checks and claims `root` (created when missing) for the job
  // (`save_dir`, `run_id`). Throws CheckpointError with one line naming the
  // root and why it is refused.
  static SnapshotRootClaim claim(const std::filesystem::path& root, const std::filesystem::path& save_dir,
                                 const std::string& run_id);

  SnapshotRootClaim(SnapshotRootClaim&& other) noexcept;
  SnapshotRootClaim& operator=(SnapshotRootClaim&&) = delete;
  SnapshotRootClaim(const SnapshotRootClaim&) = delete;
  SnapshotRootClaim& operator=(const SnapshotRootClaim&) = delete;
  ~SnapshotRootClaim();

  const std::filesystem::path& root() const { return root_; }

 private:
  SnapshotRootClaim(std::filesystem::path root, int lock_fd) : root_(std::move(root)), lock_fd_(lock_fd) {}

  std::filesystem::path root_;
  int lock_fd_ = -1;
};

// At the end of a job: removes what Accel wrote under `root` (the entries
// is_snapshot_root_entry names, step directories that are real directories),
// then the root itself if that left it empty. Never follows a symlink and
// never removes anything else. Returns a warning line when something stays,
// else nothing.
std::optional<std::string> remove_snapshot_root(const std::filesystem::path& root);

}  // namespace accel::checkpoint
