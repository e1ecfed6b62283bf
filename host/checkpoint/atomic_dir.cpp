// Commit protocol and manifest for checkpoint directories (see atomic_dir.h
// for the protocol, docs/checkpoint_format.md for the manifest format).
// Why each fsync is where it is: file fsyncs make the bytes durable before
// the manifest vouches for them; the manifest fsync and the fsync of the
// pending directory make the manifest and every file's directory entry
// durable before the rename; the fsync of root makes the rename itself
// durable. A crash at any point leaves either `<name>.tmp` (ignored by
// resume) or a complete `<name>` whose manifest verifies.
// Every filesystem error becomes a CheckpointError naming the path.
#include "host/checkpoint/atomic_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "accel/sdk/input_file.hpp"
#include "host/checkpoint/checkpoint_json.h"

namespace accel::checkpoint {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const fs::path& where, const std::string& problem) {
  throw CheckpointError(where.string() + ": " + problem);
}

[[noreturn]] void fail_errno(const fs::path& where, const std::string& action, int error) {
  fail(where, action + " failed: " + std::strerror(error));
}

[[noreturn]] void fail_ec(const fs::path& where, const std::string& action,
                          const std::error_code& ec) {
  fail(where, action + " failed: " + ec.message());
}

bool ends_with_pending_suffix(std::string_view name) { return name.ends_with(kPendingSuffix); }

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now so that a deferred write error is reported, not lost.
  int close_now() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

int open_or_fail(const fs::path& path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail_errno(path, "open", errno);
  return fd;
}

// Cheap checks first (presence, size), so a truncated checkpoint is
// rejected without reading the rest of it.
std::string first_problem(const fs::path& dir) {
  const Manifest manifest = read_manifest(dir);
  // Nothing may sit beside the committed files: whatever was added after
  // the commit is unverified, and a reader that lists the directory (plugin
  // state files are found by name) would trust it.
  std::set<std::string> listed;
  for (const ManifestEntry& entry : manifest.files) listed.insert(entry.file);
  std::error_code list_ec;
  fs::directory_iterator it(dir, list_ec);
  if (list_ec) return "cannot list: " + list_ec.message();
  for (; it != fs::directory_iterator(); it.increment(list_ec)) {
    const std::string name = it->path().filename().string();
    if (name != kManifestFileName && !listed.contains(name)) return name + " is not listed in the manifest";
  }
  if (list_ec) return "cannot list: " + list_ec.message();
  for (const ManifestEntry& entry : manifest.files) {
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(dir / entry.file, ec);
    if (ec || !fs::is_regular_file(status)) return "missing or not a regular file: " + entry.file;
    const uint64_t size = fs::file_size(dir / entry.file, ec);
    if (ec) return "cannot stat " + entry.file + ": " + ec.message();
    if (size != entry.size) {
      return "size of " + entry.file + " is " + std::to_string(size) + ", manifest says " +
             std::to_string(entry.size);
    }
  }
  for (const ManifestEntry& entry : manifest.files) {
    const ManifestEntry actual = describe_file(dir / entry.file);
    if (actual.size != entry.size) return entry.file + " changed size while being verified";
    if (actual.crc32 != entry.crc32) {
      return "crc32 mismatch for " + entry.file + " (file " + std::to_string(actual.crc32) +
             ", manifest " + std::to_string(entry.crc32) + ")";
    }
  }
  return {};
}

}  // namespace

bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

std::string manifest_json(const std::vector<ManifestEntry>& entries) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ManifestEntry& entry : entries) {
    files.push_back({{"file", entry.file}, {"size", entry.size}, {"crc32", entry.crc32}});
  }
  nlohmann::ordered_json root = {{"format", std::string(kManifestFormat)},
                                 {"format_version", kManifestFormatVersion},
                                 {"files", std::move(files)}};
  return root.dump(2) + "\n";
}

// ---------------------------------------------------------------------------
// Files and manifests
// ---------------------------------------------------------------------------

std::string read_regular_file(const fs::path& path, uint64_t max_bytes) {
  try {
    return sdk::read_input_file(path.string(), max_bytes, {}, sdk::Symlinks::refuse);
  } catch (const sdk::InputFileError& error) {
    throw CheckpointError(error.what());
  }
}

ManifestEntry describe_file(const fs::path& file) {
  // A FIFO put in place of a file is refused instead of blocking the resume
  // forever; a symlink is not a file this directory holds.
  sdk::InputFile input;
  try {
    input = sdk::open_input_file(file.string(), {}, sdk::Symlinks::refuse);
  } catch (const sdk::InputFileError& error) {
    throw CheckpointError(error.what());
  }
  ManifestEntry entry;
  entry.file = file.filename().string();
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buffer(4 << 20);
  for (;;) {
    const ssize_t got = ::read(input.fd(), buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno(file, "read", errno);
    }
    if (got == 0) break;
    crc = ::crc32(crc, buffer.data(), static_cast<uInt>(got));
    entry.size += static_cast<uint64_t>(got);
  }
  entry.crc32 = static_cast<uint32_t>(crc);
  return entry;
}

void fsync_path(const fs::path& path) {
  FdCloser fd(open_or_fail(path, O_RDONLY));
  if (::fsync(fd.get()) != 0) fail_errno(path, "fsync", errno);
}

Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestFileName;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    fail(dir, "no " + std::string(kManifestFileName) + " (not committed)");
  }
  return parse_manifest(read_regular_file(path, 64u << 20), path);
}

Manifest parse_manifest(std::string_view text, const fs::path& path) {
  // The one JSON rule (accel/sdk/json_input.hpp): a depth limit, exact types,
  // values quoted through describe().
  return read_checkpoint_json([&] {
    const nlohmann::json root = sdk::parse_json(text, path.string());
    const sdk::JsonFields fields(root, path.string());
    if (!fields.contains("format") || !fields.value("format").is_string() ||
        fields.value("format").get_ref<const std::string&>() != kManifestFormat) {
      fail(path, "\"format\" is not \"" + std::string(kManifestFormat) + "\"");
    }
    const int64_t version = fields.integer("format_version");
    if (version != kManifestFormatVersion) {
      fail(path, "format_version " + std::to_string(version) + " is not supported (this build reads " +
                     std::to_string(kManifestFormatVersion) + ")");
    }
    Manifest manifest;
    std::set<std::string> seen;
    size_t index = 0;
    for (const nlohmann::json& item : fields.array("files")) {
      const sdk::JsonFields entry_fields(item, path.string(), "files[" + std::to_string(index++) + "].");
      ManifestEntry entry{entry_fields.string("file"), entry_fields.unsigned_integer("size"),
                          static_cast<uint32_t>(entry_fields.integer("crc32", 0, 0xffffffff))};
      if (!is_plain_name(entry.file) || entry.file == kManifestFileName) {
        fail(path, "entry names an invalid file " + sdk::describe(entry_fields.value("file")));
      }
      if (!seen.insert(entry.file).second) {
        fail(path, "file " + sdk::describe(entry_fields.value("file")) + " listed twice");
      }
      manifest.files.push_back(std::move(entry));
    }
    return manifest;
  });
}

bool verify_manifest(const fs::path& dir, std::string* why) {
  std::string problem;
  try {
    problem = first_problem(dir);
  } catch (const CheckpointError& error) {
    problem = error.what();
  }
  if (why != nullptr) *why = problem;
  return problem.empty();
}

// ---------------------------------------------------------------------------
// Resume
// ---------------------------------------------------------------------------

std::optional<uint64_t> checkpoint_step(std::string_view dir_name, std::string_view prefix) {
  if (!dir_name.starts_with(prefix)) return std::nullopt;
  const std::string_view digits = dir_name.substr(prefix.size());
  if (digits.empty() || digits.size() > 20) return std::nullopt;
  uint64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(step, uint64_t{10}, &step) ||
        __builtin_add_overflow(step, static_cast<uint64_t>(c - '0'), &step)) {
      return std::nullopt;
    }
  }
  return step;
}

std::optional<fs::path> find_newest_complete(const fs::path& root, std::string_view prefix,
                                             std::vector<std::string>* skipped, const CheckpointCheck& check) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::nullopt;
  std::vector<std::pair<uint64_t, std::string>> candidates;
  fs::directory_iterator it(root, ec);
  if (ec) fail_ec(root, "list", ec);
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_symlink(ec)) {
      if (skipped != nullptr && checkpoint_step(name, prefix)) {
        skipped->push_back(name + ": a symbolic link, not a checkpoint directory (ignored)");
      }
      continue;
    }
    if (!it->is_directory(ec)) continue;
    if (const auto step = checkpoint_step(name, prefix)) {
      candidates.emplace_back(*step, name);
    } else if (skipped != nullptr && name.starts_with(prefix) && ends_with_pending_suffix(name)) {
      skipped->push_back(name + ": not committed (ignored)");
    }
  }
  if (ec) fail_ec(root, "list", ec);
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  for (const auto& [step, name] : candidates) {
    std::string why;
    if (verify_manifest(root / name, &why)) {
      const std::optional<std::string> refused = check ? check(root / name, step) : std::nullopt;
      if (!refused) return root / name;
      why = *refused;
    }
    if (skipped != nullptr) skipped->push_back(name + ": " + why);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// PendingCheckpointDir
// ---------------------------------------------------------------------------

PendingCheckpointDir::PendingCheckpointDir(fs::path root, std::string name)
    : root_(std::move(root)), name_(std::move(name)) {
  if (!is_plain_name(name_) || ends_with_pending_suffix(name_)) {
    throw CheckpointError("checkpoint name '" + name_ +
                          "' must be a plain directory name not ending in .tmp");
  }
  pending_dir_ = root_ / (name_ + std::string(kPendingSuffix));
  final_dir_ = root_ / name_;
}

PendingCheckpointDir PendingCheckpointDir::create(const fs::path& root, std::string name) {
  PendingCheckpointDir pending(root, std::move(name));
  std::error_code ec;
  const bool created_root = fs::create_directories(root, ec);
  if (ec) fail_ec(root, "create directory", ec);
  // A root made by this run must itself survive a crash, or every
  // checkpoint in it could vanish with it.
  if (created_root) fsync_path(fs::absolute(root).parent_path());
  // A leftover .tmp is a dead run's half-written save: never trusted, and
  // reusing it could mix its files into ours.
  fs::remove_all(pending.pending_dir_, ec);
  if (ec) fail_ec(pending.pending_dir_, "remove stale directory", ec);
  fs::create_directory(pending.pending_dir_, ec);
  if (ec) fail_ec(pending.pending_dir_, "create directory", ec);
  return pending;
}

PendingCheckpointDir PendingCheckpointDir::attach(const fs::path& root, std::string name) {
  PendingCheckpointDir pending(root, std::move(name));
  std::error_code ec;
  if (!fs::is_directory(pending.pending_dir_, ec)) {
    fail(pending.pending_dir_, "no such pending checkpoint directory (did rank 0 create it?)");
  }
  return pending;
}

std::vector<ManifestEntry> PendingCheckpointDir::sync_files(
    const std::vector<std::string>& files) const {
  std::vector<ManifestEntry> entries;
  entries.reserve(files.size());
  for (const std::string& file : files) {
    if (!is_plain_name(file) || file == kManifestFileName) {
      fail(pending_dir_, "cannot sync '" + file + "': not a plain data file name");
    }
    fsync_path(pending_dir_ / file);
    entries.push_back(describe_file(pending_dir_ / file));
  }
  return entries;
}

std::vector<ManifestEntry> PendingCheckpointDir::sync_described(const std::vector<ManifestEntry>& entries) const {
  for (const ManifestEntry& entry : entries) {
    if (!is_plain_name(entry.file) || entry.file == kManifestFileName) {
      fail(pending_dir_, "cannot sync '" + entry.file + "': not a plain data file name");
    }
    fsync_path(pending_dir_ / entry.file);
    std::error_code ec;
    const uint64_t size = fs::file_size(pending_dir_ / entry.file, ec);
    if (ec) fail_ec(pending_dir_ / entry.file, "stat", ec);
    if (size != entry.size) {
      fail(pending_dir_ / entry.file, "holds " + std::to_string(size) + " bytes where its writer wrote " +
                                          std::to_string(entry.size));
    }
  }
  return entries;
}

std::vector<std::string> PendingCheckpointDir::list_files() const {
  std::vector<std::string> files;
  std::error_code ec;
  fs::directory_iterator it(pending_dir_, ec);
  if (ec) fail_ec(pending_dir_, "list", ec);
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kManifestFileName) continue;
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) {
      fail(it->path(), "checkpoint directories hold plain files only");
    }
    files.push_back(name);
  }
  if (ec) fail_ec(pending_dir_, "list", ec);
  std::sort(files.begin(), files.end());
  return files;
}

void PendingCheckpointDir::write_manifest(std::vector<ManifestEntry> entries) {
  if (committed_) fail(final_dir_, "already committed");
  std::sort(entries.begin(), entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.file < b.file; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].file == entries[i - 1].file) {
      fail(pending_dir_, "file " + entries[i].file + " reported twice");
    }
  }
  // The manifest must describe the directory exactly: a file no rank
  // reported was not fsynced by anyone, and a reported file that is gone
  // would make the checkpoint fail verification forever.
  const std::vector<std::string> on_disk = list_files();
  for (const std::string& file : on_disk) {
    const bool reported = std::binary_search(
        entries.begin(), entries.end(), ManifestEntry{file, 0, 0},
        [](const ManifestEntry& a, const ManifestEntry& b) { return a.file < b.file; });
    if (!reported) fail(pending_dir_ / file, "not reported by any rank's sync_files");
  }
  for (const ManifestEntry& entry : entries) {
    std::error_code ec;
    const uint64_t size = fs::file_size(pending_dir_ / entry.file, ec);
    if (ec) fail(pending_dir_ / entry.file, "reported by sync_files but missing");
    if (size != entry.size) fail(pending_dir_ / entry.file, "changed size after sync_files");
  }
  write_file_durably(pending_dir_ / kManifestFileName, manifest_json(entries));
  fsync_path(pending_dir_);
}

void PendingCheckpointDir::publish() {
  if (committed_) fail(final_dir_, "already committed");
  std::error_code ec;
  if (!fs::exists(pending_dir_ / kManifestFileName, ec)) {
    fail(pending_dir_, "publish() before write_manifest()");
  }
  const fs::file_status existing = fs::symlink_status(final_dir_, ec);
  // Replaced only when it is a checkpoint Accel committed (the same step
  // saved again after resuming from an older one): nothing else is deleted.
  if (fs::is_directory(existing) && !fs::exists(fs::symlink_status(final_dir_ / kManifestFileName, ec))) {
    fail(final_dir_, "exists and is not a checkpoint Accel committed (no manifest.json); not replaced");
  }
  if (!fs::exists(existing)) {
    if (::rename(pending_dir_.c_str(), final_dir_.c_str()) != 0) {
      fail_errno(final_dir_, "rename from " + pending_dir_.string(), errno);
    }
  } else if (::renameat2(AT_FDCWD, pending_dir_.c_str(), AT_FDCWD, final_dir_.c_str(),
                         RENAME_EXCHANGE) == 0) {
    // The old checkpoint now sits at pending_dir_; make the swap durable
    // before deleting it (a crash here leaves a stale .tmp, which is fine).
    fsync_path(root_);
    fs::remove_all(pending_dir_, ec);
    if (ec) fail_ec(pending_dir_, "remove replaced checkpoint", ec);
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    const fs::path aside = root_ / (name_ + ".old" + std::string(kPendingSuffix));
    fs::remove_all(aside, ec);
    if (ec) fail_ec(aside, "remove stale directory", ec);
    if (::rename(final_dir_.c_str(), aside.c_str()) != 0) {
      fail_errno(final_dir_, "rename aside to " + aside.string(), errno);
    }
    if (::rename(pending_dir_.c_str(), final_dir_.c_str()) != 0) {
      fail_errno(final_dir_, "rename from " + pending_dir_.string(), errno);
    }
    fsync_path(root_);
    fs::remove_all(aside, ec);
    if (ec) fail_ec(aside, "remove replaced checkpoint", ec);
  } else {
    fail_errno(final_dir_, "exchange with " + pending_dir_.string(), errno);
  }
  fsync_path(root_);
  committed_ = true;
}

void PendingCheckpointDir::finalize(std::vector<ManifestEntry> entries) {
  write_manifest(std::move(entries));
  publish();
}

void PendingCheckpointDir::commit() {
  if (committed_) fail(final_dir_, "already committed");
  finalize(sync_files(list_files()));
}

void PendingCheckpointDir::abandon() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(pending_dir_, ec);
  if (ec) fail_ec(pending_dir_, "remove", ec);
}

void write_file_durably(const fs::path& path, std::string_view bytes) {
  FdCloser fd(open_or_fail(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  while (!bytes.empty()) {
    const ssize_t put = ::write(fd.get(), bytes.data(), bytes.size());
    if (put < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "write", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(put));
  }
  if (::fsync(fd.get()) != 0) fail_errno(path, "fsync", errno);
  if (fd.close_now() != 0) fail_errno(path, "close", errno);
}

}  // namespace accel::checkpoint
