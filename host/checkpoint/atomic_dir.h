// The atomic commit protocol for checkpoint directories, and the manifest
// that proves a directory complete. A checkpoint is written into
// `root/<name>.tmp/`, every file is fsynced, a manifest.json listing each
// file's size and crc32 is written and fsynced, and only then is the
// directory renamed to `root/<name>/` and the parent fsynced. Invariant: a
// directory without the `.tmp` suffix whose manifest verifies holds exactly
// the bytes that were committed, so resume (find_newest_complete) never
// starts from a half-written checkpoint. See docs/checkpoint_format.md.
//
// Multi-rank use: rank 0 calls create() (it clears a stale `.tmp` from a
// dead run), barrier, the other ranks call attach(); every rank writes its
// own files and calls sync_files() on them; the ranks gather the returned
// ManifestEntry lists to rank 0 (barrier), and rank 0 calls finalize(). One
// process: create(), write, commit(). One writer per root at a time.
//
// Thread-safety: none of these objects is synchronised; the free functions
// only read the filesystem and may run concurrently with each other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/checkpoint/safetensors.h"  // CheckpointError

namespace accel::checkpoint {

inline constexpr std::string_view kManifestFileName = "manifest.json";
inline constexpr std::string_view kManifestFormat = "accel-checkpoint-manifest";
inline constexpr int kManifestFormatVersion = 1;
inline constexpr std::string_view kPendingSuffix = ".tmp";

// One file of a checkpoint directory as the manifest records it.
struct ManifestEntry {
  std::string file;  // plain file name inside the checkpoint directory
  uint64_t size = 0;
  uint32_t crc32 = 0;  // zlib crc32 of the whole file

  bool operator==(const ManifestEntry&) const = default;
};

struct Manifest {
  int format_version = kManifestFormatVersion;
  std::vector<ManifestEntry> files;  // sorted by file name
};

// Size and crc32 of one file, read back from disk. Throws CheckpointError.
ManifestEntry describe_file(const std::filesystem::path& file);

// fsyncs a file or a directory (a directory fsync makes its entries, i.e.
// creations and renames inside it, durable). Throws CheckpointError.
void fsync_path(const std::filesystem::path& path);

// Creates or truncates `path`, writes `bytes` and fsyncs it. Throws
// CheckpointError naming the path and the failing call's errno text.
void write_file_durably(const std::filesystem::path& path, std::string_view bytes);

// The whole of `path`, a file inside a checkpoint directory: the SDK's
// read_input_file (accel/sdk/input_file.hpp) with Symlinks::refuse, so a
// FIFO, device, directory or symlink is refused without blocking; at most
// `max_bytes`. Throws CheckpointError naming the path.
std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes);

// Reads and validates `dir/manifest.json` (a regular file, never a symlink) (format, version, entry names that
// are plain file names, no duplicates). Throws CheckpointError.
Manifest read_manifest(const std::filesystem::path& dir);

// A name that stays inside its directory: no separators, not "." or "..".
bool is_plain_name(std::string_view name);

// manifest.json's text for `entries` (in the order given).
std::string manifest_json(const std::vector<ManifestEntry>& entries);

// The validation of read_manifest on text already read; `path` names it in
// errors. Throws CheckpointError.
Manifest parse_manifest(std::string_view text, const std::filesystem::path& path);

// True if `dir/manifest.json` parses, every file it lists is present with
// the recorded size and crc32, and the directory holds nothing else. Reads every byte of the checkpoint. On false,
// `why` (if given) receives one line naming the first problem.
bool verify_manifest(const std::filesystem::path& dir, std::string* why = nullptr);

// The step number of a committed checkpoint directory name such as
// "step_1200" for prefix "step_": nullopt unless the rest is all digits and
// fits in 64 bits (so "step_12.tmp" and "step_x" are not checkpoints).
std::optional<uint64_t> checkpoint_step(std::string_view dir_name,
                                        std::string_view prefix = "step_");

// A further check of a candidate whose manifest verified (its directory
// and the step its name gives): why it is not what its name says, or nothing.
using CheckpointCheck = std::function<std::optional<std::string>(const std::filesystem::path&, uint64_t)>;

// The committed checkpoint directory under `root` with the highest step whose
// manifest verifies (and that `check` accepts, when given); nullopt if there
// is none (or `root` does not exist). `.tmp` directories and symbolic links
// are never candidates: a name is trusted only for a directory Accel
// committed there. Candidates are verified newest first, and verification
// stops at the first good one. If `skipped` is given, it receives one line
// per directory passed over and why ("step_300: crc32 mismatch for ...").
// Logs nothing; throws CheckpointError only if `root` exists but cannot be listed.
std::optional<std::filesystem::path> find_newest_complete(
    const std::filesystem::path& root, std::string_view prefix = "step_",
    std::vector<std::string>* skipped = nullptr, const CheckpointCheck& check = nullptr);

// A checkpoint directory being written: `root/<name>.tmp/` until finalize()
// (or commit()) publishes it as `root/<name>/`. The destructor does nothing:
// an uncommitted directory stays as `.tmp` (other ranks hold objects for the
// same directory, and a crash leaves the same state anyway); the next
// create() for that name clears it, and resume ignores it.
class PendingCheckpointDir {
 public:
  // Makes a fresh, empty `root/<name>.tmp/` (creating root if needed),
  // removing any stale one left by a dead run. Call on one rank only.
  // `name` must be a plain directory name that does not end in ".tmp".
  static PendingCheckpointDir create(const std::filesystem::path& root, std::string name);

  // Opens an existing `root/<name>.tmp/` made by create() on another rank.
  static PendingCheckpointDir attach(const std::filesystem::path& root, std::string name);

  PendingCheckpointDir(PendingCheckpointDir&&) noexcept = default;
  PendingCheckpointDir& operator=(PendingCheckpointDir&&) noexcept = default;
  PendingCheckpointDir(const PendingCheckpointDir&) = delete;
  PendingCheckpointDir& operator=(const PendingCheckpointDir&) = delete;
  ~PendingCheckpointDir() = default;

  const std::filesystem::path& dir() const { return pending_dir_; }    // write files here
  const std::filesystem::path& final_dir() const { return final_dir_; }
  bool committed() const { return committed_; }

  // --- The protocol in steps, for callers that spread it over ranks. ---

  // Every rank, for the files it wrote (names relative to dir()): fsyncs each
  // and returns its manifest entry (size, crc32 read back from disk).
  std::vector<ManifestEntry> sync_files(const std::vector<std::string>& files) const;

  // The same for files whose writer already computed their entries: each is
  // fsynced and its size checked, its bytes not read again. Throws
  // CheckpointError for a name that is not a plain data file name or a file
  // whose size on disk differs.
  std::vector<ManifestEntry> sync_described(const std::vector<ManifestEntry>& entries) const;

  // Every regular file now in dir() except the manifest, sorted by name.
  std::vector<std::string> list_files() const;

  // Rank 0, after all ranks' sync_files: write_manifest() then publish().
  void finalize(std::vector<ManifestEntry> entries);

  // Checks that `entries` names every file in dir() exactly once with its
  // current size, then writes manifest.json and fsyncs it and dir().
  void write_manifest(std::vector<ManifestEntry> entries);

  // Renames dir() to final_dir() and fsyncs root. If final_dir() already
  // exists (the same step saved again after resuming from an older one), it
  // is swapped out atomically with renameat2(RENAME_EXCHANGE) and then
  // deleted; where the filesystem cannot exchange, the old directory is
  // first renamed to `<name>.old.tmp`, so a crash in between leaves no
  // `<name>` and resume falls back to the previous step.
  void publish();

  // Single process: sync_files(list_files()) then finalize().
  void commit();

  // Deletes dir() (an aborted save). Not needed after a crash.
  void abandon();

 private:
  PendingCheckpointDir(std::filesystem::path root, std::string name);

  std::filesystem::path root_;
  std::string name_;
  std::filesystem::path pending_dir_;
  std::filesystem::path final_dir_;
  bool committed_ = false;
};

}  // namespace accel::checkpoint
