// ddp — data parallel. Every rank holds the whole model and trains on its own
// share of each global batch; gradients are averaged across the data group in
// buckets of about bucket_cap_mb, each launched asynchronously as soon as the
// last of its units reported gradients_ready during backward (overlapping the
// rest of backward), and completed in gradients_finalize before clipping and
// the optimizer. Accumulation micro-batches reduce nothing: the host calls
// gradients_ready only on the last micro-batch (accelerate's no_sync).
//
// DistributedDataParallelKwargs, option by option (plugins/ddp/README.md):
// bucket_cap_mb, gradient_as_bucket_view, comm_hook fp16/bf16 implemented;
// the rest accepted and documented as not applicable, or refused with the reason.
//
// The precision policy (accel/precision.h, ABI 1.8): when a precision plugin
// asks for FP8 gradient communication (fp8's MS-AMP O1/O2), every bucket
// travels as scaled FP8 through accel/sdk/precision.hpp's codec — one MAX
// all_reduce of the bucket's per-tensor amaxes, then the SUM all_reduce of
// the FP8 bucket, decoded straight back into the units' gradients.
//
// The replicas' weights are checked equal (a checksum over ranks) after the
// initial broadcast and after the run's first step; a spread stops the run.
//
// Built with the SDK against the ABI headers alone. Hooks run on the host's
// loop thread only.
#include <accel/sdk/precision.hpp>
#include <accel/sdk/sdk.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using accel::sdk::Error;

using accel::sdk::FlatView;
using accel::sdk::ScalarView;

class Ddp final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "ddp", "1.0.0", "data parallel: bucketed, overlapped gradient all-reduce (DistributedDataParallelKwargs)",
      ACCEL_PLUGIN_PARALLEL,
      ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_REDUCES_GRADS | ACCEL_CAP_PRECISION_GRAD_COMM,
      "fsdp,deepspeed_zero"};

  static constexpr accel::sdk::Option options[] = {
      {"bucket_cap_mb", ACCEL_OPTION_DOUBLE, "25", "gradient bucket size in MiB (0: one bucket per unit)", nullptr,
       "0"},
      {"gradient_as_bucket_view", ACCEL_OPTION_BOOL, "false",
       "reduce each unit's flat gradient buffer in place instead of copying into bucket buffers"},
      {"comm_hook", ACCEL_OPTION_ENUM, "no", "compress gradients for the all-reduce", "no|fp16|bf16|power_sgd"},
      {"comm_wrapper", ACCEL_OPTION_ENUM, "no", "compression wrapper of the PowerSGD hook", "no|fp16|bf16"},
      {"comm_state_option", ACCEL_OPTION_STRING, nullptr, "state options of the PowerSGD hook"},
      {"find_unused_parameters", ACCEL_OPTION_BOOL, "false",
       "accepted: every unit's whole gradient buffer is reduced, unused parameters reduce zeros"},
      {"broadcast_buffers", ACCEL_OPTION_BOOL, "true", "accepted: the host's models have no buffers to broadcast"},
      {"static_graph", ACCEL_OPTION_BOOL, "false", "accepted: buckets are fixed at setup, the graph is always static"},
      {"check_reduction", ACCEL_OPTION_BOOL, "false", "deprecated in PyTorch; accepted and ignored"},
      {"dim", ACCEL_OPTION_INT, "0", "batch dimension inputs are split along; only 0", nullptr, "0", "0"},
  };

  explicit Ddp(const accel::sdk::Services& s)
      : Plugin(s),
        kernels_(services()),
        bucket_cap_bytes_(static_cast<int64_t>(s.option<double>("bucket_cap_mb") * 1024.0 * 1024.0)),
        as_view_(s.option<bool>("gradient_as_bucket_view")),
        hook_(s.option<std::string>("comm_hook")) {
    if (hook_ == "power_sgd") {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "comm_hook power_sgd is not available: its low-rank compression with error feedback is not built and "
                  "verified yet; use no, fp16 or bf16");
    }
    if (s.option<std::string>("comm_wrapper") != "no") {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "comm_wrapper wraps the PowerSGD hook, which is not available");
    }
  }

  void setup(const AccelSetupArgs&) override {
    group_ = kernels_.group(ACCEL_GROUP_DATA);
    group_size_ = kernels_.shape(group_).size;

    const AccelModelServices& model = *services().table()->model;
    const AccelModelInfo* model_info = nullptr;
    services().check(model.get_info(services().host(), &model_info), "get_info");
    num_units_ = model_info->num_units;

    // Initial weights from rank 0 of the data group (DDP's constructor does
    // the same), then a checksum spread across ranks that proves it.
    for (int32_t u = 0; u < num_units_; ++u) kernels_.broadcast(group_, params(u), 0, "ddp broadcast");
    spread_ = checksum_spread();
    require_equal_weights(spread_, "after the broadcast from rank 0");

    // Buckets in the order gradients become ready: the last unit first.
    for (int32_t u = num_units_ - 1; u >= 0; --u) {
      const int64_t bytes = numel(u) * 4;
      if (buckets_.empty() || buckets_.back().bytes + bytes > bucket_cap_bytes_ || bucket_cap_bytes_ == 0) {
        buckets_.emplace_back();
      }
      buckets_.back().units.push_back(u);
      buckets_.back().bytes += bytes;
      bucket_of_.resize(static_cast<size_t>(num_units_));
      bucket_of_[static_cast<size_t>(u)] = buckets_.size() - 1;
    }
    const AccelPrecisionPolicy policy = services().precision_policy();
    // One rank communicates nothing: its gradients stay as they are.
    if (accel::sdk::wants_fp8_grad_comm(policy) && group_size_ > 1) {
      if (hook_ != "no") {
        throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                    "comm_hook " + hook_ + " and the FP8 gradient communication the precision policy asks for both "
                    "compress the all-reduce; leave comm_hook at no");
      }
      fp8_ = std::make_unique<accel::sdk::Fp8GradComm>(kernels_, policy.grad_comm_dtype, group_);
      for (Bucket& bucket : buckets_) {
        int64_t offset = 0;
        for (int32_t u : bucket.units) {
          for (const accel::sdk::GradSegment& g : accel::sdk::unit_grad_segments(services(), u, grads(u), offset)) {
            bucket.segments.push_back(g);
            bucket.segment_units.push_back(u);
          }
          offset += numel(u);
        }
        bucket.buffer = accel::sdk::Buffer(services(), ACCEL_MEMORY_COMM, policy.grad_comm_dtype, {bucket.bytes / 4},
                                           ACCEL_MEMORY_DEVICE, 0, nullptr, "ddp fp8 bucket");
      }
      return;
    }
    if (hook_ != "no" || !as_view_) {
      for (Bucket& bucket : buckets_) {
        if (bucket.units.size() == 1 && hook_ == "no") continue;  // reduced in place: nothing to copy
        bucket.buffer = accel::sdk::Buffer(
            services(), ACCEL_MEMORY_COMM,
            hook_ == "fp16" ? DLDataType{kDLFloat, 16, 1}
                            : hook_ == "bf16" ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1},
            {bucket.bytes / 4}, ACCEL_MEMORY_DEVICE, 0, nullptr, "ddp bucket");
      }
    }
  }

  void step_begin(const AccelStepArgs&) override {
    for (Bucket& bucket : buckets_) bucket.ready = 0;
  }

  void gradients_ready(const AccelGradientsReadyArgs& args) override {
    Bucket& bucket = buckets_.at(bucket_of_.at(static_cast<size_t>(args.unit)));
    if (++bucket.ready == static_cast<int>(bucket.units.size())) launch(bucket);
  }

  void gradients_finalize(const AccelStepArgs&) override {
    for (Bucket& bucket : buckets_) {
      if (bucket.ready != static_cast<int>(bucket.units.size())) {
        throw Error(ACCEL_ERROR_INTERNAL, "a bucket's units never all reported gradients_ready");
      }
      for (AccelWork* work : bucket.works) kernels_.wait_and_free(work);
      bucket.works.clear();
      if (fp8_) {
        for (size_t i = 0; i < bucket.segments.size(); ++i) bucket.segments[i].source = grads(bucket.segment_units[i]);
        fp8_->decode_to_sources(bucket.buffer.tensor(), bucket.segments, bucket.scales);
        bucket.scales = {};
      } else if (bucket.buffer) {
        unpack(bucket);
      }
    }
  }

  void step_end(const AccelStepArgs& args) override {
    // Once more after this run's first update: averaged gradients and one
    // optimizer keep replicas bitwise equal, so any spread is a fault
    // (a rank that stepped differently, a plugin that touched one rank).
    if (!checked_after_step_) {
      checked_after_step_ = true;
      spread_ = checksum_spread();
      require_equal_weights(spread_, "after this run's first step");
    }
    if (args.step == 0) services().metric("param_checksum_spread", spread_);
    services().metric("buckets", static_cast<double>(buckets_.size()));
  }

 private:
  struct Bucket {
    std::vector<int32_t> units;  // in ready order
    int64_t bytes = 0;           // fp32 gradient bytes
    int ready = 0;
    accel::sdk::Buffer buffer;   // empty: reduce the units' buffers in place
    std::vector<AccelWork*> works;
    std::vector<accel::sdk::GradSegment> segments;  // FP8 communication: one per parameter
    std::vector<int32_t> segment_units;              // the unit of each segment
    accel::sdk::Fp8Scales scales;                    // this step's, from launch to finalize
  };

  const DLTensor* params(int32_t unit) const { return kernels_.storage(unit).params; }
  const DLTensor* grads(int32_t unit) const { return kernels_.storage(unit).grads; }
  int64_t numel(int32_t unit) const { return grads(unit)->shape[0]; }

  void launch(Bucket& bucket) {
    if (fp8_) {
      for (size_t i = 0; i < bucket.segments.size(); ++i) bucket.segments[i].source = grads(bucket.segment_units[i]);
      // Scales agreed (a small synchronous MAX all_reduce), then the FP8
      // bucket summed asynchronously; decoded in gradients_finalize.
      bucket.scales = fp8_->agree_scales(bucket.segments, bucket.buffer.tensor(), "ddp fp8 amax all_reduce");
      fp8_->encode(bucket.segments, bucket.scales, bucket.buffer.tensor());
      bucket.works.push_back(kernels_.all_reduce(group_, &bucket.buffer.tensor(), ACCEL_REDUCE_SUM,
                                                 "ddp fp8 bucket all_reduce", true));
      return;
    }
    if (!bucket.buffer) {
      for (int32_t u : bucket.units) {
        bucket.works.push_back(kernels_.all_reduce(group_, grads(u), ACCEL_REDUCE_AVG, "ddp all_reduce", true));
      }
      return;
    }
    // Pack (casting for the compression hooks, pre-divided by the group size
    // as PyTorch's fp16_compress_hook does), then one all_reduce for the bucket.
    const double prescale = hook_ == "no" ? 1.0 : 1.0 / group_size_;
    int64_t offset = 0;
    for (int32_t u : bucket.units) {
      FlatView slot(bucket.buffer.tensor(), offset, numel(u));
      cast(grads(u), slot.get(), prescale);
      offset += numel(u);
    }
    bucket.works.push_back(kernels_.all_reduce(group_, &bucket.buffer.tensor(),
                                               hook_ == "no" ? ACCEL_REDUCE_AVG : ACCEL_REDUCE_SUM,
                                               "ddp bucket all_reduce", true));
  }

  void unpack(Bucket& bucket) {
    int64_t offset = 0;
    for (int32_t u : bucket.units) {
      FlatView slot(bucket.buffer.tensor(), offset, numel(u));
      cast(slot.get(), grads(u), 1.0);
      offset += numel(u);
    }
  }

  void cast(const DLTensor* from, const DLTensor* to, double scale) {
    float factor = static_cast<float>(scale);
    const ScalarView scale_view(&factor);
    kernels_.cast(from, to, scale == 1.0 ? nullptr : scale_view.get(), nullptr, false);
  }

  // max - min over ranks of the sum of all parameters: 0 when every rank holds
  // the same weights.
  double checksum_spread() {
    float sum = 0.0f;
    for (int32_t u = 0; u < num_units_; ++u) {
      const DLTensor* p = params(u);
      const float* data = reinterpret_cast<const float*>(static_cast<const char*>(p->data) + p->byte_offset);
      for (int64_t i = 0; i < p->shape[0]; ++i) sum += data[i];
    }
    float high = sum, low = sum;
    const ScalarView high_view(&high), low_view(&low);
    kernels_.all_reduce(group_, high_view.get(), ACCEL_REDUCE_MAX, "ddp checksum max");
    kernels_.all_reduce(group_, low_view.get(), ACCEL_REDUCE_MIN, "ddp checksum min");
    return static_cast<double>(high) - static_cast<double>(low);
  }

  // The spread is all-reduced, so every rank throws together.
  void require_equal_weights(double spread, const char* when) const {
    if (spread == 0.0) return;
    throw Error(ACCEL_ERROR_INTERNAL,
                "the replicas' weights differ " + std::string(when) + ": the parameter sums spread " +
                    std::to_string(spread) + " across the data group's ranks (0 when every rank holds the same weights)");
  }

  const accel::sdk::Kernels kernels_;
  const int64_t bucket_cap_bytes_;
  const bool as_view_;
  const std::string hook_;
  AccelGroup* group_ = nullptr;
  int32_t group_size_ = 1;
  int32_t num_units_ = 0;
  double spread_ = 0.0;
  bool checked_after_step_ = false;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::unique_ptr<accel::sdk::Fp8GradComm> fp8_;  // the policy's FP8 gradient communication, or null
};

}  // namespace

ACCEL_PLUGIN(Ddp)
