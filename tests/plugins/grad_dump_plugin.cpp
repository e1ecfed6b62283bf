// A test plugin that writes every parameter's gradient, as the optimizer
// will see it, to files: at gradients_finalize of each training step (after
// backward and any reduction by a plugin before it, before clipping and the
// optimizer), `<dir>/step_<k>/<parameter>.bin` holds the raw fp32 elements
// of the host's gradient (k counts steps from 1, as checkpoints do). For the
// tests that replay an optimizer in Python (tests/python/test_fp8.py, MS-AMP
// O2). Kind OBSERVER: it reads only. Host-owned units only.
#include <accel/sdk/sdk.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

class GradDump final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{"grad_dump", "1.0.0",
                                               "test plugin: writes each step's gradients to files",
                                               ACCEL_PLUGIN_OBSERVER, ACCEL_CAP_CPU};
  static constexpr accel::sdk::Option options[] = {
      {"dir", ACCEL_OPTION_STRING, nullptr, "directory the gradients are written under"},
  };

  explicit GradDump(const accel::sdk::Services& services)
      : Plugin(services), kernels_(services), dir_(services.option<std::string>("dir")) {}

  void gradients_finalize(const AccelStepArgs& args) override {
    if ((args.flags & ACCEL_STEP_EVAL) != 0 || dir_.empty()) return;
    const std::filesystem::path step_dir = std::filesystem::path(dir_) / ("step_" + std::to_string(args.step + 1));
    std::filesystem::create_directories(step_dir);
    const AccelModelServices& model = *services().table()->model;
    const AccelModelInfo* model_info = nullptr;
    services().check(model.get_info(services().host(), &model_info), "get_info");
    for (int32_t u = 0; u < model_info->num_units; ++u) {
      const DLTensor* grads = kernels_.storage(u).grads;
      if (grads == nullptr) continue;
      const std::vector<float> values = kernels_.read_floats(*grads);
      const AccelUnitInfo* unit = nullptr;
      services().check(model.get_unit(services().host(), u, &unit), "get_unit");
      for (int32_t i = 0; i < unit->num_params; ++i) {
        const AccelParamInfo* p = nullptr;
        services().check(model.get_param(services().host(), u, i, &p), "get_param");
        if (p->flat_offset < 0) continue;
        std::FILE* f = std::fopen((step_dir / (std::string(p->name) + ".bin")).c_str(), "wb");
        if (f == nullptr) throw accel::sdk::Error(ACCEL_ERROR_INTERNAL, "cannot write under " + step_dir.string());
        std::fwrite(values.data() + p->flat_offset, sizeof(float), static_cast<size_t>(p->numel), f);
        std::fclose(f);
      }
    }
  }

 private:
  const accel::sdk::Kernels kernels_;
  const std::string dir_;
};

}  // namespace

ACCEL_PLUGIN(GradDump)
