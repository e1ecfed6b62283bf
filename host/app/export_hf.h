// accel-host export-hf CHECKPOINT_DIR OUTPUT_DIR
// From any Accel checkpoint (any strategy, any world size; a save root means
// its newest complete step), a Hugging Face transformers model directory:
// OUTPUT_DIR/config.json and OUTPUT_DIR/model.safetensors, which
// GPT2LMHeadModel.from_pretrained(OUTPUT_DIR) loads (checkpoint/
// hf_checkpoint.h has the mapping). Weights are written as fp32. Each file
// appears atomically. One process, no MPI ranks.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

// Writes the two files into `output_dir` (created if needed); returns the
// checkpoint that was exported. Throws CheckpointError with one line.
std::filesystem::path export_hf(const std::filesystem::path& checkpoint_dir, const std::filesystem::path& output_dir);

// The subcommand: 0 on success, usage text for --help; a wrong argument
// count is a cli::UsageError (exit 2), a bad checkpoint CheckpointError (1).
int export_hf_command(const std::vector<std::string>& args, const comm::MpiSession& mpi);

}  // namespace accel::app
