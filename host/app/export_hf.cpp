// accel-host export-hf (see export_hf.h).
#include "host/app/export_hf.h"

#include <cstdio>

#include "host/app/model_weights.h"
#include "host/checkpoint/hf_checkpoint.h"
#include "host/checkpoint/trainer_state.h"
#include "host/cli/options.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

namespace fs = std::filesystem;
const std::string kCommand = "export-hf";

constexpr const char* kUsage =
    "usage: accel-host export-hf CHECKPOINT_DIR OUTPUT_DIR\n"
    "  Writes OUTPUT_DIR/config.json and OUTPUT_DIR/model.safetensors, a Hugging Face transformers\n"
    "  GPT2LMHeadModel that from_pretrained(OUTPUT_DIR) loads, from any Accel checkpoint (any\n"
    "  strategy and world size; a save root exports its newest complete step).\n";

}  // namespace

fs::path export_hf(const fs::path& checkpoint_dir, const fs::path& output_dir) {
  const fs::path checkpoint = resolve_checkpoint(checkpoint_dir, kCommand);
  const checkpoint::TrainerState state = checkpoint::read_trainer_state(checkpoint);
  const model::GptConfig& shape = state.model;
  const NamedTensors tensors = checkpoint::to_hf_tensors(read_whole_model(checkpoint, kCommand), shape, state.hf);
  create_output_directory(output_dir, kCommand);
  // Weights first: a directory with a config.json is taken for a model.
  write_safetensors_file(output_dir / "model.safetensors", tensors, kCommand);
  write_text_file(output_dir / "config.json", checkpoint::hf_config_json(shape, state.hf), kCommand);
  log::info(strformat("exported %s (%s) to %s", checkpoint.c_str(), shape.describe().c_str(), output_dir.c_str()));
  return checkpoint;
}

int export_hf_command(const std::vector<std::string>& args, const comm::MpiSession& mpi) {
  log::init(mpi.rank(), log::Level::info);
  std::vector<std::string> positional;
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      if (mpi.rank() == 0) std::fputs(kUsage, stdout);
      return 0;
    }
    if (!arg.empty() && arg[0] == '-') {
      throw cli::UsageError("export-hf: unknown option '" + arg + "' (see accel-host export-hf --help)");
    }
    positional.push_back(arg);
  }
  if (positional.size() != 2) {
    throw cli::UsageError(strformat("export-hf: expected CHECKPOINT_DIR and OUTPUT_DIR, got %zu argument(s) (see "
                                    "accel-host export-hf --help)",
                                    positional.size()));
  }
  if (mpi.world_size() > 1) {
    throw cli::UsageError(
        strformat("export-hf runs as one process, not on %d ranks (run it without mpirun)", mpi.world_size()));
  }
  export_hf(positional[0], positional[1]);
  return 0;
}

}  // namespace accel::app
