// Context parallelism as a strategy declares it (accel/model.h
// plan_context_parallel): the options every parallel plugin offers under
// its own degree's name (megatron's cp_degree, fsdp's cp_size, DeepSpeed's
// sequence_parallel_size), read and checked once, the mesh's context_size
// and the plan. The host runs it; the context ranks are data-parallel peers
// for the gradients, so a strategy's data, sharding and replica groups
// average and shard over them as over any data rank.
#pragma once

#include <accel/sdk/sdk.hpp>

#include <cstdint>
#include <string>

namespace accel::sharding {

// The options' schema entries, after the degree's own: its exchange and the
// all-to-all sub-group of a2a+p2p. `default_type` is p2p or a2a.
#define ACCEL_CONTEXT_PARALLEL_OPTIONS(default_type)                                                                \
  {"cp_comm_type", ACCEL_OPTION_ENUM, default_type,                                                                 \
   "context parallelism's exchange: p2p (ring attention, load-balanced causal chunks), all_gather (the same "      \
   "layout, every key/value block all-gathered), a2a (Ulysses all-to-all over heads) or a2a+p2p (heads over "       \
   "cp_a2a_degree adjacent ranks, the ring over the rest)",                                                         \
   "p2p|all_gather|a2a|a2a+p2p"},                                                                                   \
  {                                                                                                                 \
    "cp_a2a_degree", ACCEL_OPTION_INT, "0",                                                                         \
        "a2a+p2p: the all-to-all sub-group's size, a divisor of the context degree (0: the largest below it that "  \
        "divides this rank's heads)",                                                                               \
        nullptr, "0", "2147483647"                                                                                  \
  }

class ContextParallel {
 public:
  // Reads the degree option `degree_option` and the two above. `data_ranks`
  // is what is left of the world once tensor and pipeline took theirs; the
  // degree must divide it. Throws sdk::Error (INVALID_ARGUMENT) with one
  // line naming the option, or UNSUPPORTED on a host before ABI 1.10.
  ContextParallel(const sdk::Services& s, const char* degree_option, int64_t data_ranks);

  int64_t degree() const { return degree_; }
  // The mesh's context_size (call before set_mesh).
  void declare(AccelMeshSpec& mesh) const { mesh.context_size = static_cast<int32_t>(degree_); }
  // plan_context_parallel when the degree is above 1. Phase: plan_model.
  void plan(const sdk::Services& s) const;

 private:
  int64_t degree_ = 1;
  AccelContextParallelSpec spec_{};
};

}  // namespace accel::sharding
