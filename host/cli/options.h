// The accel-host command line and --config file (Boost.Program_options).
//
// parse_command_line turns argv into a validated RunConfig or throws
// UsageError carrying one line that names the bad option and why.
#pragma once

#include <boost/program_options/options_description.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/cli/accelerate_config.h"
#include "host/cli/run_config.h"

namespace accel::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The words main() dispatches before option parsing; anything else that is
// not an option is a usage error.
inline constexpr const char* kSubcommands = "launch, check-plugin, merge-weights, export-hf, generate";
// --resume auto: the newest checkpoint under --save if any (app/run.cpp). A
// directory that is really named "auto" is given as ./auto.
inline constexpr const char* kResumeAuto = "auto";

// --init_process_group.timeout's accepted range, in seconds: the watchdog
// counts whole milliseconds, and a week is longer than any collective.
inline constexpr double kMinTimeoutSeconds = 0.001;
inline constexpr double kMaxTimeoutSeconds = 604800.0;

// An integer option's accepted values, inclusive. Every integer option of the
// run's command line has one (tests/host/options_test.cpp fails on one
// without), checked while parsing with one line naming the option. The
// maxima are generous yet keep every product the host and the plugins form
// of options inside int64: samples (steps x batch <= 2^50), tokens per step
// (batch x seq_len <= 2^40), parameters and FLOPs per token (layers x
// width^2, layers x width x seq_len < 2^61); plugins bound their own
// options alike (their schema's min_value/max_value).
struct IntegerOptionRange {
  const char* option;  // long name, without "--"
  int64_t min;
  int64_t max;  // >= 0 (an unsigned option is compared against it)
};
const std::vector<IntegerOptionRange>& integer_option_ranges();

// The run's options, as parse_command_line declares them (plugins' sections
// aside): what --help lists, for tests that walk the schema. Only a
// description: parsing with it writes into storage nobody reads.
boost::program_options::options_description describe_run_options();

enum class Action { run, help, version, list_plugins };

struct ParsedCommandLine {
  Action action = Action::run;
  RunConfig config;
  std::string help_text;  // filled for Action::help
  // Plugin options the user gave ("fsdp.sharding_strategy" -> text), from
  // the command line or the config file's [fsdp] section.
  std::map<std::string, std::string> plugin_values;
  // --config FILE.yaml: the accelerate config it named (its launch-level
  // settings and notes; its options are already in the parse).
  std::optional<AccelerateConfig> accelerate;
};

// What must be known before plugins load: which ones, from where, and the
// config file (which may name plugins too, as `plugin = NAME` lines).
// Tolerates every other option, known or not. Throws UsageError.
struct PluginRequest {
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_paths;
};
PluginRequest scan_plugin_request(const std::vector<std::string>& args);

// The full, strict parse. `plugin_options`: the loaded plugins' sections
// (plugin/plugin_options.h), or null when no plugin is loaded.
ParsedCommandLine parse_command_line(const std::vector<std::string>& args,
                                     const boost::program_options::options_description* plugin_options = nullptr);

// Checks the cross-option rules that need the data-parallel world size
// (e.g. the global batch must split evenly across ranks and micro-steps).
void validate_for_world(const RunConfig& config, int data_parallel_size);

}  // namespace accel::cli
