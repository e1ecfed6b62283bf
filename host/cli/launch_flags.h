// `accel-host launch`'s command line: accelerate launch's flags (every one of
// accelerate_keys.h's, read into launch settings for the one mapping of
// cli/accelerate_config.h) and Accel's own (--hostfile, --dry_run,
// --min_ranks), then `--` and the training options. Parsed here, not by
// Boost.Program_options, so that a flag missing its value is refused rather
// than taking the next flag as its value (`--main_process_ip --dry_run`),
// and so that every accelerate flag Accel cannot honour is refused by name
// with the reason instead of as "unrecognised".
//
// Flags are spelled with underscores or hyphens (--num-processes), as
// accelerate launch allows; -h, -q, -t and -m are accelerate's short forms.
// A flag given twice keeps its last value (argparse's rule); --env and --vm
// collect theirs.
//
// Thread-safety: pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/cli/accelerate_config.h"

namespace accel::cli {

struct LaunchFlags {
  std::string config_file;
  bool help = false;
  bool dry_run = false;
  int64_t max_restarts = 0;
  std::optional<int64_t> min_ranks;
  double restart_backoff_s = 1.0;  // --restart_backoff (app/supervise.h)
  AccelerateSettings settings;             // accelerate's flags by name; --hostfile as mpirun_hostfile
  std::vector<std::string> training_args;  // after --
};

// Throws UsageError (one line naming the flag) on anything it cannot read.
LaunchFlags parse_launch_flags(const std::vector<std::string>& args);

// `accel-host launch --help`.
std::string launch_help();

}  // namespace accel::cli
