// The one reader of a checkpoint directory, whoever wrote it and at whatever
// world size: it indexes the slices of
//   plugin_state.safetensors, plugin_state.rank<r>.safetensors
//                             (every rank's plugin-state file, plugin_state.h)
//   model.safetensors         the host's parameters: MODEL space, one whole
//                             slice per tensor, named after the parameter
//   optimizer.safetensors     the host's AdamW moments "<p>.exp_avg" and
//                             "<p>.exp_avg_sq": OPTIMIZER space, served as
//                             "exp_avg/<p>" and "exp_avg_sq/<p>"
// and serves any rectangle of any tensor, assembled from whichever slices of
// whichever files overlap it. This is what the checkpoint services' get /
// info / get_string read (accel/checkpoint.h), what resume restores the
// host's units from, and what `accel-host merge-weights` merges.
//
// Invariants after a successful open: the slices of one tensor, over all
// files, agree on dtype and global shape, lie inside it and never overlap
// (otherwise CheckpointError names the tensor and both files). Whether they
// cover a requested region is checked per request. Only headers are read up
// front; tensor bytes are read per request, and of a slice only the rows
// (dimension 0) the request touches.
//
// Strings: the first file indexed that holds a key wins; open_directory
// indexes rank 0's plugin-state file first ("rank 0's value is the one kept").
//
// Errors: indexing throws checkpoint::CheckpointError; get/read/check throw
// ServiceError with the ABI's statuses (NOT_FOUND, INVALID_ARGUMENT).
// Thread-safety: immutable after indexing; reads use pread() and may run
// from several threads, but the checkpoint services call it on the loop
// thread only.
#pragma once

#include <ATen/ATen.h>
#include <accel/accel.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"
#include "host/runtime/plugin_state.h"

namespace accel::runtime {

class CheckpointReader {
 public:
  static constexpr const char* kModelFile = "model.safetensors";
  static constexpr const char* kOptimizerFile = "optimizer.safetensors";

  // An empty reader: every lookup is NOT_FOUND.
  CheckpointReader() = default;
  CheckpointReader(CheckpointReader&&) noexcept = default;
  CheckpointReader& operator=(CheckpointReader&&) noexcept = default;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  // Indexes the checkpoint directory `dir`: the files its manifest lists
  // (every file in it when there is no manifest) that are plugin-state,
  // model or optimizer files. Does not verify checksums (resolve the
  // directory with find_newest_complete / verify_manifest first). Throws
  // CheckpointError naming the file and the problem.
  static CheckpointReader open_directory(const std::filesystem::path& dir);

  // Index one more file. Each validates the file and its agreement with what
  // is already indexed before changing anything; throws CheckpointError.
  void add_plugin_state_file(const std::filesystem::path& path);
  void add_model_file(const std::filesystem::path& path);
  void add_optimizer_file(const std::filesystem::path& path);

  // ---- The checkpoint services (accel/checkpoint.h semantics)

  // Fills `local` (any place, any strides) with the rectangle at
  // `global_offset`, converting float dtypes (never FP8). NOT_FOUND names a
  // tensor or region that was not saved; INVALID_ARGUMENT a global shape or
  // dtype that does not match.
  void get(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
           const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
           const DLTensor* local) const;
  // nullptr when absent.
  const StoredTensor* find(const std::string& plugin, AccelCheckpointSpace space, const std::string& name) const;
  const std::string* find_string(const std::string& plugin, AccelCheckpointSpace space, const std::string& key) const;

  // ---- The host's own use (resume, merge-weights)

  // get() into an ATen tensor of any device and float dtype.
  void read(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
            const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
            const at::Tensor& target) const;
  // Every check read() makes for a region of `extent` read as `type`,
  // without reading: a caller that must change nothing unless everything
  // can be read checks all of it first.
  void check_readable(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                      const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                      const std::vector<int64_t>& extent, at::ScalarType type) const;
  // The whole tensor in its saved dtype, on the CPU; NOT_FOUND when part of
  // it was never saved.
  at::Tensor read_whole(const StoredTensor& tensor) const;
  // Every tensor of `space`, sorted by name.
  std::vector<const StoredTensor*> tensors_in(AccelCheckpointSpace space) const;
  // The files indexed, in indexing order (StoredTensor::Slice::file indexes it).
  std::vector<std::filesystem::path> files() const;

 private:
  // A saved slice and the part of a requested region it supplies.
  struct Piece {
    const StoredTensor::Slice* slice;
    SliceBox overlap;
  };
  // The checks of get(), and the slices that fill the region.
  std::vector<Piece> locate(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                            const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                            const std::vector<int64_t>& extent, at::ScalarType type,
                            const StoredTensor** tensor) const;
  // Assembles the region from its pieces into a CPU tensor of the saved dtype.
  at::Tensor assemble(const StoredTensor& tensor, const std::vector<Piece>& pieces,
                      const std::vector<int64_t>& global_offset, const std::vector<int64_t>& extent) const;
  // Merges a parsed file into the index: checks first, then inserts.
  void merge(checkpoint::SafetensorsFile file, std::map<std::string, StoredTensor> tensors,
             const std::map<std::string, std::string>& strings, bool verify_overlaps);
  void add_plugin_state(const std::filesystem::path& path, bool verify_overlaps);
  void add_whole_tensors(const std::filesystem::path& path, AccelCheckpointSpace space, bool verify_overlaps);
  // Throws CheckpointError naming both files for the first overlap among
  // the slices of `stored` (every tensor when empty).
  void check_overlaps(const std::vector<std::string>& stored) const;
  std::string describe(const StoredTensor& tensor) const;
  std::string file_name(size_t file) const;

  std::vector<checkpoint::SafetensorsFile> files_;
  std::map<std::string, StoredTensor> tensors_;  // by stored name (plugin_state_name)
  std::map<std::string, std::string> strings_;   // by stored name
};

}  // namespace accel::runtime
