// loss_spike_guard — an example third-party observer plugin, written with the
// C++ SDK (accel/sdk/sdk.hpp) and built outside the Accel tree.
//
// It watches the training loss at every step_end, keeps a running mean and
// standard deviation (Welford), and after `warmup` steps reports a loss above
// mean + threshold * std as a spike: one warning line and the metric
// "spikes" (the running count, in the host's metric log). Spikes are kept
// out of the statistics, so one spike does not hide the next. It only
// watches: an OBSERVER never changes numerics or takes over a step.
//
// Options: --loss_spike_guard.threshold (double, 3.0),
//          --loss_spike_guard.warmup (int, 10).
// Threads: hooks run on the host's loop thread only; no locking needed.
#include <accel/sdk/sdk.hpp>

#include <cmath>
#include <cstdint>

namespace {

class LossSpikeGuard final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "loss_spike_guard", "1.0.0",
      "warns when the loss jumps above its running mean (SDK example)",
      ACCEL_PLUGIN_OBSERVER, ACCEL_CAP_CPU | ACCEL_CAP_CUDA};

  static constexpr accel::sdk::Option options[] = {
      {"threshold", ACCEL_OPTION_DOUBLE, "3.0",
       "a spike is a loss above mean + threshold * std", nullptr, "0"},
      {"warmup", ACCEL_OPTION_INT, "10",
       "steps observed before spikes are reported (at least 2)", nullptr,
       "2"},
  };

  explicit LossSpikeGuard(const accel::sdk::Services& services)
      : Plugin(services),
        threshold_(services.option<double>("threshold")),
        warmup_(services.option<int64_t>("warmup")) {}

  void step_end(const AccelStepArgs& args) override {
    // Only ranks of the last pipeline stage see the loss; evaluation steps
    // report an evaluation loss, not a training one.
    if (args.loss == nullptr || (args.flags & ACCEL_STEP_EVAL) != 0) return;
    const double loss =
        accel::sdk::read_scalar<float>(services(), *args.loss, args.stream);
    const long long step = static_cast<long long>(args.step) + 1;  // 1-based,
                                                  // as the host's progress lines
    const bool warmed_up = count_ >= warmup_;
    if (!std::isfinite(loss) ||
        (warmed_up && loss > mean_ + threshold_ * stddev())) {
      ++spikes_;
      services().logf(ACCEL_LOG_WARN,
                      "loss spike at step %lld: %.4f (mean %.4f, std %.4f)",
                      step, loss, mean_, stddev());
    } else {
      observe(loss);
    }
    services().metric("spikes", static_cast<double>(spikes_));
  }

  void teardown() override {
    services().info() << "observed " << count_ << " steps, " << spikes_
                      << " loss spike(s)";
  }

 private:
  void observe(double loss) {  // Welford's running mean and variance
    ++count_;
    const double delta = loss - mean_;
    mean_ += delta / static_cast<double>(count_);
    m2_ += delta * (loss - mean_);
  }
  double stddev() const {
    return count_ > 1 ? std::sqrt(m2_ / static_cast<double>(count_ - 1)) : 0.0;
  }

  const double threshold_;
  const int64_t warmup_;
  int64_t count_ = 0;
  double mean_ = 0.0;
  double m2_ = 0.0;
  int64_t spikes_ = 0;
};

}  // namespace

ACCEL_PLUGIN(LossSpikeGuard)
