// Ownership of snapshot roots (see snapshot_root.h).
#include "host/checkpoint/snapshot_root.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/checkpoint/atomic_dir.h"

namespace accel::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kIdentityFormat = "accel-snapshot-root";
constexpr std::string_view kJobFormat = "accel-job";
constexpr uint64_t kMaxIdentityBytes = 64 * 1024;

fs::path canonical_or_absolute(const fs::path& path) {
  std::error_code error;
  fs::path resolved = fs::weakly_canonical(fs::absolute(path, error), error);
  return error ? fs::absolute(path).lexically_normal() : resolved;
}

// Whether `inner` is `outer` or lies below it, component by component.
bool lies_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

[[noreturn]] void refuse(const fs::path& root, const std::string& why) {
  throw CheckpointError("--snapshot-dir " + root.string() + ": " + why);
}

std::string fresh_run_id() {
  std::random_device device;
  std::uniform_int_distribution<uint64_t> bits;
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(bits(device)),
                static_cast<unsigned long long>(bits(device)));
  return text;
}

// The step directory names Accel writes: step_N, step_N.tmp, step_N.old.tmp.
bool is_step_entry(std::string_view name) {
  std::string_view base = name;
  if (base.ends_with(".old.tmp")) {
    base.remove_suffix(8);
  } else if (base.ends_with(kPendingSuffix)) {
    base.remove_suffix(kPendingSuffix.size());
  }
  return checkpoint_step(base).has_value();
}

// The first entry of `root` that Accel did not write there, with why.
std::optional<std::string> foreign_entry(const fs::path& root) {
  std::error_code error;
  for (fs::directory_iterator it(root, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!is_snapshot_root_entry(name)) return "'" + name + "' is not a file Accel writes there";
    const fs::file_status status = it->symlink_status(error);
    if (fs::is_symlink(status)) return "'" + name + "' is a symbolic link, which Accel never writes";
    if (is_step_entry(name) && !fs::is_directory(status)) return "'" + name + "' is not a directory";
  }
  if (error) return "cannot list it: " + error.message();
  return std::nullopt;
}

nlohmann::json read_identity(const fs::path& file) {
  try {
    nlohmann::json identity = nlohmann::json::parse(read_regular_file(file, kMaxIdentityBytes));
    if (!identity.is_object()) throw CheckpointError("not a JSON object");
    return identity;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
}

std::string string_field(const nlohmann::json& object, const char* key, const fs::path& file) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    throw CheckpointError(file.string() + ": '" + key + "' is missing or not a string");
  }
  return it->get<std::string>();
}

}  // namespace

std::optional<std::string> snapshot_root_conflict(const fs::path& snapshot_root, const fs::path& save_dir) {
  const fs::path root = canonical_or_absolute(snapshot_root), save = canonical_or_absolute(save_dir);
  if (root == save) return "it is the --save directory; snapshots need a root of their own";
  if (lies_within(save, root)) {
    return "it contains the --save directory " + save.string() +
           " (snapshots are removed as training goes); give a root of their own";
  }
  if (lies_within(root, save)) {
    return "it lies inside the --save directory " + save.string() + "; give a root outside it";
  }
  return std::nullopt;
}

std::string job_run_id(const fs::path& save_dir) {
  const fs::path file = save_dir / kJobIdentityFile;
  std::error_code error;
  if (fs::exists(fs::symlink_status(file, error))) {
    const nlohmann::json job = read_identity(file);
    if (string_field(job, "format", file) != kJobFormat) throw CheckpointError(file.string() + ": not an accel-job file");
    return string_field(job, "run_id", file);
  }
  fs::create_directories(save_dir, error);
  if (error) throw CheckpointError(save_dir.string() + ": create directory failed: " + error.message());
  const std::string run_id = fresh_run_id();
  const nlohmann::json job = {{"format", kJobFormat}, {"run_id", run_id}};
  const fs::path pending = save_dir / (std::string(kJobIdentityFile) + ".tmp");
  write_file_durably(pending, job.dump(2) + "\n");
  fs::rename(pending, file, error);
  if (error) throw CheckpointError(file.string() + ": rename failed: " + error.message());
  fsync_path(fs::absolute(save_dir));
  return run_id;
}

bool is_snapshot_root_entry(std::string_view name) {
  return name == kSnapshotIdentityFile || name == kSnapshotLockFile || name.starts_with(kNodeProbePrefix) ||
         is_step_entry(name);
}

SnapshotRootClaim SnapshotRootClaim::claim(const fs::path& root, const fs::path& save_dir,
                                           const std::string& run_id) {
  if (const std::optional<std::string> conflict = snapshot_root_conflict(root, save_dir)) refuse(root, *conflict);
  std::error_code error;
  const fs::file_status status = fs::status(root, error);
  if (fs::exists(status) && !fs::is_directory(status)) refuse(root, "it exists and is not a directory");
  if (!fs::exists(status)) {
    fs::create_directories(root, error);
    if (error) refuse(root, "cannot create it: " + error.message());
  }
  // Checked before anything is written into it: a directory holding files
  // of someone else's gets nothing of ours.
  if (const std::optional<std::string> foreign = foreign_entry(root)) {
    refuse(root, *foreign + "; snapshots need a directory of their own (Accel prunes and removes its snapshots)");
  }
  const fs::path lock_path = root / kSnapshotLockFile;
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) refuse(root, std::string("cannot open its lock file: ") + std::strerror(errno));
  SnapshotRootClaim claimed(canonical_or_absolute(root), fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string owner;
    try {
      owner = " (--save " + string_field(read_identity(root / kSnapshotIdentityFile), "save", root) + ")";
    } catch (const std::exception&) {
    }
    refuse(root, "another job is using it now" + owner + "; each job needs a --snapshot-dir of its own");
  }
  const std::string save = canonical_or_absolute(save_dir).string();
  const fs::path identity_path = root / kSnapshotIdentityFile;
  if (fs::exists(fs::symlink_status(identity_path, error))) {
    nlohmann::json identity;
    try {
      identity = read_identity(identity_path);
      if (string_field(identity, "format", identity_path) != kIdentityFormat) {
        throw CheckpointError("its format is not " + std::string(kIdentityFormat));
      }
    } catch (const CheckpointError& e) {
      refuse(root, std::string("its identity file is not Accel's: ") + e.what());
    }
    const std::string owner_save = string_field(identity, "save", identity_path);
    if (owner_save != save) {
      refuse(root, "it holds the snapshots of the job whose --save is " + owner_save +
                       "; a snapshot root belongs to one job (give this one another --snapshot-dir)");
    }
    if (string_field(identity, "run_id", identity_path) != run_id) {
      refuse(root, "it holds the snapshots of an earlier job with the same --save (run " +
                       string_field(identity, "run_id", identity_path) + ", this one is " + run_id + " in " +
                       (save_dir / kJobIdentityFile).string() +
                       "); they are not resumed by another job: remove the directory to start afresh");
    }
    return claimed;
  }
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (is_step_entry(name)) {
      refuse(root, "it holds '" + name + "' but no record of the job that wrote it (" +
                       std::string(kSnapshotIdentityFile) + "); remove the directory to start afresh");
    }
  }
  const nlohmann::json identity = {{"format", kIdentityFormat}, {"save", save}, {"run_id", run_id}};
  const fs::path pending = root / (std::string(kSnapshotIdentityFile) + ".new");
  write_file_durably(pending, identity.dump(2) + "\n");
  fs::rename(pending, identity_path, error);
  if (error) refuse(root, "cannot write its identity file: " + error.message());
  fsync_path(root);
  return claimed;
}

SnapshotRootClaim::SnapshotRootClaim(SnapshotRootClaim&& other) noexcept
    : root_(std::move(other.root_)), lock_fd_(std::exchange(other.lock_fd_, -1)) {}

SnapshotRootClaim::~SnapshotRootClaim() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::optional<std::string> remove_snapshot_root(const fs::path& root) {
  std::error_code error;
  std::vector<fs::path> ours;
  for (fs::directory_iterator it(root, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    const fs::file_status status = it->symlink_status(error);
    if (!is_snapshot_root_entry(name) || fs::is_symlink(status)) continue;
    if (is_step_entry(name) && !fs::is_directory(status)) continue;
    ours.push_back(it->path());
  }
  if (error) return "could not list the snapshots in " + root.string() + ": " + error.message();
  // The identity goes last: a crash part-way leaves a root that is still provably ours.
  std::stable_partition(ours.begin(), ours.end(),
                        [](const fs::path& p) { return p.filename() != kSnapshotIdentityFile; });
  for (const fs::path& path : ours) {
    fs::remove_all(path, error);
    if (error) return "could not remove " + path.string() + ": " + error.message();
  }
  fs::remove(root, error);  // only when empty: what stays is not ours
  if (error) return "left " + root.string() + " in place: it holds files Accel did not write (" + error.message() + ")";
  return std::nullopt;
}

}  // namespace accel::checkpoint
