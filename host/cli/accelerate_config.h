// The YAML that `accelerate config` writes and the flags of `accelerate
// launch`, read with accelerate's meaning and mapped onto the plugins and
// options Accel has: both `accel-host launch` (host/app/launch.h) and
// `accel-host --config F.yaml` (cli/options.h) use this one mapping.
//
// Three sources, each later one replacing an earlier one's setting as a
// whole, as accelerate launch does:
//   1. the file: its keys become accelerate's launch settings, named as the
//      launch arguments they are copied onto (fsdp_config.fsdp_offload_params
//      -> fsdp_offload_params; cli/accelerate_keys.h holds the names);
//   2. the launch flags: a flag replaces the file's setting of the same name,
//      and --use_fsdp (--multi_gpu, --use_deepspeed, --use_megatron_lm)
//      replaces its distributed_type; the merged settings are then mapped
//      once (map_accelerate_settings), so `--mixed_precision bf16` over a
//      file's fp8 leaves no FP8 plugin or option behind;
//   3. the training options after `--` (or accel-host's own command line
//      under --config): each mapped option belongs to a setting (precision:
//      --mixed-precision, or --plugin fp8 with its fp8.* options and the
//      DeepSpeed JSON's loss-scale options; accumulation: --grad-accum with
//      the plugins' copies; ...), and a training option that gives a setting
//      drops the mapped setting whole (kept_under).
// Every key and flag is mapped, accepted with one printed note saying why it
// changes nothing here, or refused in one line naming it and why.
// docs/launch.md has the whole table.
//
// The file is read by the SDK's input rule (regular files only, never a
// blocking open, a size bound) and cli/safe_yaml.h (PyYAML's safe_load).
//
// Thread-safety: plain values; reading is reentrant.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::cli {

// One of accelerate's launch settings, and where it was written.
struct AccelerateSetting {
  std::string value;   // a scalar as written; a list's items joined by commas
  std::string origin;  // for messages: "c.yaml: fsdp_config.fsdp_offload_params", "--fsdp_offload_params"
  bool list = false;
};
// By accelerate's launch argument name (accelerate_keys.h).
using AccelerateSettings = std::map<std::string, AccelerateSetting>;

// An accel-host option the mapping gives, and the setting it belongs to.
struct MappedOption {
  std::string name;  // without "--": "plugin", "fsdp.sharding_strategy", "mixed-precision"
  std::string value;
  std::string setting;  // "precision", "accumulation", "clipping", "strategy", "device", or the option's own name
  bool operator==(const MappedOption&) const = default;
};

struct AccelerateConfig {
  std::string path;
  // Launch-level settings.
  std::optional<int64_t> num_processes;  // the whole job's ranks
  int64_t num_machines = 1;
  int64_t machine_rank = 0;
  std::string hostfile;       // mpirun_hostfile, deepspeed_hostfile or --hostfile
  std::string gpu_ids;        // "" or "all": every GPU; else CUDA_VISIBLE_DEVICES for the ranks
  bool debug = false;         // ACCEL_COMM_VERIFY=ops: every collective compared before it runs
  bool cpu_affinity = false;  // enable_cpu_affinity: ranks bound to their NUMA node
  std::vector<MappedOption> options;
  // Keys accepted that change nothing in Accel, one line each, for the
  // caller to print.
  std::vector<std::string> notes;

  // The options as (name, value) pairs, in order.
  std::vector<std::pair<std::string, std::string>> pairs() const;
  // The options left standing under `training` (accel-host arguments): a
  // setting any of them gives is dropped whole, a plugin they name and an
  // option they give are dropped.
  std::vector<std::pair<std::string, std::string>> kept_under(const std::vector<std::string>& training) const;
};

// Whether `path` names a YAML file (.yaml or .yml), which --config reads as
// an accelerate config.
bool is_yaml_config(const std::string& path);

// The file's keys as launch settings; throws UsageError naming the file and
// the first key that accelerate has not (or a SageMaker file, or YAML that
// PyYAML's safe_load would not read).
AccelerateSettings read_accelerate_settings(const std::string& text, const std::string& path);

// The file's settings with the flags' over them, mapped. `file_given`: a
// config file was read (then distributed_type is required, as accelerate
// requires it). Throws UsageError naming the key or flag that cannot be
// honoured.
AccelerateConfig map_accelerate_settings(const AccelerateSettings& file, const AccelerateSettings& flags,
                                         bool file_given, const std::string& path);

// Reads and maps `path` (no flags).
AccelerateConfig read_accelerate_config(const std::string& path);

// The same from YAML text already read; `path` names it in messages.
AccelerateConfig parse_accelerate_config(const std::string& text, const std::string& path);

// The text of `path` as read_accelerate_config reads it (the SDK's input rule).
std::string read_accelerate_file(const std::string& path);

}  // namespace accel::cli
