// The checkpoint reader: index of every file's slices, resharding get (see
// checkpoint_reader.h).
#include "host/runtime/checkpoint_reader.h"

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "host/checkpoint/atomic_dir.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;
using checkpoint::DType;

bool is_float_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// The part `box` of `tensor`, whose first element sits at global `origin`.
at::Tensor sub_box(at::Tensor tensor, const std::vector<int64_t>& origin, const SliceBox& box) {
  for (size_t i = 0; i < box.offset.size(); ++i) {
    tensor = tensor.narrow(static_cast<int64_t>(i), box.offset[i] - origin[i], box.extent[i]);
  }
  return tensor;
}

// "exp_avg/<p>" for "<p>.exp_avg" and the like; nullopt for other names.
std::optional<std::string> optimizer_state_name(const std::string& saved) {
  for (const std::string state : {"exp_avg_sq", "exp_avg"}) {
    const std::string suffix = "." + state;
    if (saved.size() > suffix.size() && saved.compare(saved.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return state + "/" + saved.substr(0, saved.size() - suffix.size());
    }
  }
  return std::nullopt;
}

void check_space(AccelCheckpointSpace space) {
  if (checkpoint_space_name(space) == nullptr) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown checkpoint space %d", static_cast<int>(space)));
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------

CheckpointReader CheckpointReader::open_directory(const fs::path& dir) {
  std::vector<std::string> names;
  if (fs::exists(dir / checkpoint::kManifestFileName)) {
    for (const checkpoint::ManifestEntry& entry : checkpoint::read_manifest(dir).files) names.push_back(entry.file);
  } else {
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
      if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
    }
    if (error) throw CheckpointError("'" + dir.string() + "' cannot be listed: " + error.message());
  }
  // Rank 0's plugin state first (its strings win), then the other ranks in
  // rank order, then the host's files.
  std::vector<std::pair<int, std::string>> plugin_files;
  for (const std::string& name : names) {
    if (const auto rank = plugin_state_file_rank(name)) plugin_files.emplace_back(*rank, name);
  }
  std::sort(plugin_files.begin(), plugin_files.end());

  CheckpointReader reader;
  for (const auto& [rank, name] : plugin_files) reader.add_plugin_state(dir / name, /*verify_overlaps=*/false);
  const auto listed = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (listed(kModelFile)) reader.add_whole_tensors(dir / kModelFile, ACCEL_CHECKPOINT_MODEL, false);
  if (listed(kOptimizerFile)) reader.add_whole_tensors(dir / kOptimizerFile, ACCEL_CHECKPOINT_OPTIMIZER, false);
  // Once for all files: sorted sweeps, not a check per file added.
  reader.check_overlaps({});
  return reader;
}

void CheckpointReader::add_plugin_state_file(const fs::path& path) { add_plugin_state(path, true); }
void CheckpointReader::add_model_file(const fs::path& path) { add_whole_tensors(path, ACCEL_CHECKPOINT_MODEL, true); }
void CheckpointReader::add_optimizer_file(const fs::path& path) {
  add_whole_tensors(path, ACCEL_CHECKPOINT_OPTIMIZER, true);
}

void CheckpointReader::add_plugin_state(const fs::path& path, bool verify_overlaps) {
  checkpoint::SafetensorsFile file = checkpoint::SafetensorsFile::open(path);
  const std::string where = path.string() + ": plugin state: ";
  const auto meta_it = file.metadata().find(kPluginStateMetadataKey);
  if (meta_it == file.metadata().end()) {
    throw CheckpointError(where + "no \"" + kPluginStateMetadataKey + "\" metadata");
  }
  const size_t file_index = files_.size();
  std::map<std::string, StoredTensor> tensors;
  std::map<std::string, std::string> strings;
  // The one JSON rule (accel/sdk/json_input.hpp): depth limit, exact types
  // (an offset of 2.5 is refused, not read as 2), values and names quoted
  // through describe().
  const auto name = [](const std::string& text) { return sdk::describe(nlohmann::json(text)); };
  try {
    const nlohmann::json document = sdk::parse_json(meta_it->second, where + "metadata");
    const sdk::JsonFields meta(document, where + "metadata");
    if (meta.string("format") != kPluginStateFormat) {
      meta.fail("format", "is " + sdk::describe(meta.value("format")) + ", not \"" + kPluginStateFormat + "\"");
    }
    if (meta.integer("format_version") != kPluginStateFormatVersion) {
      meta.fail("format_version", "is " + sdk::describe(meta.value("format_version")) + ", not 1");
    }
    const sdk::JsonFields all_tensors = meta.object("tensors");
    for (const auto& [stored, j] : all_tensors.json().items()) {
      const sdk::JsonFields fields(j, where + "metadata", "tensors." + stored + ".");
      StoredTensor t;
      const auto space = checkpoint_space_from_name(fields.string("space"));
      if (!space) throw CheckpointError(where + name(stored) + ": unknown space " + sdk::describe(fields.value("space")));
      t.space = *space;
      t.plugin = fields.string("plugin");
      t.name = fields.string("name");
      t.global_shape = fields.integer_array("global_shape", 0);
      if (stored != plugin_state_name(t.space, t.plugin, t.name)) {
        throw CheckpointError(where + name(stored) + " does not match its space, plugin and name");
      }
      const auto file_dtype = checkpoint::dtype_from_name(fields.string("dtype"));
      if (!file_dtype || !from_file_dtype(*file_dtype)) {
        throw CheckpointError(where + name(stored) + ": unknown dtype " + sdk::describe(fields.value("dtype")));
      }
      t.dtype = *from_file_dtype(*file_dtype);
      size_t index = 0;
      for (const nlohmann::json& js : fields.array("slices")) {
        const sdk::JsonFields slice(js, where + "metadata", "tensors." + stored + ".slices[" + std::to_string(index++) + "].");
        StoredTensor::Slice s;
        s.file = file_index;
        s.tensor = slice.string("tensor");
        s.offset = slice.integer_array("offset", 0);
        const checkpoint::TensorInfo* info = file.find(s.tensor);
        if (info == nullptr) {
          throw CheckpointError(where + name(stored) + ": slice tensor " + name(s.tensor) + " is missing");
        }
        if (info->dtype != *file_dtype) {
          throw CheckpointError(where + name(s.tensor) + " has another dtype than its tensor");
        }
        s.shape = info->shape;
        if (s.shape.size() != t.global_shape.size() || s.offset.size() != t.global_shape.size()) {
          throw CheckpointError(where + name(s.tensor) + " has the wrong number of dimensions");
        }
        for (size_t i = 0; i < s.shape.size(); ++i) {
          // offset + shape <= global, written so that neither side overflows.
          if (s.shape[i] > t.global_shape[i] || s.offset[i] > t.global_shape[i] - s.shape[i]) {
            throw CheckpointError(where + name(s.tensor) + " lies outside its global shape");
          }
        }
        t.slices.push_back(std::move(s));
      }
      tensors.emplace(stored, std::move(t));
    }
    const sdk::JsonFields all_strings = meta.object("strings");
    for (const auto& [stored, j] : all_strings.json().items()) {
      strings[stored] = sdk::JsonFields(j, where + "metadata", "strings." + stored + ".").string("value");
    }
  } catch (const sdk::JsonInputError& e) {
    throw CheckpointError(e.what());
  }
  merge(std::move(file), std::move(tensors), strings, verify_overlaps);
}

void CheckpointReader::add_whole_tensors(const fs::path& path, AccelCheckpointSpace space, bool verify_overlaps) {
  checkpoint::SafetensorsFile file = checkpoint::SafetensorsFile::open(path);
  const size_t file_index = files_.size();
  std::map<std::string, StoredTensor> tensors;
  for (const checkpoint::TensorInfo& info : file.tensors()) {
    StoredTensor t;
    t.space = space;
    if (space == ACCEL_CHECKPOINT_OPTIMIZER) {
      const auto name = optimizer_state_name(info.name);
      if (!name) {
        throw CheckpointError(path.string() + ": tensor '" + info.name +
                              "' is not an optimizer state ('<param>.exp_avg' or '<param>.exp_avg_sq')");
      }
      t.name = *name;
    } else {
      t.name = info.name;
    }
    t.dtype = *from_file_dtype(info.dtype);  // every safetensors dtype we accept has an ABI twin
    t.global_shape = info.shape;
    t.slices.push_back({file_index, info.name, std::vector<int64_t>(info.shape.size(), 0), info.shape});
    tensors.emplace(plugin_state_name(space, "", t.name), std::move(t));
  }
  merge(std::move(file), std::move(tensors), {}, verify_overlaps);
}

void CheckpointReader::merge(checkpoint::SafetensorsFile file, std::map<std::string, StoredTensor> tensors,
                             const std::map<std::string, std::string>& strings, bool verify_overlaps) {
  const std::string added = file.path().filename().string();
  // Check everything against the index before changing it.
  for (const auto& [stored, t] : tensors) {
    const auto found = tensors_.find(stored);
    if (found == tensors_.end()) continue;
    const StoredTensor& known = found->second;
    const std::string earlier = file_name(known.slices.front().file);
    if (known.global_shape != t.global_shape) {
      throw CheckpointError(describe(t) + ": global shape " + describe_shape(t.global_shape) + " in " + added +
                            " differs from " + describe_shape(known.global_shape) + " in " + earlier);
    }
    if (!accel_dtype_equal(known.dtype, t.dtype)) {
      throw CheckpointError(describe(t) + ": dtype " + describe_dtype(t.dtype) + " in " + added + " differs from " +
                            describe_dtype(known.dtype) + " in " + earlier);
    }
  }
  std::vector<std::string> touched;
  for (auto& [stored, t] : tensors) {
    touched.push_back(stored);
    const auto found = tensors_.find(stored);
    if (found == tensors_.end()) {
      tensors_.emplace(stored, std::move(t));
    } else {
      for (StoredTensor::Slice& s : t.slices) found->second.slices.push_back(std::move(s));
    }
  }
  for (const auto& [stored, value] : strings) strings_.emplace(stored, value);  // the first file's value stays
  files_.push_back(std::move(file));
  if (verify_overlaps) check_overlaps(touched);
}

void CheckpointReader::check_overlaps(const std::vector<std::string>& stored) const {
  const auto check_one = [&](const StoredTensor& t) {
    std::vector<SliceBox> boxes;
    for (const StoredTensor::Slice& s : t.slices) boxes.push_back({s.offset, s.shape});
    if (const auto clash = find_overlapping_boxes(boxes)) {
      const StoredTensor::Slice& a = t.slices[clash->first];
      const StoredTensor::Slice& b = t.slices[clash->second];
      throw CheckpointError(describe(t) + ": the slice at " + describe_shape(a.offset) + " in " + file_name(a.file) +
                            " overlaps the slice at " + describe_shape(b.offset) + " in " + file_name(b.file));
    }
  };
  if (stored.empty()) {
    for (const auto& [name, t] : tensors_) check_one(t);
  } else {
    for (const std::string& name : stored) check_one(tensors_.at(name));
  }
}

std::string CheckpointReader::describe(const StoredTensor& tensor) const {
  const std::string where = files_.empty() ? std::string() : files_.front().path().parent_path().string() + ": ";
  switch (tensor.space) {
    case ACCEL_CHECKPOINT_MODEL: return where + "model tensor '" + tensor.name + "'";
    case ACCEL_CHECKPOINT_OPTIMIZER: return where + "optimizer tensor '" + tensor.name + "'";
    default: return where + "plugin " + tensor.plugin + "'s tensor '" + tensor.name + "'";
  }
}

std::string CheckpointReader::file_name(size_t file) const {
  return file < files_.size() ? files_[file].path().filename().string() : "(the file being added)";
}

std::vector<fs::path> CheckpointReader::files() const {
  std::vector<fs::path> paths;
  for (const checkpoint::SafetensorsFile& f : files_) paths.push_back(f.path());
  return paths;
}

// ---------------------------------------------------------------------------
// Lookups
// ---------------------------------------------------------------------------

const StoredTensor* CheckpointReader::find(const std::string& plugin, AccelCheckpointSpace space,
                                           const std::string& name) const {
  const auto it = tensors_.find(plugin_state_name(space, plugin, name));
  return it == tensors_.end() ? nullptr : &it->second;
}

const std::string* CheckpointReader::find_string(const std::string& plugin, AccelCheckpointSpace space,
                                                 const std::string& key) const {
  const auto it = strings_.find(plugin_state_name(space, plugin, key));
  return it == strings_.end() ? nullptr : &it->second;
}

std::vector<const StoredTensor*> CheckpointReader::tensors_in(AccelCheckpointSpace space) const {
  std::vector<const StoredTensor*> found;
  for (const auto& [stored, t] : tensors_) {
    if (t.space == space) found.push_back(&t);
  }
  std::sort(found.begin(), found.end(), [](const StoredTensor* a, const StoredTensor* b) {
    return a->plugin != b->plugin ? a->plugin < b->plugin : a->name < b->name;
  });
  return found;
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

std::vector<CheckpointReader::Piece> CheckpointReader::locate(
    const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
    const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
    const std::vector<int64_t>& extent, at::ScalarType type, const StoredTensor** found) const {
  check_space(space);
  const StoredTensor* tensor = find(plugin, space, name);
  if (tensor == nullptr) {
    fail(ACCEL_ERROR_NOT_FOUND, "no tensor '" + name + "' in the " + checkpoint_space_name(space) + " state of " +
                                    (files_.empty() ? std::string("the checkpoint")
                                                    : files_.front().path().parent_path().string()));
  }
  if (tensor->global_shape != global_shape) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': global shape " + describe_shape(global_shape) +
                                           " requested, " + describe_shape(tensor->global_shape) + " saved");
  }
  if (extent.size() != global_shape.size() || global_offset.size() != global_shape.size()) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': local does not have the tensor's dimensions");
  }
  for (size_t i = 0; i < extent.size(); ++i) {
    if (global_offset[i] < 0 || global_offset[i] + extent[i] > global_shape[i]) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': region " + describe_shape(extent) + " at " +
                                             describe_shape(global_offset) + " lies outside " +
                                             describe_shape(global_shape));
    }
  }
  const at::ScalarType saved_type = *to_scalar_type(tensor->dtype);
  if (saved_type != type && !(is_float_type(saved_type) && is_float_type(type))) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "' was saved as " + describe_dtype(tensor->dtype) +
                                           " and cannot be read as " + describe_dtype(to_dl_dtype(type)) +
                                           " (only float dtypes convert; FP8 never implicitly)");
  }
  // Saved slices never overlap, so the overlaps' volumes add up to the
  // region's exactly when it was saved completely.
  const SliceBox region{global_offset, extent};
  std::vector<Piece> pieces;
  int64_t covered = 0;
  for (const StoredTensor::Slice& slice : tensor->slices) {
    auto overlap = box_intersection(region, {slice.offset, slice.shape});
    if (!overlap) continue;
    covered += box_volume(overlap->extent);
    pieces.push_back({&slice, std::move(*overlap)});
  }
  if (covered != box_volume(extent)) {
    fail(ACCEL_ERROR_NOT_FOUND,
         "'" + name + "': region " + describe_shape(extent) + " at " + describe_shape(global_offset) +
             strformat(" was only partly saved (%lld of %lld elements)", static_cast<long long>(covered),
                       static_cast<long long>(box_volume(extent))));
  }
  if (found) *found = tensor;
  return pieces;
}

at::Tensor CheckpointReader::assemble(const StoredTensor& tensor, const std::vector<Piece>& pieces,
                                      const std::vector<int64_t>& global_offset,
                                      const std::vector<int64_t>& extent) const {
  const at::ScalarType saved_type = *to_scalar_type(tensor.dtype);
  at::Tensor staging = at::empty(extent, at::TensorOptions().dtype(saved_type));
  for (const Piece& piece : pieces) {
    const StoredTensor::Slice& slice = *piece.slice;
    const checkpoint::SafetensorsFile& file = files_[slice.file];
    const checkpoint::TensorInfo* info = file.find(slice.tensor);
    // Only the rows (dimension 0) of the slice that the region touches.
    std::vector<int64_t> rows_shape = slice.shape;
    std::vector<int64_t> rows_origin = slice.offset;
    uint64_t skip_bytes = 0;
    if (!rows_shape.empty()) {
      const int64_t first_row = piece.overlap.offset[0] - slice.offset[0];
      rows_shape[0] = piece.overlap.extent[0];
      rows_origin[0] = piece.overlap.offset[0];
      const uint64_t row_bytes = info->shape[0] == 0 ? 0 : info->nbytes() / static_cast<uint64_t>(info->shape[0]);
      skip_bytes = static_cast<uint64_t>(first_row) * row_bytes;
    }
    at::Tensor rows = at::empty(rows_shape, at::TensorOptions().dtype(saved_type));
    file.read_bytes(*info, skip_bytes, rows.data_ptr(), rows.nbytes());
    sub_box(staging, global_offset, piece.overlap).copy_(sub_box(rows, rows_origin, piece.overlap));
  }
  return staging;
}

void CheckpointReader::check_readable(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                                      const std::vector<int64_t>& global_shape,
                                      const std::vector<int64_t>& global_offset, const std::vector<int64_t>& extent,
                                      at::ScalarType type) const {
  locate(plugin, space, name, global_shape, global_offset, extent, type, nullptr);
}

void CheckpointReader::read(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                            const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                            const at::Tensor& target) const {
  const std::vector<int64_t> extent(target.sizes().begin(), target.sizes().end());
  const StoredTensor* tensor = nullptr;
  const std::vector<Piece> pieces =
      locate(plugin, space, name, global_shape, global_offset, extent, target.scalar_type(), &tensor);
  at::Tensor(target).copy_(assemble(*tensor, pieces, global_offset, extent));
}

void CheckpointReader::get(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                           const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                           const DLTensor* local) const {
  read(plugin, space, name, global_shape, global_offset, to_aten(local, "local"));
}

at::Tensor CheckpointReader::read_whole(const StoredTensor& tensor) const {
  const std::vector<int64_t> origin(tensor.global_shape.size(), 0);
  const std::vector<Piece> pieces = locate(tensor.plugin, tensor.space, tensor.name, tensor.global_shape, origin,
                                           tensor.global_shape, *to_scalar_type(tensor.dtype), nullptr);
  return assemble(tensor, pieces, origin, tensor.global_shape);
}

}  // namespace accel::runtime
