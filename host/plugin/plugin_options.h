// Plugin option schemas as command-line flags and config sections: option
// `x` of plugin `fsdp` is --fsdp.x=VALUE, or `x = VALUE` under [fsdp] in
// --config. Values are validated against the schema here (type, allowed
// values, bounds, required) and stored typed in the OptionStore the option
// services read; the host's own settings plugins may read go in section
// "train" (docs/abi.md §9).
#pragma once

#include <boost/program_options/options_description.hpp>

#include <map>
#include <string>

#include "host/cli/run_config.h"
#include "host/plugin/plugin_registry.h"
#include "host/runtime/host_context.h"

namespace accel::plugin {

// One section per loaded plugin, for parsing and for --help.
boost::program_options::options_description describe_plugin_options(const PluginRegistry& registry);

// Validates `given` ("plugin.option" -> text) and fills `store` with every
// plugin option (given or default) and the host's "train" section.
// Throws cli::UsageError naming the option and the problem.
void fill_option_store(const PluginRegistry& registry, const std::map<std::string, std::string>& given,
                       const RunConfig& config, runtime::OptionStore& store);

}  // namespace accel::plugin
