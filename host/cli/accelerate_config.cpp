#include "host/cli/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include "accel/sdk/input_file.hpp"
#include "accel/sdk/json_input.hpp"
#include "host/cli/options.h"

namespace accel::cli {
namespace {

constexpr uint64_t kMaxYamlBytes = 1ull << 20;  // accelerate writes a few hundred bytes

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// yaml-cpp's message (it names line and column) as one bounded line.
std::string one_line(std::string text) {
  constexpr size_t kShown = 200;
  std::replace_if(text.begin(), text.end(), [](unsigned char c) { return c < 0x20; }, ' ');
  return text.size() <= kShown ? text : text.substr(0, kShown) + "...";
}

// One section's reader: the file, the section's dotted prefix for messages.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string prefix)
      : node_(node), path_(std::move(path)), prefix_(std::move(prefix)) {}

  // The first key that `known` does not hold, refused.
  void only(const std::set<std::string>& known) const {
    for (const auto& entry : node_) {
      const std::string key = entry.first.Scalar();
      if (known.count(key) == 0) {
        throw UsageError(path_ + ": " + sdk::describe(prefix_ + key) +
                         " is not a key of accelerate's config that Accel knows (docs/launch.md lists them)");
      }
    }
  }

  bool has(const std::string& key) const { return node_[key] && !node_[key].IsNull(); }

  // A scalar as text; lists (override_linear_precision) joined by commas.
  // One line: the text becomes an option's value (and a line of --config's
  // INI text), where a newline would start another option.
  std::string text(const std::string& key) const {
    std::string joined = joined_text(key);
    if (std::any_of(joined.begin(), joined.end(), [](unsigned char c) { return c < 0x20; })) {
      fail(key, "must be one line without control characters");
    }
    return joined;
  }

  std::string joined_text(const std::string& key) const {
    const YAML::Node value = node_[key];
    if (value.IsScalar()) return value.Scalar();
    if (value.IsSequence()) {
      std::string joined;
      for (const YAML::Node& item : value) {
        if (!item.IsScalar()) fail(key, "must be a list of plain values");
        joined += (joined.empty() ? "" : ",") + item.Scalar();
      }
      return joined;
    }
    fail(key, "must be a plain value, got a mapping");
    return {};
  }

  bool boolean(const std::string& key) const {
    bool value = false;
    if (!node_[key].IsScalar() || !YAML::convert<bool>::decode(node_[key], value)) {
      fail(key, "must be true or false, got " + sdk::describe(text_or_kind(key)));
    }
    return value;
  }

  int64_t integer(const std::string& key, int64_t min, int64_t max) const {
    const std::string value = text(key);
    size_t used = 0;
    int64_t number = 0;
    try {
      number = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size() || number < min || number > max) {
      fail(key, "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
                    sdk::describe(value));
    }
    return number;
  }

  Section child(const std::string& key) const {
    const YAML::Node value = node_[key];
    if (!value.IsMap()) fail(key, "must be a mapping of keys");
    return Section(value, path_, prefix_ + key + ".");
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw UsageError(path_ + ": " + prefix_ + key + " " + why);
  }

  const YAML::Node& node() const { return node_; }

 private:
  std::string text_or_kind(const std::string& key) const {
    return node_[key].IsScalar() ? node_[key].Scalar() : std::string("a list or mapping");
  }

  YAML::Node node_;
  std::string path_;
  std::string prefix_;
};

// key in the section -> the plugin option it sets (value copied as text).
using OptionMap = std::map<std::string, std::string>;

using Convert = std::function<std::string(const std::string& key, std::string value)>;

std::string no_conversion(const std::string&, std::string value) { return value; }

// A plugin's section: refuses keys neither in `options` nor in `also_known`
// (which the caller reads itself), and maps each key present onto
// --PLUGIN.OPTION, its value through `convert`.
void map_section(const Section& section, const OptionMap& options, std::set<std::string> also_known,
                 const std::string& plugin, AccelerateConfig& out, const Convert& convert = no_conversion) {
  for (const auto& [key, option] : options) also_known.insert(key);
  section.only(also_known);
  for (const auto& [key, option] : options) {
    if (!section.has(key)) continue;
    out.options.emplace_back(plugin + "." + option, convert(key, section.text(key)));
  }
}

// FSDP's sharding strategies by the numbers older accelerate configs wrote.
std::string sharding_strategy(std::string value) {
  static const std::map<std::string, std::string> by_number = {
      {"1", "FULL_SHARD"}, {"2", "SHARD_GRAD_OP"}, {"3", "NO_SHARD"}, {"4", "HYBRID_SHARD"},
      {"5", "HYBRID_SHARD_ZERO2"}};
  const auto it = by_number.find(value);
  return it == by_number.end() ? value : it->second;
}

void read_fsdp(const Section& fsdp, AccelerateConfig& out) {
  static const OptionMap options = {
      {"fsdp_version", "fsdp_version"},
      {"fsdp_sharding_strategy", "sharding_strategy"},
      {"fsdp_reshard_after_forward", "reshard_after_forward"},
      {"fsdp_offload_params", "cpu_offload"},
      {"fsdp_auto_wrap_policy", "auto_wrap_policy"},
      {"fsdp_transformer_layer_cls_to_wrap", "transformer_cls_names_to_wrap"},
      {"fsdp_min_num_params", "min_num_params"},
      {"fsdp_backward_prefetch", "backward_prefetch"},
      {"fsdp_backward_prefetch_policy", "backward_prefetch"},  // older accelerate
      {"fsdp_forward_prefetch", "forward_prefetch"},
      {"fsdp_state_dict_type", "state_dict_type"},
      {"fsdp_use_orig_params", "use_orig_params"},
      {"fsdp_cpu_ram_efficient_loading", "cpu_ram_efficient_loading"},
      {"fsdp_sync_module_states", "sync_module_states"},
      {"fsdp_activation_checkpointing", "activation_checkpointing"},
  };
  map_section(fsdp, options, {}, "fsdp", out, [&](const std::string& key, std::string value) {
    if (key == "fsdp_sharding_strategy") return sharding_strategy(value);
    if (key == "fsdp_auto_wrap_policy") return lower(value);
    if (key == "fsdp_transformer_layer_cls_to_wrap") {
      // A Hugging Face model's layer class (GPT2Block, LlamaDecoderLayer) is
      // Accel's transformer block: the unit kind "block".
      std::string kinds;
      size_t start = 0;
      while (start <= value.size()) {
        const size_t end = std::min(value.find(',', start), value.size());
        std::string name = value.substr(start, end - start);
        name.erase(0, name.find_first_not_of(' '));
        name.erase(name.find_last_not_of(' ') + 1);
        const auto ends_with = [&](const char* tail) {
          const std::string t(tail);
          return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
        };
        const bool layer = ends_with("Block") || ends_with("Layer");
        const std::string kind = layer ? "block" : name;
        if (kinds.find(kind) == std::string::npos) kinds += (kinds.empty() ? "" : ",") + kind;
        start = end + 1;
      }
      return kinds;
    }
    return value;
  });
}

void read_deepspeed(const Section& ds, AccelerateConfig& out) {
  static const OptionMap options = {
      {"deepspeed_config_file", "hf_ds_config"},
      {"zero_stage", "zero_stage"},
      {"offload_optimizer_device", "offload_optimizer_device"},
      {"offload_param_device", "offload_param_device"},
      {"offload_optimizer_nvme_path", "offload_optimizer_nvme_path"},
      {"offload_param_nvme_path", "offload_param_nvme_path"},
      {"gradient_accumulation_steps", "gradient_accumulation_steps"},
      {"gradient_clipping", "gradient_clipping"},
      {"zero3_init_flag", "zero3_init_flag"},
      {"zero3_save_16bit_model", "zero3_save_16bit_model"},
      {"deepspeed_moe_layer_cls_names", "transformer_moe_cls_names"},
  };
  map_section(ds, options, {"deepspeed_multinode_launcher", "deepspeed_hostfile", "deepspeed_exclusion_filter",
                            "deepspeed_inclusion_filter"},
              "deepspeed_zero", out);
  // Accelerate makes the config's accumulation the Accelerator's: the host's.
  if (ds.has("gradient_accumulation_steps") && ds.text("gradient_accumulation_steps") != "auto") {
    out.options.emplace_back("grad-accum", std::to_string(ds.integer("gradient_accumulation_steps", 1, 1 << 20)));
  }
  if (ds.has("deepspeed_hostfile")) out.hostfile = ds.text("deepspeed_hostfile");
  if (ds.has("deepspeed_multinode_launcher")) {
    out.notes.push_back("deepspeed_config.deepspeed_multinode_launcher " + sdk::describe(ds.text("deepspeed_multinode_launcher")) +
                        ": Accel starts every node's ranks with mpirun (or srun inside Slurm)");
  }
  for (const char* filter : {"deepspeed_exclusion_filter", "deepspeed_inclusion_filter"}) {
    if (ds.has(filter) && !ds.text(filter).empty()) {
      ds.fail(filter, "is not honoured: name the hosts in the hostfile instead");
    }
  }
}

void read_megatron(const Section& megatron, AccelerateConfig& out) {
  static const OptionMap options = {
      {"megatron_lm_tp_degree", "tp_degree"},
      {"megatron_lm_pp_degree", "pp_degree"},
      {"megatron_lm_num_micro_batches", "num_micro_batches"},
      {"megatron_lm_sequence_parallelism", "sequence_parallelism"},
      {"megatron_lm_recompute_activations", "recompute_activations"},
      {"megatron_lm_use_distributed_optimizer", "use_distributed_optimizer"},
  };
  map_section(megatron, options, {"megatron_lm_gradient_clipping"}, "megatron", out);
  // The one clipping setting every strategy reads is the host's.
  if (megatron.has("megatron_lm_gradient_clipping")) {
    out.options.emplace_back("grad-clip", megatron.text("megatron_lm_gradient_clipping"));
  }
}

void read_fp8(const Section& fp8, AccelerateConfig& out) {
  static const OptionMap options = {
      {"backend", "backend"},
      {"fp8_format", "fp8_format"},
      {"amax_history_len", "amax_history_len"},
      {"amax_compute_algo", "amax_compute_algo"},
      {"margin", "margin"},
      {"interval", "interval"},
      {"override_linear_precision", "override_linear_precision"},
      {"use_autocast_during_eval", "use_autocast_during_eval"},
      {"opt_level", "opt_level"},
  };
  map_section(fp8, options, {}, "fp8", out, [](const std::string& key, std::string value) {
    if (key != "backend") return value;
    value = lower(value);  // accelerate writes TE and MSAMP
    return value == "ms-amp" ? std::string("msamp") : value;
  });
}

// The keys of ClusterConfig (accelerate/commands/config/config_args.py).
const std::set<std::string> kClusterKeys = {
    "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
    "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
    "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config",
    "fsdp_config", "tp_config", "megatron_lm_config", "ipex_config", "mpirun_config", "downcast_bf16", "tpu_name",
    "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm", "tpu_env",
    "dynamo_config", "dynamo_backend", "fp16"};

void read_top_level(const Section& top, AccelerateConfig& out) {
  top.only(kClusterKeys);
  if (top.has("compute_environment") && top.text("compute_environment") != "LOCAL_MACHINE") {
    top.fail("compute_environment", sdk::describe(top.text("compute_environment")) +
                                        " is not honoured: Accel runs on machines it is started on (LOCAL_MACHINE)");
  }
  if (!top.has("distributed_type")) top.fail("distributed_type", "is missing (accelerate requires it too)");
  const std::string type = top.text("distributed_type");
  if (top.has("num_processes")) out.num_processes = top.integer("num_processes", 1, 1 << 20);
  if (top.has("num_machines")) out.num_machines = top.integer("num_machines", 1, 1 << 16);
  if (top.has("machine_rank")) out.machine_rank = top.integer("machine_rank", 0, out.num_machines - 1);
  if (top.has("main_process_ip")) out.main_process_ip = top.text("main_process_ip");
  if (top.has("main_process_port")) {
    top.integer("main_process_port", 0, 65535);
    out.notes.push_back("main_process_port: mpirun's daemons connect without a rendezvous port; not used");
  }
  if (top.has("rdzv_backend") && top.text("rdzv_backend") != "static") {
    out.notes.push_back("rdzv_backend " + sdk::describe(top.text("rdzv_backend")) +
                        ": mpirun (or srun) is the rendezvous; not used");
  }
  if (top.has("gpu_ids")) out.gpu_ids = top.text("gpu_ids");
  if (top.has("debug")) out.debug = top.boolean("debug");
  if (top.has("enable_cpu_affinity")) out.cpu_affinity = top.boolean("enable_cpu_affinity");

  if (type == "FSDP") {
    out.options.emplace_back("plugin", "fsdp");
    if (top.has("fsdp_config")) read_fsdp(top.child("fsdp_config"), out);
  } else if (type == "DEEPSPEED") {
    out.options.emplace_back("plugin", "deepspeed_zero");
    if (top.has("deepspeed_config")) read_deepspeed(top.child("deepspeed_config"), out);
  } else if (type == "MEGATRON_LM") {
    out.options.emplace_back("plugin", "megatron");
    if (top.has("megatron_lm_config")) read_megatron(top.child("megatron_lm_config"), out);
  } else if (type == "MULTI_CPU" || type == "MULTI_GPU") {
    if (out.num_processes.value_or(1) > 1) out.options.emplace_back("plugin", "ddp");
  } else if (type != "NO") {
    top.fail("distributed_type", sdk::describe(type) +
                                     " is not honoured: Accel runs NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED and "
                                     "MEGATRON_LM (CPU ranks over MPI, CUDA ranks over NCCL)");
  }
  // Sections of other distributed types are what `accelerate config` left
  // from an earlier answer; accelerate ignores them too, unless they ask for
  // something (an FSDP section under DEEPSPEED is not read).

  if (top.has("mixed_precision")) {
    const std::string precision = lower(top.text("mixed_precision"));
    if (precision == "fp16" || precision == "bf16" || precision == "no") {
      out.options.emplace_back("mixed-precision", precision);
    } else if (precision == "fp8") {
      out.options.emplace_back("plugin", "fp8");
      if (top.has("fp8_config")) read_fp8(top.child("fp8_config"), out);
    } else {
      top.fail("mixed_precision", "must be no, fp16, bf16 or fp8, got " + sdk::describe(precision));
    }
  }
  // The older spelling accelerate still converts: fp16: true without mixed_precision.
  if (!top.has("mixed_precision") && top.has("fp16") && top.boolean("fp16")) {
    out.options.emplace_back("mixed-precision", "fp16");
  }
  if (top.has("use_cpu") && top.boolean("use_cpu")) out.options.emplace_back("device", "cpu");

  // Keys for hardware or tools Accel does not drive: their defaults are
  // fine, anything that asks for them is refused.
  for (const char* key : {"downcast_bf16", "tpu_use_cluster", "tpu_use_sudo"}) {
    if (top.has(key) && top.boolean(key)) top.fail(key, "is not honoured: there are no TPUs in Accel");
  }
  for (const char* key : {"tpu_name", "tpu_zone", "command_file", "commands", "tpu_vm", "tpu_env"}) {
    if (top.has(key)) top.fail(key, "is not honoured: there are no TPUs in Accel");
  }
  if (top.has("main_training_function") && top.text("main_training_function") != "main") {
    top.fail("main_training_function", "is not honoured: accel-host's training loop is the program");
  }
  if (top.has("dynamo_backend") && lower(top.text("dynamo_backend")) != "no") {
    top.fail("dynamo_backend", "is not honoured: there is no torch.compile in a C++ host");
  }
  if (top.has("dynamo_config")) {
    const Section dynamo = top.child("dynamo_config");
    if (dynamo.has("dynamo_backend") && lower(dynamo.text("dynamo_backend")) != "no") {
      dynamo.fail("dynamo_backend", "is not honoured: there is no torch.compile in a C++ host");
    }
  }
  if (top.has("ipex_config")) {
    const Section ipex = top.child("ipex_config");
    if (ipex.has("ipex") && ipex.boolean("ipex")) ipex.fail("ipex", "is not honoured: Intel's extension is Python");
  }
  if (top.has("tp_config")) {
    const Section tp = top.child("tp_config");
    if (tp.has("tp_size") && tp.integer("tp_size", 1, 1 << 20) > 1) {
      tp.fail("tp_size", "is not honoured: use distributed_type MEGATRON_LM with megatron_lm_tp_degree");
    }
  }
  if (top.has("mpirun_config")) {
    const Section mpi = top.child("mpirun_config");
    mpi.only({"mpirun_hostfile", "mpirun_ccl"});
    if (mpi.has("mpirun_hostfile")) out.hostfile = mpi.text("mpirun_hostfile");
    if (mpi.has("mpirun_ccl")) out.notes.push_back("mpirun_config.mpirun_ccl: oneCCL is not used; MPI moves CPU tensors");
  }
}

}  // namespace

bool is_yaml_config(const std::string& path) {
  const auto ends_with = [&](const std::string& suffix) {
    return path.size() >= suffix.size() && lower(path.substr(path.size() - suffix.size())) == suffix;
  };
  return ends_with(".yaml") || ends_with(".yml");
}

AccelerateConfig parse_accelerate_config(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // e.what() is one line: "yaml-cpp: error at line L, column C: ...".
    throw UsageError(path + ": not valid YAML: " + one_line(e.what()));
  }
  if (!root.IsMap()) throw UsageError(path + ": an accelerate config is a mapping of keys at the top");
  AccelerateConfig config;
  config.path = path;
  try {
    read_top_level(Section(root, path, ""), config);
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ": " + one_line(e.what()));
  }
  return config;
}

AccelerateConfig read_accelerate_config(const std::string& path) {
  std::string text;
  try {
    text = sdk::read_input_file(path, kMaxYamlBytes, "accelerate config");
  } catch (const sdk::InputFileError& e) {
    throw UsageError(e.what());
  }
  return parse_accelerate_config(text, path);
}

std::vector<std::string> AccelerateConfig::to_args() const {
  std::vector<std::string> args;
  for (const auto& [option, value] : options) {
    args.push_back("--" + option);
    args.push_back(value);
  }
  return args;
}

std::string AccelerateConfig::to_ini() const {
  std::string top, sections;
  std::map<std::string, std::string> by_section;
  for (const auto& [option, value] : options) {
    const size_t dot = option.find('.');
    if (dot == std::string::npos) {
      top += option + " = " + value + "\n";
    } else {
      by_section[option.substr(0, dot)] += option.substr(dot + 1) + " = " + value + "\n";
    }
  }
  for (const auto& [section, lines] : by_section) sections += "[" + section + "]\n" + lines;
  return top + sections;
}

}  // namespace accel::cli
