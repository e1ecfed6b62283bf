// A test plugin that makes one rank misbehave at the start of one step
// (step_begin with args.step == at_step, on rank `rank`), with the same
// options on every rank so the ranks' configurations agree:
//  - action perturb: adds 1 to every parameter of unit 0 (the host's fp32
//    buffer). Beside ddp, whose weight checksum must then stop the run with
//    one line; nothing else in a correct run makes replicas drift apart.
//  - action stall: sleeps 120 s, so the other ranks wait in the step's
//    collectives and the communication timeout must end the job.
//  - action die: the rank kills itself (SIGKILL), so the others meet a dead
//    peer in the step's first operation, at a known step whatever the load.
//  - action nan_loss: the last unit's output (the logits) becomes NaN in
//    that step's forward on that rank, so the loss averaged over the ranks
//    is NaN and the step must be skipped with nothing changed.
//  - action fail: the hook named by `hook` (step_begin, gradients_finalize,
//    step_end, or save_state of the checkpoint at step at_step) returns an
//    error on that rank alone, so the others must hear of it instead of
//    waiting in the step's collectives or publishing a checkpoint without
//    that rank's share.
#include <accel/sdk/sdk.hpp>

#include <chrono>
#include <csignal>
#include <limits>
#include <string>
#include <thread>

namespace {

class Drift final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{"drift", "1.0.0", "test plugin: one rank misbehaves at one step",
                                               ACCEL_PLUGIN_PRECISION, ACCEL_CAP_CPU};
  static constexpr accel::sdk::Option options[] = {
      {"rank", ACCEL_OPTION_INT, "1", "the rank that misbehaves", nullptr, "0"},
      {"at_step", ACCEL_OPTION_INT, "0", "the optimizer step (0-based) at whose start it does", nullptr, "0"},
      {"action", ACCEL_OPTION_ENUM, "perturb", "what it does", "perturb|stall|fail|die|nan_loss"},
      {"hook", ACCEL_OPTION_ENUM, "step_begin", "where action fail fails",
       "step_begin|gradients_finalize|step_end|save_state"},
  };

  explicit Drift(const accel::sdk::Services& services)
      : Plugin(services),
        rank_(services.option<int64_t>("rank")),
        at_step_(services.option<int64_t>("at_step")),
        stall_(services.option<std::string>("action") == "stall"),
        die_(services.option<std::string>("action") == "die"),
        nan_loss_(services.option<std::string>("action") == "nan_loss"),
        fail_in_(services.option<std::string>("action") == "fail" ? services.option<std::string>("hook") : "") {}

  void gradients_finalize(const AccelStepArgs& args) override { fail_if_chosen("gradients_finalize", args.step); }
  void step_end(const AccelStepArgs& args) override { fail_if_chosen("step_end", args.step); }
  void save_state(const AccelStateArgs& args) override { fail_if_chosen("save_state", args.step); }

  void unit_forward_post(AccelUnitHookArgs& args) override {
    if (!nan_loss_ || poisoned_ || services().rank() != rank_ || step_ != at_step_ || args.activation == nullptr) {
      return;
    }
    const AccelModelInfo* model = nullptr;
    services().check(services().table()->model->get_info(services().host(), &model), "get_info");
    if (args.unit != model->num_units - 1) return;
    poisoned_ = true;  // once: a skipped step leaves the optimizer's count, and so args.step, where it was
    const DLTensor& logits = *args.activation;
    if (logits.dtype.code != kDLFloat || logits.dtype.bits != 32 || logits.device.device_type != kDLCPU) {
      throw accel::sdk::Error(ACCEL_ERROR_UNSUPPORTED, "drift nan_loss: fp32 logits in host memory only");
    }
    float* data = reinterpret_cast<float*>(static_cast<char*>(logits.data) + logits.byte_offset);
    data[0] = std::numeric_limits<float>::quiet_NaN();
  }

  void step_begin(const AccelStepArgs& args) override {
    step_ = args.step;
    if (nan_loss_ || services().rank() != rank_ || args.step != at_step_) return;
    if (fail_in_ == "step_begin") fail_if_chosen("step_begin", args.step);
    if (!fail_in_.empty()) return;
    if (die_) std::raise(SIGKILL);
    if (stall_) {
      std::this_thread::sleep_for(std::chrono::seconds(120));
      return;
    }
    const DLTensor* params = nullptr;
    const DLTensor* grads = nullptr;
    services().check(services().table()->model->get_storage(services().host(), 0, &params, &grads), "get_storage");
    float* data = reinterpret_cast<float*>(static_cast<char*>(params->data) + params->byte_offset);
    for (int64_t i = 0; i < params->shape[0]; ++i) data[i] += 1.0f;
  }

 private:
  void fail_if_chosen(const char* hook, int64_t step) const {
    if (fail_in_ != hook || services().rank() != rank_ || step != at_step_) return;
    throw accel::sdk::Error(ACCEL_ERROR_IO, std::string("drift: failing on purpose in ") + hook);
  }

  const int64_t rank_;
  const int64_t at_step_;
  const bool stall_;
  const bool die_;
  const bool nan_loss_;
  int64_t step_ = -1;  // the step in progress
  bool poisoned_ = false;
  const std::string fail_in_;  // the hook action fail fails in; "" for the other actions
};

}  // namespace

ACCEL_PLUGIN(Drift)
