// trainer_state.json's "block" object under "model": the rotary decoder's
// choices beyond Llama's (cli/block_choices.h), each key written only when it
// is not Llama's default, so checkpoints of the earlier shapes carry none.
// Free of LibTorch (accel_checkpoint_io). Pure functions.
#pragma once

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include "host/cli/block_choices.h"

namespace accel::checkpoint {

// The choices that differ from the default, as an object (empty when none).
nlohmann::json block_choices_json(const BlockChoices& block);
// Reads what block_choices_json wrote; refuses unknown keys and bad values
// through `fields`' fail (CheckpointError via the caller).
BlockChoices read_block_choices(const sdk::JsonFields& fields);

}  // namespace accel::checkpoint
