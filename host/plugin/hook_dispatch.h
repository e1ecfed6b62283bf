// Calls the hooks of a run's plugins in the order accel/plugin.h defines:
// opening hooks in plugin order (parallel, precision, observer), closing
// hooks (step_end, unit_*_post) in reverse, so wrappers nest. Take-over hooks
// (clip_gradients, optimizer_step, train_step) have at most one owner each,
// checked after every plugin's create.
//
// A hook that fails ends the run: the dispatcher throws PluginError with
// "plugin NAME: HOOK failed (STATUS): message" and the registry still tears
// every created plugin down. Knows no LibTorch: tensors arrive as DLTensor
// views made by the caller. Loop thread only.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "host/plugin/plugin_registry.h"

namespace accel::plugin {

class HookDispatcher {
 public:
  HookDispatcher(PluginRegistry& registry, runtime::HostContext& context);

  bool empty() const { return plugins_.empty(); }
  std::vector<std::string> plugin_names() const;

  // ---- lifecycle
  // Creates every plugin in load order. `after_each`, when given, runs after
  // each plugin's create with what it threw (null: it succeeded) and must
  // throw when any rank failed: the ranks then stop at the same plugin, so
  // no rank holds a plugin (and owes its teardown's collectives) that
  // another rank never created. Without it, the first failure is thrown.
  using CreateAgreement = std::function<void(std::exception_ptr failure)>;
  void create_all(const CreateAgreement& after_each = {});
  void plan_model();
  void setup(int64_t first_step, int32_t micro_batches, bool resuming);
  void load_state(int64_t step, int32_t saved_world_size, const char* saved_plugins);
  void save_state(int64_t step, int32_t world_size);

  // ---- steps
  void step_begin(const AccelStepArgs& args);
  void step_end(const AccelStepArgs& args);
  bool has_unit_hooks() const { return has_unit_hooks_; }
  void unit_forward_pre(AccelUnitHookArgs& args);
  void unit_forward_post(AccelUnitHookArgs& args);
  void unit_backward_pre(AccelUnitHookArgs& args);
  void unit_backward_post(AccelUnitHookArgs& args);
  void gradients_ready(const AccelGradientsReadyArgs& args);
  void gradients_finalize(const AccelStepArgs& args);

  // ---- take-overs: each returns false when no plugin owns it (host default runs)
  bool clip_gradients(const AccelClipArgs& args);
  bool optimizer_step(const AccelOptimizerStepArgs& args);
  bool train_step(const AccelTrainStepArgs& args);
  // Whether a plugin took over the optimizer step (known after create_all):
  // the host then keeps no optimizer state.
  bool owns_optimizer_step() const { return optimizer_owner_ != nullptr; }
  // The plugin that steps the optimizer, or null.
  const LoadedPlugin* optimizer_owner() const { return optimizer_owner_; }
  bool owns_clip_gradients() const { return clip_owner_ != nullptr; }
  // The plugin that runs its own schedule of the micro-batches, or null.
  const LoadedPlugin* train_step_owner() const { return train_step_owner_; }

  // ---- the linear chain: the plugins that join it, outermost first
  const std::vector<LoadedPlugin*>& linear_links() const { return linear_links_; }

  // Throws PluginError for a failed hook call of `plugin`.
  static void check(const LoadedPlugin& plugin, const char* hook, AccelStatus status);

 private:
  void create_one(LoadedPlugin* p);
  void creating_finished();
  void require_precision_policy_owners() const;

  runtime::HostContext& context_;
  std::vector<LoadedPlugin*> plugins_;
  std::vector<LoadedPlugin*> linear_links_;
  LoadedPlugin* clip_owner_ = nullptr;
  LoadedPlugin* optimizer_owner_ = nullptr;
  LoadedPlugin* train_step_owner_ = nullptr;
  bool has_unit_hooks_ = false;
};

}  // namespace accel::plugin
