// The precision area of the services table (accel/precision.h, ABI 1.8): a
// PRECISION plugin states, during its create, the formats of state it does
// not own — the gradient reduction's wire dtype, AdamW's moment dtypes — and
// the host's optimizer and the parallel plugins read them. The host checks
// after every create that each non-default part has an owner that declared
// it honours it (plugin/hook_dispatch.cpp); here only the policy itself is
// checked: known dtypes, set once, by a PRECISION plugin, while plugins are
// created.
//
// Thread-safety: loop thread only (the ABI's rule for both functions).
#include <accel/accel.h>

#include <string>

#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"

namespace accel::runtime {
namespace {

bool unset(DLDataType t) { return t.bits == 0; }
bool is_dtype(DLDataType t, uint8_t code, uint8_t bits) { return t.code == code && t.bits == bits && t.lanes == 1; }
bool same(DLDataType a, DLDataType b) {
  return (unset(a) && unset(b)) || (a.code == b.code && a.bits == b.bits && a.lanes == b.lanes);
}

std::string describe(DLDataType t) { return unset(t) ? std::string("default") : describe_dtype(t); }

void require(bool ok, const char* field, DLDataType t, const char* allowed) {
  if (!ok) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         std::string(field) + " " + describe(t) + " is not supported (" + allowed + ")");
  }
}

AccelStatus set_policy(AccelHost* host, const AccelPrecisionPolicy* policy) {
  return call_service("precision.set_policy", [&] {
    ACCEL_REQUIRE_ARGS(policy, AccelPrecisionPolicy, reserved);
    HostContext& context = context_of(host);
    if (host->kind != ACCEL_PLUGIN_PRECISION) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "only a PRECISION plugin sets the precision policy");
    }
    if (!context.creating_plugins) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "the precision policy is set during create only");
    }
    if (policy->reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "reserved must be 0");
    const DLDataType comm = policy->grad_comm_dtype, m = policy->exp_avg_dtype, v = policy->exp_avg_sq_dtype;
    require(unset(comm) || is_dtype(comm, ACCEL_DL_FLOAT8_E4M3FN, 8) || is_dtype(comm, ACCEL_DL_FLOAT8_E5M2, 8),
            "grad_comm_dtype", comm, "default, E4M3FN or E5M2");
    require(unset(m) || is_dtype(m, kDLFloat, 32) || is_dtype(m, ACCEL_DL_FLOAT8_E4M3FN, 8), "exp_avg_dtype", m,
            "default, f32 or E4M3FN");
    require(unset(v) || is_dtype(v, kDLFloat, 32) || is_dtype(v, kDLFloat, 16), "exp_avg_sq_dtype", v,
            "default, f32 or f16");
    AccelPrecisionPolicy copy{};
    copy.struct_size = sizeof(copy);
    copy.grad_comm_dtype = comm;
    // f32 is the default, spelled out: readers compare bits with 0.
    copy.exp_avg_dtype = is_dtype(m, kDLFloat, 32) ? DLDataType{} : m;
    copy.exp_avg_sq_dtype = is_dtype(v, kDLFloat, 32) ? DLDataType{} : v;
    if (!context.precision_policy_owner.empty()) {
      const AccelPrecisionPolicy& old = context.precision_policy;
      if (same(old.grad_comm_dtype, copy.grad_comm_dtype) && same(old.exp_avg_dtype, copy.exp_avg_dtype) &&
          same(old.exp_avg_sq_dtype, copy.exp_avg_sq_dtype)) {
        return;
      }
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "plugin " + context.precision_policy_owner +
                                                " set another precision policy already; plugins " +
                                                context.precision_policy_owner + " and " + host->plugin_name +
                                                " disagree");
    }
    context.precision_policy = copy;
    context.precision_policy_owner = host->plugin_name;
  });
}

AccelStatus get_policy(AccelHost* host, const AccelPrecisionPolicy** policy) {
  return call_service("precision.get_policy", [&] {
    if (policy == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "policy is NULL");
    *policy = &context_of(host).precision_policy;
  });
}

}  // namespace

const AccelPrecisionServices* precision_services_table() {
  static const AccelPrecisionServices table{sizeof(AccelPrecisionServices), nullptr, &set_policy, &get_policy};
  return &table;
}

}  // namespace accel::runtime
