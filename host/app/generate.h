// accel-host generate CHECKPOINT_DIR --prompt TEXT | --prompt-ids IDS
//     [--tokenizer PATH] [--max-new-tokens N] [--temperature T] [--top-k K]
//     [--seed S] [--eos-id ID] [--output text|ids]
// Samples a continuation from any Accel checkpoint (any strategy and world
// size; a save root means its newest complete step) through the model's
// key/value cache (model/sampling.h). --prompt's UTF-8 bytes are the tokens
// of a byte-trained model (--data text:PATH) and the continuation is written
// as bytes. A token-trained model takes --tokenizer (a Hugging Face
// tokenizer.json, read by host/tokenizer/): --prompt is encoded as the
// `tokenizers` package encodes it, post-processor's special tokens included,
// and the continuation is decoded to text once it is complete (special
// tokens written); or --prompt-ids, written back as ids. A tokenizer whose
// ids pass the checkpoint's vocabulary is refused. Only the continuation is
// written, to stdout. One process, no MPI ranks.
#pragma once

#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

// The subcommand: 0 on success, usage text for --help; a bad argument is a
// cli::UsageError (exit 2), a bad checkpoint CheckpointError (exit 1).
int generate_command(const std::vector<std::string>& args, const comm::MpiSession& mpi);

}  // namespace accel::app
