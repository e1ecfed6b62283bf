// Where plugins come from, and which files may be loaded at all.
//
// Search order: --plugin-path dirs, then $ACCEL_PLUGIN_PATH (colon
// separated), then the install's own plugin dir, found relative to the
// executable (build/bin/accel-host -> build/lib/accel/plugins). A plugin
// named `fsdp` is the file libaccel_fsdp.so; --plugin also takes a path.
//
// Trust model (docs/plugins.md): loading a plugin runs its code with our
// privileges, so a file, or a directory above it, that another user could
// write to is refused (trusted_file.h: checked on the descriptor that is
// then loaded), and the current directory is never searched implicitly (an
// empty or relative ACCEL_PLUGIN_PATH entry is ignored with a warning).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace accel::plugin {

namespace fs = std::filesystem;

std::string plugin_file_name(const std::string& name);  // "libaccel_<name>.so"

// True when `spec` names a file rather than a plugin name (has a '/' or ends in .so).
bool names_a_path(const std::string& spec);

// The directories to search, in order. `env` is $ACCEL_PLUGIN_PATH (may be null).
std::vector<fs::path> plugin_search_dirs(const std::vector<std::string>& cli_dirs, const char* env,
                                         const fs::path& executable_dir);

// The install's plugin directory relative to this executable.
fs::path builtin_plugin_dir(const fs::path& executable_dir);
fs::path current_executable_dir();

// Resolves a --plugin value to an existing file; throws PluginError listing
// the directories searched.
fs::path resolve_plugin(const std::string& spec, const std::vector<fs::path>& dirs);

// Every libaccel_*.so in the directories (first occurrence of each name wins).
std::vector<fs::path> find_plugin_files(const std::vector<fs::path>& dirs);

}  // namespace accel::plugin
