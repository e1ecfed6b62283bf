// The YAML that `accelerate config` writes, read the way `accelerate launch`
// reads it, and mapped onto the plugins and options Accel has: both
// `accel-host launch --config_file F` (host/app/launch.h) and
// `accel-host --config F.yaml` (cli/options.h) use this one reader.
//
// Every key ClusterConfig defines is either mapped (distributed_type FSDP ->
// --plugin fsdp, fsdp_config.fsdp_sharding_strategy ->
// --fsdp.sharding_strategy, ...), accepted with one line saying why it
// changes nothing here (main_process_port: mpirun's daemons find each other
// without a rendezvous), or refused in one line naming it (a TPU key, a
// dynamo backend, an fsdp_config key Accel does not know). docs/launch.md
// has the whole table.
//
// The file is read by the SDK's input rule (regular files only, never a
// blocking open, a size bound); yaml-cpp bounds the nesting (DeepRecursion).
//
// Thread-safety: plain values; reading is reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::cli {

struct AccelerateConfig {
  std::string path;
  // Launch-level settings.
  std::optional<int64_t> num_processes;  // the whole job's ranks
  int64_t num_machines = 1;
  int64_t machine_rank = 0;
  std::string main_process_ip;
  std::string hostfile;       // mpirun_config.mpirun_hostfile or deepspeed_config.deepspeed_hostfile
  std::string gpu_ids;        // "" or "all": every GPU; else CUDA_VISIBLE_DEVICES for the ranks
  bool debug = false;         // ACCEL_COMM_VERIFY=ops: every collective compared before it runs
  bool cpu_affinity = false;  // enable_cpu_affinity: ranks bound to their NUMA node
  // accel-host options, in order, without the leading "--": ("plugin",
  // "fsdp"), ("fsdp.sharding_strategy", "FULL_SHARD"), ("mixed-precision", "bf16").
  std::vector<std::pair<std::string, std::string>> options;
  // Keys accepted that change nothing in Accel, one line each, for the
  // caller to print.
  std::vector<std::string> notes;

  // The options as command-line words: --plugin fsdp --fsdp.sharding_strategy FULL_SHARD ...
  std::vector<std::string> to_args() const;
  // The options as --config's INI text (plugin = NAME lines, [section] blocks).
  std::string to_ini() const;
};

// Whether `path` names a YAML file (.yaml or .yml), which --config reads as
// an accelerate config.
bool is_yaml_config(const std::string& path);

// Reads and maps `path`; throws UsageError naming the file and the first key
// or value that cannot be honoured.
AccelerateConfig read_accelerate_config(const std::string& path);

// The same from YAML text already read; `path` names it in messages.
AccelerateConfig parse_accelerate_config(const std::string& text, const std::string& path);

}  // namespace accel::cli
