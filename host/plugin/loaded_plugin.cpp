// Loading and validating one plugin library (see loaded_plugin.h).
#include "host/plugin/loaded_plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <cctype>
#include <cstring>
#include <optional>
#include <regex>
#include <set>

#include "host/plugin/discovery.h"
#include "host/plugin/elf_dynamic.h"
#include "host/plugin/option_values.h"
#include "host/plugin/plugin_error.h"
#include "host/plugin/trusted_file.h"

namespace accel::plugin {
namespace {

constexpr const char* kEntryPrefix = "accel_plugin_init_v";

// ABI 1.0's hook table ends at trace_event. Frozen: a later minor that
// appends hooks leaves this where it is (tests/abi pins the 1.0 prefix).
constexpr size_t kHooksSizeV1_0 = ACCEL_FIELD_END(AccelHooks, trace_event);

bool valid_name(const char* name) {
  static const std::regex pattern("[a-z][a-z0-9_]*");
  return name && std::regex_match(name, pattern);
}

// The ABI majors a file exports entry symbols for, read from its ELF
// dynamic symbol table without loading it (through the descriptor that was
// checked, not the name).
std::set<int> exported_majors(const TrustedFile& trusted, const std::filesystem::path& file) {
  std::vector<std::string> symbols;
  try {
    boost::dll::library_info info(trusted.proc_path());
    symbols = info.symbols();
  } catch (const std::exception& e) {
    throw PluginError(file.string() + ": not a loadable shared library (" + e.what() + ")");
  }
  std::set<int> majors;
  for (const std::string& symbol : symbols) {
    if (symbol.rfind(kEntryPrefix, 0) != 0) continue;
    const std::string digits = symbol.substr(std::strlen(kEntryPrefix));
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 6) {
      majors.insert(std::stoi(digits));
    }
  }
  return majors;
}

void check_option_spec(const AccelOptionSpec* spec, std::set<std::string>& names) {
  if (!spec) throw std::invalid_argument("option schema has a NULL entry");
  if (spec->struct_size < ACCEL_FIELD_END(AccelOptionSpec, max_value)) {
    throw std::invalid_argument("option spec struct_size " + std::to_string(spec->struct_size) +
                                " is smaller than ABI 1.0's " +
                                std::to_string(ACCEL_FIELD_END(AccelOptionSpec, max_value)));
  }
  const std::string label = spec->name ? spec->name : "(null)";
  if (!valid_name(spec->name)) throw std::invalid_argument("option name '" + label + "' is not [a-z][a-z0-9_]*");
  if (!names.insert(label).second) throw std::invalid_argument("option '" + label + "' is declared twice");
  if (spec->type < ACCEL_OPTION_BOOL || spec->type > ACCEL_OPTION_ENUM) {
    throw std::invalid_argument("option '" + label + "' has unknown type " + std::to_string(spec->type));
  }
  if (spec->num_allowed_values > 0 && !spec->allowed_values) {
    throw std::invalid_argument("option '" + label + "' counts allowed values but gives none");
  }
  for (size_t i = 0; i < spec->num_allowed_values; ++i) {
    if (!spec->allowed_values[i]) throw std::invalid_argument("option '" + label + "' has a NULL allowed value");
  }
  if (spec->type == ACCEL_OPTION_ENUM && spec->num_allowed_values == 0) {
    throw std::invalid_argument("enum option '" + label + "' lists no allowed values");
  }
  if ((spec->min_value || spec->max_value) && spec->type != ACCEL_OPTION_INT && spec->type != ACCEL_OPTION_DOUBLE) {
    throw std::invalid_argument("option '" + label + "' has bounds but is not numeric");
  }
  for (const char* bound : {spec->min_value, spec->max_value}) {
    char* end = nullptr;
    if (bound && (std::strtod(bound, &end), *end != '\0' || end == bound)) {
      throw std::invalid_argument("option '" + label + "' has a non-numeric bound '" + bound + "'");
    }
  }
  const bool required = spec->flags & ACCEL_OPTION_FLAG_REQUIRED;
  if (required && spec->default_value) {
    throw std::invalid_argument("option '" + label + "' is required but has a default");
  }
  if (!spec->default_value && !required && spec->type != ACCEL_OPTION_STRING) {
    throw std::invalid_argument("option '" + label + "' has no default and is not required");
  }
  if (spec->default_value) {
    std::string why;
    if (!parse_option_value(*spec, spec->default_value, &why)) {
      throw std::invalid_argument("option '" + label + "' has an invalid default: " + why);
    }
  }
}

void check_descriptor(const AccelPluginDescriptor& d, const AccelHooks* raw_hooks, const AccelHooks& hooks,
                      const std::filesystem::path& file, const std::string& expected_name) {
  if (d.abi_version.major != ACCEL_ABI_VERSION_MAJOR) {
    throw std::invalid_argument("descriptor declares ABI major " + std::to_string(d.abi_version.major) +
                                " but was returned by accel_plugin_init_v1");
  }
  if (!valid_name(d.name)) {
    throw std::invalid_argument(std::string("plugin name '") + (d.name ? d.name : "(null)") +
                                "' is not [a-z][a-z0-9_]*");
  }
  if (!expected_name.empty() && expected_name != d.name) {
    throw std::invalid_argument("descriptor names the plugin '" + std::string(d.name) + "', but '" + expected_name +
                                "' was requested");
  }
  if (file.filename() != plugin_file_name(d.name)) {
    throw std::invalid_argument("plugin '" + std::string(d.name) + "' must be in a file named " +
                                plugin_file_name(d.name));
  }
  if (!d.version || !d.description) throw std::invalid_argument("descriptor lacks a version or description");
  if (d.kind != ACCEL_PLUGIN_PARALLEL && d.kind != ACCEL_PLUGIN_PRECISION && d.kind != ACCEL_PLUGIN_OBSERVER) {
    throw std::invalid_argument("descriptor has unknown kind " + std::to_string(d.kind));
  }
  if (d.num_conflicts > 0 && !d.conflicts) throw std::invalid_argument("descriptor counts conflicts but gives none");
  for (size_t i = 0; i < d.num_conflicts; ++i) {
    if (!valid_name(d.conflicts[i])) throw std::invalid_argument("descriptor lists an invalid conflict name");
  }
  if (d.num_options > 0 && !d.options) throw std::invalid_argument("descriptor counts options but gives none");
  std::set<std::string> option_names;
  for (size_t i = 0; i < d.num_options; ++i) check_option_spec(d.options[i], option_names);

  if (!raw_hooks) throw std::invalid_argument("descriptor has no hook table");
  // A table may be longer than ours (a newer minor) but never shorter than
  // 1.0's: the 1.0 hooks are read without a size check (docs/abi.md §3).
  if (raw_hooks->struct_size < kHooksSizeV1_0) {
    throw std::invalid_argument("hook table struct_size " + std::to_string(raw_hooks->struct_size) +
                                " is smaller than ABI 1.0's " + std::to_string(kHooksSizeV1_0));
  }
  const bool takes_over = hooks.plan_model || hooks.clip_gradients || hooks.optimizer_step || hooks.train_step ||
                          hooks.linear_forward || hooks.linear_backward;
  if (d.kind == ACCEL_PLUGIN_OBSERVER && takes_over) {
    throw std::invalid_argument("an observer plugin may not plan the model, take over a step or join the linear chain");
  }
  // ABI 1.8's gather codec: all three hooks or none, never an observer's
  // (a codec changes what a sharding plugin gathers).
  const int codec_hooks = (hooks.gather_codec_query != nullptr) + (hooks.gather_encode != nullptr) +
                          (hooks.gather_decode != nullptr);
  if (codec_hooks != 0 && codec_hooks != 3) {
    throw std::invalid_argument("gather_codec_query, gather_encode and gather_decode must be implemented together");
  }
  if (d.kind == ACCEL_PLUGIN_OBSERVER && codec_hooks != 0) {
    throw std::invalid_argument("an observer plugin may not implement the gather codec");
  }
  if (!hooks.linear_forward != !hooks.linear_backward) {
    throw std::invalid_argument("linear_forward and linear_backward must be implemented together");
  }
  if ((d.capabilities & (ACCEL_CAP_SHARDS_GRADS | ACCEL_CAP_SHARDS_OPTIMIZER)) &&
      (!hooks.clip_gradients || !hooks.optimizer_step)) {
    throw std::invalid_argument("a plugin that shards gradients or optimizer state must implement clip_gradients "
                                "and optimizer_step");
  }
  // The host reduces nothing itself once a plugin claims the reduction: a
  // claim with no hook to do it in would let every rank train its own model.
  if ((d.capabilities & ACCEL_CAP_REDUCES_GRADS) && !hooks.gradients_ready && !hooks.gradients_finalize &&
      !hooks.unit_backward_post && !hooks.train_step) {
    throw std::invalid_argument("declares ACCEL_CAP_REDUCES_GRADS but implements none of the hooks gradients are "
                                "reduced in (gradients_ready, gradients_finalize, unit_backward_post, train_step)");
  }
}

}  // namespace

// The library and the descriptor it was loaded through. dlopen knows it as
// "/proc/self/fd/N", and glibc matches an already-loaded library by that name
// before it opens anything: so N must not name another file while this
// library is resident. The descriptor is closed only once the library is
// gone; a library dlclose leaves mapped (glibc keeps one with
// STB_GNU_UNIQUE symbols, or marked NODELETE) keeps its descriptor, and so
// its name, for the process's life.
struct LoadedPlugin::Library {
  explicit Library(TrustedFile opened) : file(std::move(opened)) {}
  ~Library() {
    handle.unload();
    if (void* resident = ::dlopen(file.proc_path().c_str(), RTLD_NOW | RTLD_NOLOAD)) {
      ::dlclose(resident);
      file.release();
    }
  }
  TrustedFile file;
  boost::dll::shared_library handle;
};

namespace {

// The one name knowable before loading. dlopen runs a library's
// constructors before its descriptor can be read, so a file not named
// libaccel_<name>.so, or not the plugin that was asked for, is refused
// without loading it; a descriptor naming another plugin than its file can
// only be refused after (check_descriptor).
void check_file_name(const std::filesystem::path& file, const std::string& expected_name) {
  const std::string name = file.filename().string();
  const std::string prefix = "libaccel_", suffix = ".so";
  const bool shaped = name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) &&
                      name.ends_with(suffix) &&
                      valid_name(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()).c_str());
  if (!shaped) {
    throw PluginError(file.string() + ": refused without loading it: a plugin file is named libaccel_<name>.so, "
                      "<name> being [a-z][a-z0-9_]*");
  }
  if (!expected_name.empty() && name != plugin_file_name(expected_name)) {
    throw PluginError(file.string() + ": refused without loading it: plugin '" + expected_name +
                      "' was requested, whose file is " + plugin_file_name(expected_name));
  }
}

ElfDynamic dynamic_section(const TrustedFile& file, const std::filesystem::path& label) {
  try {
    return read_elf_dynamic(file.fd());
  } catch (const std::exception& e) {
    throw PluginError(label.string() + ": not a loadable shared library (" + e.what() + ")");
  }
}

// ld.so's $ORIGIN, spelled either way, replaced by `origin`; nullopt for an
// entry without it (searched by the dynamic loader as for any library) or
// with another token ($LIB, $PLATFORM) we do not expand.
std::optional<std::filesystem::path> origin_entry(std::string entry, const std::string& origin) {
  std::string expanded;
  bool found = false;
  for (size_t at = 0; at < entry.size();) {
    size_t length = entry.compare(at, 9, "${ORIGIN}") == 0 ? 9 : entry.compare(at, 7, "$ORIGIN") == 0 ? 7 : 0;
    // "$ORIGINAL" is another token to ld.so, not $ORIGIN and "AL".
    if (length == 7 && at + 7 < entry.size() && (std::isalnum(static_cast<unsigned char>(entry[at + 7])) ||
                                                 entry[at + 7] == '_')) {
      length = 0;
    }
    if (length == 0 && entry[at] == '$') return std::nullopt;
    expanded += length ? origin : std::string(1, entry[at]);
    found = found || length;
    at += length ? length : 1;
  }
  if (!found) return std::nullopt;
  return std::filesystem::path(expanded);
}

constexpr int kMaxBundleDepth = 8;

}  // namespace

// Libraries a plugin ships beside itself. dlopen of /proc/self/fd/N makes
// $ORIGIN mean /proc/self/fd, so a plugin whose RUNPATH says $ORIGIN would
// not find them; and the dynamic loader would open them by name, unchecked.
// So each library `object` needs that lies in a directory its RUNPATH names
// through $ORIGIN (taken as the directory the object really is in, its
// symlinks resolved) is opened by the same trust rules (trusted_file.h),
// its own bundled libraries first, and dlopen'ed from its descriptor before
// the object: the dynamic loader then finds it already loaded by its SONAME
// and searches nothing. A library that is already resident (libc, libtorch)
// is left to the loader, as it would be. The bundled library's SONAME must
// be the name it is needed by, or the loader would not recognise it.
void LoadedPlugin::load_bundled(const ElfDynamic& object, const TrustedFile& file,
                                const std::filesystem::path& label, int depth) {
  const std::string origin = file.resolved().parent_path().string();
  std::vector<std::filesystem::path> origin_dirs;
  for (const std::string& entry : object.search_path) {
    if (std::optional<std::filesystem::path> dir = origin_entry(entry, origin)) origin_dirs.push_back(*dir);
  }
  if (origin_dirs.empty()) return;
  for (const std::string& needed : object.needed) {
    if (needed.find('/') != std::string::npos) continue;  // a path: ld.so searches nothing for it
    if (void* resident = ::dlopen(needed.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      ::dlclose(resident);
      continue;
    }
    for (const std::filesystem::path& dir : origin_dirs) {
      const std::filesystem::path candidate = dir / needed;
      struct stat st {};
      if (::lstat(candidate.c_str(), &st) != 0) continue;  // not in this directory: the next one
      if (depth >= kMaxBundleDepth) {
        throw PluginError(label.string() + ": refused: bundled libraries need each other more than " +
                          std::to_string(kMaxBundleDepth) + " levels deep");
      }
      TrustedFile dependency = TrustedFile::open(candidate);
      const ElfDynamic dynamic = dynamic_section(dependency, candidate);
      if (dynamic.soname != needed) {
        throw PluginError(candidate.string() + ": refused: " + label.filename().string() + " needs it as " + needed +
                          " but its SONAME is " + (dynamic.soname.empty() ? "missing" : "'" + dynamic.soname + "'") +
                          " (link it with -Wl,-soname," + needed + ")");
      }
      load_bundled(dynamic, dependency, candidate, depth + 1);
      auto library = std::make_unique<Library>(std::move(dependency));
      try {
        library->handle.load(library->file.proc_path(),
                             boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
      } catch (const std::exception& e) {
        throw PluginError(candidate.string() + ": dlopen failed: " + e.what());
      }
      bundled_.push_back(std::move(library));
      break;
    }
  }
}

AccelHooks normalise_hooks(const AccelHooks* table) {
  AccelHooks hooks{};
  if (table) std::memcpy(&hooks, table, std::min(table->struct_size, sizeof(AccelHooks)));
  hooks.struct_size = sizeof(AccelHooks);
  return hooks;
}

std::unique_ptr<LoadedPlugin> LoadedPlugin::load(const std::filesystem::path& file, const std::string& expected_name,
                                                 runtime::HostContext& context, bool info_only) {
  check_file_name(file, expected_name);
  TrustedFile trusted = TrustedFile::open(file);
  const std::set<int> majors = exported_majors(trusted, file);
  if (majors.empty()) throw PluginError(file.string() + ": not an Accel plugin (no accel_plugin_init_v<N> symbol)");
  if (!majors.count(ACCEL_ABI_VERSION_MAJOR)) {
    throw PluginError(file.string() + ": built for ABI major " + std::to_string(*majors.rbegin()) +
                      ", this host supports " + std::to_string(ACCEL_ABI_VERSION_MAJOR));
  }

  std::unique_ptr<LoadedPlugin> plugin(new LoadedPlugin());
  plugin->path_ = file;
  plugin->load_bundled(dynamic_section(trusted, file), trusted, file, 0);
  plugin->library_ = std::make_unique<Library>(std::move(trusted));
  try {
    plugin->library_->handle.load(plugin->library_->file.proc_path(),
                                  boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw PluginError(file.string() + ": dlopen failed: " + e.what());
  }
  auto& entry = plugin->library_->handle.get<AccelPluginInitV1Fn>(ACCEL_PLUGIN_ENTRY_V1_NAME);

  plugin->host_ = std::make_unique<AccelHost>();
  plugin->host_->context = &context;
  plugin->host_->plugin_name = file.filename().string();
  AccelHostInfo info{};
  info.struct_size = sizeof(info);
  info.abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR};
  info.host_name = "accel-host";
  info.host_version = ACCEL_VERSION;
  info.host = plugin->host_.get();
  info.services = runtime::host_services();
  info.plugin_path = file.c_str();
  info.flags = info_only ? ACCEL_HOST_INFO_ONLY : 0;

  const AccelPluginDescriptor* raw = nullptr;
  runtime::take_pending_error();
  const AccelStatus status = entry(&info, &raw);
  if (status != ACCEL_OK || !raw) {
    const runtime::PendingError error = runtime::take_pending_error();
    throw PluginError(file.string() + ": " + ACCEL_PLUGIN_ENTRY_V1_NAME + " failed (" +
                      accel_status_name(status == ACCEL_OK ? ACCEL_ERROR_INTERNAL : status) + ")" +
                      (error.message.empty() ? (raw ? "" : ": returned no descriptor") : ": " + error.message));
  }
  if (raw->struct_size < ACCEL_FIELD_END(AccelPluginDescriptor, hooks)) {
    throw PluginError(file.string() + ": descriptor struct_size " + std::to_string(raw->struct_size) +
                      " is smaller than ABI 1.0's " +
                      std::to_string(ACCEL_FIELD_END(AccelPluginDescriptor, hooks)));
  }
  std::memcpy(&plugin->descriptor_, raw, std::min(raw->struct_size, sizeof(AccelPluginDescriptor)));
  plugin->descriptor_.struct_size = sizeof(AccelPluginDescriptor);
  plugin->hooks_ = normalise_hooks(raw->hooks);
  try {
    check_descriptor(plugin->descriptor_, raw->hooks, plugin->hooks_, file, expected_name);
  } catch (const std::invalid_argument& e) {
    throw PluginError(file.string() + ": " + e.what());
  }
  plugin->name_ = plugin->descriptor_.name;
  plugin->host_->plugin_name = plugin->name_;
  plugin->host_->kind = plugin->descriptor_.kind;
  for (size_t i = 0; i < plugin->descriptor_.num_options; ++i) plugin->options_.push_back(plugin->descriptor_.options[i]);
  return plugin;
}

void LoadedPlugin::narrow_hooks(const AccelHooks* table) {
  if (table) hooks_ = normalise_hooks(table);
}

LoadedPlugin::~LoadedPlugin() = default;

}  // namespace accel::plugin
