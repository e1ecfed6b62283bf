// --list-plugins (see plugin_list.h).
#include "host/plugin/plugin_list.h"

#include "host/plugin/discovery.h"
#include "host/plugin/loaded_plugin.h"
#include "host/plugin/plugin_error.h"
#include "host/plugin/plugin_registry.h"

namespace accel::plugin {

void print_plugin_list(const std::vector<std::filesystem::path>& dirs, runtime::HostContext& context,
                       std::FILE* out) {
  const std::vector<std::filesystem::path> files = find_plugin_files(dirs);
  std::fprintf(out, "%-18s %-9s %-10s %-4s %s\n", "NAME", "VERSION", "KIND", "ABI", "PATH / DESCRIPTION");
  for (const auto& file : files) {
    try {
      const auto plugin = LoadedPlugin::load(file, "", context, /*info_only=*/true);
      const AccelPluginDescriptor& d = plugin->descriptor();
      std::fprintf(out, "%-18s %-9s %-10s %u.%-2u %s\n%-43s %s\n", plugin->name().c_str(), d.version,
                   kind_name(d.kind), d.abi_version.major, d.abi_version.minor, file.c_str(), "", d.description);
    } catch (const PluginError& e) {
      std::fprintf(out, "%-18s %-9s %-10s %-4s %s\n", file.filename().c_str(), "-", "unloadable", "-", e.what());
    }
  }
  if (files.empty()) {
    std::fprintf(out, "(no plugins found in");
    for (const auto& dir : dirs) std::fprintf(out, " %s", dir.c_str());
    std::fprintf(out, ")\n");
  }
}

}  // namespace accel::plugin
