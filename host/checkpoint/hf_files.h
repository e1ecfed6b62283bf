// What the Hugging Face checkpoint readers share (hf_checkpoint.cpp for
// GPT-2, hf_llama.cpp for Llama): config.json and index reading with typed
// keys, the weight files of a save_pretrained directory (their tensors are
// read by hf_weight_source.h).
// Internal to host/checkpoint. Errors: CheckpointError naming file and key.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"

namespace accel::checkpoint::hf {

// A JSON file of at most 64 MiB (config.json and the shard index are small).
nlohmann::json read_json(const std::filesystem::path& path);

// A key's value when present and not null; its type checked.
template <typename T>
std::optional<T> optional_key(const nlohmann::json& config, const std::filesystem::path& path, const char* key) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  try {
    return found->template get<T>();
  } catch (const nlohmann::json::exception&) {
    throw CheckpointError(path.string() + ": \"" + key + "\" has the wrong type (" + found->dump() + ")");
  }
}

// A key that must be present and positive.
int64_t positive_key(const nlohmann::json& config, const std::filesystem::path& path, const char* key);

// The files holding the weights: the one model.safetensors, or every shard
// model.safetensors.index.json names (each once).
std::vector<std::filesystem::path> weight_files(const std::filesystem::path& dir);

}  // namespace accel::checkpoint::hf
