// fp8_config.h — FP8RecipeKwargs as one value, read and cross-checked once,
// in `create`.
//
// Invariant: an Fp8Config that exists is consistent — a known format,
// backend, opt_level and scaling recipe, margin >= 0, amax_history_len >= 1,
// interval >= 1, and a host precision FP8 can run under (not fp16). Every
// refusal is an accel::sdk::Error with one line naming the option. The
// checks are a pure function of the raw values (validate), so they are
// unit-testable without a host. Thread-safety: plain values.
#pragma once

#include <accel/sdk/services.hpp>

#include <cstdint>
#include <string>

namespace accel::fp8 {

enum class Format { e4m3, hybrid };          // HYBRID: E5M2 gradients
enum class AmaxAlgo { most_recent, max };
enum class Recipe { delayed, current };      // DelayedScaling / Float8CurrentScaling
enum class Backend { te, msamp };

// The options as the user gave them (text where the host cannot validate).
struct RawOptions {
  std::string fp8_format = "HYBRID";
  std::string backend = "te";
  std::string opt_level = "O2";
  bool opt_level_given = false;
  std::string amax_compute_algo = "most_recent";
  std::string recipe = "delayed";
  int64_t margin = 0;
  int64_t interval = 1;
  int64_t amax_history_len = 1024;
  std::string override_linear_precision = "false,false,false";  // fprop,dgrad,wgrad
  bool use_autocast_during_eval = false;
  bool count_saturation = true;
  bool fp8_weight_gather = true;             // offer the gather codec (sharding plugins gather FP8 weights)
  std::string state_log;                     // test-only dump; "" = none
  std::string mixed_precision = "no";        // the host's train.mixed_precision
};

struct Fp8Config {
  Format format = Format::hybrid;
  Backend backend = Backend::te;
  int opt_level = 2;                         // msamp only: 1 or 2
  AmaxAlgo algo = AmaxAlgo::most_recent;
  Recipe recipe = Recipe::delayed;
  int32_t margin = 0;
  int64_t interval = 1;
  int64_t amax_history_len = 1024;
  bool override_fprop = false;
  bool override_dgrad = false;
  bool override_wgrad = false;
  bool use_autocast_during_eval = false;
  bool count_saturation = true;
  // Offer the parameter gather codec (fp8_gather_codec.h): a sharding plugin
  // then all-gathers block linear weights as E4M3 codes.
  bool fp8_weight_gather = true;
  std::string state_log;

  // Whether a sharding plugin's gather may carry the block linears'
  // weights as E4M3 codes (fp8_gather_codec.h): the codec is offered, every
  // use of the gathered weight is its FP8 cast (fprop and dgrad not
  // overridden; wgrad does not read it), the gather does not feed an
  // evaluation forward in the run's precision (ACCEL_GATHER_CODEC_NO_GRAD
  // without use_autocast_during_eval), and the parameters are bf16, fp16
  // or fp32.
  bool gathers_weights_encoded(uint32_t codec_flags, DLDataType param_dtype) const;

  // E4M3FN for inputs and weights; E5M2 for gradients under HYBRID.
  DLDataType forward_dtype() const;
  DLDataType backward_dtype() const;
};

// Checks and resolves the raw values; throws Error with one line.
Fp8Config validate(const RawOptions& raw);

// Reads the plugin's options and train.mixed_precision, then validate().
Fp8Config read_config(const sdk::Services& services);

// The precision policy MS-AMP's opt_level asks of the gradient reducer and
// the optimizer (accel/precision.h): O1 communicates gradients in FP8 E4M3
// with per-tensor scales (MS-AMP's all-reduce format); O2 also keeps AdamW's
// first moment in E4M3 and its second in FP16, each with a per-tensor scale.
AccelPrecisionPolicy msamp_policy(int opt_level);

// A small JSON object of the recipe (checkpoints, logs).
std::string to_json(const Fp8Config& config);

const char* to_string(Format format);
const char* to_string(AmaxAlgo algo);

}  // namespace accel::fp8
