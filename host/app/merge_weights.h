// accel-host merge-weights CHECKPOINT_DIR OUTPUT_PATH [--no-safe-serialization]
//                          [--remove-checkpoint-dir]
// The counterpart of accelerate's merge_fsdp_weights: every MODEL-space
// tensor of a checkpoint, whoever saved it and however it was sharded across
// ranks and files, merged whole into one file a Python user loads directly:
// OUTPUT_PATH/model.safetensors (names = parameter names, sorted, in the
// saved dtype), or with --no-safe-serialization OUTPUT_PATH/pytorch_model.bin
// (a dict name -> tensor that torch.load(path, weights_only=True) opens).
//
// CHECKPOINT_DIR is one checkpoint (its manifest must verify) or a save root
// (its newest complete step). The output file appears atomically (temporary
// file, fsync, rename); --remove-checkpoint-dir deletes CHECKPOINT_DIR only
// after that. One process, no MPI ranks.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

struct MergeWeightsOptions {
  std::filesystem::path checkpoint_dir;
  std::filesystem::path output_path;
  bool safe_serialization = true;
  bool remove_checkpoint_dir = false;
};

// The usage text `--help` prints.
std::string merge_weights_usage();

// The arguments after "merge-weights"; nullopt for --help. Throws
// cli::UsageError with one line for anything else that is wrong.
std::optional<MergeWeightsOptions> parse_merge_weights_args(const std::vector<std::string>& args);

// Merges and writes; returns the file written. Throws CheckpointError (or
// another std::exception) with one line; writes nothing partial.
std::filesystem::path merge_weights(const MergeWeightsOptions& options);

// The subcommand: 0 on success; throws as above (main turns it into exit 1,
// a cli::UsageError into exit 2).
int merge_weights_command(const std::vector<std::string>& args, const comm::MpiSession& mpi);

}  // namespace accel::app
