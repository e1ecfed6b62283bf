// The checkpoint readers' side of the one JSON reading rule
// (accel/sdk/json_input.hpp): the SDK's JsonInputError becomes this layer's
// CheckpointError, carrying the same one line, so every caller that catches
// CheckpointError for a damaged file still does.
//
// Header only. Thread-safety: reentrant.
#pragma once

#include <accel/sdk/json_input.hpp>

#include <string>
#include <string_view>
#include <utility>

#include "host/checkpoint/safetensors.h"  // CheckpointError

namespace accel::checkpoint {

// Runs `read` (which parses with sdk::parse_json and reads fields through
// sdk::JsonFields) and rethrows a JsonInputError as CheckpointError.
template <typename Read>
decltype(auto) read_checkpoint_json(Read&& read) {
  try {
    return std::forward<Read>(read)();
  } catch (const sdk::JsonInputError& e) {
    throw CheckpointError(e.what());
  }
}

// sdk::parse_json failing as CheckpointError.
inline nlohmann::json parse_checkpoint_json(std::string_view text, const std::string& where) {
  return read_checkpoint_json([&] { return sdk::parse_json(text, where); });
}

}  // namespace accel::checkpoint
