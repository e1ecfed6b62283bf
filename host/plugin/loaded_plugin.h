// One plugin library, loaded and validated: the file, its descriptor and
// hook table (normalised copies: fields beyond the plugin's struct_size read
// as zero/NULL), its AccelHost handle and, once created, its instance.
//
// Loading order (DESIGN.md "Loading"): the file name is checked
// (libaccel_<name>.so: nothing misnamed is mapped), the file is opened once
// and its trust checked on that descriptor (trusted_file.h), the ELF
// inspected with Boost.DLL's library_info (a truncated .so can SIGBUS inside
// dlopen), the libraries it ships beside itself and finds through $ORIGIN
// opened and checked the same way and loaded first, then the plugin
// dlopened with RTLD_NOW | RTLD_LOCAL — all through /proc/self/fd/N, so a
// name swapped meanwhile changes nothing — then the entry symbol of the
// newest ABI major this host knows, then descriptor validation (hook table
// at least 1.0's; a gradient reducer has a hook to reduce in). The library stays
// mapped until this object is destroyed, which the registry does only after
// teardown. Not thread-safe.
#pragma once

#include <accel/accel.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "host/runtime/host_context.h"

namespace accel::plugin {

struct ElfDynamic;
class TrustedFile;

class LoadedPlugin {
 public:
  // Throws PluginError("<file>: <reason>"). `expected_name`: the name the
  // user asked for (empty when loaded by path); it must match the descriptor.
  // `info_only`: --list-plugins/--help; the plugin is told no hook will run.
  static std::unique_ptr<LoadedPlugin> load(const std::filesystem::path& file, const std::string& expected_name,
                                            runtime::HostContext& context, bool info_only);
  ~LoadedPlugin();
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;

  const std::string& name() const { return name_; }
  const std::filesystem::path& path() const { return path_; }
  const AccelPluginDescriptor& descriptor() const { return descriptor_; }
  const std::vector<const AccelOptionSpec*>& options() const { return options_; }
  AccelAbiVersion abi_version() const { return descriptor_.abi_version; }
  AccelHost* host() { return host_.get(); }

  // The hooks of this run: the descriptor's, or the narrower table `create`
  // returned. Always a full-size, normalised copy.
  const AccelHooks& hooks() const { return hooks_; }
  void narrow_hooks(const AccelHooks* table);

  AccelPlugin* self = nullptr;  // set by create
  bool created = false;         // create returned OK: teardown is owed

 private:
  LoadedPlugin() = default;
  struct Library;
  // Loads the libraries `object` (the file open as `file`) ships beside
  // itself and finds through $ORIGIN, checked like the plugin (loaded_plugin.cpp).
  void load_bundled(const ElfDynamic& object, const TrustedFile& file, const std::filesystem::path& label, int depth);

  std::filesystem::path path_;
  std::string name_;
  // Declared before library_: destroyed after it, the plugin unloaded
  // before the libraries it needs.
  std::vector<std::unique_ptr<Library>> bundled_;
  std::unique_ptr<Library> library_;
  std::unique_ptr<AccelHost> host_;
  AccelPluginDescriptor descriptor_{};
  AccelHooks hooks_{};
  std::vector<const AccelOptionSpec*> options_;
};

// Copies a plugin-owned hook table into a full-size one; hooks beyond its
// struct_size are NULL. Exposed for tests.
AccelHooks normalise_hooks(const AccelHooks* table);

}  // namespace accel::plugin
