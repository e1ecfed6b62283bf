// Must NOT compile: an OBSERVER that overrides a take-over hook. The SDK
// rejects it with a static_assert (accel/plugin.h: "An OBSERVER implements
// neither take-overs, nor plan_model, nor the linear chain"), so the mistake
// is caught where it is made instead of by the host's loader.
// tests/sdk/CMakeLists.txt builds this target and expects the message.
#include <accel/sdk/sdk.hpp>

namespace {

class SneakyObserver final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "sneaky_observer", "0.0.1", "an observer that changes the update",
      ACCEL_PLUGIN_OBSERVER, ACCEL_CAP_CPU};
  using Plugin::Plugin;
  void optimizer_step(const AccelOptimizerStepArgs&) override {}
};

}  // namespace

ACCEL_PLUGIN(SneakyObserver)

int main() { return 0; }
