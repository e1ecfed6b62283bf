// Plugin option flags, config sections and validation (see plugin_options.h).
#include "host/plugin/plugin_options.h"

#include <boost/program_options.hpp>

#include "host/cli/options.h"
#include "host/plugin/option_values.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace po = boost::program_options;

namespace accel::plugin {
namespace {

std::string describe(const AccelOptionSpec& spec) {
  std::string text = spec.help ? spec.help : "";
  text += std::string(" [") + option_type_name(spec.type);
  if (spec.num_allowed_values > 0) {
    text += ": ";
    for (size_t i = 0; i < spec.num_allowed_values; ++i) text += (i ? "|" : "") + std::string(spec.allowed_values[i]);
  }
  if (spec.min_value || spec.max_value) {
    text += std::string(", ") + (spec.min_value ? spec.min_value : "") + ".." + (spec.max_value ? spec.max_value : "");
  }
  text += "]";
  if (spec.flags & ACCEL_OPTION_FLAG_REQUIRED) text += " (required)";
  if (spec.flags & ACCEL_OPTION_FLAG_DEPRECATED) text += " (deprecated)";
  return text;
}

runtime::OptionValue host_value(AccelOptionType type, const std::string& text, double number = 0.0,
                                int64_t integer = 0) {
  runtime::OptionValue v;
  v.type = type;
  v.text = text;
  v.given = true;
  v.as_double = number;
  v.as_int = integer;
  return v;
}

}  // namespace

po::options_description describe_plugin_options(const PluginRegistry& registry) {
  po::options_description all;
  for (const auto& plugin : registry.plugins()) {
    po::options_description section("Plugin " + plugin->name() + " (" + plugin->descriptor().description +
                                    "; [" + plugin->name() + "] in --config)");
    for (const AccelOptionSpec* spec : plugin->options()) {
      auto* value = po::value<std::string>()->value_name(option_type_name(spec->type));
      if (spec->default_value) value->default_value(spec->default_value);
      if (spec->type == ACCEL_OPTION_BOOL) value->implicit_value("true");
      section.add_options()((plugin->name() + "." + spec->name).c_str(), value, describe(*spec).c_str());
    }
    all.add(section);
  }
  return all;
}

void fill_option_store(const PluginRegistry& registry, const std::map<std::string, std::string>& given,
                       const RunConfig& config, runtime::OptionStore& store) {
  for (const auto& plugin : registry.plugins()) {
    for (const AccelOptionSpec* spec : plugin->options()) {
      const std::string key = plugin->name() + "." + spec->name;
      const auto it = given.find(key);
      runtime::OptionValue value;
      if (it != given.end()) {
        std::string why;
        auto parsed = parse_option_value(*spec, it->second, &why);
        if (!parsed) throw cli::UsageError("--" + key + ": " + why);
        value = *parsed;
        value.given = true;
        if (spec->flags & ACCEL_OPTION_FLAG_DEPRECATED) {
          log::warn("--" + key + " is deprecated: " + std::string(spec->help ? spec->help : ""));
        }
      } else if (spec->default_value) {
        std::string why;
        value = *parse_option_value(*spec, spec->default_value, &why);  // validated at load
      } else if (spec->flags & ACCEL_OPTION_FLAG_REQUIRED) {
        throw cli::UsageError("--" + key + " is required by plugin " + plugin->name());
      } else {
        value.type = spec->type;
        value.has_value = false;
      }
      store.put(plugin->name(), spec->name, value);
    }
  }
  const auto& o = config.optimizer;
  const int64_t micro = config.batch_size / config.grad_accum;  // per rank once DP splits it
  store.put("train", "grad_accum_steps", host_value(ACCEL_OPTION_INT, std::to_string(config.grad_accum),
                                                    static_cast<double>(config.grad_accum), config.grad_accum));
  store.put("train", "micro_batch_size",
            host_value(ACCEL_OPTION_INT, std::to_string(micro), static_cast<double>(micro), micro));
  runtime::OptionValue max_grad_norm = host_value(ACCEL_OPTION_DOUBLE, strformat("%g", o.grad_clip), o.grad_clip);
  max_grad_norm.given = o.grad_clip_given;  // a plugin's own clipping option may then take its place
  store.put("train", "max_grad_norm", max_grad_norm);
  store.put("train", "lr", host_value(ACCEL_OPTION_DOUBLE, strformat("%g", o.lr), o.lr));
  store.put("train", "weight_decay", host_value(ACCEL_OPTION_DOUBLE, strformat("%g", o.weight_decay), o.weight_decay));
  // The schedule's settings, for a plugin whose configuration names its own
  // schedule with "auto" values (deepspeed_zero's WarmupLR & co.).
  store.put("train", "warmup_steps",
            host_value(ACCEL_OPTION_INT, std::to_string(o.warmup_steps), static_cast<double>(o.warmup_steps),
                       o.warmup_steps));
  const int64_t horizon = o.decay_steps > 0 ? o.decay_steps : config.steps;
  store.put("train", "decay_steps",
            host_value(ACCEL_OPTION_INT, std::to_string(horizon), static_cast<double>(horizon), horizon));
  store.put("train", "steps", host_value(ACCEL_OPTION_INT, std::to_string(config.steps),
                                         static_cast<double>(config.steps), config.steps));
  store.put("train", "min_lr", host_value(ACCEL_OPTION_DOUBLE, strformat("%g", o.min_lr), o.min_lr));
  store.put("train", "seed", host_value(ACCEL_OPTION_INT, std::to_string(config.seed), static_cast<double>(config.seed),
                                        static_cast<int64_t>(config.seed)));
  // Intra-op CPU threads (--threads; 0: LibTorch's default), for a plugin
  // that runs host work of its own (the sharding plugins' offloaded AdamW).
  store.put("train", "threads", host_value(ACCEL_OPTION_INT, std::to_string(config.threads),
                                           static_cast<double>(config.threads), config.threads));
  // The fp16 loss scaler's settings, for a plugin whose configuration names
  // them (deepspeed_zero's fp16 section) and must agree.
  const GradScalerOptions& scaler = config.grad_scaler;
  store.put("train", "loss_scale_init",
            host_value(ACCEL_OPTION_DOUBLE, strformat("%g", scaler.init_scale), scaler.init_scale));
  store.put("train", "loss_scale_growth_interval",
            host_value(ACCEL_OPTION_INT, std::to_string(scaler.growth_interval),
                       static_cast<double>(scaler.growth_interval), scaler.growth_interval));
  store.put("train", "loss_scale_hysteresis",
            host_value(ACCEL_OPTION_INT, std::to_string(scaler.hysteresis), static_cast<double>(scaler.hysteresis),
                       scaler.hysteresis));
  store.put("train", "loss_scale_min",
            host_value(ACCEL_OPTION_DOUBLE, strformat("%g", scaler.min_scale), scaler.min_scale));
  runtime::OptionValue precision = host_value(ACCEL_OPTION_ENUM, to_string(config.mixed_precision));
  precision.enum_index = static_cast<int32_t>(config.mixed_precision);
  store.put("train", "mixed_precision", precision);
  runtime::OptionValue optimizer = host_value(ACCEL_OPTION_ENUM, "adamw");
  optimizer.enum_index = 0;
  store.put("train", "optimizer", optimizer);
}

}  // namespace accel::plugin
