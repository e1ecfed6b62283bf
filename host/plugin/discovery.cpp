// Plugin search paths (see discovery.h).
#include "host/plugin/discovery.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "host/plugin/plugin_error.h"
#include "host/util/log.h"

namespace accel::plugin {

std::string plugin_file_name(const std::string& name) { return "libaccel_" + name + ".so"; }

bool names_a_path(const std::string& spec) {
  return spec.find('/') != std::string::npos ||
         (spec.size() > 3 && spec.compare(spec.size() - 3, 3, ".so") == 0);
}

fs::path current_executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

fs::path builtin_plugin_dir(const fs::path& executable_dir) {
  return (executable_dir / ".." / "lib" / "accel" / "plugins").lexically_normal();
}

std::vector<fs::path> plugin_search_dirs(const std::vector<std::string>& cli_dirs, const char* env,
                                         const fs::path& executable_dir) {
  std::vector<fs::path> dirs;
  for (const std::string& dir : cli_dirs) dirs.emplace_back(dir);  // explicit: relative is fine
  if (env) {
    std::stringstream entries(env);
    std::string entry;
    while (std::getline(entries, entry, ':')) {
      if (entry.empty() || fs::path(entry).is_relative()) {
        log::warn("ACCEL_PLUGIN_PATH entry '" + entry +
                  "' ignored: only absolute directories are searched (never the current directory)");
        continue;
      }
      dirs.emplace_back(entry);
    }
  }
  if (!executable_dir.empty()) dirs.push_back(builtin_plugin_dir(executable_dir));
  return dirs;
}

fs::path resolve_plugin(const std::string& spec, const std::vector<fs::path>& dirs) {
  if (names_a_path(spec)) {
    if (!fs::is_regular_file(spec)) throw PluginError("--plugin " + spec + ": no such file");
    return fs::absolute(spec).lexically_normal();
  }
  const std::string file = plugin_file_name(spec);
  std::string searched;
  for (const fs::path& dir : dirs) {
    const fs::path candidate = dir / file;
    if (fs::is_regular_file(candidate)) return fs::absolute(candidate).lexically_normal();
    searched += (searched.empty() ? "" : ", ") + dir.string();
  }
  throw PluginError("--plugin " + spec + ": " + file + " not found in " +
                    (searched.empty() ? std::string("any plugin directory") : searched));
}

std::vector<fs::path> find_plugin_files(const std::vector<fs::path>& dirs) {
  std::vector<fs::path> files;
  std::set<std::string> seen;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> here;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("libaccel_", 0) == 0 && name.size() > 12 && name.compare(name.size() - 3, 3, ".so") == 0) {
        here.push_back(entry.path());
      }
    }
    std::sort(here.begin(), here.end());
    for (const fs::path& file : here) {
      if (seen.insert(file.filename().string()).second) files.push_back(file);
    }
  }
  return files;
}

}  // namespace accel::plugin
