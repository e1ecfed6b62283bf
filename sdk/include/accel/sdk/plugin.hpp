// accel/sdk/plugin.hpp — a plugin as a C++ class. Derive from
// accel::sdk::Plugin, override the hooks you implement, declare `static
// constexpr PluginInfo info` (and optionally `static constexpr Option
// options[]`), and ACCEL_PLUGIN(YourClass) defines accel_plugin_init_v1.
//
// Invariants. The hook table holds a trampoline for exactly the hooks the
// class overrides and NULL for every other ("not mine", accel/plugin.h);
// create and teardown are always present because they construct and delete
// the instance. Every trampoline is an exception barrier (error.hpp): no C++
// exception reaches the host. The descriptor, hooks and option specs are
// built once, at the first entry call, and never freed — the host may read
// them until the library is unloaded. What the ABI forbids is rejected at
// compile time: an OBSERVER that overrides a take-over, plan_model or a
// linear link, and a plugin that shards gradients or optimizer state without
// clip_gradients and optimizer_step.
//
// Threads: every hook runs on the host's loop thread, one at a time, except
// trace_event (any thread, concurrently: make it thread-safe).
#pragma once

#include <accel/accel.h>

#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "accel/sdk/error.hpp"
#include "accel/sdk/services.hpp"

namespace accel::sdk {

// ---------------------------------------------------------------- metadata

// What the plugin is: `static constexpr PluginInfo info{...};` in the class.
struct PluginInfo {
  const char* name;           // [a-z][a-z0-9_]*; the file is libaccel_<name>.so
  const char* version;        // the plugin's own version, "1.0.0"
  const char* description;    // one line for --list-plugins
  AccelPluginKind kind;       // PARALLEL, PRECISION or OBSERVER
  uint64_t capabilities;      // ACCEL_CAP_*
  const char* conflicts = nullptr;  // plugins it cannot run with: "fsdp,ddp"
};

// One option of the schema: `static constexpr Option options[] = {...};`.
// The host turns it into --<plugin>.<name> and a [<plugin>] config key.
struct Option {
  const char* name;           // [a-z][a-z0-9_]*
  AccelOptionType type;
  const char* default_value;  // text, parsed like a user value; nullptr: none
  const char* help;           // one line for --help
  const char* allowed_values = nullptr;  // ENUM (or a STRING whitelist): "a|b"
  const char* min_value = nullptr;       // INT/DOUBLE inclusive bounds, text
  const char* max_value = nullptr;
  uint32_t flags = 0;                    // ACCEL_OPTION_FLAG_*
};

// ------------------------------------------------------------------ Plugin

namespace detail {
template <typename T>
AccelStatus create_hook(AccelCreateArgs* args) noexcept;  // builds the run's hook table
}  // namespace detail

// The base of a C++ plugin. The host creates one instance per process (the
// create hook constructs T from the Services; read and check options in the
// constructor — throwing there fails `create` cleanly) and deletes it after
// teardown(). Override hooks as public member functions; a hook fails by
// throwing. Destructors must not throw.
class Plugin {
 public:
  explicit Plugin(const Services& services) noexcept : services_(services) {}
  virtual ~Plugin() = default;
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const Services& services() const noexcept { return services_; }

  // Hooks, as in accel/plugin.h. Only the overridden ones reach the table.
  virtual void plan_model(const AccelPlanArgs&) {}
  virtual void setup(const AccelSetupArgs&) {}
  virtual void step_begin(const AccelStepArgs&) {}
  virtual void step_end(const AccelStepArgs&) {}
  virtual void unit_forward_pre(AccelUnitHookArgs&) {}
  virtual void unit_forward_post(AccelUnitHookArgs&) {}
  virtual void unit_backward_pre(AccelUnitHookArgs&) {}
  virtual void unit_backward_post(AccelUnitHookArgs&) {}
  virtual void gradients_ready(const AccelGradientsReadyArgs&) {}
  virtual void gradients_finalize(const AccelStepArgs&) {}
  virtual void clip_gradients(const AccelClipArgs&) {}
  virtual void optimizer_step(const AccelOptimizerStepArgs&) {}
  virtual void train_step(const AccelTrainStepArgs&) {}
  virtual void linear_forward(AccelLinearForwardArgs&, const AccelLinearNext&) {}
  virtual void linear_backward(AccelLinearBackwardArgs&,
                               const AccelLinearNext&) {}
  virtual void save_state(const AccelStateArgs&) {}
  virtual void load_state(const AccelStateArgs&) {}
  // Any thread, concurrently; cannot fail (an exception becomes a log line).
  virtual void trace_event(const AccelTraceEvent&) {}
  // The parameter gather codec (ABI 1.8, accel/gather_codec.h): all three
  // or none; not an observer's.
  virtual void gather_codec_query(AccelGatherCodecQueryArgs&) {}
  virtual void gather_encode(const AccelGatherCodecArgs&) {}
  virtual void gather_decode(const AccelGatherCodecArgs&) {}
  // Always called once before the instance is deleted, also after a failure.
  virtual void teardown() {}

 protected:
  // From the constructor: this run does without an overridden hook (an
  // option switched its feature off), e.g. decline(&AccelHooks::train_step):
  // the host never calls it, and a take-over declined is no take-over (the
  // host runs its own loop). AccelCreateArgs.hooks, accel/plugin.h.
  template <typename Fn>
  void decline(Fn AccelHooks::*hook) {
    declined_.push_back([hook](AccelHooks& table) { table.*hook = nullptr; });
  }

 private:
  template <typename T>
  friend AccelStatus detail::create_hook(AccelCreateArgs* args) noexcept;

  Services services_;
  std::vector<std::function<void(AccelHooks&)>> declined_;
  AccelHooks narrowed_{};  // the run's table when a hook was declined
};

// The next link of the linear chain; a failure propagates (message pending).
inline void forward_next(const AccelLinearNext& next,
                         AccelLinearForwardArgs& args) {
  const AccelStatus status = next.forward(&next, &args);
  if (status != ACCEL_OK) throw Error(status);
}
inline void backward_next(const AccelLinearNext& next,
                          AccelLinearBackwardArgs& args) {
  const AccelStatus status = next.backward(&next, &args);
  if (status != ACCEL_OK) throw Error(status);
}

// ------------------------------------------------------------ trampolines

namespace detail {

inline AccelPlugin* to_handle(Plugin* plugin) noexcept {
  return reinterpret_cast<AccelPlugin*>(plugin);
}
template <typename T>
T* from_handle(AccelPlugin* self) noexcept {
  return static_cast<T*>(reinterpret_cast<Plugin*>(self));
}

template <typename T, auto Method, typename... Args>
AccelStatus call_hook(AccelPlugin* self, Args*... args) noexcept {
  T* plugin = from_handle<T>(self);
  const Services& s = plugin->services();
  return guard(s.host(), s.table(), [&] { (plugin->*Method)(*args...); });
}

template <typename T>
AccelHooks make_hooks() noexcept;

template <typename T>
AccelStatus create_hook(AccelCreateArgs* args) noexcept {
  return guard(args->host, args->services, [&] {
    T* plugin = new T(Services(args->host, args->services));
    args->self = to_handle(plugin);
    Plugin& base = *plugin;
    if (base.declined_.empty()) return;
    base.narrowed_ = make_hooks<T>();
    for (const auto& clear : base.declined_) clear(base.narrowed_);
    args->hooks = &base.narrowed_;
  });
}

template <typename T>
AccelStatus teardown_hook(AccelPlugin* self) noexcept {
  T* plugin = from_handle<T>(self);
  if (plugin == nullptr) return ACCEL_OK;
  const Services s = plugin->services();
  const AccelStatus status =
      guard(s.host(), s.table(), [&] { plugin->teardown(); });
  delete plugin;
  return status;
}

template <typename T>
void trace_event_hook(AccelPlugin* self,
                      const AccelTraceEvent* event) noexcept {
  T* plugin = from_handle<T>(self);
  try {
    plugin->trace_event(*event);
  } catch (const std::exception& e) {
    plugin->services().logf(ACCEL_LOG_ERROR,
                            "trace_event: uncaught exception: %s", e.what());
  } catch (...) {
    plugin->services().log(ACCEL_LOG_ERROR, "trace_event: uncaught exception");
  }
}

// True when T (or a base between T and Plugin) overrides `hook`: &T::hook then
// has T's (or that base's) class type instead of Plugin's.
#define ACCEL_SDK_OVERRIDES_(T, hook) \
  (!std::is_same_v<decltype(&T::hook), decltype(&::accel::sdk::Plugin::hook)>)

template <typename T>
AccelHooks make_hooks() noexcept {
  AccelHooks h{};
  h.struct_size = sizeof(AccelHooks);
  h.create = &create_hook<T>;
  h.teardown = &teardown_hook<T>;
#define ACCEL_SDK_HOOK_(hook, ...)                   \
  if constexpr (ACCEL_SDK_OVERRIDES_(T, hook)) {     \
    h.hook = &call_hook<T, &T::hook, __VA_ARGS__>;   \
  }
  ACCEL_SDK_HOOK_(plan_model, const AccelPlanArgs)
  ACCEL_SDK_HOOK_(setup, const AccelSetupArgs)
  ACCEL_SDK_HOOK_(step_begin, const AccelStepArgs)
  ACCEL_SDK_HOOK_(step_end, const AccelStepArgs)
  ACCEL_SDK_HOOK_(unit_forward_pre, AccelUnitHookArgs)
  ACCEL_SDK_HOOK_(unit_forward_post, AccelUnitHookArgs)
  ACCEL_SDK_HOOK_(unit_backward_pre, AccelUnitHookArgs)
  ACCEL_SDK_HOOK_(unit_backward_post, AccelUnitHookArgs)
  ACCEL_SDK_HOOK_(gradients_ready, const AccelGradientsReadyArgs)
  ACCEL_SDK_HOOK_(gradients_finalize, const AccelStepArgs)
  ACCEL_SDK_HOOK_(clip_gradients, const AccelClipArgs)
  ACCEL_SDK_HOOK_(optimizer_step, const AccelOptimizerStepArgs)
  ACCEL_SDK_HOOK_(train_step, const AccelTrainStepArgs)
  ACCEL_SDK_HOOK_(linear_forward, AccelLinearForwardArgs,
                  const AccelLinearNext)
  ACCEL_SDK_HOOK_(linear_backward, AccelLinearBackwardArgs,
                  const AccelLinearNext)
  ACCEL_SDK_HOOK_(save_state, const AccelStateArgs)
  ACCEL_SDK_HOOK_(load_state, const AccelStateArgs)
  ACCEL_SDK_HOOK_(gather_codec_query, AccelGatherCodecQueryArgs)
  ACCEL_SDK_HOOK_(gather_encode, const AccelGatherCodecArgs)
  ACCEL_SDK_HOOK_(gather_decode, const AccelGatherCodecArgs)
#undef ACCEL_SDK_HOOK_
  if constexpr (ACCEL_SDK_OVERRIDES_(T, trace_event)) {
    h.trace_event = &trace_event_hook<T>;
  }
  return h;
}

// The descriptor and everything it points into. Built once, never freed.
struct DescriptorStorage {
  AccelHooks hooks{};
  std::deque<std::string> pieces;  // split allowed values and conflicts
  std::vector<std::vector<const char*>> allowed;  // per option
  std::vector<AccelOptionSpec> specs;
  std::vector<const AccelOptionSpec*> spec_pointers;
  std::vector<const char*> conflicts;
  AccelPluginDescriptor descriptor{};
};

// Splits "a|b" (or "a, b") into trimmed pieces kept alive in `pieces`.
inline std::vector<const char*> split(std::deque<std::string>& pieces,
                                      const char* text, char separator) {
  std::vector<const char*> out;
  if (text == nullptr) return out;
  const std::string all(text);
  for (size_t start = 0;;) {
    const size_t end = all.find(separator, start);
    std::string piece = all.substr(start, end - start);
    const size_t first = piece.find_first_not_of(" \t");
    const size_t last = piece.find_last_not_of(" \t");
    pieces.push_back(first == std::string::npos
                         ? std::string()
                         : piece.substr(first, last - first + 1));
    out.push_back(pieces.back().c_str());
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

template <typename T, typename = void>
struct has_options : std::false_type {};
template <typename T>
struct has_options<T, std::void_t<decltype(T::options)>> : std::true_type {};

template <typename T>
const DescriptorStorage* build_descriptor() {
  auto storage = std::make_unique<DescriptorStorage>();
  DescriptorStorage& s = *storage;
  s.hooks = make_hooks<T>();
  if constexpr (has_options<T>::value) {
    s.allowed.reserve(std::size(T::options));
    s.specs.reserve(std::size(T::options));
    for (const Option& option : T::options) {
      const std::vector<const char*>& allowed =
          s.allowed.emplace_back(split(s.pieces, option.allowed_values, '|'));
      AccelOptionSpec spec{};
      spec.struct_size = sizeof(AccelOptionSpec);
      spec.name = option.name;
      spec.type = option.type;
      spec.flags = option.flags;
      spec.default_value = option.default_value;
      spec.help = option.help;
      spec.allowed_values = allowed.empty() ? nullptr : allowed.data();
      spec.num_allowed_values = allowed.size();
      spec.min_value = option.min_value;
      spec.max_value = option.max_value;
      s.specs.push_back(spec);
    }
    for (const AccelOptionSpec& spec : s.specs) s.spec_pointers.push_back(&spec);
  }
  s.conflicts = split(s.pieces, T::info.conflicts, ',');

  AccelPluginDescriptor& d = s.descriptor;
  d.struct_size = sizeof(AccelPluginDescriptor);
  d.abi_version.major = ACCEL_ABI_VERSION_MAJOR;
  d.abi_version.minor = ACCEL_ABI_VERSION_MINOR;
  d.name = T::info.name;
  d.version = T::info.version;
  d.description = T::info.description;
  d.kind = T::info.kind;
  d.capabilities = T::info.capabilities;
  d.conflicts = s.conflicts.empty() ? nullptr : s.conflicts.data();
  d.num_conflicts = s.conflicts.size();
  d.options = s.spec_pointers.empty() ? nullptr : s.spec_pointers.data();
  d.num_options = s.spec_pointers.size();
  d.hooks = &s.hooks;
  return storage.release();
}

}  // namespace detail

// ------------------------------------------------------------- descriptor

// T's descriptor, built on first use and valid until the library unloads.
template <typename T>
const AccelPluginDescriptor* descriptor_for() {
  static_assert(std::is_base_of_v<Plugin, T>,
                "an SDK plugin derives from accel::sdk::Plugin");
  static_assert(std::is_constructible_v<T, const Services&>,
                "an SDK plugin is constructible from const Services&");
  constexpr PluginInfo info = T::info;  // must be static constexpr
  constexpr bool takes_over =
      ACCEL_SDK_OVERRIDES_(T, plan_model) ||
      ACCEL_SDK_OVERRIDES_(T, clip_gradients) ||
      ACCEL_SDK_OVERRIDES_(T, optimizer_step) ||
      ACCEL_SDK_OVERRIDES_(T, train_step) ||
      ACCEL_SDK_OVERRIDES_(T, linear_forward) ||
      ACCEL_SDK_OVERRIDES_(T, linear_backward);
  static_assert(info.kind != ACCEL_PLUGIN_OBSERVER || !takes_over,
                "an OBSERVER plugin must not implement plan_model, "
                "clip_gradients, optimizer_step, train_step or the linear "
                "chain (accel/plugin.h)");
  constexpr int codec_hooks = int{ACCEL_SDK_OVERRIDES_(T, gather_codec_query)} +
                              int{ACCEL_SDK_OVERRIDES_(T, gather_encode)} +
                              int{ACCEL_SDK_OVERRIDES_(T, gather_decode)};
  static_assert(codec_hooks == 0 || codec_hooks == 3,
                "gather_codec_query, gather_encode and gather_decode are "
                "implemented together (accel/gather_codec.h)");
  static_assert(info.kind != ACCEL_PLUGIN_OBSERVER || codec_hooks == 0,
                "an OBSERVER plugin must not implement the gather codec");
  constexpr bool shards_state =
      (info.capabilities &
       (ACCEL_CAP_SHARDS_GRADS | ACCEL_CAP_SHARDS_OPTIMIZER)) != 0;
  static_assert(!shards_state || (ACCEL_SDK_OVERRIDES_(T, clip_gradients) &&
                                  ACCEL_SDK_OVERRIDES_(T, optimizer_step)),
                "a plugin that shards gradients or optimizer state must "
                "implement clip_gradients and optimizer_step");
  // Owned by a static of this library: freed when the library unloads
  // (dlclose runs its static destructors), so a host that loads and unloads
  // plugins does not leak one descriptor per load.
  static const std::unique_ptr<const detail::DescriptorStorage> storage(
      detail::build_descriptor<T>());
  return &storage->descriptor;
}

// The body of accel_plugin_init_v1 for T (what ACCEL_PLUGIN expands to).
template <typename T>
AccelStatus init_plugin(const AccelHostInfo* info,
                        const AccelPluginDescriptor** descriptor) noexcept {
  if (info == nullptr || descriptor == nullptr) {
    return ACCEL_ERROR_INVALID_ARGUMENT;
  }
  detail::loaded_host_abi = info->abi_version;
  return guard(info->host, info->services,
               [&] { *descriptor = descriptor_for<T>(); });
}

#undef ACCEL_SDK_OVERRIDES_

}  // namespace accel::sdk

// Defines the plugin's only exported symbol, accel_plugin_init_v1, for the
// class PluginClass. Use it once per plugin, at namespace scope.
#define ACCEL_PLUGIN(PluginClass)                                          \
  extern "C" ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(         \
      const AccelHostInfo* info, const AccelPluginDescriptor** descriptor) { \
    return ::accel::sdk::init_plugin<PluginClass>(info, descriptor);       \
  }
