// Hook dispatch in the order accel/plugin.h defines (see hook_dispatch.h).
#include "host/plugin/hook_dispatch.h"

#include "host/cli/options.h"
#include "host/plugin/plugin_error.h"
#include "host/runtime/trace_scope.h"

namespace accel::plugin {
namespace {

// Generic forward (opening) and reverse (closing) iteration over a hook.
// Each call is a trace range named after the hook, under the plugin's name.
template <typename Fn, typename... Args>
void call_each(runtime::HostContext& context, const std::vector<LoadedPlugin*>& plugins, Fn AccelHooks::* hook,
               const char* name, bool reverse, Args&&... args) {
  const size_t n = plugins.size();
  for (size_t k = 0; k < n; ++k) {
    LoadedPlugin& p = *plugins[reverse ? n - 1 - k : k];
    if (Fn fn = p.hooks().*hook) {
      const runtime::TraceRange range(&context, name, p.name().c_str(), p.name().c_str(),
                                      [] { return std::string(); });
      runtime::take_pending_error();
      HookDispatcher::check(p, name, fn(p.self, std::forward<Args>(args)...));
    }
  }
}

}  // namespace

HookDispatcher::HookDispatcher(PluginRegistry& registry, runtime::HostContext& context) : context_(context) {
  for (const auto& p : registry.plugins()) plugins_.push_back(p.get());
}

std::vector<std::string> HookDispatcher::plugin_names() const {
  std::vector<std::string> names;
  for (const LoadedPlugin* p : plugins_) names.push_back(p->name());
  return names;
}

void HookDispatcher::check(const LoadedPlugin& plugin, const char* hook, AccelStatus status) {
  if (status == ACCEL_OK) return;
  const runtime::PendingError error = runtime::take_pending_error();
  throw HookError("plugin " + plugin.name() + ": " + hook + " failed (" + accel_status_name(status) + ")" +
                      (error.message.empty() ? std::string() : ": " + error.message),
                  hook, static_cast<int>(status));
}

void HookDispatcher::create_all(const CreateAgreement& after_each) {
  // A PRECISION plugin sets the precision policy from its create only.
  context_.creating_plugins = true;
  struct CreatingGuard {
    runtime::HostContext& context;
    ~CreatingGuard() { context.creating_plugins = false; }
  } creating{context_};
  for (LoadedPlugin* p : plugins_) {
    std::exception_ptr failure;
    try {
      create_one(p);
    } catch (...) {
      failure = std::current_exception();
    }
    if (after_each) {
      after_each(failure);
    } else if (failure) {
      std::rethrow_exception(failure);
    }
  }
  creating_finished();
}

void HookDispatcher::create_one(LoadedPlugin* p) {
  {
    const AccelHooks& hooks = p->hooks();
    if (hooks.create) {
      AccelCreateArgs args{};
      args.struct_size = sizeof(args);
      args.host = p->host();
      args.services = runtime::host_services();
      runtime::take_pending_error();
      const AccelStatus created = hooks.create(&args);
      if (created == ACCEL_ERROR_INVALID_ARGUMENT) {
        // A plugin refusing its options (a value the schema cannot express,
        // such as an output directory that is not writable) is a usage
        // error, exit 2, like the host's own option checks.
        const runtime::PendingError error = runtime::take_pending_error();
        throw cli::UsageError("plugin " + p->name() + ": " +
                              (error.message.empty() ? std::string("invalid options") : error.message));
      }
      check(*p, "create", created);
      p->self = args.self;
      if (args.hooks) {
        // A run's table may only drop hooks the descriptor offers.
        const AccelHooks narrowed = normalise_hooks(args.hooks);
        const auto* offered = reinterpret_cast<void* const*>(&hooks.create);
        const auto* wanted = reinterpret_cast<void* const*>(&narrowed.create);
        const size_t count = (sizeof(AccelHooks) - offsetof(AccelHooks, create)) / sizeof(void*);
        for (size_t i = 0; i < count; ++i) {
          if (wanted[i] && !offered[i]) {
            p->created = true;  // teardown is still owed
            throw PluginError("plugin " + p->name() + ": create returned a hook table with hooks its descriptor lacks");
          }
        }
        p->narrow_hooks(args.hooks);
      }
    }
    p->created = true;
  }
}

void HookDispatcher::creating_finished() {
  // Trace events reach the plugins that asked to capture them (any thread).
  std::vector<LoadedPlugin*> listeners;
  for (LoadedPlugin* p : plugins_) {
    if (p->hooks().trace_event) listeners.push_back(p);
  }
  if (!listeners.empty()) {
    runtime::HostContext* context = &context_;
    context_.trace_listener = [context, listeners](const AccelTraceEvent& event) {
      // Through the capture gate: once a plugin's set_capture(false) has
      // returned, no thread is still inside its trace_event.
      for (LoadedPlugin* p : listeners) {
        context->trace_capture.deliver(p->name(), [&] { p->hooks().trace_event(p->self, &event); });
      }
    };
  }
  // Take-overs have at most one owner; the linear chain runs outermost first.
  auto claim = [&](LoadedPlugin*& owner, bool has, LoadedPlugin* p, const char* hook) {
    if (!has) return;
    if (owner) throw PluginError("plugins " + owner->name() + " and " + p->name() + " both take over " + hook);
    owner = p;
  };
  for (LoadedPlugin* p : plugins_) {
    const AccelHooks& h = p->hooks();
    claim(clip_owner_, h.clip_gradients != nullptr, p, "clip_gradients");
    claim(optimizer_owner_, h.optimizer_step != nullptr, p, "optimizer_step");
    claim(train_step_owner_, h.train_step != nullptr, p, "train_step");
    if (h.linear_forward) linear_links_.push_back(p);
    if (h.gather_codec_query && h.gather_encode && h.gather_decode) {
      // The parameter gather codec (ABI 1.8) has one provider, which the
      // gather_codec services call (gather_codec_services.cpp).
      runtime::HostContext::GatherCodecProvider& codec = context_.gather_codec;
      if (codec.query) throw PluginError("plugins " + codec.name + " and " + p->name() + " both provide a gather codec");
      codec = {p->name(), p->self, h.gather_codec_query, h.gather_encode, h.gather_decode};
    }
    has_unit_hooks_ = has_unit_hooks_ || h.unit_forward_pre || h.unit_forward_post || h.unit_backward_pre ||
                      h.unit_backward_post || h.gradients_ready;
  }
  require_precision_policy_owners();
}

// Every part of the precision policy a plugin set has an owner that honours
// it (accel/precision.h): the gradient reducer declares
// ACCEL_CAP_PRECISION_GRAD_COMM, the optimizer-step owner
// ACCEL_CAP_PRECISION_MOMENTS (the host's own AdamW honours the moments).
// Anything else is refused here, before planning, with one line.
void HookDispatcher::require_precision_policy_owners() const {
  const AccelPrecisionPolicy& policy = context_.precision_policy;
  const std::string& asker = context_.precision_policy_owner;
  if (asker.empty()) return;
  if (policy.grad_comm_dtype.bits != 0) {
    for (const LoadedPlugin* p : plugins_) {
      const uint64_t caps = p->descriptor().capabilities;
      if ((caps & ACCEL_CAP_REDUCES_GRADS) != 0 && (caps & ACCEL_CAP_PRECISION_GRAD_COMM) == 0) {
        throw cli::UsageError("plugin " + asker + " asks for FP8 gradient communication, which plugin " + p->name() +
                              " (the gradient reducer) does not implement; use another strategy or a plain " +
                              asker + " setting");
      }
    }
  }
  const bool low_moments = policy.exp_avg_dtype.bits != 0 || policy.exp_avg_sq_dtype.bits != 0;
  if (low_moments && optimizer_owner_ != nullptr &&
      (optimizer_owner_->descriptor().capabilities & ACCEL_CAP_PRECISION_MOMENTS) == 0) {
    throw cli::UsageError("plugin " + asker + " asks for low-precision AdamW moments, which plugin " +
                          optimizer_owner_->name() + " (the optimizer step) does not implement; use another " +
                          "strategy or a plain " + asker + " setting");
  }
}

void HookDispatcher::plan_model() {
  AccelModelInfo const* info = nullptr;
  if (context_.model && runtime::host_services()->model && runtime::host_services()->model->get_info &&
      !plugins_.empty()) {
    runtime::host_services()->model->get_info(plugins_.front()->host(), &info);
  }
  AccelPlanArgs args{};
  args.struct_size = sizeof(args);
  args.model = info;
  context_.planning = true;
  try {
    call_each(context_, plugins_, &AccelHooks::plan_model, "plan_model", false, &args);
  } catch (...) {
    context_.planning = false;
    throw;
  }
  context_.planning = false;
}

void HookDispatcher::setup(int64_t first_step, int32_t micro_batches, bool resuming) {
  AccelSetupArgs args{};
  args.struct_size = sizeof(args);
  args.first_step = first_step;
  args.num_micro_batches = micro_batches;
  args.flags = resuming ? ACCEL_SETUP_RESUMING : 0;
  context_.running = true;
  call_each(context_, plugins_, &AccelHooks::setup, "setup", false, &args);
}

void HookDispatcher::load_state(int64_t step, int32_t saved_world_size, const char* saved_plugins) {
  AccelStateArgs args{};
  args.struct_size = sizeof(args);
  args.step = step;
  args.saved_world_size = saved_world_size;
  args.saved_plugins = saved_plugins;
  call_each(context_, plugins_, &AccelHooks::load_state, "load_state", false, &args);
}

void HookDispatcher::save_state(int64_t step, int32_t world_size) {
  AccelStateArgs args{};
  args.struct_size = sizeof(args);
  args.step = step;
  args.saved_world_size = world_size;
  call_each(context_, plugins_, &AccelHooks::save_state, "save_state", false, &args);
}

void HookDispatcher::step_begin(const AccelStepArgs& args) {
  call_each(context_, plugins_, &AccelHooks::step_begin, "step_begin", false, &args);
}
void HookDispatcher::step_end(const AccelStepArgs& args) {
  call_each(context_, plugins_, &AccelHooks::step_end, "step_end", true, &args);
}
void HookDispatcher::unit_forward_pre(AccelUnitHookArgs& args) {
  call_each(context_, plugins_, &AccelHooks::unit_forward_pre, "unit_forward_pre", false, &args);
}
void HookDispatcher::unit_forward_post(AccelUnitHookArgs& args) {
  call_each(context_, plugins_, &AccelHooks::unit_forward_post, "unit_forward_post", true, &args);
}
void HookDispatcher::unit_backward_pre(AccelUnitHookArgs& args) {
  call_each(context_, plugins_, &AccelHooks::unit_backward_pre, "unit_backward_pre", false, &args);
}
void HookDispatcher::unit_backward_post(AccelUnitHookArgs& args) {
  call_each(context_, plugins_, &AccelHooks::unit_backward_post, "unit_backward_post", true, &args);
}
void HookDispatcher::gradients_ready(const AccelGradientsReadyArgs& args) {
  call_each(context_, plugins_, &AccelHooks::gradients_ready, "gradients_ready", false, &args);
}
void HookDispatcher::gradients_finalize(const AccelStepArgs& args) {
  call_each(context_, plugins_, &AccelHooks::gradients_finalize, "gradients_finalize", false, &args);
}

bool HookDispatcher::clip_gradients(const AccelClipArgs& args) {
  if (!clip_owner_) return false;
  const runtime::TraceRange range(&context_, "clip_gradients", clip_owner_->name().c_str(), clip_owner_->name().c_str(),
                                  [] { return std::string(); });
  runtime::take_pending_error();
  check(*clip_owner_, "clip_gradients", clip_owner_->hooks().clip_gradients(clip_owner_->self, &args));
  return true;
}

bool HookDispatcher::optimizer_step(const AccelOptimizerStepArgs& args) {
  if (!optimizer_owner_) return false;
  const runtime::TraceRange range(&context_, "optimizer_step", optimizer_owner_->name().c_str(), optimizer_owner_->name().c_str(),
                                  [] { return std::string(); });
  runtime::take_pending_error();
  check(*optimizer_owner_, "optimizer_step", optimizer_owner_->hooks().optimizer_step(optimizer_owner_->self, &args));
  return true;
}

bool HookDispatcher::train_step(const AccelTrainStepArgs& args) {
  if (!train_step_owner_) return false;
  const runtime::TraceRange range(&context_, "train_step", train_step_owner_->name().c_str(), train_step_owner_->name().c_str(),
                                  [] { return std::string(); });
  runtime::take_pending_error();
  check(*train_step_owner_, "train_step", train_step_owner_->hooks().train_step(train_step_owner_->self, &args));
  return true;
}

}  // namespace accel::plugin
