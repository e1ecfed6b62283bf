// fsdp_config.h — FullyShardedDataParallelPlugin's options as one value, read
// and cross-checked once, in `create`.
//
// Invariant: a FsdpConfig that exists is consistent — the sharding strategy
// and reshard_after_forward agree, the mesh divides the world, dtypes are
// valid, the ignored_modules regex compiled, cpu_ram_efficient_loading has
// sync_module_states. Every refusal is an accel::sdk::Error with one line
// naming the option. The resolution rules are pure functions
// (resolve_sharding, mesh_shape, parse_dtype) so they are unit-tested without
// a host. Thread-safety: plain values.
#pragma once

#include <accel/sdk/services.hpp>

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "sharding/sharding_options.h"

namespace accel::fsdp {

using sharding::BackwardPrefetch;
using sharding::MeshShape;
using sharding::StateDictType;

enum class ShardingStrategy { full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2 };
enum class WrapPolicy { transformer_based, size_based, no_wrap };

const char* to_string(ShardingStrategy strategy);
std::optional<ShardingStrategy> parse_strategy(std::string_view text);
// Whether a strategy releases gathered parameters after forward.
bool reshards_after_forward(ShardingStrategy strategy);

// What the user gave for the two overlapping options (is_set tells "given").
struct ShardingInputs {
  int fsdp_version = 1;
  std::string sharding_strategy = "FULL_SHARD";
  bool sharding_strategy_given = false;
  std::string reshard_after_forward = "true";
  bool reshard_after_forward_given = false;
};

struct ShardingChoice {
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  bool reshard_after_forward = true;
};

// sharding_strategy (the deprecated spelling) against reshard_after_forward
// (true/false, or with fsdp_version 1 also a strategy name). Throws Error on
// a contradiction or an unreadable value.
ShardingChoice resolve_sharding(const ShardingInputs& in);

// FULL_SHARD / SHARD_GRAD_OP: sharding = world; NO_SHARD: replica = world;
// HYBRID_*: sharding = hybrid_group_size (0: the local world size), replica =
// the rest. Throws Error when the hybrid group size does not divide the world.
MeshShape mesh_shape(ShardingStrategy strategy, int32_t world_size, int32_t local_world_size,
                     int64_t hybrid_group_size);

// "fp32", "bf16", "fp16" -> DLPack dtype; nullopt for anything else.
std::optional<DLDataType> parse_dtype(std::string_view text);
std::string dtype_label(DLDataType dtype);
// The host's train.mixed_precision ("no", "bf16", "fp16") as the dtype
// accelerate's set_mixed_precision gives the policy: fp32 for "no".
DLDataType precision_dtype(std::string_view mixed_precision);

// "a, b,c" -> {"a", "b", "c"}; empty pieces dropped.
std::vector<std::string> split_list(std::string_view text);

// The shared machinery's options (mesh, release and prefetch policy, dtypes,
// offload, state dict, initialisation) plus what only fsdp reads.
struct FsdpConfig : sharding::ShardingOptions {
  int fsdp_version = 1;
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  std::string buffer_dtype;                  // accepted, no effect (models have no buffers)
  WrapPolicy wrap_policy = WrapPolicy::no_wrap;
  std::vector<std::string> wrap_names;       // transformer_cls_names_to_wrap
  int64_t min_num_params = 100000000;
  std::string ignored_modules;               // the regex as given ("" = none)
  std::optional<std::regex> ignored_regex;
  bool activation_checkpointing = false;

  bool shards() const { return strategy != ShardingStrategy::no_shard; }
  bool hybrid() const {
    return strategy == ShardingStrategy::hybrid_shard || strategy == ShardingStrategy::hybrid_shard_zero2;
  }
};

// Reads the plugin's options and the host's train.* section through
// `services`; throws Error with one line on any refusal.
FsdpConfig read_config(const sdk::Services& services);

// A small JSON object of the resolved configuration (checkpoints, logs).
std::string to_json(const FsdpConfig& config);

}  // namespace accel::fsdp
