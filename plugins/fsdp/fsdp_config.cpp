// fsdp_config.cpp — reading, resolving and checking fsdp's options (see
// fsdp_config.h). Every message is one line that names the option.
#include "fsdp_config.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <cctype>

namespace accel::fsdp {

using sdk::Error;
using sdk::format;

namespace {

constexpr const char* kStrategyNames[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                          "HYBRID_SHARD_ZERO2"};

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::optional<bool> parse_bool_text(std::string_view text) {
  const std::string t = lower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return std::nullopt;
}

const char* released_or_kept(bool reshard) { return reshard ? "releases" : "keeps"; }

}  // namespace

// --------------------------------------------------------------- strategies

const char* to_string(ShardingStrategy strategy) { return kStrategyNames[static_cast<int>(strategy)]; }

std::optional<ShardingStrategy> parse_strategy(std::string_view text) {
  for (int i = 0; i < 5; ++i) {
    if (text == kStrategyNames[i]) return static_cast<ShardingStrategy>(i);
  }
  return std::nullopt;
}

bool reshards_after_forward(ShardingStrategy strategy) {
  return strategy == ShardingStrategy::full_shard || strategy == ShardingStrategy::hybrid_shard;
}

ShardingChoice resolve_sharding(const ShardingInputs& in) {
  const std::optional<ShardingStrategy> given = parse_strategy(in.sharding_strategy);
  if (!given) {  // the host validates the ENUM; this guards direct callers
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "sharding_strategy: unknown value '" + in.sharding_strategy +
                    "' (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2)");
  }
  if (!in.reshard_after_forward_given) return ShardingChoice{*given, reshards_after_forward(*given)};

  const std::string& text = in.reshard_after_forward;
  if (const std::optional<bool> reshard = parse_bool_text(text)) {
    if (!in.sharding_strategy_given) {
      // fsdp2's spelling alone: true is FULL_SHARD, false SHARD_GRAD_OP (ZeRO-2).
      return ShardingChoice{*reshard ? ShardingStrategy::full_shard : ShardingStrategy::shard_grad_op, *reshard};
    }
    if (reshards_after_forward(*given) != *reshard) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  format("sharding_strategy %s %s parameters after forward, but reshard_after_forward is %s; give "
                         "one of the two",
                         to_string(*given), released_or_kept(reshards_after_forward(*given)), text.c_str()));
    }
    return ShardingChoice{*given, *reshard};
  }
  if (const std::optional<ShardingStrategy> named = parse_strategy(text)) {
    if (in.fsdp_version == 2) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "reshard_after_forward: fsdp_version 2 reads it as true or false, got '" + text +
                      "'; give the strategy with sharding_strategy or use fsdp_version 1");
    }
    if (in.sharding_strategy_given && *named != *given) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  format("sharding_strategy %s contradicts reshard_after_forward %s; give one of the two",
                         to_string(*given), to_string(*named)));
    }
    return ShardingChoice{*named, reshards_after_forward(*named)};
  }
  throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
              "reshard_after_forward: '" + text +
                  "' is neither true/false nor a sharding strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                  "HYBRID_SHARD, HYBRID_SHARD_ZERO2)");
}

MeshShape mesh_shape(ShardingStrategy strategy, int32_t world_size, int32_t local_world_size,
                     int64_t hybrid_group_size) {
  switch (strategy) {
    case ShardingStrategy::full_shard:
    case ShardingStrategy::shard_grad_op:
      return MeshShape{world_size, 1};
    case ShardingStrategy::no_shard:
      return MeshShape{1, world_size};
    case ShardingStrategy::hybrid_shard:
    case ShardingStrategy::hybrid_shard_zero2: break;
  }
  const int64_t group = hybrid_group_size == 0 ? local_world_size : hybrid_group_size;
  if (group < 1 || group > world_size || world_size % group != 0) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                format("hybrid_shard_group_size %lld%s does not divide the world size %d",
                       static_cast<long long>(group), hybrid_group_size == 0 ? " (the local world size)" : "",
                       world_size));
  }
  return MeshShape{static_cast<int32_t>(group), static_cast<int32_t>(world_size / group)};
}

// ------------------------------------------------------------------- dtypes

std::optional<DLDataType> parse_dtype(std::string_view text) {
  if (text == "fp32") return DLDataType{kDLFloat, 32, 1};
  if (text == "bf16") return DLDataType{kDLBfloat, 16, 1};
  if (text == "fp16") return DLDataType{kDLFloat, 16, 1};
  return std::nullopt;
}

DLDataType precision_dtype(std::string_view mixed_precision) {
  if (mixed_precision == "bf16") return DLDataType{kDLBfloat, 16, 1};
  if (mixed_precision == "fp16") return DLDataType{kDLFloat, 16, 1};
  return DLDataType{kDLFloat, 32, 1};
}

std::string dtype_label(DLDataType dtype) {
  if (dtype.code == kDLFloat && dtype.bits == 32) return "fp32";
  if (dtype.code == kDLBfloat && dtype.bits == 16) return "bf16";
  if (dtype.code == kDLFloat && dtype.bits == 16) return "fp16";
  return format("dtype(%u,%u)", unsigned{dtype.code}, unsigned{dtype.bits});
}

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string_view piece = text.substr(start, end - start);
    while (!piece.empty() && std::isspace(static_cast<unsigned char>(piece.front()))) piece.remove_prefix(1);
    while (!piece.empty() && std::isspace(static_cast<unsigned char>(piece.back()))) piece.remove_suffix(1);
    if (!piece.empty()) out.emplace_back(piece);
    start = end + 1;
  }
  return out;
}

// ------------------------------------------------------------------ reading

FsdpConfig read_config(const sdk::Services& s) {
  // The host's own settings first: what fsdp cannot serve is refused before
  // anything else is looked at. (--mixed-precision fp16 is served: the host
  // reads overflow from clip_gradients' norm of the still-scaled shards and
  // passes 1/scale to optimizer_step as grad_scale.)
  const std::string optimizer = s.option<std::string>("train.optimizer");
  if (optimizer != "adamw") {
    throw Error(ACCEL_ERROR_UNSUPPORTED, "train.optimizer " + optimizer + ": fsdp's sharded optimizer is AdamW only");
  }

  FsdpConfig c;
  c.fsdp_version = std::stoi(s.option<std::string>("fsdp_version"));
  ShardingInputs in;
  in.fsdp_version = c.fsdp_version;
  in.sharding_strategy = s.option<std::string>("sharding_strategy");
  in.sharding_strategy_given = s.option_is_set("sharding_strategy");
  in.reshard_after_forward = s.option<std::string>("reshard_after_forward");
  in.reshard_after_forward_given = s.option_is_set("reshard_after_forward");
  const ShardingChoice choice = resolve_sharding(in);
  c.strategy = choice.strategy;
  c.reshard_after_forward = choice.reshard_after_forward;

  const AccelIdentity& id = s.identity();
  c.mesh = mesh_shape(c.strategy, id.world_size, id.local_world_size, s.option<int64_t>("hybrid_shard_group_size"));
  if (!c.hybrid() && s.option_is_set("hybrid_shard_group_size") && id.rank == 0) {
    s.warn() << "hybrid_shard_group_size applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2 only; ignored with "
             << to_string(c.strategy);
  }

  const std::string backward = s.option<std::string>("backward_prefetch");
  c.backward_prefetch = backward == "BACKWARD_PRE"    ? BackwardPrefetch::backward_pre
                        : backward == "BACKWARD_POST" ? BackwardPrefetch::backward_post
                                                      : BackwardPrefetch::no_prefetch;
  c.forward_prefetch = s.option<bool>("forward_prefetch");
  c.limit_all_gathers = s.option<bool>("limit_all_gathers");

  const auto dtype_option = [&](const char* name, DLDataType fallback) {
    const std::string text = s.option<std::string>(name);
    if (text.empty()) return fallback;
    const std::optional<DLDataType> dtype = parse_dtype(text);
    if (!dtype) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT, std::string(name) + ": '" + text + "' is not fp32, bf16 or fp16");
    }
    return *dtype;
  };
  // The host's --mixed-precision bf16 maps onto the policy, as accelerate's
  // set_mixed_precision does when FullyShardedDataParallelPlugin has no
  // mixed_precision_policy: param_dtype = reduce_dtype = bf16 (sharded
  // units only; NO_SHARD keeps the host's fp32 units). Any explicit dtype
  // option makes the policy explicit, and it wins. fp16 is not mapped: it
  // keeps fp32 shards and parameters under the host's loss scaler, which
  // matches ddp step for step (README, "Mixed precision").
  const bool explicit_policy =
      s.option_is_set("param_dtype") || s.option_is_set("reduce_dtype") || s.option_is_set("buffer_dtype");
  const std::string host_mixed = s.option<std::string>("train.mixed_precision");
  const DLDataType host_precision = host_mixed == "bf16" ? precision_dtype(host_mixed) : DLDataType{kDLFloat, 32, 1};
  const DLDataType default_param =
      explicit_policy || !c.shards() ? DLDataType{kDLFloat, 32, 1} : host_precision;
  c.param_dtype = dtype_option("param_dtype", default_param);
  c.reduce_dtype = dtype_option("reduce_dtype", c.param_dtype);
  c.buffer_dtype = s.option<std::string>("buffer_dtype");
  if (!c.buffer_dtype.empty()) (void)dtype_option("buffer_dtype", c.param_dtype);

  const std::string wrap = s.option<std::string>("auto_wrap_policy");
  c.wrap_policy = wrap == "transformer_based_wrap" ? WrapPolicy::transformer_based
                  : wrap == "size_based_wrap"      ? WrapPolicy::size_based
                                                   : WrapPolicy::no_wrap;
  c.wrap_names = split_list(s.option<std::string>("transformer_cls_names_to_wrap"));
  c.min_num_params = s.option<int64_t>("min_num_params");
  c.cpu_offload = s.option<bool>("cpu_offload");
  // What applies to shards only: say so rather than run without it.
  std::string shard_only;
  if (s.option_is_set("param_dtype")) shard_only += " param_dtype";
  if (s.option_is_set("reduce_dtype")) shard_only += " reduce_dtype";
  if (c.cpu_offload) shard_only += " cpu_offload";
  if (!c.shards() && !shard_only.empty()) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "NO_SHARD keeps every unit as the host's replicated fp32 buffers, so" + shard_only +
                    " would have no effect; drop it (for bf16 compute use --mixed-precision bf16)");
  }

  c.ignored_modules = s.option<std::string>("ignored_modules");
  if (!c.ignored_modules.empty()) {
    try {
      c.ignored_regex.emplace(c.ignored_modules, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "ignored_modules: '" + c.ignored_modules + "' is not a valid regular expression (" + e.what() + ")");
    }
    if (!shard_only.empty() && id.rank == 0) {
      s.warn() << "ignored units stay the host's replicated fp32 buffers:" << shard_only
               << " applies to the units fsdp shards only";
    }
  }

  const std::string state_dict = s.option<std::string>("state_dict_type");
  c.state_dict_type = state_dict == "SHARDED_STATE_DICT" ? StateDictType::sharded
                      : state_dict == "LOCAL_STATE_DICT" ? StateDictType::local
                                                         : StateDictType::full;
  c.activation_checkpointing = s.option<bool>("activation_checkpointing");
  c.sync_module_states = s.option<bool>("sync_module_states");
  c.cpu_ram_efficient_loading = s.option<bool>("cpu_ram_efficient_loading");
  if (c.cpu_ram_efficient_loading && !c.sync_module_states) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "cpu_ram_efficient_loading requires sync_module_states, as in accelerate: every rank must start "
                "from rank 0's weights (add --fsdp.sync_module_states true)");
  }
  return c;
}

std::string to_json(const FsdpConfig& c) {
  const char* prefetch = c.backward_prefetch == BackwardPrefetch::backward_pre    ? "BACKWARD_PRE"
                         : c.backward_prefetch == BackwardPrefetch::backward_post ? "BACKWARD_POST"
                                                                                  : "NO_PREFETCH";
  const char* wrap = c.wrap_policy == WrapPolicy::transformer_based ? "transformer_based_wrap"
                     : c.wrap_policy == WrapPolicy::size_based      ? "size_based_wrap"
                                                                    : "no_wrap";
  const char* state_dict = c.state_dict_type == StateDictType::sharded ? "SHARDED_STATE_DICT"
                           : c.state_dict_type == StateDictType::local ? "LOCAL_STATE_DICT"
                                                                       : "FULL_STATE_DICT";
  std::string names;
  for (const std::string& n : c.wrap_names) names += (names.empty() ? "\"" : ",\"") + n + "\"";
  std::string ignored;  // JSON-escape the regex's backslashes and quotes
  for (char ch : c.ignored_modules) {
    if (ch == '\\' || ch == '"') ignored += '\\';
    ignored += ch;
  }
  return format(
      "{\"fsdp_version\":%d,\"sharding_strategy\":\"%s\",\"reshard_after_forward\":%s,\"sharding_size\":%d,"
      "\"replica_size\":%d,\"backward_prefetch\":\"%s\",\"forward_prefetch\":%s,\"limit_all_gathers\":%s,"
      "\"param_dtype\":\"%s\",\"reduce_dtype\":\"%s\",\"auto_wrap_policy\":\"%s\","
      "\"transformer_cls_names_to_wrap\":[%s],\"min_num_params\":%lld,\"cpu_offload\":%s,"
      "\"ignored_modules\":\"%s\",\"state_dict_type\":\"%s\",\"activation_checkpointing\":%s}",
      c.fsdp_version, to_string(c.strategy), c.reshard_after_forward ? "true" : "false", c.mesh.sharding_size,
      c.mesh.replica_size, prefetch, c.forward_prefetch ? "true" : "false", c.limit_all_gathers ? "true" : "false",
      dtype_label(c.param_dtype).c_str(), dtype_label(c.reduce_dtype).c_str(), wrap, names.c_str(),
      static_cast<long long>(c.min_num_params), c.cpu_offload ? "true" : "false", ignored.c_str(), state_dict,
      c.activation_checkpointing ? "true" : "false");
}

}  // namespace accel::fsdp
