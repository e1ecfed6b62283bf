// accelerate's config file and launch flags mapped onto Accel's options
// (accelerate_config.h): the file read into launch settings, the flags laid
// over them, and one mapping of the result. The mapping reads every setting
// it is given: one no part of it reads is a bug, refused as such, so a key
// added to accelerate_keys.cpp cannot be silently dropped.
#include "host/cli/accelerate_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>

#include "accel/sdk/input_file.hpp"
#include "accel/sdk/json_input.hpp"
#include "host/cli/accelerate_keys.h"
#include "host/cli/options.h"
#include "host/cli/safe_yaml.h"
#include "host/cli/whole_number.h"
#include "host/util/strformat.h"

namespace accel::cli {
namespace {

constexpr uint64_t kMaxYamlBytes = 1ull << 20;  // accelerate writes a few hundred bytes
constexpr uint64_t kMaxDsJsonBytes = 4ull << 20;  // the deepspeed_zero plugin's bound

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// ------------------------------------------------------------ the file

// ClusterConfig's sections: a mapping of keys each.
const std::set<std::string> kSections = {"fsdp_config", "deepspeed_config", "megatron_lm_config", "fp8_config",
                                         "dynamo_config", "mpirun_config", "parallelism_config", "ipex_config",
                                         "tp_config"};

// SageMakerConfig's own fields: a file holding one is accelerate's SageMaker config.
const std::set<std::string> kSageMakerKeys = {
    "ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "base_job_name", "pytorch_version",
    "transformers_version", "py_version", "sagemaker_inputs_file", "sagemaker_metrics_file", "additional_args"};

// Settings whose value accelerate takes as a list.
const std::set<std::string> kListKeys = {"fp8_override_linear_precision", "tpu_env", "tpu_vm", "commands"};

void store(AccelerateSettings& out, const std::string& name, const YamlValue& value, const std::string& origin) {
  AccelerateSetting setting{{}, origin, false};
  switch (value.kind) {
    case YamlValue::Kind::null:
      return;  // None: accelerate's default, as if absent
    case YamlValue::Kind::map:
      throw UsageError(origin + " must be a plain value, got a mapping");
    case YamlValue::Kind::list:
      if (kListKeys.count(name) == 0) throw UsageError(origin + " must be a plain value, got a list");
      setting.list = true;
      for (const YamlValue& item : value.items) {
        if (item.kind != YamlValue::Kind::scalar) throw UsageError(origin + " must be a list of plain values");
        setting.value += (setting.value.empty() ? "" : ",") + item.scalar;
      }
      break;
    case YamlValue::Kind::scalar:
      setting.value = value.scalar;
      break;
  }
  // One line: the value becomes an option's value and a word of a printed
  // command, where a newline would start another.
  if (std::any_of(setting.value.begin(), setting.value.end(), [](unsigned char c) { return c < 0x20; })) {
    throw UsageError(origin + " must be one line without control characters");
  }
  out[name] = std::move(setting);
}

[[noreturn]] void unknown_key(const std::string& path, const std::string& key) {
  throw UsageError(path + ": " + sdk::describe(key) + " is not a key of accelerate " + kAccelerateVersion +
                   "'s config that Accel knows (docs/launch.md lists them)");
}

// ------------------------------------------------------------ the DeepSpeed JSON

// What accelerate lets a DeepSpeed JSON decide (DeepSpeedPlugin's
// set_mixed_precision and fill_match: a concrete value stays, "auto" is
// filled from the launch settings).
struct DsJsonSettings {
  std::optional<bool> fp16, bf16;
  std::vector<std::pair<std::string, std::string>> loss_scale;  // grad_scaler.* options
  std::optional<int64_t> gradient_accumulation_steps;
};

// `origin` names the setting that named the file, in messages.
DsJsonSettings read_ds_json(const std::string& path, const std::string& origin) {
  std::string text;
  try {
    text = sdk::read_input_file(path, kMaxDsJsonBytes, "the DeepSpeed config");
  } catch (const sdk::InputFileError& e) {
    throw UsageError(origin + ": " + e.what());
  }
  nlohmann::json json;
  try {
    json = sdk::parse_json(text, path);
  } catch (const sdk::JsonInputError& e) {
    throw UsageError(origin + ": " + e.what());
  }
  DsJsonSettings out;
  if (!json.is_object()) return out;  // the plugin refuses it with its own line
  // Values of another type are left to the plugin, which names them.
  const auto enabled = [&](const char* section) -> std::optional<bool> {
    const auto it = json.find(section);
    if (it == json.end() || !it->is_object()) return std::nullopt;
    const auto flag = it->find("enabled");
    if (flag == it->end() || !flag->is_boolean()) return std::nullopt;
    return flag->get<bool>();
  };
  out.fp16 = enabled("fp16");
  out.bf16 = json.contains("bf16") ? enabled("bf16") : enabled("bfloat16");
  if (out.fp16.value_or(false)) {
    const nlohmann::json& fp16 = json["fp16"];
    const auto whole = [&](const char* key, int64_t min, int64_t max) -> std::optional<int64_t> {
      const auto it = fp16.find(key);
      if (it == fp16.end() || !it->is_number_integer()) return std::nullopt;
      const int64_t value = it->get<int64_t>();
      return value >= min && value <= max ? std::optional<int64_t>(value) : std::nullopt;
    };
    if (const auto power = whole("initial_scale_power", 0, 126)) {
      out.loss_scale.emplace_back("grad_scaler.init_scale", strformat("%.17g", std::ldexp(1.0, int(*power))));
    }
    if (const auto window = whole("loss_scale_window", 1, INT64_MAX)) {
      out.loss_scale.emplace_back("grad_scaler.growth_interval", std::to_string(*window));
    }
    if (const auto hysteresis = whole("hysteresis", 1, INT64_MAX)) {
      out.loss_scale.emplace_back("grad_scaler.hysteresis", std::to_string(*hysteresis));
    }
    const auto min_scale = fp16.find("min_loss_scale");
    if (min_scale != fp16.end() && min_scale->is_number() && std::isfinite(min_scale->get<double>()) &&
        min_scale->get<double>() >= 0) {
      out.loss_scale.emplace_back("grad_scaler.min_scale", strformat("%.17g", min_scale->get<double>()));
    }
  }
  const auto gas = json.find("gradient_accumulation_steps");
  if (gas != json.end() && gas->is_number_integer() && gas->get<int64_t>() >= 1 &&
      gas->get<int64_t>() <= (1 << 20)) {
    out.gradient_accumulation_steps = gas->get<int64_t>();
  }
  return out;
}

// ------------------------------------------------------------ the mapping

const AccelerateKey* any_key(const std::string& name) {
  for (const AccelerateKey* key = accelerate_keys_begin(); key != accelerate_keys_end(); ++key) {
    if (name == key->name) return key;
  }
  return nullptr;
}

// FSDP's sharding strategies by the numbers older accelerate configs wrote.
std::string sharding_strategy(const std::string& value) {
  static const std::map<std::string, std::string> by_number = {
      {"1", "FULL_SHARD"}, {"2", "SHARD_GRAD_OP"}, {"3", "NO_SHARD"}, {"4", "HYBRID_SHARD"},
      {"5", "HYBRID_SHARD_ZERO2"}};
  const auto it = by_number.find(value);
  return it == by_number.end() ? value : it->second;
}

// A Hugging Face model's layer class (GPT2Block, LlamaDecoderLayer) is
// Accel's transformer block: the unit kind "block".
std::string unit_kinds(const std::string& value) {
  std::string kinds;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t end = std::min(value.find(',', start), value.size());
    std::string name = value.substr(start, end - start);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    const auto ends_with = [&](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    const std::string kind = ends_with("Block") || ends_with("Layer") ? "block" : name;
    if (kinds.find(kind) == std::string::npos) kinds += (kinds.empty() ? "" : ",") + kind;
    start = end + 1;
  }
  return kinds;
}

const std::set<std::string> kStrategyPlugins = {"fsdp", "deepspeed_zero", "megatron", "ddp"};

class Mapper {
 public:
  Mapper(AccelerateSettings settings, bool file_given, std::string path)
      : settings_(std::move(settings)), file_given_(file_given) {
    out_.path = std::move(path);
  }

  AccelerateConfig run() {
    refuse_what_cannot_be_honoured();
    launch_level();
    const std::string type = distributed_type();
    strategy(type);
    precision(type);
    if (has("use_cpu") && boolean("use_cpu")) add("device", "cpu", "device");
    check_everything_was_read(type);
    return std::move(out_);
  }

 private:
  // ---- reading settings (each read is recorded)
  const AccelerateSetting* find(const std::string& name) {
    read_.insert(name);
    const auto it = settings_.find(name);
    return it == settings_.end() ? nullptr : &it->second;
  }
  bool has(const std::string& name) { return find(name) != nullptr; }
  const std::string& origin(const std::string& name) { return find(name)->origin; }

  [[noreturn]] void fail(const std::string& name, const std::string& why) {
    throw UsageError(origin(name) + " " + why);
  }

  std::string text(const std::string& name) {
    const AccelerateSetting* setting = find(name);
    if (setting->list && kListKeys.count(name) == 0) fail(name, "must be a plain value, got a list");
    return setting->value;
  }

  int64_t whole(const std::string& name, int64_t min, int64_t max) {
    const std::string value = text(name);
    const std::optional<int64_t> number = whole_number(value, min, max);
    if (!number) {
      fail(name, strformat("must be a whole number from %lld to %lld, got ", static_cast<long long>(min),
                           static_cast<long long>(max)) +
                     sdk::describe(value));
    }
    return *number;
  }

  double number(const std::string& name, double min) {
    const std::string value = text(name);
    errno = 0;
    char* end = nullptr;
    const double parsed = value.empty() ? NAN : std::strtod(value.c_str(), &end);
    if (value.empty() || errno != 0 || *end != '\0' || !std::isfinite(parsed) || parsed < min) {
      fail(name, strformat("must be a number of at least %g, got ", min) + sdk::describe(value));
    }
    return parsed;
  }

  // accelerate's str_to_bool, which also reads YAML's true/false.
  bool boolean(const std::string& name) {
    const std::string value = lower(text(name));
    if (value == "true" || value == "1" || value == "yes" || value == "y" || value == "t" || value == "on") {
      return true;
    }
    if (value == "false" || value == "0" || value == "no" || value == "n" || value == "f" || value == "off") {
      return false;
    }
    fail(name, "must be true or false, got " + sdk::describe(find(name)->value));
  }
  std::string boolean_text(const std::string& name) { return boolean(name) ? "true" : "false"; }

  void add(const std::string& option, const std::string& value, const std::string& setting) {
    out_.options.push_back({option, value, setting});
  }
  // A strategy plugin's own option: it goes with the strategy.
  void add_strategy(const std::string& option, const std::string& value) { add(option, value, "strategy"); }

  // The settings the file's section `section` holds, in name order.
  std::vector<std::string> names_in(const std::string& section) const {
    std::vector<std::string> names;
    for (const auto& [name, setting] : settings_) {
      const AccelerateKey* key = any_key(name);
      if (key != nullptr && key->section != nullptr && section == key->section) names.push_back(name);
    }
    return names;
  }

  // ---- the parts of the mapping

  void refuse_what_cannot_be_honoured() {
    for (const auto& [name, setting] : settings_) {
      const AccelerateKey* key = any_key(name);
      if (key == nullptr || key->refusal == nullptr) continue;
      read_.insert(name);
      if (!is_inert(*key, setting.value)) fail(name, std::string("is not honoured: ") + key->refusal);
    }
  }

  void launch_level() {
    if (has("compute_environment") && text("compute_environment") != "LOCAL_MACHINE") {
      fail("compute_environment", sdk::describe(text("compute_environment")) +
                                      " is not honoured: Accel runs on the machines it is started on (LOCAL_MACHINE)");
    }
    if (has("num_processes")) out_.num_processes = whole("num_processes", 1, 1 << 20);
    if (has("num_machines")) out_.num_machines = whole("num_machines", 1, 1 << 16);
    if (has("machine_rank")) out_.machine_rank = whole("machine_rank", 0, out_.num_machines - 1);
    if (has("main_process_ip")) {
      out_.notes.push_back("main_process_ip " + sdk::describe(text("main_process_ip")) +
                           ": mpirun starts every rank from the machine it runs on, reaching the others through the "
                           "hostfile (or srun through Slurm); not used");
    }
    if (has("main_process_port")) {
      whole("main_process_port", 0, 65535);
      out_.notes.push_back("main_process_port: mpirun's daemons connect without a rendezvous port; not used");
    }
    if (has("rdzv_backend") && text("rdzv_backend") != "static") {
      out_.notes.push_back("rdzv_backend " + sdk::describe(text("rdzv_backend")) +
                           ": mpirun (or srun) is the rendezvous; not used");
    }
    if (has("monitor_interval")) {
      number("monitor_interval", 0.0);
      out_.notes.push_back("monitor_interval: the supervisor (--max_restarts) waits on mpirun itself; not used");
    }
    if (has("same_network")) boolean("same_network");  // Open MPI picks its interfaces
    if (has("quiet")) boolean("quiet");                // Accel's launch prints one line either way
    if (has("use_parallelism_config")) boolean("use_parallelism_config");  // the sizes below are read either way
    if (has("gpu_ids")) out_.gpu_ids = text("gpu_ids");
    if (has("debug")) out_.debug = boolean("debug");
    if (has("enable_cpu_affinity")) out_.cpu_affinity = boolean("enable_cpu_affinity");
    if (has("mpirun_hostfile")) out_.hostfile = text("mpirun_hostfile");
    if (has("mpirun_ccl")) out_.notes.push_back("mpirun_config.mpirun_ccl: oneCCL is not used; MPI moves CPU tensors");
    if (has("num_cpu_threads_per_process")) {
      add("threads", std::to_string(whole("num_cpu_threads_per_process", 1, 1 << 16)), "threads");
    }
    if (has("dynamo_backend") && lower(text("dynamo_backend")) != "no") {
      fail("dynamo_backend", "is not honoured: there is no torch.compile in a C++ host");
    }
    // Only a backend makes them mean anything (accelerate reads them with one).
    for (const char* key : {"dynamo_mode", "dynamo_use_fullgraph", "dynamo_use_dynamic",
                            "dynamo_use_regional_compilation"}) {
      find(key);
    }
  }

  std::string distributed_type() {
    if (!has("distributed_type")) {
      if (file_given_) throw UsageError(out_.path + ": distributed_type is missing (accelerate requires it too)");
      return "";
    }
    return text("distributed_type");
  }

  void strategy(const std::string& type) {
    if (type == "FSDP") {
      add_strategy("plugin", "fsdp");
      fsdp();
      parallelism(type);
    } else if (type == "DEEPSPEED") {
      add_strategy("plugin", "deepspeed_zero");
      deepspeed();
      parallelism(type);
    } else if (type == "MEGATRON_LM") {
      add_strategy("plugin", "megatron");
      megatron();
      parallelism(type);
    } else if (type == "MULTI_CPU" || type == "MULTI_GPU") {
      if (out_.num_processes.value_or(1) > 1) add_strategy("plugin", "ddp");
      parallelism(type);
    } else if (type == "NO" || type.empty()) {
      parallelism(type);
    } else {
      fail("distributed_type", sdk::describe(type) +
                                   " is not honoured: Accel runs NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED and "
                                   "MEGATRON_LM (CPU ranks over MPI, CUDA ranks over NCCL)");
    }
  }

  void fsdp() {
    static const std::map<std::string, std::string> renamed = {
        {"fsdp_offload_params", "cpu_offload"},
        {"fsdp_transformer_layer_cls_to_wrap", "transformer_cls_names_to_wrap"},
        {"fsdp_backward_prefetch_policy", "backward_prefetch"}, {"fsdp_version", "fsdp_version"}};
    static const std::set<std::string> booleans = {
        "fsdp_activation_checkpointing", "fsdp_cpu_ram_efficient_loading", "fsdp_forward_prefetch",
        "fsdp_offload_params",           "fsdp_sync_module_states",        "fsdp_use_orig_params"};
    const bool hybrid_from_parallelism = replicate_size() > 1;
    for (const std::string& name : names_in("fsdp_config")) {
      find(name);
      if (any_key(name)->refusal != nullptr) continue;
      // The older spelling, when the newer one is there too, is what accelerate ignores.
      if (name == "fsdp_backward_prefetch_policy" && has("fsdp_backward_prefetch")) continue;
      // parallelism_config's dp_replicate_size decides the sharding (below).
      if (name == "fsdp_sharding_strategy" && hybrid_from_parallelism) continue;
      const auto it = renamed.find(name);
      const std::string option = "fsdp." + (it != renamed.end() ? it->second : name.substr(5));
      std::string value;
      if (booleans.count(name)) {
        value = boolean_text(name);
      } else if (name == "fsdp_min_num_params") {
        value = std::to_string(whole(name, 0, 1000000000000000));
      } else if (name == "fsdp_sharding_strategy") {
        value = sharding_strategy(text(name));
      } else if (name == "fsdp_auto_wrap_policy") {
        value = lower(text(name));
      } else if (name == "fsdp_transformer_layer_cls_to_wrap") {
        value = unit_kinds(text(name));
      } else {
        value = text(name);
      }
      add_strategy(option, value);
    }
  }

  void deepspeed() {
    static const std::map<std::string, std::string> renamed = {
        {"deepspeed_config_file", "hf_ds_config"}, {"deepspeed_moe_layer_cls_names", "transformer_moe_cls_names"}};
    for (const std::string& name : names_in("deepspeed_config")) {
      find(name);
      const AccelerateKey* key = any_key(name);
      if (key->refusal != nullptr) continue;
      if (name == "deepspeed_hostfile") {
        out_.hostfile = text(name);
      } else if (name == "deepspeed_multinode_launcher") {
        out_.notes.push_back("deepspeed_config.deepspeed_multinode_launcher " + sdk::describe(text(name)) +
                             ": Accel starts every node's ranks with mpirun (or srun inside Slurm)");
      } else if (name == "gradient_accumulation_steps") {
        // Accelerate makes the config's accumulation the Accelerator's: the host's too.
        if (text(name) == "auto") continue;
        const std::string steps = std::to_string(whole(name, 1, 1 << 20));
        add("deepspeed_zero.gradient_accumulation_steps", steps, "accumulation");
        add("grad-accum", steps, "accumulation");
      } else if (name == "gradient_clipping") {
        if (text(name) == "auto") continue;
        number(name, 0.0);
        add("deepspeed_zero.gradient_clipping", text(name), "clipping");
      } else if (name == "zero_stage") {
        add_strategy("deepspeed_zero.zero_stage", std::to_string(whole(name, 0, 3)));
      } else if (name == "zero3_init_flag" || name == "zero3_save_16bit_model") {
        add_strategy("deepspeed_zero." + name, boolean_text(name));
      } else {
        const auto it = renamed.find(name);
        add_strategy("deepspeed_zero." + (it != renamed.end() ? it->second : name), text(name));
      }
    }
  }

  void megatron() {
    static const std::map<std::string, std::string> renamed = {
        {"megatron_lm_context_parallel_size", "cp_degree"}, {"megatron_lm_expert_model_parallel_size", "ep_degree"}};
    static const std::set<std::string> degrees = {"megatron_lm_tp_degree", "megatron_lm_pp_degree",
                                                  "megatron_lm_context_parallel_size",
                                                  "megatron_lm_expert_model_parallel_size"};
    static const std::set<std::string> booleans = {"megatron_lm_sequence_parallelism",
                                                   "megatron_lm_recompute_activations",
                                                   "megatron_lm_use_distributed_optimizer"};
    for (const std::string& name : names_in("megatron_lm_config")) {
      find(name);
      if (any_key(name)->refusal != nullptr) continue;
      const auto it = renamed.find(name);
      const std::string option = "megatron." + (it != renamed.end() ? it->second : name.substr(12));
      if (name == "megatron_lm_gradient_clipping") {
        // The one clipping setting every strategy reads is the host's.
        number(name, 0.0);
        add("grad-clip", text(name), "clipping");
      } else if (name == "megatron_lm_num_micro_batches") {
        // Megatron's micro-batches are the host's accumulation steps.
        const std::string steps = std::to_string(whole(name, 1, 1 << 20));
        add(option, steps, "accumulation");
        add("grad-accum", steps, "accumulation");
      } else if (degrees.count(name)) {
        add_strategy(option, std::to_string(whole(name, 1, 1 << 20)));
      } else if (booleans.count(name)) {
        add_strategy(option, boolean_text(name));
      } else {
        add_strategy(option, text(name));
      }
    }
  }

  int64_t size(const std::string& name) { return has(name) ? whole(name, 1, 1 << 20) : 1; }
  int64_t replicate_size() { return size("parallelism_config_dp_replicate_size"); }

  // accelerate's ParallelismConfig: dp_replicate x dp_shard x tp x cp (x sp) ranks.
  void parallelism(const std::string& type) {
    const int64_t replicate = replicate_size(), shard = size("parallelism_config_dp_shard_size");
    const int64_t tp = size("parallelism_config_tp_size"), cp = size("parallelism_config_cp_size");
    const int64_t sp = size("parallelism_config_sp_size");
    if (has("parallelism_config_sp_seq_length_is_variable")) boolean("parallelism_config_sp_seq_length_is_variable");
    const auto refuse_above_one = [&](const char* name, int64_t value, const std::string& why) {
      if (value > 1) fail(name, "is not honoured: " + why);
    };
    if (type == "FSDP") {
      refuse_above_one("parallelism_config_tp_size", tp,
                       "fsdp has no tensor parallelism; use distributed_type MEGATRON_LM with megatron_lm_tp_degree");
      refuse_above_one("parallelism_config_sp_size", sp,
                       "sp_size is DeepSpeed's sequence parallelism; use distributed_type DEEPSPEED");
      refuse_above_one("parallelism_config_dp_replicate_size", replicate > 1 && cp > 1 ? replicate : 1,
                       "fsdp combines replicas (HYBRID_SHARD) with context parallelism nowhere here; use one");
      if (cp > 1) {
        add_strategy("fsdp.cp_size", std::to_string(cp));
        if (has("parallelism_config_cp_comm_strategy")) {
          const std::string strategy = text("parallelism_config_cp_comm_strategy");
          if (strategy != "allgather" && strategy != "alltoall") {
            fail("parallelism_config_cp_comm_strategy", "must be allgather or alltoall, got " + sdk::describe(strategy));
          }
          add_strategy("fsdp.cp_comm_type", strategy == "allgather" ? "all_gather" : "a2a");
        }
      }
      if (replicate > 1) {
        std::string strategy = "HYBRID_SHARD";
        if (has("fsdp_sharding_strategy")) {
          strategy = sharding_strategy(text("fsdp_sharding_strategy"));
          if (strategy != "HYBRID_SHARD" && strategy != "HYBRID_SHARD_ZERO2") {
            fail("parallelism_config_dp_replicate_size",
                 "above 1 replicates the shards (HYBRID_SHARD), which contradicts " +
                     origin("fsdp_sharding_strategy") + " " + strategy);
          }
        }
        add_strategy("fsdp.sharding_strategy", strategy);
        add_strategy("fsdp.hybrid_shard_group_size", std::to_string(shard));
      }
    } else if (type == "DEEPSPEED") {
      for (const char* name : {"parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size",
                               "parallelism_config_tp_size", "parallelism_config_cp_size"}) {
        refuse_above_one(name, size(name), "under DEEPSPEED only sp_size is read (ZeRO shards over every rank)");
      }
      if (sp > 1) add_strategy("deepspeed_zero.sequence_parallel_size", std::to_string(sp));
    } else {
      for (const char* name : {"parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size",
                               "parallelism_config_tp_size", "parallelism_config_cp_size",
                               "parallelism_config_sp_size"}) {
        refuse_above_one(name, size(name),
                         "parallelism_config is read under distributed_type FSDP (and its sp_size under DEEPSPEED)");
      }
    }
    find("parallelism_config_cp_comm_strategy");  // read with cp_size above 1 only, as accelerate
    if (out_.num_processes && (type == "FSDP" || type == "DEEPSPEED")) {
      const int64_t product = replicate * shard * tp * cp * sp;
      const bool any = has("parallelism_config_dp_replicate_size") || has("parallelism_config_dp_shard_size") ||
                       has("parallelism_config_cp_size") || has("parallelism_config_sp_size");
      if (any && product != *out_.num_processes) {
        throw UsageError(strformat("%s: parallelism_config's sizes make %lld rank(s) (dp_replicate x dp_shard x tp "
                                   "x cp x sp), but num_processes is %lld (accelerate requires them equal)",
                                   out_.path.c_str(), static_cast<long long>(product),
                                   static_cast<long long>(*out_.num_processes)));
      }
    }
  }

  void fp8_options() {
    // Each option once: accelerate's flag name wins over the questionnaire's spelling.
    static const std::map<std::string, std::string> options = {
        {"fp8_amax_compute_algo", "amax_compute_algo"}, {"fp8_amax_compute_algorithm", "amax_compute_algo"},
        {"fp8_amax_history_len", "amax_history_len"},   {"fp8_amax_history_length", "amax_history_len"},
        {"fp8_backend", "backend"},                     {"fp8_enable_fsdp_float8_all_gather", "fp8_weight_gather"},
        {"fp8_format", "fp8_format"},                   {"fp8_interval", "interval"},
        {"fp8_margin", "margin"},                       {"fp8_opt_level", "opt_level"},
        {"fp8_optimization_level", "opt_level"},        {"fp8_override_linear_precision", "override_linear_precision"},
        {"fp8_use_autocast_during_eval", "use_autocast_during_eval"}};
    std::set<std::string> given;
    for (const std::string& name : names_in("fp8_config")) {
      find(name);
      if (name == "fp8_pad_inner_dim") {
        boolean(name);  // torchao pads for its matmul; Accel's FP8 GEMM takes any inner size
        continue;
      }
      const std::string& option = options.at(name);
      if (!given.insert(option).second) continue;
      std::string value;
      if (name == "fp8_backend") {
        value = lower(text(name));  // accelerate writes TE, MSAMP, AO
        if (value == "ms-amp") value = "msamp";
        if (value != "te" && value != "msamp") {
          fail(name, sdk::describe(text(name)) + " is not honoured: Accel's FP8 backends are TE and MSAMP");
        }
      } else if (name == "fp8_use_autocast_during_eval" || name == "fp8_enable_fsdp_float8_all_gather") {
        value = boolean_text(name);
      } else if (name == "fp8_amax_history_len" || name == "fp8_amax_history_length" || name == "fp8_margin" ||
                 name == "fp8_interval") {
        value = std::to_string(whole(name, name == "fp8_margin" ? 0 : 1, 1 << 20));
      } else {
        value = text(name);
      }
      add("fp8." + option, value, "precision");
    }
  }

  void precision(const std::string& type) {
    std::optional<std::string> precision;
    std::string precision_key = "mixed_precision";
    if (has("mixed_precision")) {
      precision = lower(text("mixed_precision"));
      if (*precision != "no" && *precision != "fp16" && *precision != "bf16" && *precision != "fp8") {
        fail("mixed_precision", "must be no, fp16, bf16 or fp8, got " + sdk::describe(*precision));
      }
    }
    // The older spelling accelerate still converts: fp16: true without mixed_precision.
    if (has("fp16") && boolean("fp16") && !precision) {
      precision = "fp16";
      precision_key = "fp16";
    }
    // A DeepSpeed JSON's concrete fp16/bf16 decide, as accelerate lets them.
    DsJsonSettings json;
    if (type == "DEEPSPEED" && has("deepspeed_config_file")) {
      json = read_ds_json(text("deepspeed_config_file"), origin("deepspeed_config_file"));
    }
    const std::string file = has("deepspeed_config_file") ? text("deepspeed_config_file") : "";
    bool bf16_beside_fp8 = false;
    if (json.fp16.value_or(false)) {
      if (precision == "bf16" || precision == "fp8") {
        fail(precision_key, *precision + " cannot be used with " + file +
                                "'s fp16.enabled true (accelerate refuses it too); set it to \"auto\" there");
      }
      precision = "fp16";
    } else if (json.bf16.value_or(false)) {
      if (precision == "fp16") {
        fail(precision_key, "fp16 cannot be used with " + file +
                                "'s bf16.enabled true (accelerate refuses it too); set it to \"auto\" there");
      }
      if (precision == "fp8") {
        bf16_beside_fp8 = true;  // accelerate's fp8 under DeepSpeed runs in bf16 around the FP8 linears
      } else {
        precision = "bf16";
      }
    }
    if (precision == "fp8") {
      add("plugin", "fp8", "precision");
      fp8_options();
      if (bf16_beside_fp8) add("mixed-precision", "bf16", "precision");
    } else if (precision) {
      add("mixed-precision", *precision, "precision");
    }
    for (const auto& [option, value] : json.loss_scale) add(option, value, "precision");
    if (json.gradient_accumulation_steps && !has("gradient_accumulation_steps")) {
      add("grad-accum", std::to_string(*json.gradient_accumulation_steps), "accumulation");
    }
  }

  // Sections of another distributed type (an fsdp_config left under
  // DEEPSPEED by an earlier answer) and fp8_config without fp8 are what
  // accelerate ignores too; anything else unread is a bug here.
  void check_everything_was_read(const std::string& type) {
    const std::map<std::string, std::string> section_of_type = {
        {"FSDP", "fsdp_config"}, {"DEEPSPEED", "deepspeed_config"}, {"MEGATRON_LM", "megatron_lm_config"}};
    for (const auto& [name, setting] : settings_) {
      if (read_.count(name)) continue;
      const AccelerateKey* key = any_key(name);
      const std::string section = key != nullptr && key->section != nullptr ? key->section : "";
      const auto own = section_of_type.find(type);
      const bool other_strategy = (section == "fsdp_config" || section == "deepspeed_config" ||
                                   section == "megatron_lm_config") &&
                                  (own == section_of_type.end() || own->second != section);
      if (other_strategy || section == "fp8_config") continue;
      throw std::logic_error(setting.origin + " was read by no part of the mapping (a bug in cli/accelerate_config.cpp)");
    }
  }

  AccelerateSettings settings_;
  bool file_given_;
  std::set<std::string> read_;
  AccelerateConfig out_;
};

// The flags that choose the distributed type, as accelerate's launch reads them.
const std::map<std::string, std::string> kTypeFlags = {
    {"multi_gpu", "MULTI_GPU"}, {"use_fsdp", "FSDP"}, {"use_deepspeed", "DEEPSPEED"}, {"use_megatron_lm", "MEGATRON_LM"}};

// An accel-host argument's option name ("--grad-accum=2" -> "grad-accum"), or "".
std::string option_name(const std::string& word) {
  if (word.rfind("--", 0) != 0 || word.size() == 2) return "";
  return word.substr(2, word.find('=') == std::string::npos ? std::string::npos : word.find('=') - 2);
}

}  // namespace

// ------------------------------------------------------------ public

bool is_yaml_config(const std::string& path) {
  const auto ends_with = [&](const std::string& suffix) {
    return path.size() >= suffix.size() && lower(path.substr(path.size() - suffix.size())) == suffix;
  };
  return ends_with(".yaml") || ends_with(".yml");
}

AccelerateSettings read_accelerate_settings(const std::string& text, const std::string& path) {
  YamlValue root;
  try {
    root = safe_load(text);
  } catch (const YamlError& e) {
    throw UsageError(path + ": " + e.what());
  }
  if (root.kind != YamlValue::Kind::map) {
    throw UsageError(path + ": an accelerate config is a mapping of keys at the top" +
                     (root.kind == YamlValue::Kind::null ? std::string(" (the file is empty)") : ""));
  }
  // A SageMaker file is refused as that, before any of its keys is.
  const YamlValue* environment = root.find("compute_environment");
  if (environment != nullptr && environment->kind == YamlValue::Kind::scalar &&
      environment->scalar == "AMAZON_SAGEMAKER") {
    throw UsageError(path + ": compute_environment AMAZON_SAGEMAKER is a SageMaker config: Accel runs on the "
                            "machines it is started on (LOCAL_MACHINE)");
  }
  for (const auto& [key, value] : root.entries) {
    if (kSageMakerKeys.count(key)) {
      throw UsageError(path + ": " + key + " is a SageMaker key (accelerate's SageMakerConfig): Accel runs on the "
                                           "machines it is started on (LOCAL_MACHINE)");
    }
  }
  AccelerateSettings settings;
  for (const auto& [key, value] : root.entries) {
    if (kSections.count(key) == 0) {
      if (find_accelerate_key(key, "") == nullptr) unknown_key(path, key);
      store(settings, key, value, path + ": " + key);
      continue;
    }
    if (value.kind == YamlValue::Kind::null) continue;
    if (value.kind != YamlValue::Kind::map) throw UsageError(path + ": " + key + " must be a mapping of keys");
    for (const auto& [inner, inner_value] : value.entries) {
      const std::string name = launch_name(key, inner);
      if (find_accelerate_key(name, key.c_str()) == nullptr) unknown_key(path, key + "." + inner);
      store(settings, name, inner_value, path + ": " + key + "." + inner);
    }
  }
  return settings;
}

AccelerateConfig map_accelerate_settings(const AccelerateSettings& file, const AccelerateSettings& flags,
                                         bool file_given, const std::string& path) {
  AccelerateSettings merged = file;
  std::string type_flag;
  for (const auto& [name, setting] : flags) {
    const auto type = kTypeFlags.find(name);
    if (type != kTypeFlags.end()) {
      if (!type_flag.empty()) {
        throw UsageError(type_flag + " and " + setting.origin +
                         ": only one of --multi_gpu, --use_deepspeed, --use_fsdp, --use_megatron_lm at a time (as "
                         "accelerate launch)");
      }
      type_flag = setting.origin;
      merged["distributed_type"] = {type->second, setting.origin, false};
    } else if (name == "cpu") {
      merged["use_cpu"] = setting;
    } else {
      merged[name] = setting;
    }
  }
  return Mapper(std::move(merged), file_given, path).run();
}

std::string read_accelerate_file(const std::string& path) {
  try {
    return sdk::read_input_file(path, kMaxYamlBytes, "accelerate config");
  } catch (const sdk::InputFileError& e) {
    throw UsageError(e.what());
  }
}

AccelerateConfig parse_accelerate_config(const std::string& text, const std::string& path) {
  return map_accelerate_settings(read_accelerate_settings(text, path), {}, true, path);
}

AccelerateConfig read_accelerate_config(const std::string& path) {
  return parse_accelerate_config(read_accelerate_file(path), path);
}

std::vector<std::pair<std::string, std::string>> AccelerateConfig::pairs() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const MappedOption& option : options) out.emplace_back(option.name, option.value);
  return out;
}

std::vector<std::pair<std::string, std::string>> AccelerateConfig::kept_under(
    const std::vector<std::string>& training) const {
  std::set<std::string> given, plugins;
  for (size_t i = 0; i < training.size(); ++i) {
    const std::string name = option_name(training[i]);
    if (name.empty()) continue;
    given.insert(name);
    if (name != "plugin") continue;
    if (training[i].size() > 9 && training[i][8] == '=') {
      plugins.insert(training[i].substr(9));
    } else if (i + 1 < training.size()) {
      plugins.insert(training[i + 1]);
    }
  }
  std::set<std::string> own_plugins;
  for (const MappedOption& option : options) {
    if (option.name == "plugin") own_plugins.insert(option.value);
  }
  // The settings the training options give, each dropped whole.
  std::set<std::string> replaced;
  const auto gives_any = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* name) { return given.count(name) > 0; });
  };
  if (gives_any({"mixed-precision"}) || plugins.count("fp8")) replaced.insert("precision");
  if (gives_any({"grad-accum", "deepspeed_zero.gradient_accumulation_steps", "megatron.num_micro_batches"})) {
    replaced.insert("accumulation");
  }
  if (gives_any({"grad-clip", "deepspeed_zero.gradient_clipping", "megatron.gradient_clipping"})) {
    replaced.insert("clipping");
  }
  for (const std::string& plugin : plugins) {
    if (kStrategyPlugins.count(plugin) && own_plugins.count(plugin) == 0) replaced.insert("strategy");
  }
  std::vector<std::pair<std::string, std::string>> kept;
  for (const MappedOption& option : options) {
    if (replaced.count(option.setting)) continue;
    if (option.name == "plugin" ? plugins.count(option.value) > 0 : given.count(option.name) > 0) continue;
    kept.emplace_back(option.name, option.value);
  }
  return kept;
}

}  // namespace accel::cli
