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
#include <vector>

#include "host/checkpoint/atomic_dir.h"   // ManifestEntry
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

// Manifest entries as a JSON array ({"file", "size", "crc32"} each): the
// multi-rank commit's messages and a node's snapshot holdings.
inline nlohmann::json manifest_entries_json(const std::vector<ManifestEntry>& entries) {
  nlohmann::json list = nlohmann::json::array();
  for (const ManifestEntry& e : entries) list.push_back({{"file", e.file}, {"size", e.size}, {"crc32", e.crc32}});
  return list;
}

// `fields[key]`, an array manifest_entries_json wrote; each file a plain
// name. An absent key is no entries unless `required`. Throws
// sdk::JsonInputError (the text came from a peer).
inline std::vector<ManifestEntry> parse_manifest_entries(const sdk::JsonFields& fields, const char* key,
                                                         bool required) {
  std::vector<ManifestEntry> entries;
  if (!required && !fields.contains(key)) return entries;
  size_t index = 0;
  for (const nlohmann::json& item : fields.array(key)) {
    const sdk::JsonFields e(item, fields.where(), std::string(key) + "[" + std::to_string(index++) + "].");
    entries.push_back(
        {e.string("file"), e.unsigned_integer("size"), static_cast<uint32_t>(e.integer("crc32", 0, 0xffffffff))});
    if (!is_plain_name(entries.back().file)) {
      throw sdk::JsonInputError(fields.where() + ": " + key + " names an invalid file " +
                                sdk::describe(e.value("file")));
    }
  }
  return entries;
}

}  // namespace accel::checkpoint
