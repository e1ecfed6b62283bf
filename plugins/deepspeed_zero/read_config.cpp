// read_config.cpp — the deepspeed_zero options, accel-host's train.* section
// and the hf_ds_config file read through the services, then resolved by
// resolve_config (see zero_config.h); NVMe paths probed for writability.
// The file is opened by the SDK's rule (accel/sdk/input_file.hpp): a regular
// file only, never a blocking open, bounded in size.
#include <accel/sdk/error.hpp>
#include <accel/sdk/input_file.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "zero_config.h"

namespace accel::zero {

using sdk::Error;
using sdk::format;

namespace {

[[noreturn]] void refuse(const std::string& message) { throw Error(ACCEL_ERROR_INVALID_ARGUMENT, message); }

// Far above any DeepSpeed config (Accelerate's examples are about 1 KiB).
constexpr uint64_t kMaxConfigBytes = 4u << 20;

}  // namespace

ZeroConfig read_config(const sdk::Services& s) {
  const std::string optimizer = s.option<std::string>("train.optimizer");
  if (optimizer != "adamw") {
    throw Error(ACCEL_ERROR_UNSUPPORTED, "train.optimizer " + optimizer + ": the partitioned optimizer is AdamW only");
  }
  HostSettings h;
  h.world_size = s.world_size();
  h.sequence_parallel_size = static_cast<int32_t>(s.option<int64_t>("sequence_parallel_size"));
  h.grad_accum = s.option<int64_t>("train.grad_accum_steps");
  h.batch_size = s.option<int64_t>("train.micro_batch_size") * h.grad_accum;
  h.max_grad_norm = s.option<double>("train.max_grad_norm");
  h.max_grad_norm_given = s.option_is_set("train.max_grad_norm");
  h.lr = s.option<double>("train.lr");
  h.min_lr = s.option<double>("train.min_lr");
  h.weight_decay = s.option<double>("train.weight_decay");
  h.warmup_steps = s.option<int64_t>("train.warmup_steps");
  h.decay_steps = s.option<int64_t>("train.decay_steps");
  h.mixed_precision = s.option<std::string>("train.mixed_precision");
  h.loss_scale_init = s.option<double>("train.loss_scale_init");
  h.loss_scale_growth_interval = s.option<int64_t>("train.loss_scale_growth_interval");
  h.loss_scale_hysteresis = s.option<int64_t>("train.loss_scale_hysteresis");
  h.loss_scale_min = s.option<double>("train.loss_scale_min");

  PluginFields f;
  const auto given_text = [&](const char* name) -> std::optional<std::string> {
    return s.option_is_set(name) ? std::optional<std::string>(s.option<std::string>(name)) : std::nullopt;
  };
  f.hf_ds_config = s.option<std::string>("hf_ds_config");
  if (s.option_is_set("gradient_accumulation_steps")) {
    f.gradient_accumulation_steps = s.option<int64_t>("gradient_accumulation_steps");
  }
  if (s.option_is_set("gradient_clipping")) f.gradient_clipping = s.option<double>("gradient_clipping");
  if (s.option_is_set("zero_stage")) f.zero_stage = s.option<int64_t>("zero_stage");
  f.is_train_batch_min = s.option<bool>("is_train_batch_min");
  f.offload_optimizer_device = given_text("offload_optimizer_device");
  f.offload_param_device = given_text("offload_param_device");
  f.offload_optimizer_nvme_path = given_text("offload_optimizer_nvme_path");
  f.offload_param_nvme_path = given_text("offload_param_nvme_path");
  if (s.option_is_set("zero3_init_flag")) f.zero3_init_flag = s.option<bool>("zero3_init_flag");
  if (s.option_is_set("zero3_save_16bit_model")) f.zero3_save_16bit_model = s.option<bool>("zero3_save_16bit_model");
  f.transformer_moe_cls_names = s.option<std::string>("transformer_moe_cls_names");
  f.enable_msamp = s.option<bool>("enable_msamp");
  f.msamp_opt_level = given_text("msamp_opt_level");

  std::string text;
  std::string source = "the DeepSpeed config";
  if (!f.hf_ds_config.empty()) {
    source = "hf_ds_config " + f.hf_ds_config;
    try {
      text = sdk::read_input_file(f.hf_ds_config, kMaxConfigBytes, "--deepspeed_zero.hf_ds_config");
    } catch (const sdk::InputFileError& e) {
      refuse(e.what());
    }
    if (text.empty()) refuse(source + ": not valid JSON: the file is empty");
  }
  ZeroConfig c = resolve_config(f, h, text, source);
  // NVMe: the path must be a writable directory (checked by writing a probe
  // file, as the I/O thread would).
  for (const auto& [device, path, key] :
       {std::tuple<OffloadDevice, std::string, const char*>{c.offload_optimizer, c.optimizer_nvme_path,
                                                            "offload_optimizer.nvme_path"},
        {c.offload_param, c.param_nvme_path, "offload_param.nvme_path"}}) {
    if (device != OffloadDevice::nvme) continue;
    const std::filesystem::path probe = std::filesystem::path(path) / format(".accel_nvme_probe.%d", s.rank());
    std::ofstream out(probe, std::ios::binary | std::ios::trunc);
    out << "probe";
    out.close();
    std::error_code ec;
    std::filesystem::remove(probe, ec);
    if (!out) {
      // The path comes from the config: shown whole up to any real path's
      // length, an unbounded or multi-line one through describe().
      refuse(std::string(key) + " " + shown_text(path, 256) + ": not a writable directory");
    }
  }
  return c;
}

}  // namespace accel::zero
