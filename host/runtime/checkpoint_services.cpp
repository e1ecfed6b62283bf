// The checkpoint area of the services table (accel/checkpoint.h): put/get of
// tensor slices by global offset and of small strings, routed to the
// PluginStateWriter (plugin_state.h) / CheckpointReader (checkpoint_reader.h)
// the trainer installs in HostContext for the duration of the save_state /
// load_state hooks. The reader serves every file of the checkpoint: the
// plugin-state files of every rank and the host's model and optimizer files.
//
// Phases: put/put_string need HostContext::state_writer (inside save_state),
// get/info/get_string need HostContext::state_reader (inside load_state);
// otherwise ACCEL_ERROR_FAILED_PRECONDITION. Names in ACCEL_CHECKPOINT_PLUGIN
// are the calling plugin's own (prefixed with its name); MODEL and OPTIMIZER
// names are shared by every plugin; EXPORT tensors (rank 0's, whole) become
// the checkpoint's model_16bit.safetensors and are never read back. A put
// flagged ACCEL_CHECKPOINT_PUT_STABLE lends its memory to the writer
// instead of being copied (plugin_state.h, PluginStateWriter::put).
//
// Thread-safety: loop thread only.
#include <accel/accel.h>

#include <string>
#include <vector>

#include "host/runtime/checkpoint_reader.h"
#include "host/runtime/host_context.h"
#include "host/runtime/plugin_state.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

PluginStateWriter& writer_of(HostContext& context) {
  if (context.state_writer == nullptr) fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed only inside save_state");
  return *context.state_writer;
}

const CheckpointReader& reader_of(HostContext& context) {
  if (context.state_reader == nullptr) fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed only inside load_state");
  return *context.state_reader;
}

std::string required_text(const char* text, const char* what) {
  if (text == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  return text;
}

// The slice's geometry: global shape and offset, ndim entries each.
struct SliceGeometry {
  std::string name;
  std::vector<int64_t> global_shape, global_offset;
};

SliceGeometry geometry_of(const AccelCheckpointSliceArgs* args) {
  ACCEL_REQUIRE_ARGS(args, AccelCheckpointSliceArgs, stream);
  SliceGeometry g;
  g.name = required_text(args->name, "name");
  if (args->ndim < 0 || (args->ndim > 0 && (args->global_shape == nullptr || args->global_offset == nullptr))) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("'%s': ndim %d needs global_shape and global_offset arrays", g.name.c_str(), args->ndim));
  }
  g.global_shape.assign(args->global_shape, args->global_shape + args->ndim);
  g.global_offset.assign(args->global_offset, args->global_offset + args->ndim);
  return g;
}

AccelStatus put(AccelHost* host, const AccelCheckpointSliceArgs* args) {
  return call_service("checkpoint put", [&] {
    HostContext& context = context_of(host);
    PluginStateWriter& writer = writer_of(context);
    const SliceGeometry g = geometry_of(args);
    if (args->space == ACCEL_CHECKPOINT_EXPORT && context.identity.rank != 0) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + g.name + "': only world rank 0 puts into the consolidated model file");
    }
    // Since 1.13; an older plugin's args end before them (no flags).
    uint32_t flags = 0;
    if (ACCEL_STRUCT_HAS_FIELD(args, AccelCheckpointSliceArgs, reserved)) {
      if (args->reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "'" + g.name + "': reserved must be 0");
      flags = args->flags;
    }
    const bool stable = (flags & ACCEL_CHECKPOINT_PUT_STABLE) != 0;
    writer.put(plugin_name_of(host), args->space, g.name, g.global_shape, g.global_offset, args->local, stable);
  });
}

AccelStatus get(AccelHost* host, const AccelCheckpointSliceArgs* args) {
  return call_service("checkpoint get", [&] {
    const CheckpointReader& reader = reader_of(context_of(host));
    const SliceGeometry g = geometry_of(args);
    reader.get(plugin_name_of(host), args->space, g.name, g.global_shape, g.global_offset, args->local);
  });
}

AccelStatus info(AccelHost* host, AccelCheckpointSpace space, const char* name, AccelCheckpointTensorInfo* out) {
  return call_service("checkpoint info", [&] {
    const CheckpointReader& reader = reader_of(context_of(host));
    const std::string text = required_text(name, "name");
    if (out == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "info is NULL");
    const StoredTensor* tensor = reader.find(plugin_name_of(host), space, text);
    if (tensor == nullptr) fail(ACCEL_ERROR_NOT_FOUND, "no tensor '" + text + "' in the checkpoint");
    // Caller-owned out struct: write only what its struct_size covers.
    if (ACCEL_STRUCT_HAS_FIELD(out, AccelCheckpointTensorInfo, ndim)) {
      out->ndim = static_cast<int32_t>(tensor->global_shape.size());
    }
    if (ACCEL_STRUCT_HAS_FIELD(out, AccelCheckpointTensorInfo, dtype)) out->dtype = tensor->dtype;
    if (ACCEL_STRUCT_HAS_FIELD(out, AccelCheckpointTensorInfo, global_shape)) {
      out->global_shape = tensor->global_shape.data();
    }
  });
}

AccelStatus put_string(AccelHost* host, AccelCheckpointSpace space, const char* key, const char* value) {
  return call_service("checkpoint put_string", [&] {
    PluginStateWriter& writer = writer_of(context_of(host));
    writer.put_string(plugin_name_of(host), space, required_text(key, "key"), required_text(value, "value"));
  });
}

AccelStatus get_string(AccelHost* host, AccelCheckpointSpace space, const char* key, const char** value) {
  return call_service("checkpoint get_string", [&] {
    const CheckpointReader& reader = reader_of(context_of(host));
    const std::string text = required_text(key, "key");
    if (value == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "value is NULL");
    const std::string* found = reader.find_string(plugin_name_of(host), space, text);
    if (found == nullptr) fail(ACCEL_ERROR_NOT_FOUND, "no string '" + text + "' in the checkpoint");
    *value = found->c_str();
  });
}

}  // namespace

const AccelCheckpointServices* checkpoint_services_table() {
  static const AccelCheckpointServices table{sizeof(AccelCheckpointServices), nullptr, &put, &get, &info,
                                             &put_string, &get_string};
  return &table;
}

}  // namespace accel::runtime
