// The one exception type of plugin loading and hook dispatch. Its message is
// a single line that names the plugin (file or name) and the reason.
#pragma once

#include <stdexcept>

namespace accel::plugin {

struct PluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace accel::plugin
