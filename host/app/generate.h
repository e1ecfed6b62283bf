// accel-host generate CHECKPOINT_DIR --prompt TEXT | --prompt-ids IDS
//     [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]
//     [--eos-id ID] [--output text|ids]
// Samples a continuation from any Accel checkpoint (any strategy and world
// size; a save root means its newest complete step) through the model's
// key/value cache (model/sampling.h). --prompt's UTF-8 bytes are the tokens
// of a byte-trained model (--data text:PATH) and the continuation is written
// as bytes; a token-trained model takes --prompt-ids and writes ids, which a
// tokenizer turns back into text (README: the round trip through the
// `tokenizers` package; no C++ tokenizer library is packaged for Debian).
// Only the continuation is written, to stdout. One process, no MPI ranks.
#pragma once

#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

// The subcommand: 0 on success, usage text for --help; a bad argument is a
// cli::UsageError (exit 2), a bad checkpoint CheckpointError (exit 1).
int generate_command(const std::vector<std::string>& args, const comm::MpiSession& mpi);

}  // namespace accel::app
