// Plugin state files: writer and reader (see plugin_state.h for the layout
// and invariants).
#include "host/runtime/plugin_state.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

using checkpoint::CheckpointError;
using checkpoint::DType;

constexpr const char* kMetadataKey = "accel.plugin_state";
constexpr const char* kFormat = "accel-plugin-state";
constexpr int kFormatVersion = 1;

const char* space_name(AccelCheckpointSpace space) {
  switch (space) {
    case ACCEL_CHECKPOINT_MODEL: return "model";
    case ACCEL_CHECKPOINT_OPTIMIZER: return "optimizer";
    case ACCEL_CHECKPOINT_PLUGIN: return "plugin";
    default: return nullptr;
  }
}

std::optional<AccelCheckpointSpace> space_from_name(const std::string& name) {
  for (AccelCheckpointSpace s : {ACCEL_CHECKPOINT_MODEL, ACCEL_CHECKPOINT_OPTIMIZER, ACCEL_CHECKPOINT_PLUGIN}) {
    if (name == space_name(s)) return s;
  }
  return std::nullopt;
}

void check_space(AccelCheckpointSpace space) {
  if (space_name(space) == nullptr) {
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

int64_t volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The intersection of two boxes, as (offset, extent); nullopt when empty.
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> intersect(
    const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_ext, const std::vector<int64_t>& b_off,
    const std::vector<int64_t>& b_ext) {
  std::vector<int64_t> off(a_off.size()), ext(a_off.size());
  for (size_t i = 0; i < a_off.size(); ++i) {
    off[i] = std::max(a_off[i], b_off[i]);
    const int64_t stop = std::min(a_off[i] + a_ext[i], b_off[i] + b_ext[i]);
    if (stop <= off[i]) return std::nullopt;
    ext[i] = stop - off[i];
  }
  return std::pair{std::move(off), std::move(ext)};
}

// `box` of `tensor` (whose first element sits at global `origin`).
at::Tensor sub_box(at::Tensor tensor, const std::vector<int64_t>& origin, const std::vector<int64_t>& off,
                   const std::vector<int64_t>& ext) {
  for (size_t i = 0; i < off.size(); ++i) {
    tensor = tensor.narrow(static_cast<int64_t>(i), off[i] - origin[i], ext[i]);
  }
  return tensor;
}

bool is_float_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

}  // namespace

std::string plugin_state_name(AccelCheckpointSpace space, const std::string& plugin, const std::string& name) {
  switch (space) {
    case ACCEL_CHECKPOINT_MODEL: return "@model/" + name;
    case ACCEL_CHECKPOINT_OPTIMIZER: return "@optimizer/" + name;
    default: return plugin + "/" + name;
  }
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

void PluginStateWriter::put(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                            const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                            const DLTensor* local) {
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
      if (volume(extent) > 0 && intersect(global_offset, extent, other.offset, other.shape)) {
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
  at::Tensor copy = at::empty(slice.sizes(), slice.options().device(at::kCPU));
  copy.copy_(slice);
  const size_t k = entry.meta.slices.size();
  entry.meta.slices.push_back({k == 0 ? stored : stored + "#" + std::to_string(k), global_offset, extent});
  entry.data.push_back(std::move(copy));
}

void PluginStateWriter::put_string(const std::string& plugin, AccelCheckpointSpace space, const std::string& key,
                                   const std::string& value) {
  check_space(space);
  if (key.empty()) fail(ACCEL_ERROR_INVALID_ARGUMENT, "key is empty");
  strings_[plugin_state_name(space, plugin, key)] =
      StoredString{space, space == ACCEL_CHECKPOINT_PLUGIN ? plugin : "", key, value};
}

void PluginStateWriter::check_complete() const {
  for (const auto& [stored, entry] : tensors_) {
    int64_t covered = 0;
    for (const StoredTensor::Slice& s : entry.meta.slices) covered += volume(s.shape);
    const int64_t total = volume(entry.meta.global_shape);
    if (covered != total) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("'%s': the saved slices cover %lld of %lld elements of ", stored.c_str(),
                     static_cast<long long>(covered), static_cast<long long>(total)) +
               describe_shape(entry.meta.global_shape));
    }
  }
}

void PluginStateWriter::write(const std::filesystem::path& path) const {
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
    tensors[stored] = {{"space", space_name(entry.meta.space)},
                       {"plugin", entry.meta.plugin},
                       {"name", entry.meta.name},
                       {"dtype", std::string(checkpoint::dtype_name(dtype))},
                       {"global_shape", entry.meta.global_shape},
                       {"slices", std::move(slices)}};
  }
  nlohmann::json strings = nlohmann::json::object();
  for (const auto& [stored, s] : strings_) {
    strings[stored] = {{"space", space_name(s.space)}, {"plugin", s.plugin}, {"key", s.key}, {"value", s.value}};
  }
  const nlohmann::json meta = {{"format", kFormat},
                               {"format_version", kFormatVersion},
                               {"tensors", std::move(tensors)},
                               {"strings", std::move(strings)}};
  writer.set_metadata(kMetadataKey, meta.dump());
  writer.write(path);
}

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------

void PluginStateReader::open(const std::filesystem::path& path) {
  checkpoint::SafetensorsFile file = checkpoint::SafetensorsFile::open(path);
  const std::string where = path.string() + ": plugin state: ";
  const auto meta_it = file.metadata().find(kMetadataKey);
  if (meta_it == file.metadata().end()) throw CheckpointError(where + "no \"" + kMetadataKey + "\" metadata");
  std::map<std::string, StoredTensor> tensors;
  std::map<std::string, std::string> strings;
  try {
    const nlohmann::json meta = nlohmann::json::parse(meta_it->second);
    if (meta.at("format") != kFormat) throw CheckpointError(where + "unknown format " + meta.at("format").dump());
    if (meta.at("format_version") != kFormatVersion) {
      throw CheckpointError(where + "format_version " + meta.at("format_version").dump() + " is not 1");
    }
    for (const auto& [stored, j] : meta.at("tensors").items()) {
      StoredTensor t;
      const auto space = space_from_name(j.at("space").get<std::string>());
      if (!space) throw CheckpointError(where + "'" + stored + "': unknown space " + j.at("space").dump());
      t.space = *space;
      t.plugin = j.at("plugin").get<std::string>();
      t.name = j.at("name").get<std::string>();
      t.global_shape = j.at("global_shape").get<std::vector<int64_t>>();
      if (stored != plugin_state_name(t.space, t.plugin, t.name)) {
        throw CheckpointError(where + "'" + stored + "' does not match its space, plugin and name");
      }
      const auto file_dtype = checkpoint::dtype_from_name(j.at("dtype").get<std::string>());
      if (!file_dtype || !from_file_dtype(*file_dtype)) {
        throw CheckpointError(where + "'" + stored + "': unknown dtype " + j.at("dtype").dump());
      }
      t.dtype = *from_file_dtype(*file_dtype);
      for (int64_t d : t.global_shape) {
        if (d < 0) throw CheckpointError(where + "'" + stored + "': negative global shape");
      }
      for (const auto& js : j.at("slices")) {
        StoredTensor::Slice s;
        s.tensor = js.at("tensor").get<std::string>();
        s.offset = js.at("offset").get<std::vector<int64_t>>();
        const checkpoint::TensorInfo* info = file.find(s.tensor);
        if (info == nullptr) throw CheckpointError(where + "'" + stored + "': slice tensor '" + s.tensor + "' is missing");
        if (info->dtype != *file_dtype) throw CheckpointError(where + "'" + s.tensor + "' has another dtype than its tensor");
        s.shape = info->shape;
        if (s.shape.size() != t.global_shape.size() || s.offset.size() != t.global_shape.size()) {
          throw CheckpointError(where + "'" + s.tensor + "' has the wrong number of dimensions");
        }
        for (size_t i = 0; i < s.shape.size(); ++i) {
          if (s.offset[i] < 0 || s.offset[i] + s.shape[i] > t.global_shape[i]) {
            throw CheckpointError(where + "'" + s.tensor + "' lies outside its global shape");
          }
        }
        for (const StoredTensor::Slice& other : t.slices) {
          if (volume(s.shape) > 0 && intersect(s.offset, s.shape, other.offset, other.shape)) {
            throw CheckpointError(where + "'" + s.tensor + "' overlaps '" + other.tensor + "'");
          }
        }
        t.slices.push_back(std::move(s));
      }
      tensors.emplace(stored, std::move(t));
    }
    for (const auto& [stored, j] : meta.at("strings").items()) strings[stored] = j.at("value").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(where + "malformed metadata: " + e.what());
  }
  file_.emplace(std::move(file));
  tensors_ = std::move(tensors);
  strings_ = std::move(strings);
}

const StoredTensor* PluginStateReader::find(const std::string& plugin, AccelCheckpointSpace space,
                                            const std::string& name) const {
  const auto it = tensors_.find(plugin_state_name(space, plugin, name));
  return it == tensors_.end() ? nullptr : &it->second;
}

const std::string* PluginStateReader::find_string(const std::string& plugin, AccelCheckpointSpace space,
                                                  const std::string& key) const {
  const auto it = strings_.find(plugin_state_name(space, plugin, key));
  return it == strings_.end() ? nullptr : &it->second;
}

at::Tensor PluginStateReader::read_slice(const StoredTensor& tensor, const StoredTensor::Slice& slice) const {
  const checkpoint::TensorInfo* info = file_->find(slice.tensor);
  at::Tensor data = at::empty(slice.shape, at::TensorOptions().dtype(*to_scalar_type(tensor.dtype)));
  file_->read(*info, data.data_ptr(), data.nbytes());
  return data;
}

void PluginStateReader::get(const std::string& plugin, AccelCheckpointSpace space, const std::string& name,
                            const std::vector<int64_t>& global_shape, const std::vector<int64_t>& global_offset,
                            const DLTensor* local) const {
  check_space(space);
  if (!file_) fail(ACCEL_ERROR_FAILED_PRECONDITION, "no plugin state file is open");
  at::Tensor target = to_aten(local, "local");
  const StoredTensor* tensor = find(plugin, space, name);
  if (tensor == nullptr) {
    fail(ACCEL_ERROR_NOT_FOUND, "no tensor '" + name + "' in " + space_name(space) + " state of " +
                                    file_->path().string());
  }
  if (tensor->global_shape != global_shape) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "': global shape " + describe_shape(global_shape) +
                                           " requested, " + describe_shape(tensor->global_shape) + " saved");
  }
  const std::vector<int64_t> extent(target.sizes().begin(), target.sizes().end());
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
  if (saved_type != target.scalar_type() && !(is_float_type(saved_type) && is_float_type(target.scalar_type()))) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + name + "' was saved as " + describe_dtype(tensor->dtype) +
                                           " and cannot be read as " + describe_dtype(local->dtype) +
                                           " (only float dtypes convert; FP8 never implicitly)");
  }
  // Assemble the rectangle from every saved slice that overlaps it. Saved
  // slices never overlap, so the overlaps' volumes add up to the region's
  // exactly when it was saved completely.
  at::Tensor staging = at::empty(target.sizes(), at::TensorOptions().dtype(saved_type));
  int64_t covered = 0;
  for (const StoredTensor::Slice& slice : tensor->slices) {
    const auto overlap = intersect(global_offset, extent, slice.offset, slice.shape);
    if (!overlap) continue;
    const at::Tensor data = read_slice(*tensor, slice);
    sub_box(staging, global_offset, overlap->first, overlap->second)
        .copy_(sub_box(data, slice.offset, overlap->first, overlap->second));
    covered += volume(overlap->second);
  }
  if (covered != volume(extent)) {
    fail(ACCEL_ERROR_NOT_FOUND,
         "'" + name + "': region " + describe_shape(extent) + " at " + describe_shape(global_offset) +
             strformat(" was only partly saved (%lld of %lld elements)", static_cast<long long>(covered),
                       static_cast<long long>(volume(extent))));
  }
  target.copy_(staging);
}

}  // namespace accel::runtime
