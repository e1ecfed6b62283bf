// fp8_config.cpp — reading and checking FP8RecipeKwargs (see fp8_config.h).
// Every message is one line that names the option and the limit.
#include "fp8_config.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <cctype>
#include <vector>

namespace accel::fp8 {

using sdk::Error;
using sdk::format;

namespace {

// Accelerate upper-cases fp8_format and backend before checking them.
std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

// "a, b,c" -> {"a", "b", "c"}, spaces trimmed; empty pieces kept (and refused).
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(',', start);
    std::string piece = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const size_t first = piece.find_first_not_of(" \t");
    const size_t last = piece.find_last_not_of(" \t");
    out.push_back(first == std::string::npos ? "" : piece.substr(first, last - first + 1));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

[[noreturn]] void refuse(const std::string& message) { throw Error(ACCEL_ERROR_INVALID_ARGUMENT, message); }

}  // namespace

DLDataType Fp8Config::forward_dtype() const { return DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1}; }

DLDataType Fp8Config::backward_dtype() const {
  return format == Format::hybrid ? DLDataType{ACCEL_DL_FLOAT8_E5M2, 8, 1} : DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};
}

bool Fp8Config::gathers_weights_encoded(uint32_t codec_flags, DLDataType param_dtype) const {
  const bool float_params = param_dtype.lanes == 1 &&
                            ((param_dtype.code == kDLFloat && (param_dtype.bits == 16 || param_dtype.bits == 32)) ||
                             (param_dtype.code == kDLBfloat && param_dtype.bits == 16));
  if (!fp8_weight_gather || !float_params || override_fprop || override_dgrad) return false;
  return (codec_flags & ACCEL_GATHER_CODEC_NO_GRAD) == 0 || use_autocast_during_eval;
}

const char* to_string(Format f) { return f == Format::hybrid ? "HYBRID" : "E4M3"; }
const char* to_string(AmaxAlgo a) { return a == AmaxAlgo::max ? "max" : "most_recent"; }

Fp8Config validate(const RawOptions& raw) {
  Fp8Config c;
  const std::string fmt = upper(raw.fp8_format);
  if (fmt == "HYBRID") {
    c.format = Format::hybrid;
  } else if (fmt == "E4M3") {
    c.format = Format::e4m3;
  } else {
    refuse("fp8_format: unknown value '" + raw.fp8_format +
           "' (HYBRID: E4M3 forward, E5M2 gradients; or E4M3 everywhere)");
  }

  const std::string backend = upper(raw.backend);
  if (backend == "TE") {
    c.backend = Backend::te;
  } else if (backend == "MSAMP") {
    c.backend = Backend::msamp;
  } else {
    refuse("backend: unknown value '" + raw.backend + "' (te or msamp)");
  }

  const std::string level = upper(raw.opt_level);
  if (level == "O3") {
    refuse("opt_level O3 is refused: in Accelerate it is DeepSpeed-only (FP8 weights and master weights inside "
           "DeepSpeed's ZeRO optimizer); use O1 or O2");
  }
  if (level != "O1" && level != "O2") refuse("opt_level: unknown value '" + raw.opt_level + "' (O1 or O2)");
  c.opt_level = level == "O1" ? 1 : 2;
  if (raw.opt_level_given && c.backend != Backend::msamp) {
    refuse("opt_level " + level + " is an MS-AMP optimisation level; it needs --fp8.backend msamp");
  }

  if (raw.amax_compute_algo == "max") {
    c.algo = AmaxAlgo::max;
  } else if (raw.amax_compute_algo == "most_recent") {
    c.algo = AmaxAlgo::most_recent;
  } else {
    refuse("amax_compute_algo: unknown value '" + raw.amax_compute_algo + "' (max or most_recent)");
  }

  if (raw.recipe == "delayed") {
    c.recipe = Recipe::delayed;
  } else if (raw.recipe == "current") {
    c.recipe = Recipe::current;
  } else {
    refuse("recipe: unknown value '" + raw.recipe + "' (delayed or current)");
  }

  if (raw.margin < 0 || raw.margin > 64) {
    refuse(format("margin %lld: must be in 0..64 (scale = fp8_max / amax / 2^margin)",
                  static_cast<long long>(raw.margin)));
  }
  c.margin = static_cast<int32_t>(raw.margin);
  if (raw.interval < 1) {
    refuse(format("interval %lld: must be at least 1 (scales are recomputed every interval steps)",
                  static_cast<long long>(raw.interval)));
  }
  c.interval = raw.interval;
  if (raw.amax_history_len < 1 || raw.amax_history_len > (int64_t{1} << 20)) {
    refuse(format("amax_history_len %lld: must be in 1..1048576 (rows of the amax history)",
                  static_cast<long long>(raw.amax_history_len)));
  }
  c.amax_history_len = raw.amax_history_len;

  if (raw.mixed_precision == "fp16") {
    refuse("fp8 with --mixed-precision fp16 is refused: FP8 training keeps its own per-tensor scales and runs "
           "under bf16 or fp32 (no); fp16's loss scaler would scale the gradients FP8 scales already");
  }

  const std::vector<std::string> flags = split_commas(raw.override_linear_precision);
  bool* targets[3] = {&c.override_fprop, &c.override_dgrad, &c.override_wgrad};
  if (flags.size() != 3) {
    refuse("override_linear_precision: '" + raw.override_linear_precision +
           "' is not three comma-separated booleans (fprop,dgrad,wgrad)");
  }
  for (size_t i = 0; i < 3; ++i) {
    const std::string v = upper(flags[i]);
    if (v == "TRUE" || v == "1") {
      *targets[i] = true;
    } else if (v != "FALSE" && v != "0") {
      refuse("override_linear_precision: '" + flags[i] + "' is not true or false (fprop,dgrad,wgrad)");
    }
  }
  c.use_autocast_during_eval = raw.use_autocast_during_eval;
  c.count_saturation = raw.count_saturation;
  c.fp8_weight_gather = raw.fp8_weight_gather;
  c.state_log = raw.state_log;
  return c;
}

Fp8Config read_config(const sdk::Services& s) {
  RawOptions raw;
  raw.fp8_format = s.option<std::string>("fp8_format");
  raw.backend = s.option<std::string>("backend");
  raw.opt_level = s.option<std::string>("opt_level");
  raw.opt_level_given = s.option_is_set("opt_level");
  raw.amax_compute_algo = s.option<std::string>("amax_compute_algo");
  raw.recipe = s.option<std::string>("recipe");
  raw.margin = s.option<int64_t>("margin");
  raw.interval = s.option<int64_t>("interval");
  raw.amax_history_len = s.option<int64_t>("amax_history_len");
  raw.override_linear_precision = s.option<std::string>("override_linear_precision");
  raw.use_autocast_during_eval = s.option<bool>("use_autocast_during_eval");
  // Counting reads every cast's tensors back to the host: on a GPU rank that
  // is a device synchronisation per cast, so it is on there only when asked.
  raw.count_saturation = s.option_is_set("count_saturation") ? s.option<bool>("count_saturation")
                                                              : s.identity().device.device_type == kDLCPU;
  raw.fp8_weight_gather = s.option<bool>("fp8_weight_gather");
  raw.state_log = s.option<std::string>("state_log");
  raw.mixed_precision = s.option<std::string>("train.mixed_precision");
  return validate(raw);
}

AccelPrecisionPolicy msamp_policy(int opt_level) {
  AccelPrecisionPolicy policy{};
  policy.struct_size = sizeof(policy);
  policy.grad_comm_dtype = DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};
  if (opt_level >= 2) {
    policy.exp_avg_dtype = DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};
    policy.exp_avg_sq_dtype = DLDataType{kDLFloat, 16, 1};
  }
  return policy;
}

std::string to_json(const Fp8Config& c) {
  return format(
      "{\"fp8_format\":\"%s\",\"backend\":\"%s\",\"opt_level\":\"O%d\",\"recipe\":\"%s\",\"margin\":%d,"
      "\"interval\":%lld,\"amax_history_len\":%lld,\"amax_compute_algo\":\"%s\","
      "\"override_linear_precision\":[%s,%s,%s],\"use_autocast_during_eval\":%s}",
      to_string(c.format), c.backend == Backend::te ? "te" : "msamp", c.opt_level,
      c.recipe == Recipe::delayed ? "delayed" : "current", c.margin, static_cast<long long>(c.interval),
      static_cast<long long>(c.amax_history_len), to_string(c.algo), c.override_fprop ? "true" : "false",
      c.override_dgrad ? "true" : "false", c.override_wgrad ? "true" : "false",
      c.use_autocast_during_eval ? "true" : "false");
}

}  // namespace accel::fp8
