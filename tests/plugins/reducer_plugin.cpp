// Data-parallel reducers that get the reduction wrong, for check-plugin's
// data-parallel check (N ranks must train the model one rank trains). Both
// declare ACCEL_CAP_REDUCES_GRADS and implement gradients_ready, so the
// loader accepts them; only running them on several ranks shows the fault.
// REDUCER_SUMS all-reduces each unit's gradients with SUM instead of AVG
// (gradients N times too large); otherwise gradients_ready reduces nothing
// (every rank trains its own model).
#include <accel/sdk/sdk.hpp>

#ifndef REDUCER_NAME
#define REDUCER_NAME "reduces_nothing"
#endif

namespace {

class Reducer final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{REDUCER_NAME, "1.0.0",
                                               "test plugin: a gradient reducer that reduces wrongly",
                                               ACCEL_PLUGIN_PARALLEL, ACCEL_CAP_CPU | ACCEL_CAP_REDUCES_GRADS};

  explicit Reducer(const accel::sdk::Services& services) : Plugin(services) {}

  void setup(const AccelSetupArgs&) override {
    services().check(services().table()->comm->get_group(services().host(), ACCEL_GROUP_DATA, &group_),
                     "get_group(DATA)");
  }

  void gradients_ready(const AccelGradientsReadyArgs& args) override {
#if defined(REDUCER_SUMS)
    const DLTensor* params = nullptr;
    const DLTensor* grads = nullptr;
    services().check(services().table()->model->get_storage(services().host(), args.unit, &params, &grads),
                     "get_storage");
    AccelCollectiveArgs reduce{};
    reduce.struct_size = sizeof(reduce);
    reduce.group = group_;
    reduce.input = grads;
    reduce.output = grads;
    reduce.op = ACCEL_REDUCE_SUM;  // the fault: a sum, not the average
    reduce.label = "sum_reducer all_reduce";
    services().check(services().table()->comm->all_reduce(services().host(), &reduce, nullptr), "all_reduce");
#else
    (void)args;  // the fault: nothing is reduced
#endif
  }

 private:
  AccelGroup* group_ = nullptr;
};

}  // namespace

ACCEL_PLUGIN(Reducer)
