// What plugins save through the checkpoint services (accel/checkpoint.h):
// tensor slices by global offset, and small strings, written by every rank
// into its own plugin-state file. Reading them back, together with the
// host's own files, is CheckpointReader's (checkpoint_reader.h).
//
// PluginStateWriter collects a rank's put()/put_string() items during the
// save_state hooks, copying each slice's data when it is put (so the plugin
// may reuse its buffer at once), and writes them as ONE safetensors file:
// `plugin_state.safetensors` on rank 0, `plugin_state.rank<r>.safetensors`
// on rank r > 0 (plugin_state_file_name).
//
// File layout (docs/checkpoint_format.md): each slice is one tensor named
// after its owner — "<plugin>/<name>" for plugin state, "@model/<name>" and
// "@optimizer/<name>" for the shared spaces (a plugin name never starts with
// '@'); a tensor's second and later slices add "#<k>". The "__metadata__" key
// "accel.plugin_state" holds JSON with each tensor's space, owner, name,
// global shape and the global offset of each slice, and the strings:
//   {"format":"accel-plugin-state","format_version":1,
//    "tensors":{"fp8/amax_history":{"space":"plugin","plugin":"fp8",
//       "name":"amax_history","dtype":"F32","global_shape":[1024,8],
//       "slices":[{"tensor":"fp8/amax_history","offset":[0,0]}]}},
//    "strings":{"fp8/recipe":{"space":"plugin","plugin":"fp8",
//       "key":"recipe","value":"..."}}}
//
// Invariants: the slices of one tensor share its dtype and global shape, lie
// inside it and never overlap (put refuses otherwise; the reader re-checks,
// across files too). Whether they tile the tensor is checked by
// check_complete() for a single writer, and across ranks at commit by
// SliceInventory::check_tiling.
//
// Errors: put throws ServiceError with the ABI's statuses; write() throws
// checkpoint::CheckpointError naming the file.
// Thread-safety: none; the checkpoint services are loop-thread only.
#pragma once

#include <ATen/ATen.h>
#include <accel/accel.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"

namespace accel::runtime {

// ---------------------------------------------------------------------------
// Names, spaces, dtypes and boxes shared by the writer, the reader and the
// commit check
// ---------------------------------------------------------------------------

inline constexpr const char* kPluginStateMetadataKey = "accel.plugin_state";
inline constexpr const char* kPluginStateFormat = "accel-plugin-state";
inline constexpr int kPluginStateFormatVersion = 1;

// The plugin-state file of `rank`: "plugin_state.safetensors" for rank 0,
// "plugin_state.rank<r>.safetensors" otherwise.
std::string plugin_state_file_name(int rank);
// The rank of a plugin-state file name; nullopt for any other name.
std::optional<int> plugin_state_file_rank(const std::string& file_name);

// The stored tensor (or string) name of `name` in `space` for `plugin`.
std::string plugin_state_name(AccelCheckpointSpace space, const std::string& plugin, const std::string& name);

// "model", "optimizer", "plugin"; nullptr for a value outside the enum.
const char* checkpoint_space_name(AccelCheckpointSpace space);
std::optional<AccelCheckpointSpace> checkpoint_space_from_name(const std::string& name);

// The safetensors dtype of an ABI dtype and back; nullopt where none.
std::optional<checkpoint::DType> to_file_dtype(DLDataType dtype);
std::optional<DLDataType> from_file_dtype(checkpoint::DType dtype);

// A rectangle of a tensor: the global offset of its first element and its
// extent, one entry per dimension.
struct SliceBox {
  std::vector<int64_t> offset;
  std::vector<int64_t> extent;
};
int64_t box_volume(const std::vector<int64_t>& extent);
// The common part of two boxes of one tensor; nullopt when it is empty.
std::optional<SliceBox> box_intersection(const SliceBox& a, const SliceBox& b);
// Two non-empty boxes of `boxes` that overlap, as indices (first < second);
// nullopt when none do. Sorts by the start in dimension 0, so slices that
// partition rows (the usual sharding) cost n log n, not n^2.
std::optional<std::pair<size_t, size_t>> find_overlapping_boxes(const std::vector<SliceBox>& boxes);

// ---------------------------------------------------------------------------
// What was saved for one tensor name
// ---------------------------------------------------------------------------

struct StoredTensor {
  AccelCheckpointSpace space = ACCEL_CHECKPOINT_PLUGIN;
  std::string plugin;  // the owner, "" for MODEL / OPTIMIZER
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> global_shape;
  struct Slice {
    size_t file = 0;              // which file holds it (the reader's index)
    std::string tensor;           // the safetensors tensor holding it
    std::vector<int64_t> offset;  // global offset of its first element
    std::vector<int64_t> shape;   // its extent
  };
  std::vector<Slice> slices;
};

// ---------------------------------------------------------------------------
// The commit-time tiling check
// ---------------------------------------------------------------------------

// The slices one rank saved, by stored name (dtype, global shape, boxes),
// without their data: small enough to gather to rank 0, where the union
// over all ranks must tile every tensor exactly (accel/checkpoint.h: "the
// host checks at commit that the slices of each tensor tile its global
// shape").
class SliceInventory {
 public:
  void add(const std::string& stored, checkpoint::DType dtype, const std::vector<int64_t>& global_shape,
           SliceBox box);

  std::string to_json() const;
  // Throws CheckpointError for text that is not an inventory.
  static SliceInventory from_json(const std::string& text);

  // Throws CheckpointError naming the first tensor whose slices, over all
  // `ranks` (index = rank), disagree on dtype or global shape, overlap, or
  // leave part of it unsaved.
  static void check_tiling(const std::vector<SliceInventory>& ranks);

 private:
  struct Entry {
    checkpoint::DType dtype = checkpoint::DType::F32;
    std::vector<int64_t> global_shape;
    std::vector<SliceBox> boxes;
  };
  std::map<std::string, Entry> entries_;
};

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

class PluginStateWriter {
 public:
  // Adds a slice, copying `local`'s data now (any place, any strides). A
  // `stable` slice (ACCEL_CHECKPOINT_PUT_STABLE: unchanged until the
  // plugin's next optimizer step) in contiguous host memory is lent
  // instead: the writer keeps a view of it, which write() reads as it is
  // (a blocking save: no copy) or stage() copies (a background save, on
  // its writer thread). Either must happen before the plugin's next
  // optimizer step.
  void put(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
           const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
           const DLTensor* local, bool stable = false);
  // Stores a string; a repeated key keeps the last value.
  void put_string(const std::string& plugin, AccelCheckpointSpace space, const std::string& key,
                  const std::string& value);

  // Throws ServiceError(INVALID_ARGUMENT) naming the first tensor whose slices
  // do not cover its global shape (for a writer that saw every slice).
  void check_complete() const;

  bool empty() const { return tensors_.empty() && strings_.empty(); }
  // Whether anything was put into ACCEL_CHECKPOINT_EXPORT (its tensors are
  // kept apart: not in the plugin-state file, not in the inventory).
  bool has_exports() const { return !exports_.empty(); }
  // Bytes of the tensor copies it holds (slices and exports), and of the
  // lent slices not yet staged (views of the plugins' memory).
  int64_t held_bytes() const;
  int64_t lent_bytes() const;
  // Copies every lent slice into memory of its own (recycled where it
  // fits), so the plugins may change theirs. Safe on another thread than
  // the puts' while the plugins keep the stable contract; once, after the
  // last put.
  void stage();
  // Copies into `previous`'s tensors (an earlier save's writer, written and
  // done with) instead of fresh memory, wherever a put has the same stored
  // name, slice index, shape and dtype: the periodic saves of one run put the
  // same slices every time, so from the second save on a put is a memcpy
  // into memory already faulted in (--save-async). Call before any put.
  void recycle(PluginStateWriter&& previous);
  // Every slice put so far, for the commit-time check across ranks.
  SliceInventory inventory() const;
  // Writes the file (fsynced; not atomic on its own: see atomic_dir.h);
  // returns its size and crc32 (SafetensorsWriter::write).
  checkpoint::SafetensorsWriter::Written write(const std::filesystem::path& path) const;
  // Writes the ACCEL_CHECKPOINT_EXPORT tensors as one plain safetensors file
  // (names = parameter names, no Accel metadata), fsynced; likewise.
  checkpoint::SafetensorsWriter::Written write_exports(const std::filesystem::path& path) const;

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
  // ACCEL_CHECKPOINT_EXPORT: whole tensors (contiguous CPU copies) by name.
  std::map<std::string, std::pair<checkpoint::DType, at::Tensor>> exports_;
  std::map<std::string, StoredString> strings_;  // by stored name
  // recycle's buffers by stored name (exports: "\x01" + name), slice index.
  std::map<std::string, std::vector<at::Tensor>> spare_;
  // The lent slices, not yet staged: (stored name, slice index); their
  // entry.data is a view of the plugin's memory until stage().
  std::vector<std::pair<std::string, size_t>> lent_;
  // A CPU tensor shaped like `slice` to copy it into: the spare at (key, k)
  // when it fits, else fresh memory.
  at::Tensor buffer_for(const std::string& key, size_t k, const at::Tensor& slice);
};

}  // namespace accel::runtime
