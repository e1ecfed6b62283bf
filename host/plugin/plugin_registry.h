// The plugins of one run: loaded in --plugin order, validated one by one
// (loaded_plugin.h) and as a set (duplicates, declared conflicts, at most one
// gradient-reducing strategy), then ordered the way hooks run: parallel
// plugins, then precision, then observers, --plugin order within a kind.
//
// The registry owns the libraries. Its destructor tears down every created
// plugin (reverse order) before unloading any library, so no plugin code can
// run after its library is gone. Not thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "host/plugin/loaded_plugin.h"
#include "host/runtime/host_context.h"

namespace accel::plugin {

class PluginRegistry {
 public:
  explicit PluginRegistry(runtime::HostContext& context) : context_(context) {}
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Loads every requested plugin (a name or a path). Throws PluginError with
  // one line naming the file and the reason; nothing stays loaded then.
  void load(const std::vector<std::string>& requests, const std::vector<std::filesystem::path>& dirs,
            bool info_only = false);

  const std::vector<std::unique_ptr<LoadedPlugin>>& plugins() const { return plugins_; }
  LoadedPlugin* find(std::string_view name) const;
  bool empty() const { return plugins_.empty(); }

  // Calls teardown on every created plugin, in reverse order; idempotent.
  // Errors are logged, not thrown: every plugin gets its teardown.
  void teardown_all() noexcept;

 private:
  void check_set() const;

  runtime::HostContext& context_;
  std::vector<std::unique_ptr<LoadedPlugin>> plugins_;
};

// Rank of a plugin kind in hook order (parallel first).
int kind_order(AccelPluginKind kind);
const char* kind_name(AccelPluginKind kind);

}  // namespace accel::plugin
