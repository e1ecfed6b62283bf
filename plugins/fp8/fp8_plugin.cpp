// fp8 — FP8 training of every block linear (FP8RecipeKwargs): the inner
// link of the linear chain, TransformerEngine's delayed scaling (or current
// scaling) with per-tensor scales for inputs, weights and output gradients.
//
// This file is the plugin's public face — descriptor, option schema, hooks —
// and wires the parts together: fp8_config (options), scaling_state
// (histories, scales, the step-end update), fp8_linear (the link),
// cast_counter (saturation metrics), checkpoint_io (save/load),
// fp8_gather_codec (FP8 weights on a sharding plugin's all-gather). It knows
// nothing of ddp, fsdp or any other plugin: everything it needs crosses the
// ABI (the chain, kernels->cast / gemm / fp8_scale_update, comm->all_reduce
// over WORLD, the checkpoint services). Every FP8RecipeKwargs field is
// documented in plugins/fp8/README.md.
//
// Built with the SDK against the ABI headers alone. Hooks run on the host's
// loop thread only.
#include <accel/sdk/sdk.hpp>
#include <accel/sdk/kernels.hpp>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "checkpoint_io.h"
#include "fp8_config.h"
#include "fp8_gather_codec.h"
#include "fp8_linear.h"
#include "scaling_state.h"

namespace accel::fp8 {
namespace {

// --fp8.state_log is written at every step end by rank 0: a path it cannot
// append to is refused at create, where every rank stops together with one
// line, not at the first step end, where rank 0 alone would fail while the
// others wait in the next step's collectives. A file the probe made is
// removed again (the first step writes it). Anything but a regular file is
// refused before it is opened (a FIFO's open would block).
void require_appendable(const std::string& path) {
  struct stat info {};
  const bool existed = ::stat(path.c_str(), &info) == 0;
  if (existed && !S_ISREG(info.st_mode)) {
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "--fp8.state_log: '" + path + "' is not a regular file");
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT,
                     "--fp8.state_log: cannot append to '" + path + "': " + std::strerror(errno));
  }
  std::fclose(f);
  if (!existed) std::remove(path.c_str());
}

class Fp8 final : public sdk::Plugin {
 public:
  static constexpr sdk::PluginInfo info{
      "fp8", "1.0.0",
      "FP8 linears with TransformerEngine's delayed (or current) per-tensor scaling (FP8RecipeKwargs)",
      ACCEL_PLUGIN_PRECISION, ACCEL_CAP_CPU | ACCEL_CAP_CUDA};

  static constexpr sdk::Option options[] = {
      {"fp8_format", ACCEL_OPTION_STRING, "HYBRID",
       "HYBRID (E4M3 inputs and weights, E5M2 gradients) or E4M3 (everywhere); case-insensitive"},
      {"margin", ACCEL_OPTION_INT, "0", "scale = fp8_max / amax / 2^margin", nullptr, "0", "64"},
      {"interval", ACCEL_OPTION_INT, "1", "recompute the scales every interval steps (the history records every step)",
       nullptr, "1", "1000000000"},
      {"amax_history_len", ACCEL_OPTION_INT, "1024", "steps of amax history per tensor", nullptr, "1", "1048576"},
      {"amax_compute_algo", ACCEL_OPTION_STRING, "most_recent",
       "max (largest amax in the history) or most_recent (this step's)"},
      {"override_linear_precision", ACCEL_OPTION_STRING, "false,false,false",
       "fprop,dgrad,wgrad: true keeps that GEMM in the higher precision"},
      {"use_autocast_during_eval", ACCEL_OPTION_BOOL, "false",
       "run evaluation steps' linears in FP8 too (else in the higher precision)"},
      {"backend", ACCEL_OPTION_STRING, "te",
       "te or msamp: the same FP8 linears; see plugins/fp8/README.md for what msamp's opt_level does here"},
      {"opt_level", ACCEL_OPTION_STRING, "O2", "msamp only: O1 or O2 (O3 is DeepSpeed-only in Accelerate)"},
      {"recipe", ACCEL_OPTION_STRING, "delayed",
       "delayed (DelayedScaling: scales from the amax history) or current (Float8CurrentScaling: each cast's own "
       "amax)"},
      {"count_saturation", ACCEL_OPTION_BOOL, "true",
       "count saturated and underflowed elements per step; on GPU ranks off unless given (it copies every cast "
       "to the host)"},
      {"fp8_weight_gather", ACCEL_OPTION_BOOL, "true",
       "offer sharding plugins (fsdp, ZeRO-3) to all-gather block linear weights as E4M3 codes with this step's "
       "scale (half the bytes of bf16, same numerics); false: they gather in their param dtype"},
      {"state_log", ACCEL_OPTION_STRING, nullptr,
       "diagnostics: rank 0 appends every step's amax rows, scales and histories as one JSON line to this file"},
  };

  explicit Fp8(const sdk::Services& s) : Plugin(s), config_(read_config(s)), ops_(s) {
    if (!config_.state_log.empty() && s.rank() == 0) require_appendable(config_.state_log);
    if (!config_.fp8_weight_gather) {  // no codec: sharding plugins gather as they would without fp8
      decline(&AccelHooks::gather_codec_query);
      decline(&AccelHooks::gather_encode);
      decline(&AccelHooks::gather_decode);
    }
    if (config_.backend == Backend::msamp) {
      // MS-AMP's levels change state fp8 does not own: the gradient
      // reduction and AdamW's moments. It states them as the run's precision
      // policy (accel/precision.h); their owners honour it, or the host
      // refuses the run before it starts.
      s.set_precision_policy(msamp_policy(config_.opt_level));
      if (s.rank() == 0) {
        s.info() << "fp8: backend msamp O" << config_.opt_level
                 << ": FP8 (E4M3, per-tensor scales) gradient communication"
                 << (config_.opt_level == 2 ? "; AdamW moments in FP8 (E4M3, scaled) and FP16 (scaled)" : "");
      }
    }
  }

  void setup(const AccelSetupArgs&) override {
    const sdk::Services& s = services();
    state_ = std::make_unique<ScalingState>(ops_, config_, find_block_linears(s));
    const AccelModelInfo* model = nullptr;
    s.check(s.table()->model->get_info(s.host(), &model), "model get_info");
    world_ = ops_.group(ACCEL_GROUP_WORLD);
    data_ = ops_.group(ACCEL_GROUP_DATA);
    data_size_ = ops_.shape(data_).size;
    AccelGroup* tensor = ops_.group(ACCEL_GROUP_TENSOR);
    linear_ = std::make_unique<Fp8Linear>(ops_, config_, *state_, model->compute_dtype,
                                          data_size_ > 1 ? data_ : nullptr, data_size_,
                                          ops_.shape(tensor).size > 1 ? tensor : nullptr);
    if (config_.fp8_weight_gather) {
      codec_ = std::make_unique<WeightGatherCodec>(ops_, config_, *state_,
                                                   ops_.shape(tensor).size > 1 ? tensor : nullptr);
      linear_->set_codec(codec_.get());
    }
    if (s.rank() == 0) {
      s.info() << "fp8: " << state_->num_linears() << " block linears, " << to_json(config_);
    }
  }

  void step_begin(const AccelStepArgs& args) override {
    linear_->set_eval((args.flags & ACCEL_STEP_EVAL) != 0);
    if (codec_) codec_->set_eval((args.flags & ACCEL_STEP_EVAL) != 0);
  }

  // The parameter gather codec (ABI 1.8): called by the host on behalf of a
  // sharding plugin, whichever it is (fp8_gather_codec.h).
  void gather_codec_query(AccelGatherCodecQueryArgs& args) override { codec().query(args); }
  void gather_encode(const AccelGatherCodecArgs& args) override { codec().encode(args); }
  void gather_decode(const AccelGatherCodecArgs& args) override { codec().decode(args); }

  void linear_forward(AccelLinearForwardArgs& args, const AccelLinearNext& next) override {
    linear_->forward(args, next);
  }
  void linear_backward(AccelLinearBackwardArgs& args, const AccelLinearNext& next) override {
    linear_->backward(args, next);
  }

  // The step's amax rows are complete after backward: reduced and queued
  // for the host here, before the host's one read of the step's values, so
  // step_end finds them copied without a read of its own.
  void gradients_finalize(const AccelStepArgs&) override {
    state_->finish_rows(config_.recipe == Recipe::delayed ? world_ : nullptr, data_size_);
  }

  void step_end(const AccelStepArgs& args) override {
    linear_->set_eval(false);
    if (codec_) codec_->set_eval(false);
    if ((args.flags & ACCEL_STEP_EVAL) != 0) return;  // evaluation changes no scale
    if (!state_->rows_finished()) {
      // A host that gave no gradients_finalize: finish and wait here.
      state_->finish_rows(config_.recipe == Recipe::delayed ? world_ : nullptr, data_size_);
      ops_.synchronize();
    } else if (!sdk::host_abi_at_least(1, 14)) {
      ops_.synchronize();  // an older host promises no read of its own before step_end
    }
    const std::array<ClassSummary, kNumClasses> summary =
        config_.recipe == Recipe::delayed ? state_->end_step(args.step) : state_->end_step_current();
    record_metrics(summary);
    if (!config_.state_log.empty() && services().rank() == 0) append_state_log(args.step);
  }

  void save_state(const AccelStateArgs&) override { fp8::save_state(ops_, config_, *state_, services().rank()); }

  void load_state(const AccelStateArgs&) override {
    if (!fp8::load_state(ops_, config_, *state_) && services().rank() == 0) {
      services().warn() << "fp8: the checkpoint holds no fp8 state (saved without fp8): scales start at 1";
    }
  }

  void teardown() override {
    linear_.reset();
    codec_.reset();
    state_.reset();
  }

 private:
  void record_metrics(const std::array<ClassSummary, kNumClasses>& summary) {
    const sdk::Services& s = services();
    std::array<CastCounts, kNumClasses> counts = linear_->take_counts();
    if (config_.count_saturation) {
      // Inputs and gradients are split over the data-parallel ranks: sum
      // their counts; weights are replicated: every rank counted the same.
      double local[2 * kNumClasses];
      for (int c = 0; c < kNumClasses; ++c) {
        local[2 * c] = static_cast<double>(counts[static_cast<size_t>(c)].saturated);
        local[2 * c + 1] = static_cast<double>(counts[static_cast<size_t>(c)].underflow);
      }
      sdk::Buffer totals = ops_.allocate(ACCEL_MEMORY_WORKSPACE, DLDataType{kDLFloat, 64, 1}, {2 * kNumClasses},
                                         ACCEL_MEMORY_DEVICE, false, "fp8 cast counts");
      const sdk::FlatView host_view(local, 2 * kNumClasses, DLDataType{kDLFloat, 64, 1});
      ops_.copy(host_view.get(), &totals.tensor());
      ops_.all_reduce(data_, &totals.tensor(), ACCEL_REDUCE_SUM, "fp8 cast counts");
      ops_.copy(&totals.tensor(), host_view.get());
      s.check(s.table()->memory->stream_synchronize(s.host(), nullptr), "synchronize");
      const double replicas = data_size_;
      for (int c = 0; c < kNumClasses; ++c) {
        const double divide = c == static_cast<int>(TensorClass::weight) ? replicas : 1.0;
        const std::string name = to_string(static_cast<TensorClass>(c));
        s.metric(("saturated_" + name).c_str(), local[2 * c] / divide, ACCEL_METRIC_LAST);
        s.metric(("underflow_" + name).c_str(), local[2 * c + 1] / divide, ACCEL_METRIC_LAST);
      }
    }
    for (int c = 0; c < kNumClasses; ++c) {
      const std::string name = to_string(static_cast<TensorClass>(c));
      s.metric(("amax_" + name).c_str(), summary[static_cast<size_t>(c)].amax, ACCEL_METRIC_LAST);
      s.metric(("scale_" + name).c_str(), summary[static_cast<size_t>(c)].min_scale, ACCEL_METRIC_LAST);
    }
  }

  void append_state_log(int64_t step) {
    const std::string line = state_->to_json_line(step) + "\n";
    std::FILE* f = std::fopen(config_.state_log.c_str(), "a");
    if (f == nullptr) {
      throw sdk::Error(ACCEL_ERROR_IO, "state_log: cannot open " + config_.state_log + " for appending");
    }
    const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
    if (std::fclose(f) != 0 || !ok) throw sdk::Error(ACCEL_ERROR_IO, "state_log: cannot write " + config_.state_log);
  }

  const Fp8Config config_;
  const sdk::Kernels ops_;
  std::unique_ptr<ScalingState> state_;
  std::unique_ptr<Fp8Linear> linear_;
  std::unique_ptr<WeightGatherCodec> codec_;  // absent with fp8_weight_gather false

  WeightGatherCodec& codec() {
    if (!codec_) throw sdk::Error(ACCEL_ERROR_FAILED_PRECONDITION, "fp8 gather codec called before setup");
    return *codec_;
  }
  AccelGroup* world_ = nullptr;
  AccelGroup* data_ = nullptr;
  int32_t data_size_ = 1;
};

}  // namespace
}  // namespace accel::fp8

ACCEL_PLUGIN(accel::fp8::Fp8)
