// The accel-host command line and --config file (Boost.Program_options).
//
// parse_command_line turns argv into a validated RunConfig or throws
// UsageError carrying one line that names the bad option and why.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "host/cli/run_config.h"

namespace accel::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Action { run, help, version };

struct ParsedCommandLine {
  Action action = Action::run;
  RunConfig config;
  std::string help_text;  // filled for Action::help
};

ParsedCommandLine parse_command_line(const std::vector<std::string>& args);

// Checks the cross-option rules that need the data-parallel world size
// (e.g. the global batch must split evenly across ranks and micro-steps).
void validate_for_world(const RunConfig& config, int data_parallel_size);

}  // namespace accel::cli
