// What the Hugging Face checkpoint readers share (hf_checkpoint.cpp for
// GPT-2, hf_llama.cpp for Llama; config.json is hf_config.h's): the shard
// index and the weight files of a save_pretrained directory (their tensors
// are read by hf_weight_source.h).
// Internal to host/checkpoint. Errors: CheckpointError naming file and key.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"

namespace accel::checkpoint::hf {

// A JSON file of at most 64 MiB (the shard index is small), read by the
// one rule (accel/sdk/input_file.hpp, json_input.hpp).
nlohmann::json read_json(const std::filesystem::path& path);

// The files holding the weights: the one model.safetensors, or every shard
// model.safetensors.index.json names (each once).
std::vector<std::filesystem::path> weight_files(const std::filesystem::path& dir);

}  // namespace accel::checkpoint::hf
