// config.json of a Hugging Face `transformers` save_pretrained directory:
// what model it describes, for --init-from hf:DIR, and what export-hf writes
// back. Each model_type is read and written by its bridge (hf_bridge.h:
// gpt2, llama, qwen2, qwen3, mistral, mixtral, qwen2_moe).
//
// Read by the one JSON rule (accel/sdk/json_input.hpp), as
// trainer_state.json is: a depth limit, integers that are JSON integers
// (256.9 and 1e19 are refused, never truncated or wrapped), every number
// range-checked by what the host builds from it (an epsilon is finite and
// > 0, heads divide the width), and messages that quote a value through
// describe(). Every key the host's model cannot honour is refused by name:
// a model that loads here computes what transformers computes.
//
// Free of LibTorch (the fuzz target tests/fuzz/hf_config_fuzz.cpp links
// it); the weights are read by hf_checkpoint.h.
// Errors: CheckpointError, one line naming the file and the key.
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "host/checkpoint/safetensors.h"  // CheckpointError
#include "host/model/gpt_config.h"

namespace accel::checkpoint {

// Largest config.json read; a real one is a few KiB.
inline constexpr uint64_t kMaxHfConfigBytes = 1u << 20;

// What config.json says the model is, and what the host cannot honour but
// may ignore with a warning (dropout rates: the host trains without
// dropout; a key no bridge reads and not known to be inert), one line each.
struct HfModelConfig {
  model::GptConfig shape;  // n_positions / max_position_embeddings become seq_len
  std::string model_type;  // config.json's, whose bridge read it
  HfConfigKeys keys;       // what export-hf writes back beside the shape
  std::vector<std::string> ignored;
};

// The model `text` (a config.json) describes; `where` names it in messages.
HfModelConfig parse_hf_config(std::string_view text, const std::string& where);

// Reads DIR/config.json (a regular file, never a blocking open) and parses it.
HfModelConfig read_hf_config(const std::filesystem::path& dir);

// config.json for `shape`, as export-hf writes it: by the first bridge
// whose transformers class computes `shape` (hf_bridge_for; CheckpointError
// when none does). The mixtures of experts take `keys`: router_aux_loss_coef
// (unset: 0, --moe-aux-loss-coef's default) and Qwen2-MoE's intermediate_size
// (unset: the expert width; no layer reads it). parse_hf_config gives
// `shape` and the keys of its family back.
std::string hf_config_json(const model::GptConfig& shape, const HfConfigKeys& keys = {});

}  // namespace accel::checkpoint
