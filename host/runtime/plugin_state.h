// What plugins save and load through the checkpoint services
// (accel/checkpoint.h): tensor slices by global offset, and small strings.
//
// PluginStateWriter collects a rank's put()/put_string() items during the
// save_state hooks, copying each slice's data when it is put (so the plugin
// may reuse its buffer at once), and writes them as ONE safetensors file.
// PluginStateReader opens such a file, validates it, and serves get() of any
// rectangle of a saved tensor, assembled from whichever saved slices overlap
// it, plus info() and get_string().
//
// File layout (one safetensors file, docs/checkpoint_format.md): each slice is
// one tensor named after its owner — "<plugin>/<name>" for plugin state,
// "@model/<name>" and "@optimizer/<name>" for the shared spaces (a plugin name
// never starts with '@'); a tensor's second and later slices add "#<k>". The
// "__metadata__" key "accel.plugin_state" holds JSON with each tensor's space,
// owner, name, global shape and the global offset of each slice, and the
// strings:
//   {"format":"accel-plugin-state","format_version":1,
//    "tensors":{"fp8/amax_history":{"space":"plugin","plugin":"fp8",
//       "name":"amax_history","dtype":"F32","global_shape":[1024,8],
//       "slices":[{"tensor":"fp8/amax_history","offset":[0,0]}]}},
//    "strings":{"fp8/recipe":{"space":"plugin","plugin":"fp8",
//       "key":"recipe","value":"..."}}}
//
// Invariants: the slices of one tensor share its dtype and global shape, lie
// inside it and never overlap (put refuses otherwise; open re-checks). Whether
// they tile the tensor is checked by check_complete() for a single writer, and
// by the host's commit across ranks.
//
// Errors: put/get/info throw ServiceError with the ABI's statuses; write()
// and open() throw checkpoint::CheckpointError naming the file.
// Thread-safety: none; the checkpoint services are loop-thread only.
#pragma once

#include <ATen/ATen.h>
#include <accel/accel.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"

namespace accel::runtime {

// The stored tensor (or string) name of `name` in `space` for `plugin`.
std::string plugin_state_name(AccelCheckpointSpace space, const std::string& plugin, const std::string& name);

// What the file holds for one tensor name.
struct StoredTensor {
  AccelCheckpointSpace space = ACCEL_CHECKPOINT_PLUGIN;
  std::string plugin;  // the owner, "" for MODEL / OPTIMIZER
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> global_shape;
  struct Slice {
    std::string tensor;           // the safetensors tensor holding it
    std::vector<int64_t> offset;  // global offset of its first element
    std::vector<int64_t> shape;   // its extent
  };
  std::vector<Slice> slices;
};

class PluginStateWriter {
 public:
  // Adds a slice, copying `local`'s data now (any place, any strides).
  void put(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
           const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
           const DLTensor* local);
  // Stores a string; a repeated key keeps the last value.
  void put_string(const std::string& plugin, AccelCheckpointSpace space, const std::string& key,
                  const std::string& value);

  // Throws ServiceError(INVALID_ARGUMENT) naming the first tensor whose slices
  // do not cover its global shape (for a writer that saw every slice).
  void check_complete() const;

  bool empty() const { return tensors_.empty() && strings_.empty(); }
  // Writes the file (fsynced; not atomic on its own: see atomic_dir.h).
  void write(const std::filesystem::path& path) const;

 private:
  struct Entry {
    StoredTensor meta;
    std::vector<at::Tensor> data;  // contiguous CPU copies, one per slice
  };
  struct StoredString {
    AccelCheckpointSpace space;
    std::string plugin, key, value;
  };
  std::map<std::string, Entry> tensors_;         // by stored name
  std::map<std::string, StoredString> strings_;  // by stored name
};

class PluginStateReader {
 public:
  // Opens and validates `path`; throws CheckpointError naming the file.
  void open(const std::filesystem::path& path);

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

 private:
  at::Tensor read_slice(const StoredTensor& tensor, const StoredTensor::Slice& slice) const;

  std::optional<checkpoint::SafetensorsFile> file_;
  std::map<std::string, StoredTensor> tensors_;
  std::map<std::string, std::string> strings_;
};

}  // namespace accel::runtime
