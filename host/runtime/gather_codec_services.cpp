// The gather-codec area of the services table (accel/gather_codec.h, ABI
// 1.8): a sharding plugin's query / encode / decode calls, forwarded to the
// one plugin whose hook table implements the codec
// (HostContext::gather_codec, set by the hook dispatcher after every
// create). The host adds nothing but the checks and the error context: the
// two plugins never see each other's names.
//
// A call into the provider runs inside the caller's hook, on the loop
// thread; it is a trace range under the provider's name, like a hook. The
// provider's failure comes back as its status with "gather_codec.CALL:
// plugin NAME: message" as the pending error and last_error.
//
// Thread-safety: loop thread only (accel/gather_codec.h).
#include <accel/accel.h>

#include <string>

#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"
#include "host/runtime/trace_scope.h"

namespace accel::runtime {
namespace {

// Calls the provider's hook `fn` and turns its failure into a ServiceError
// carrying the provider's own message.
template <class Fn, class Args>
void call_provider(HostContext& context, const char* call, Fn* fn, Args* args) {
  const HostContext::GatherCodecProvider& p = context.gather_codec;
  const TraceRange range(&context, call, p.name.c_str(), p.name.c_str(), [] { return std::string(); });
  take_pending_error();
  const AccelStatus status = fn(p.self, args);
  if (status == ACCEL_OK) return;
  const PendingError error = take_pending_error();
  fail(status, "plugin " + p.name + (error.message.empty() ? std::string(" failed") : ": " + error.message));
}

void require_codec_args(const AccelGatherCodecArgs* args) {
  ACCEL_REQUIRE_ARGS(args, AccelGatherCodecArgs, stream);
  if (args->num_slices < 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "num_slices is negative");
  if (args->reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "reserved is not 0");
  if (args->num_slices > 0 &&
      (args->params == nullptr || args->offsets == nullptr || args->values == nullptr || args->codes == nullptr)) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "a slice array is NULL");
  }
}

AccelStatus codec_query(AccelHost* host, AccelGatherCodecQueryArgs* args) {
  return call_service("gather_codec.query", [&] {
    HostContext& context = context_of(host);
    ACCEL_REQUIRE_ARGS(args, AccelGatherCodecQueryArgs, code_dtypes);
    if (args->num_params < 0 || (args->num_params > 0 && args->code_dtypes == nullptr)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "code_dtypes must hold num_params entries");
    }
    if (context.gather_codec.query == nullptr) return;  // no codec: everything as is
    call_provider(context, "gather_codec_query", context.gather_codec.query, args);
    for (int32_t i = 0; i < args->num_params; ++i) {
      const DLDataType t = args->code_dtypes[i];
      if (t.bits != 0 && (t.bits != 8 || t.lanes != 1)) {
        fail(ACCEL_ERROR_INTERNAL, "plugin " + context.gather_codec.name + ": parameter " + std::to_string(i) +
                                       " of unit " + std::to_string(args->unit) +
                                       " has a code dtype that is not 1 byte (bits " + std::to_string(t.bits) + ")");
      }
    }
  });
}

AccelStatus codec_encode(AccelHost* host, const AccelGatherCodecArgs* args) {
  return call_service("gather_codec.encode", [&] {
    HostContext& context = context_of(host);
    require_codec_args(args);
    if (context.gather_codec.encode == nullptr) fail(ACCEL_ERROR_FAILED_PRECONDITION, "no plugin provides a codec");
    call_provider(context, "gather_encode", context.gather_codec.encode, args);
  });
}

AccelStatus codec_decode(AccelHost* host, const AccelGatherCodecArgs* args) {
  return call_service("gather_codec.decode", [&] {
    HostContext& context = context_of(host);
    require_codec_args(args);
    if (context.gather_codec.decode == nullptr) fail(ACCEL_ERROR_FAILED_PRECONDITION, "no plugin provides a codec");
    call_provider(context, "gather_decode", context.gather_codec.decode, args);
  });
}

}  // namespace

const AccelGatherCodecServices* gather_codec_services_table() {
  static const AccelGatherCodecServices table = [] {
    AccelGatherCodecServices t{};
    t.struct_size = sizeof(AccelGatherCodecServices);
    t.extensions = nullptr;
    t.query = &codec_query;
    t.encode = &codec_encode;
    t.decode = &codec_decode;
    return t;
  }();
  return &table;
}

}  // namespace accel::runtime
