// A test plugin written with the C++ SDK that takes over gradient clipping
// and the optimizer step, doing both through the host's services alone
// (model storage views, kernels->squared_norm / clip_scale / adamw_step). A
// run with it must reproduce the host's own losses: the take-over hooks are
// wired and the kernels match the host's optimizer.
//
// `throw_in` makes a hook throw a C++ exception, which the SDK's barrier must
// turn into a status and a message (no exception crosses the C boundary).
#include <accel/sdk/sdk.hpp>

#include <cstring>
#include <stdexcept>
#include <vector>

#ifndef TAKEOVER_NAME
#define TAKEOVER_NAME "takeover"
#endif

namespace {

using accel::sdk::FlatView;
using accel::sdk::ScalarView;

class TakeOver final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{TAKEOVER_NAME, "1.0.0",
                                               "test plugin: clips and steps AdamW through the host's kernels",
                                               ACCEL_PLUGIN_PARALLEL, ACCEL_CAP_CPU};
  static constexpr accel::sdk::Option options[] = {
      {"throw_in", ACCEL_OPTION_ENUM, "none", "throw a C++ exception from this hook", "none|create|step_begin"},
  };

  explicit TakeOver(const accel::sdk::Services& services)
      : Plugin(services), throw_in_(services.option<std::string>("throw_in")) {
    if (throw_in_ == "create") throw std::runtime_error("takeover was told to throw in create");
  }

  void setup(const AccelSetupArgs&) override {
    const AccelModelServices& model = *services().table()->model;
    const AccelModelInfo* info = nullptr;
    services().check(model.get_info(services().host(), &info), "get_info");
    units_.resize(static_cast<size_t>(info->num_units));
    for (int32_t u = 0; u < info->num_units; ++u) {
      Unit& unit = units_[static_cast<size_t>(u)];
      const AccelUnitInfo* unit_info = nullptr;
      services().check(model.get_unit(services().host(), u, &unit_info), "get_unit");
      unit.exp_avg.assign(static_cast<size_t>(unit_info->numel), 0.0f);
      unit.exp_avg_sq.assign(static_cast<size_t>(unit_info->numel), 0.0f);
      // Contiguous runs of parameters with the same weight-decay rule.
      for (int32_t p = 0; p < unit_info->num_params; ++p) {
        const AccelParamInfo* param = nullptr;
        services().check(model.get_param(services().host(), u, p, &param), "get_param");
        if (param->flat_offset < 0) continue;  // a tied reference: its owner steps it
        const bool decays = param->role == ACCEL_PARAM_LINEAR_WEIGHT || param->role == ACCEL_PARAM_EMBEDDING;
        if (!unit.runs.empty() && unit.runs.back().decays == decays &&
            unit.runs.back().offset + unit.runs.back().count == param->flat_offset) {
          unit.runs.back().count += param->numel;
        } else {
          unit.runs.push_back({param->flat_offset, param->numel, decays});
        }
      }
    }
  }

  void step_begin(const AccelStepArgs&) override {
    if (throw_in_ == "step_begin") throw std::runtime_error("takeover was told to throw in step_begin");
  }

  void clip_gradients(const AccelClipArgs& args) override {
    std::vector<const DLTensor*> grads;
    for (int32_t u = 0; u < static_cast<int32_t>(units_.size()); ++u) grads.push_back(storage(u).second);
    float squared = 0.0f;
    const ScalarView squared_view(&squared);
    AccelSquaredNormArgs norm{};
    norm.struct_size = sizeof(norm);
    norm.inputs = grads.data();
    norm.num_inputs = static_cast<int32_t>(grads.size());
    norm.output = squared_view.get();
    services().check(services().table()->kernels->squared_norm(services().host(), &norm), "squared_norm");
    AccelClipScaleArgs clip{};
    clip.struct_size = sizeof(clip);
    clip.tensors = grads.data();
    clip.num_tensors = static_cast<int32_t>(grads.size());
    clip.total_squared_norm = squared_view.get();
    clip.total_norm = args.total_norm;
    clip.max_norm = args.max_norm;
    services().check(services().table()->kernels->clip_scale(services().host(), &clip), "clip_scale");
    ++clips_;
    services().metric("clips", static_cast<double>(clips_));
  }

  void optimizer_step(const AccelOptimizerStepArgs& args) override {
    for (int32_t u = 0; u < static_cast<int32_t>(units_.size()); ++u) {
      const auto [params, grads] = storage(u);
      Unit& unit = units_[static_cast<size_t>(u)];
      for (const Run& run : unit.runs) {
        FlatView p(*params, run.offset, run.count), g(*grads, run.offset, run.count);
        FlatView m(unit.exp_avg.data() + run.offset, run.count), v(unit.exp_avg_sq.data() + run.offset, run.count);
        AccelAdamWArgs adamw{};
        adamw.struct_size = sizeof(adamw);
        adamw.param = p.get();
        adamw.grad = g.get();
        adamw.exp_avg = m.get();
        adamw.exp_avg_sq = v.get();
        adamw.grad_scale = args.grad_scale;
        adamw.found_inf = args.found_inf;
        adamw.lr = args.lr;
        adamw.beta1 = args.beta1;
        adamw.beta2 = args.beta2;
        adamw.eps = args.eps;
        adamw.weight_decay = run.decays ? args.weight_decay : 0.0;
        adamw.step = args.step;
        services().check(services().table()->kernels->adamw_step(services().host(), &adamw), "adamw_step");
      }
    }
  }

 private:
  struct Run {
    int64_t offset, count;
    bool decays;
  };
  struct Unit {
    std::vector<float> exp_avg, exp_avg_sq;
    std::vector<Run> runs;
  };

  std::pair<const DLTensor*, const DLTensor*> storage(int32_t unit) const {
    const DLTensor* params = nullptr;
    const DLTensor* grads = nullptr;
    services().check(services().table()->model->get_storage(services().host(), unit, &params, &grads), "get_storage");
    return {params, grads};
  }

  std::string throw_in_;
  std::vector<Unit> units_;
  int64_t clips_ = 0;
};

}  // namespace

ACCEL_PLUGIN(TakeOver)
