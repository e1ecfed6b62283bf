// Loading a run's plugins as a set (see plugin_registry.h).
#include "host/plugin/plugin_registry.h"

#include <algorithm>
#include <set>

#include "host/plugin/discovery.h"
#include "host/plugin/plugin_error.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/service_support.h"
#include "host/util/log.h"

namespace accel::plugin {

int kind_order(AccelPluginKind kind) {
  switch (kind) {
    case ACCEL_PLUGIN_PARALLEL: return 0;
    case ACCEL_PLUGIN_PRECISION: return 1;
    case ACCEL_PLUGIN_OBSERVER: return 2;
    default: return 3;
  }
}

const char* kind_name(AccelPluginKind kind) {
  switch (kind) {
    case ACCEL_PLUGIN_PARALLEL: return "parallel";
    case ACCEL_PLUGIN_PRECISION: return "precision";
    case ACCEL_PLUGIN_OBSERVER: return "observer";
    default: return "unknown";
  }
}

PluginRegistry::~PluginRegistry() {
  teardown_all();
  // Unload in reverse load order.
  while (!plugins_.empty()) plugins_.pop_back();
}

void PluginRegistry::load(const std::vector<std::string>& requests, const std::vector<std::filesystem::path>& dirs,
                          bool info_only) {
  std::vector<std::unique_ptr<LoadedPlugin>> loaded;
  std::set<std::filesystem::path> files;
  for (const std::string& request : requests) {
    const std::filesystem::path file = resolve_plugin(request, dirs);
    if (!files.insert(file).second) throw PluginError("--plugin " + request + ": given twice (" + file.string() + ")");
    loaded.push_back(LoadedPlugin::load(file, names_a_path(request) ? std::string() : request, context_, info_only));
  }
  std::stable_sort(loaded.begin(), loaded.end(), [](const auto& a, const auto& b) {
    return kind_order(a->descriptor().kind) < kind_order(b->descriptor().kind);
  });
  plugins_ = std::move(loaded);
  try {
    check_set();
  } catch (...) {
    plugins_.clear();
    throw;
  }
}

void PluginRegistry::check_set() const {
  std::set<std::string> names;
  const LoadedPlugin* reducer = nullptr;
  for (const auto& p : plugins_) {
    if (!names.insert(p->name()).second) {
      throw PluginError(p->path().string() + ": a plugin named '" + p->name() + "' is already loaded");
    }
    if (p->descriptor().capabilities & ACCEL_CAP_REDUCES_GRADS) {
      if (reducer) {
        throw PluginError(p->path().string() + ": '" + p->name() + "' and '" + reducer->name() +
                          "' both reduce gradients across data-parallel ranks; choose one");
      }
      reducer = p.get();
    }
  }
  for (const auto& p : plugins_) {
    const AccelPluginDescriptor& d = p->descriptor();
    for (size_t i = 0; i < d.num_conflicts; ++i) {
      if (const LoadedPlugin* other = find(d.conflicts[i])) {
        throw PluginError(p->path().string() + ": '" + p->name() + "' conflicts with '" + other->name() +
                          "' (declared by " + p->name() + ")");
      }
    }
  }
}

LoadedPlugin* PluginRegistry::find(std::string_view name) const {
  for (const auto& p : plugins_) {
    if (p->name() == name) return p.get();
  }
  return nullptr;
}

void PluginRegistry::teardown_all() noexcept {
  for (auto it = plugins_.rbegin(); it != plugins_.rend(); ++it) {
    LoadedPlugin& p = **it;
    if (!p.created) continue;
    p.created = false;
    // No trace_event may reach a plugin tearing down (one that left its
    // capture on, or an event still in flight on another thread).
    runtime::end_trace_capture(context_, p.name());
    // Nor a gather-codec call (a sharding plugin torn down later may still
    // complete a gather): without its provider the service declines.
    if (context_.gather_codec.name == p.name()) context_.gather_codec = {};
    if (p.hooks().teardown) {
      runtime::take_pending_error();
      const AccelStatus status = p.hooks().teardown(p.self);
      if (status != ACCEL_OK) {
        log::error("plugin " + p.name() + ": teardown failed (" + accel_status_name(status) +
                   "): " + runtime::take_pending_error().message);
      }
    }
    // What the plugin allocated through the host and did not free is
    // reclaimed here, and reported: it is a leak in the plugin.
    if (context_.memory) {
      const int64_t leaked = context_.memory->free_leaked(p.name());
      if (leaked > 0) log::warn("plugin " + p.name() + " leaked " + std::to_string(leaked) + " buffer(s) (reclaimed)");
    }
  }
}

}  // namespace accel::plugin
