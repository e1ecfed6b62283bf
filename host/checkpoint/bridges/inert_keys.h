// The config.json keys no bridge needs to read: what transformers'
// PretrainedConfig writes for every model and what cannot change what a
// causal language model computes or how it trains from loaded weights (token
// ids, output switches, the dtype weights are stored in, the initializer
// of weights that are loaded anyway, generation defaults of older
// transformers, heads accel-host never builds). parse_hf_config names every
// other key that no bridge consulted (hf_config.cpp), and
// tests/python/test_config_keys.py walks each supported family's
// transformers config class against the two. A key belongs here only when
// its value cannot change the loss of any step.
#pragma once

#include <string_view>

namespace accel::checkpoint::bridge {

bool is_inert_hf_config_key(std::string_view key);

}  // namespace accel::checkpoint::bridge
