// Context parallelism's options and plan (see context_parallel.h).
#include "sharding/context_parallel.h"

namespace accel::sharding {

ContextParallel::ContextParallel(const sdk::Services& s, const char* degree_option, int64_t data_ranks)
    : degree_(s.option<int64_t>(degree_option)) {
  const std::string type = s.option<std::string>("cp_comm_type");
  const std::string name = degree_option;
  if (degree_ == 1 && (s.option_is_set("cp_comm_type") || s.option_is_set("cp_a2a_degree"))) {
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "cp_comm_type and cp_a2a_degree need " + name + " > 1");
  }
  if (type != "a2a+p2p" && s.option_is_set("cp_a2a_degree")) {
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT,
                     "cp_a2a_degree is the a2a+p2p sub-group's size; cp_comm_type is " + type);
  }
  if (data_ranks % degree_ != 0) {
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT,
                     sdk::format("%s %lld does not divide the %lld data-parallel ranks (the context ranks are part "
                                 "of the data dimension: world = pipeline x data x context x tensor)",
                                 degree_option, static_cast<long long>(degree_),
                                 static_cast<long long>(data_ranks)));
  }
  if (degree_ > 1 && !ACCEL_HAS_FN(s.table()->model, AccelModelServices, plan_context_parallel)) {
    throw sdk::Error(ACCEL_ERROR_UNSUPPORTED, name + " needs a host with model->plan_context_parallel (ABI 1.10)");
  }
  spec_.struct_size = sizeof(spec_);
  spec_.comm_type = type == "p2p"          ? ACCEL_CONTEXT_P2P
                    : type == "all_gather" ? ACCEL_CONTEXT_ALL_GATHER
                    : type == "a2a"        ? ACCEL_CONTEXT_A2A
                                           : ACCEL_CONTEXT_A2A_P2P;
  spec_.a2a_size = static_cast<int32_t>(s.option<int64_t>("cp_a2a_degree"));
}

void ContextParallel::plan(const sdk::Services& s) const {
  if (degree_ > 1) s.check(s.table()->model->plan_context_parallel(s.host(), &spec_), "plan_context_parallel");
}

}  // namespace accel::sharding
