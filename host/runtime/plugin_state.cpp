// Plugin state files: the writer, the names and codecs the reader shares,
// and the commit-time tiling check (see plugin_state.h).
#include "host/runtime/plugin_state.h"

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

using checkpoint::CheckpointError;
using checkpoint::DType;

constexpr const char* kFilePrefix = "plugin_state";
constexpr const char* kFileSuffix = ".safetensors";

void check_space(AccelCheckpointSpace space) {
  if (checkpoint_space_name(space) == nullptr) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown checkpoint space %d", static_cast<int>(space)));
  }
}

// The safetensors dtypes (docs/checkpoint_format.md), paired with ABI dtypes.
const std::vector<std::pair<DLDataType, DType>>& dtype_pairs() {
  static const std::vector<std::pair<DLDataType, DType>> pairs = {
      {accel_dtype(kDLFloat, 64), DType::F64},   {accel_dtype(kDLFloat, 32), DType::F32},
      {accel_dtype(kDLFloat, 16), DType::F16},   {accel_dtype(kDLBfloat, 16), DType::BF16},
      {accel_dtype(ACCEL_DL_FLOAT8_E4M3FN, 8), DType::F8_E4M3},
      {accel_dtype(ACCEL_DL_FLOAT8_E5M2, 8), DType::F8_E5M2},
      {accel_dtype(kDLInt, 64), DType::I64},     {accel_dtype(kDLInt, 32), DType::I32},
      {accel_dtype(kDLInt, 16), DType::I16},     {accel_dtype(kDLInt, 8), DType::I8},
      {accel_dtype(kDLUInt, 8), DType::U8},      {accel_dtype(kDLUInt, 16), DType::U16},
      {accel_dtype(ACCEL_DL_BOOL, 8), DType::BOOL}, {accel_dtype(kDLUInt, 32), DType::U32},
      {accel_dtype(kDLUInt, 64), DType::U64},
  };
  return pairs;
}

}  // namespace

// ---------------------------------------------------------------------------
// Names, spaces, dtypes, boxes
// ---------------------------------------------------------------------------

std::string plugin_state_file_name(int rank) {
  return rank == 0 ? std::string(kFilePrefix) + kFileSuffix
                   : std::string(kFilePrefix) + ".rank" + std::to_string(rank) + kFileSuffix;
}

std::optional<int> plugin_state_file_rank(const std::string& file_name) {
  if (file_name == plugin_state_file_name(0)) return 0;
  const std::string prefix = std::string(kFilePrefix) + ".rank";
  const std::string suffix = kFileSuffix;
  if (file_name.size() <= prefix.size() + suffix.size() || file_name.compare(0, prefix.size(), prefix) != 0 ||
      file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  // Canonical decimal only ("rank01" is not rank 1), small enough for an int.
  if (digits.size() > 9 || digits[0] == '0' ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoi(digits);
}

std::string plugin_state_name(AccelCheckpointSpace space, const std::string& plugin, const std::string& name) {
  switch (space) {
    case ACCEL_CHECKPOINT_MODEL: return "@model/" + name;
    case ACCEL_CHECKPOINT_OPTIMIZER: return "@optimizer/" + name;
    case ACCEL_CHECKPOINT_EXPORT: return "@export/" + name;
    default: return plugin + "/" + name;
  }
}

const char* checkpoint_space_name(AccelCheckpointSpace space) {
  switch (space) {
    case ACCEL_CHECKPOINT_MODEL: return "model";
    case ACCEL_CHECKPOINT_OPTIMIZER: return "optimizer";
    case ACCEL_CHECKPOINT_PLUGIN: return "plugin";
    case ACCEL_CHECKPOINT_EXPORT: return "export";
    default: return nullptr;
  }
}

std::optional<AccelCheckpointSpace> checkpoint_space_from_name(const std::string& name) {
  for (AccelCheckpointSpace s : {ACCEL_CHECKPOINT_MODEL, ACCEL_CHECKPOINT_OPTIMIZER, ACCEL_CHECKPOINT_PLUGIN}) {
    if (name == checkpoint_space_name(s)) return s;
  }
  return std::nullopt;
}

std::optional<DType> to_file_dtype(DLDataType dtype) {
  for (const auto& [dl, file] : dtype_pairs()) {
    if (accel_dtype_equal(dl, dtype)) return file;
  }
  return std::nullopt;
}

std::optional<DLDataType> from_file_dtype(DType dtype) {
  for (const auto& [dl, file] : dtype_pairs()) {
    if (file == dtype) return dl;
  }
  return std::nullopt;
}

int64_t box_volume(const std::vector<int64_t>& extent) {
  int64_t n = 1;
  for (int64_t d : extent) n *= d;
  return n;
}

std::optional<SliceBox> box_intersection(const SliceBox& a, const SliceBox& b) {
  SliceBox common{std::vector<int64_t>(a.offset.size()), std::vector<int64_t>(a.offset.size())};
  for (size_t i = 0; i < a.offset.size(); ++i) {
    common.offset[i] = std::max(a.offset[i], b.offset[i]);
    const int64_t stop = std::min(a.offset[i] + a.extent[i], b.offset[i] + b.extent[i]);
    if (stop <= common.offset[i]) return std::nullopt;
    common.extent[i] = stop - common.offset[i];
  }
  return common;
}

std::optional<std::pair<size_t, size_t>> find_overlapping_boxes(const std::vector<SliceBox>& boxes) {
  std::vector<size_t> order;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (box_volume(boxes[i].extent) > 0) order.push_back(i);
  }
  if (order.size() < 2) return std::nullopt;
  const auto ordered = [](size_t a, size_t b) { return std::pair<size_t, size_t>{std::min(a, b), std::max(a, b)}; };
  // A scalar has one element: two non-empty boxes of it always overlap.
  if (boxes[order[0]].offset.empty()) return ordered(order[0], order[1]);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return boxes[a].offset[0] < boxes[b].offset[0]; });
  // Sweep over dimension 0: only boxes whose rows are still open can overlap
  // the next one; the rest leave the active list for good.
  std::vector<size_t> active;
  for (size_t i : order) {
    const int64_t start = boxes[i].offset[0];
    std::erase_if(active, [&](size_t k) { return boxes[k].offset[0] + boxes[k].extent[0] <= start; });
    for (size_t k : active) {
      if (box_intersection(boxes[i], boxes[k])) return ordered(i, k);
    }
    active.push_back(i);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// The commit-time tiling check
// ---------------------------------------------------------------------------

void SliceInventory::add(const std::string& stored, DType dtype, const std::vector<int64_t>& global_shape,
                         SliceBox box) {
  Entry& entry = entries_[stored];
  if (entry.boxes.empty()) {
    entry.dtype = dtype;
    entry.global_shape = global_shape;
  }
  entry.boxes.push_back(std::move(box));
}

std::string SliceInventory::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [stored, entry] : entries_) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const SliceBox& box : entry.boxes) boxes.push_back({box.offset, box.extent});
    j[stored] = {{"dtype", std::string(checkpoint::dtype_name(entry.dtype))},
                 {"global_shape", entry.global_shape},
                 {"boxes", std::move(boxes)}};
  }
  return j.dump();
}

SliceInventory SliceInventory::from_json(const std::string& text) {
  // Another rank's text, read by the one JSON rule (accel/sdk/json_input.hpp):
  // depth limit, exact types, names and values quoted through describe().
  const std::string where = "slice inventory";
  SliceInventory inventory;
  try {
    const nlohmann::json parsed = sdk::parse_json(text, where);  // outlives the loop over its items
    const sdk::JsonFields all(parsed, where);
    for (const auto& [stored, j] : all.json().items()) {
      const sdk::JsonFields fields(j, where, stored + ".");
      Entry& entry = inventory.entries_[stored];
      const auto dtype = checkpoint::dtype_from_name(fields.string("dtype"));
      if (!dtype) fields.fail("dtype", "is unknown: " + sdk::describe(fields.value("dtype")));
      entry.dtype = *dtype;
      entry.global_shape = fields.integer_array("global_shape", 0);
      size_t index = 0;
      for (const nlohmann::json& b : fields.array("boxes")) {
        const std::string box = "boxes[" + std::to_string(index++) + "]";
        if (!b.is_array() || b.size() != 2) fields.fail(box, "must be [offset, extent], got " + sdk::describe(b));
        entry.boxes.push_back({fields.integer_list(box + "[0]", b[0], 0), fields.integer_list(box + "[1]", b[1], 0)});
        if (entry.boxes.back().offset.size() != entry.global_shape.size() ||
            entry.boxes.back().extent.size() != entry.global_shape.size()) {
          fields.fail(box, "is of the wrong rank");
        }
      }
    }
  } catch (const sdk::JsonInputError& e) {
    throw CheckpointError(e.what());
  }
  return inventory;
}

void SliceInventory::check_tiling(const std::vector<SliceInventory>& ranks) {
  struct Owned {
    SliceBox box;
    size_t rank;
  };
  std::map<std::string, std::pair<const Entry*, std::vector<Owned>>> merged;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& [stored, entry] : ranks[r].entries_) {
      auto& [first, boxes] = merged[stored];
      if (first == nullptr) {
        first = &entry;
      } else if (first->dtype != entry.dtype || first->global_shape != entry.global_shape) {
        throw CheckpointError(strformat("'%s': rank %zu saved it as %s ", stored.c_str(), r,
                                        std::string(checkpoint::dtype_name(entry.dtype)).c_str()) +
                              describe_shape(entry.global_shape) + ", another rank as " +
                              std::string(checkpoint::dtype_name(first->dtype)) + " " +
                              describe_shape(first->global_shape));
      }
      for (const SliceBox& box : entry.boxes) boxes.push_back({box, r});
    }
  }
  for (const auto& [stored, merged_entry] : merged) {
    const auto& [entry, boxes] = merged_entry;
    int64_t covered = 0;
    std::vector<SliceBox> plain;
    for (const Owned& owned : boxes) {
      covered += box_volume(owned.box.extent);
      plain.push_back(owned.box);
    }
    if (const auto clash = find_overlapping_boxes(plain)) {
      const Owned& a = boxes[clash->first];
      const Owned& b = boxes[clash->second];
      throw CheckpointError(strformat("'%s': the slice of rank %zu at ", stored.c_str(), a.rank) +
                            describe_shape(a.box.offset) + strformat(" overlaps the slice of rank %zu at ", b.rank) +
                            describe_shape(b.box.offset) + " (replicated state is saved by one replica only)");
    }
    const int64_t total = box_volume(entry->global_shape);
    if (covered != total) {
      throw CheckpointError(strformat("'%s': the slices saved by all ranks cover %lld of %lld elements of ",
                                      stored.c_str(), static_cast<long long>(covered),
                                      static_cast<long long>(total)) +
                            describe_shape(entry->global_shape));
    }
  }
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

void PluginStateWriter::put(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                            const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                            const DLTensor* local, bool stable) {
  check_space(space);
  if (name.empty()) fail(ACCEL_ERROR_INVALID_ARGUMENT, "name is empty");
  const at::Tensor slice = to_aten(local, "local");
  const std::string stored = plugin_state_name(space, plugin, name);
  const std::vector<int64_t> extent(slice.sizes().begin(), slice.sizes().end());
  if (extent.size() != global_shape.size() || global_offset.size() != global_shape.size()) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("'%s': local has %zu dimensions, the global tensor %zu", name.c_str(),
                                                 extent.size(), global_shape.size()));
  }
  for (size_t i = 0; i < extent.size(); ++i) {
    if (global_shape[i] < 0 || global_offset[i] < 0 || global_offset[i] + extent[i] > global_shape[i]) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           "'" + name + "': slice " + describe_shape(extent) + " at " + describe_shape(global_offset) +
               " lies outside the global shape " + describe_shape(global_shape));
    }
  }
  const DLDataType dtype = local->dtype;
  if (!to_file_dtype(dtype)) {
    fail(ACCEL_ERROR_UNSUPPORTED, "'" + name + "': dtype " + describe_dtype(dtype) + " cannot be stored in a checkpoint");
  }
  if (space == ACCEL_CHECKPOINT_EXPORT) {
    if (extent != global_shape) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': the consolidated model file takes whole tensors, got a " +
                                             describe_shape(extent) + " slice of " + describe_shape(global_shape));
    }
    if (exports_.count(name) != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': put twice into the model file");
    at::Tensor copy = buffer_for("\x01" + name, 0, slice);
    copy.copy_(slice);
    exports_.emplace(name, std::make_pair(*to_file_dtype(dtype), std::move(copy)));
    return;
  }
  auto found = tensors_.find(stored);
  if (found != tensors_.end()) {
    const StoredTensor& meta = found->second.meta;
    if (meta.global_shape != global_shape) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': global shape " + describe_shape(global_shape) +
                                             " differs from the earlier put's " + describe_shape(meta.global_shape));
    }
    if (!accel_dtype_equal(meta.dtype, dtype)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': dtype " + describe_dtype(dtype) +
                                             " differs from the earlier put's " + describe_dtype(meta.dtype));
    }
    for (const StoredTensor::Slice& other : meta.slices) {
      if (box_volume(extent) > 0 && box_intersection({global_offset, extent}, {other.offset, other.shape})) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': slice at " + describe_shape(global_offset) +
                                               " overlaps the one put at " + describe_shape(other.offset));
      }
    }
  } else {
    Entry entry;
    entry.meta.space = space;
    entry.meta.plugin = space == ACCEL_CHECKPOINT_PLUGIN ? plugin : "";
    entry.meta.name = name;
    entry.meta.dtype = dtype;
    entry.meta.global_shape = global_shape;
    found = tensors_.emplace(stored, std::move(entry)).first;
  }
  Entry& entry = found->second;
  const size_t k = entry.meta.slices.size();
  entry.meta.slices.push_back({0, k == 0 ? stored : stored + "#" + std::to_string(k), global_offset, extent});
  // Lent: host memory stage() can memcpy. A device slice is copied now.
  if (stable && slice.is_cpu() && slice.is_contiguous()) {
    entry.data.push_back(slice);
    lent_.emplace_back(stored, k);
    return;
  }
  at::Tensor copy = buffer_for(stored, k, slice);
  copy.copy_(slice);
  entry.data.push_back(std::move(copy));
}

void PluginStateWriter::put_string(const std::string& plugin, AccelCheckpointSpace space, const std::string& key,
                                   const std::string& value) {
  check_space(space);
  if (space == ACCEL_CHECKPOINT_EXPORT) fail(ACCEL_ERROR_INVALID_ARGUMENT, "the consolidated model file holds no strings");
  if (key.empty()) fail(ACCEL_ERROR_INVALID_ARGUMENT, "key is empty");
  strings_[plugin_state_name(space, plugin, key)] =
      StoredString{space, space == ACCEL_CHECKPOINT_PLUGIN ? plugin : "", key, value};
}

void PluginStateWriter::check_complete() const {
  for (const auto& [stored, entry] : tensors_) {
    int64_t covered = 0;
    for (const StoredTensor::Slice& s : entry.meta.slices) covered += box_volume(s.shape);
    const int64_t total = box_volume(entry.meta.global_shape);
    if (covered != total) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("'%s': the saved slices cover %lld of %lld elements of ", stored.c_str(),
                     static_cast<long long>(covered), static_cast<long long>(total)) +
               describe_shape(entry.meta.global_shape));
    }
  }
}

void PluginStateWriter::stage() {
  for (const auto& [stored, k] : lent_) {
    at::Tensor& data = tensors_.at(stored).data[k];
    at::Tensor copy = buffer_for(stored, k, data);
    // A plain memcpy: ATen's copy_ would start an intra-op thread team on
    // this thread, beside the training thread's own.
    std::memcpy(copy.data_ptr(), data.data_ptr(), data.nbytes());
    data = std::move(copy);
  }
  lent_.clear();
}

int64_t PluginStateWriter::lent_bytes() const {
  int64_t bytes = 0;
  for (const auto& [stored, k] : lent_) bytes += static_cast<int64_t>(tensors_.at(stored).data[k].nbytes());
  return bytes;
}

void PluginStateWriter::recycle(PluginStateWriter&& previous) {
  // A lent slice is the plugin's memory, never a spare.
  for (const auto& [stored, k] : previous.lent_) previous.tensors_.at(stored).data[k] = at::Tensor();
  for (auto& [stored, entry] : previous.tensors_) spare_[stored] = std::move(entry.data);
  for (auto& [name, stored] : previous.exports_) spare_["\x01" + name] = {std::move(stored.second)};
  previous.tensors_.clear();
  previous.exports_.clear();
}

at::Tensor PluginStateWriter::buffer_for(const std::string& key, size_t k, const at::Tensor& slice) {
  const auto found = spare_.find(key);
  if (found != spare_.end() && k < found->second.size()) {
    at::Tensor spare = std::move(found->second[k]);
    if (spare.defined() && spare.sizes() == slice.sizes() && spare.scalar_type() == slice.scalar_type()) return spare;
  }
  return at::empty(slice.sizes(), slice.options().device(at::kCPU));
}

int64_t PluginStateWriter::held_bytes() const {
  int64_t bytes = 0;
  for (const auto& [stored, entry] : tensors_) {
    for (const at::Tensor& data : entry.data) bytes += static_cast<int64_t>(data.nbytes());
  }
  for (const auto& [name, stored] : exports_) bytes += static_cast<int64_t>(stored.second.nbytes());
  return bytes - lent_bytes();
}

SliceInventory PluginStateWriter::inventory() const {
  SliceInventory inventory;
  for (const auto& [stored, entry] : tensors_) {
    for (const StoredTensor::Slice& slice : entry.meta.slices) {
      inventory.add(stored, *to_file_dtype(entry.meta.dtype), entry.meta.global_shape, {slice.offset, slice.shape});
    }
  }
  return inventory;
}

checkpoint::SafetensorsWriter::Written PluginStateWriter::write(const std::filesystem::path& path) const {
  checkpoint::SafetensorsWriter writer;
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [stored, entry] : tensors_) {
    const DType dtype = *to_file_dtype(entry.meta.dtype);
    nlohmann::json slices = nlohmann::json::array();
    for (size_t k = 0; k < entry.meta.slices.size(); ++k) {
      const StoredTensor::Slice& slice = entry.meta.slices[k];
      const at::Tensor& data = entry.data[k];
      writer.add(slice.tensor, dtype, slice.shape, data.data_ptr(), data.nbytes());
      slices.push_back({{"tensor", slice.tensor}, {"offset", slice.offset}});
    }
    tensors[stored] = {{"space", checkpoint_space_name(entry.meta.space)},
                       {"plugin", entry.meta.plugin},
                       {"name", entry.meta.name},
                       {"dtype", std::string(checkpoint::dtype_name(dtype))},
                       {"global_shape", entry.meta.global_shape},
                       {"slices", std::move(slices)}};
  }
  nlohmann::json strings = nlohmann::json::object();
  for (const auto& [stored, s] : strings_) {
    strings[stored] = {{"space", checkpoint_space_name(s.space)}, {"plugin", s.plugin}, {"key", s.key}, {"value", s.value}};
  }
  const nlohmann::json meta = {{"format", kPluginStateFormat},
                               {"format_version", kPluginStateFormatVersion},
                               {"tensors", std::move(tensors)},
                               {"strings", std::move(strings)}};
  writer.set_metadata(kPluginStateMetadataKey, meta.dump());
  return writer.write(path);
}

checkpoint::SafetensorsWriter::Written PluginStateWriter::write_exports(const std::filesystem::path& path) const {
  checkpoint::SafetensorsWriter writer;
  for (const auto& [name, stored] : exports_) {
    const auto& [dtype, data] = stored;
    const std::vector<int64_t> shape(data.sizes().begin(), data.sizes().end());
    writer.add(name, dtype, shape, data.data_ptr(), data.nbytes());
  }
  return writer.write(path);
}

}  // namespace accel::runtime
