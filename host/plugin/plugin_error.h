// The one exception type of plugin loading and hook dispatch. Its message is
// a single line that names the plugin (file or name) and the reason.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace accel::plugin {

struct PluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A plugin's hook returned an error during the run: which hook, with which
// status (an AccelStatus value), so the trainer can tell a failure of the
// plugin's own (agreed across ranks, trainer.h) from a communication
// failure inside the hook (the job is ended).
struct HookError : PluginError {
  HookError(const std::string& message, std::string failed_hook, int failed_status)
      : PluginError(message), hook(std::move(failed_hook)), status(failed_status) {}
  std::string hook;
  int status;
};

}  // namespace accel::plugin
