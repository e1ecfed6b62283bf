// Parsing and checking option values against a plugin's AccelOptionSpec:
// used to validate a schema's defaults at load time and the user's values
// at parse time, with the same rules and messages.
#pragma once

#include <accel/options.h>

#include <optional>
#include <string>

#include "host/runtime/host_context.h"

namespace accel::plugin {

// Parses `text` as a value of `spec`; on failure returns nullopt and sets
// *why to a phrase like "'x' is not one of: a, b" or "'7' is above the maximum 4".
std::optional<runtime::OptionValue> parse_option_value(const AccelOptionSpec& spec, const std::string& text,
                                                       std::string* why);

const char* option_type_name(AccelOptionType type);

}  // namespace accel::plugin
