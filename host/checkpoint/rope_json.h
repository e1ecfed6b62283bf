// The rotary scaling (cli/run_config.h's RopeScaling) as JSON keys, one rule
// for config.json's "rope_parameters"/"rope_scaling" (the bridges) and for
// trainer_state.json's "rope_scaling": transformers' key names, written
// resolved (a yarn or longrope factor config.json left out is written as
// the max_position_embeddings / original_max_position_embeddings it meant).
#pragma once

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "host/cli/run_config.h"

namespace accel::checkpoint {

// {"rope_type": ..., and the type's parameters}; {"rope_type": "default"} for none.
nlohmann::json rope_scaling_json(const RopeScaling& scaling);

// The scaling of type `type` (transformers' rope_type name) from `rope`'s
// keys. `max_position` stands in for a missing original_max_position_embeddings
// (transformers' standardize_rope_params) and is dynamic's length;
// `original` (Phi-3's top-level original_max_position_embeddings) wins over
// the object's own. Every key but the type's and `also_known` is refused by
// name. Throws sdk::JsonInputError.
RopeScaling read_rope_scaling(const sdk::JsonFields& rope, const std::string& type, int64_t max_position,
                              std::optional<int64_t> original, std::initializer_list<const char*> also_known);

}  // namespace accel::checkpoint
