// Memory extent checks and ACCEL_COMM_VERIFY parsing (see comm_checks.h).
// The ledger answers for buffers from allocate in O(log n); the model's flat
// storage (a handful of units) is scanned after it.
#include "host/runtime/comm_checks.h"

#include <sstream>
#include <stdexcept>

#include "host/runtime/host_context.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"
#include "host/util/strformat.h"

namespace accel::runtime {

CommVerify parse_comm_verify(const char* text) {
  CommVerify verify;
  if (text == nullptr) return verify;
  std::stringstream words(text);
  std::string word;
  while (std::getline(words, word, ',')) {
    if (word.empty() || word == "0") continue;
    if (word == "1" || word == "ops") {
      verify.each_op = true;
    } else if (word == "memory") {
      verify.strict_memory = true;
    } else if (word == "all") {
      verify.each_op = verify.strict_memory = true;
    } else {
      throw std::invalid_argument("ACCEL_COMM_VERIFY: '" + word +
                                  "' is not one of ops, memory, all (comma-separated), 1 or 0");
    }
  }
  return verify;
}

CommHandles& handles_of(HostContext& context) {
  if (!context.comm_handles) context.comm_handles = std::make_shared<CommHandles>();
  return *context.comm_handles;
}

ResolvedGroup resolve_group(HostContext& context, const AccelGroup* handle, const char* role) {
  ResolvedGroup resolved;
  CommHandles& handles = handles_of(context);
  if (handle == nullptr) {
    if (!context.world) fail(ACCEL_ERROR_FAILED_PRECONDITION, "no communicator in this host context");
    resolved.group = context.world;
    const auto it = context.standard_groups.find(ACCEL_GROUP_WORLD);
    if (it != context.standard_groups.end()) resolved.entry = handles.groups.find(handle_value(it->second), nullptr);
    return resolved;
  }
  HandleProblem problem = HandleProblem::kOk;
  resolved.entry = handles.groups.find(handle_value(handle), &problem);
  if (!resolved.entry) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         std::string(role) + ": " + describe_handle_problem(problem, "group", "destroyed", handle_value(handle)));
  }
  resolved.group = resolved.entry->group;
  return resolved;
}

void poll_sequences(HostContext& context) {
  if (!context.comm_handles) return;
  for (const auto& entry : context.comm_handles->groups.objects()) {
    if (!entry->sequence) continue;
    try {
      entry->sequence->poll();
    } catch (const comm::PeerFailed& e) {
      pass_on_rank_failure(context, e);
      fail(ACCEL_ERROR_ABORTED, e.what());
    } catch (const comm::CommError& e) {
      fail(ACCEL_ERROR_ABORTED, e.what());
    }
  }
}

namespace {

void tell_every_successor(HostContext& context, const HostContext::RankFailure& failure) {
  if (!context.comm_handles) return;
  for (const auto& entry : context.comm_handles->groups.objects()) {
    if (!entry->sequence) continue;
    try {
      entry->sequence->announce_failure(failure.rank, failure.where, failure.step);
    } catch (const comm::CommError&) {
      // A send that cannot start: that successor learns at its deadline, as
      // it would have without the news; the others still hear it.
    }
  }
}

}  // namespace

void announce_rank_failure(HostContext& context, const std::string& where, int64_t step) {
  if (context.rank_failure) return;
  context.rank_failure = HostContext::RankFailure{context.identity.rank, where, step};
  tell_every_successor(context, *context.rank_failure);
}

void pass_on_rank_failure(HostContext& context, const comm::PeerFailed& heard) {
  if (context.rank_failure) return;
  context.rank_failure = HostContext::RankFailure{heard.world_rank, heard.where, heard.step};
  tell_every_successor(context, *context.rank_failure);
}

namespace {

// A host-known allocation containing an address.
struct KnownMemory {
  uintptr_t begin = 0;
  int64_t bytes = 0;
  std::string what;  // "allocation 'label' (f32 x16, 64 B) of plugin X"
};

bool find_in_model(const HostContext& context, uintptr_t address, KnownMemory* out) {
  if (context.model == nullptr) return false;
  const auto& units = context.model->units();
  for (size_t u = 0; u < units.size(); ++u) {
    const model::Unit& unit = units[u];
    for (int kind = 0; kind < 2; ++kind) {
      const at::Tensor& flat = kind == 0 ? unit.flat_params() : unit.flat_grads();
      if (!flat.defined()) continue;
      const auto begin = reinterpret_cast<uintptr_t>(flat.data_ptr());
      const auto bytes = static_cast<int64_t>(flat.nbytes());
      if (address < begin || (address >= begin + static_cast<uintptr_t>(bytes) && address != begin)) continue;
      out->begin = begin;
      out->bytes = bytes;
      out->what = strformat("the model's flat %s of unit %zu (%s x%lld, %s)", kind == 0 ? "parameters" : "gradients",
                            u, c10::toString(flat.scalar_type()), static_cast<long long>(flat.numel()),
                            format_bytes(static_cast<double>(bytes)).c_str());
      return true;
    }
  }
  return false;
}

}  // namespace

void check_tensor_memory(const HostContext& context, const DLTensor* tensor, int64_t bytes, const char* role,
                         bool strict) {
  const auto first = reinterpret_cast<uintptr_t>(accel_tensor_begin(tensor));
  KnownMemory known;
  bool found = false;
  if (context.memory) {
    if (auto extent = context.memory->find_extent(accel_tensor_begin(tensor))) {
      known.begin = extent->begin;
      known.bytes = extent->bytes;
      known.what = strformat("allocation '%s' (%s x%lld, %s) of %s", extent->label.c_str(),
                             describe_dtype(extent->dtype).c_str(), static_cast<long long>(extent->numel),
                             format_bytes(static_cast<double>(extent->bytes)).c_str(),
                             extent->owner.empty() ? "the host" : ("plugin " + extent->owner).c_str());
      found = true;
    }
  }
  if (!found) found = find_in_model(context, first, &known);
  if (!found) {
    if (strict && bytes > 0) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("%s (%s) points into no memory the host issued (ACCEL_COMM_VERIFY=memory refuses a plugin's "
                     "own memory: allocate it with memory->allocate)",
                     role, format_bytes(static_cast<double>(bytes)).c_str()));
    }
    return;
  }
  const uintptr_t end = known.begin + static_cast<uintptr_t>(known.bytes);
  const uintptr_t last = first + static_cast<uintptr_t>(bytes);
  if (last > end) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("%s (%s x%lld = %s from byte %llu of its memory) runs %s past the end of %s", role,
                   describe_dtype(tensor->dtype).c_str(),
                   static_cast<long long>(bytes * 8 / std::max<int64_t>(1, tensor->dtype.bits)),
                   format_bytes(static_cast<double>(bytes)).c_str(),
                   static_cast<unsigned long long>(first - known.begin),
                   format_bytes(static_cast<double>(last - end)).c_str(), known.what.c_str()));
  }
}

}  // namespace accel::runtime
