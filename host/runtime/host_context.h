// The host state that the services table (services.cpp and friends) reaches
// on behalf of plugins, and the opaque AccelHost handle each plugin holds.
//
// Ownership: one HostContext per process, owned by main()'s run (via the
// plugin registry); every AccelHost points into it and lives as long as its
// plugin is loaded. The trainer fills `model` before any `create` hook runs
// and sets `state_writer` / `state_reader` only for the duration of the
// save_state / load_state hook calls.
//
// Thread-safety: the loop thread owns everything here, except what the ABI
// marks "Thread: any" (logging, errors, trace, metrics), which is guarded by
// `mutex` or thread-local.
#pragma once

#include <accel/accel.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/model/gpt.h"
#include "host/runtime/trace_capture.h"
#include "host/util/log.h"

namespace accel::comm {
class ProcessGroup;
}

namespace accel::runtime {

class PluginStateWriter;  // plugin_state.h: checkpoint put target
class CheckpointReader;   // checkpoint_reader.h: checkpoint get source
class MemoryAccounting;   // memory_services.h
class ModelView;          // model_services.h: the ABI's model info structs
class CommHandles;        // comm_checks.h: group and work handle tables

// One option's parsed value (a plugin's or the host's), by "section.name".
struct OptionValue {
  AccelOptionType type = ACCEL_OPTION_STRING;
  std::string text;          // the given or default text
  bool given = false;        // set by the user (flag or config file)
  bool has_value = true;     // false: a STRING without default, not given
  bool as_bool = false;
  int64_t as_int = 0;
  double as_double = 0.0;
  int32_t enum_index = -1;   // ENUM: index into the spec's allowed_values
};

class OptionStore {
 public:
  void put(const std::string& section, const std::string& name, OptionValue value) {
    values_[section + "." + name] = std::move(value);
  }
  const OptionValue* find(std::string_view section, std::string_view name) const {
    auto it = values_.find(std::string(section) + "." + std::string(name));
    return it == values_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, OptionValue>& all() const { return values_; }

 private:
  std::map<std::string, OptionValue> values_;
};

// What plugins recorded during plan_model; resolved by the host afterwards
// (managed storage is resolved; splits and stages land with the strategies
// that need them).
struct ModelPlan {
  struct Split {
    int32_t unit, param, dim;
    std::string group;
  };
  std::vector<Split> splits;
  std::vector<int32_t> unit_stage;           // empty: one stage
  std::map<int32_t, uint32_t> managed_storage;  // unit -> ACCEL_STORAGE_* bits
  std::map<int32_t, bool> checkpointing;        // unit -> recompute in backward
  bool sequence_parallel = false;               // plan_sequence_parallel (since 1.4)
  std::optional<AccelContextParallelSpec> context_parallel;  // plan_context_parallel (since 1.10)
  std::map<int32_t, std::string> managed_by;    // unit -> plugin that took storage
  // (unit, one ACCEL_STORAGE_* bit) -> the plugin managing that buffer, so two
  // plugins taking the same buffer are refused naming both.
  std::map<std::pair<int32_t, uint32_t>, std::string> buffer_manager;
};

// What the model services report that GptModel itself does not know; the
// trainer fills it with the model (defaults describe a plain fp32 run).
struct ModelRunInfo {
  std::string name = "gpt";        // the preset ("gpt-tiny"), for reports
  int64_t micro_batch_size = 1;    // sequences per micro-batch and rank
  DLDataType compute_dtype{kDLFloat, 32, 1};  // autocast dtype (bf16, f16)
  int32_t pipeline_stage = 0;      // this rank's stage once plans resolve
  int32_t pipeline_size = 1;       // stages once plans resolve (pipeline_plan.h)
  std::vector<int32_t> tied_copies;  // units of other stages held for a local unit's reads
};

// How repeated trace->metric records of one name combine within a step
// (accel/trace.h: the first record's reduce wins). Guarded by HostContext::mutex.
struct MetricRecord {
  AccelMetricReduce reduce = ACCEL_METRIC_LAST;
  double sum = 0.0;
  int64_t count = 0;
};

class ModelRunner;

class HostContext {
 public:
  HostContext();
  ~HostContext();
  HostContext(const HostContext&) = delete;
  HostContext& operator=(const HostContext&) = delete;

  AccelIdentity identity{};
  OptionStore options;
  // --tensor-parallel-across-nodes: a mesh whose tensor-parallel groups span
  // nodes is accepted (otherwise refused when the standard groups resolve).
  bool tensor_parallel_across_nodes = false;
  model::GptModel* model = nullptr;  // set before any create hook
  ModelPlan plan;
  bool planning = false;             // true only while plan_model hooks run
  bool running = false;              // true from setup on
  std::unique_ptr<MemoryAccounting> memory;

  // Checkpoint put/get targets, set around save_state / load_state calls.
  PluginStateWriter* state_writer = nullptr;
  CheckpointReader* state_reader = nullptr;

  // Called for every trace event while at least one plugin captures; set by
  // the plugin registry (it forwards to the capturing plugins' trace_event
  // through trace_capture.deliver).
  std::function<void(const AccelTraceEvent&)> trace_listener;
  // Which plugins capture (set_capture), and the gate that keeps a plugin's
  // trace_event from being called once its capture is off (trace_capture.h).
  TraceCapture trace_capture;

  // Plugin metrics of the current step (trace->metric); the trainer drains
  // them into the metrics line. Guarded by mutex.
  std::mutex mutex;
  std::map<std::string, double> step_metrics;
  std::map<std::string, uint32_t> trace_detail;  // plugin name -> set_detail bits

  // --- added with the services implementation (host/runtime/*_services.cpp) ---
  ModelRunInfo model_run;                 // set by the trainer with `model`
  std::unique_ptr<ModelView> model_view;  // built lazily by the model services
  // The training step stamped on trace events; -1 outside the loop. Written by
  // the loop thread, read by any thread.
  std::atomic<int64_t> step{-1};
  // True from step_begin to step_end: set_checkpointing is refused inside.
  bool in_step = false;
  // Per-metric combine state behind step_metrics; an entry whose name is no
  // longer in step_metrics (drained by the trainer) starts afresh.
  std::map<std::string, MetricRecord> metric_records;

  // --- communication (comm_services.cpp) ---
  // The world process group; owned by the run (host/app/run.cpp), null in
  // tests and info-only loads (the comm services then fail cleanly).
  comm::ProcessGroup* world = nullptr;
  // The handle tables of groups and works, and the ACCEL_COMM_VERIFY
  // settings (comm_checks.h); made on first use.
  std::shared_ptr<CommHandles> comm_handles;
  // The standard groups' handles by AccelGroupKind (entries of
  // comm_handles->groups), made by resolve_standard_groups.
  std::map<int, AccelGroup*> standard_groups;
  // A rank that failed on its own during a step and told the others over
  // the sequence checks' rings (comm_checks.h): this rank, or the one it
  // heard of first. Set once; the trainer turns it into an agreed stop.
  struct RankFailure {
    int rank = -1;
    std::string where;  // "step_end", "gradients_finalize", ...
    int64_t step = 0;   // 0-based
  };
  std::optional<RankFailure> rank_failure;
  // The mesh plugins declared while planning (0: not said).
  AccelMeshSpec mesh{};
  // Bytes of the full tensor each collective plugins issued works on: the
  // buffer of an all_reduce or broadcast, the output of an all_gather, the
  // input of a reduce_scatter (so FSDP's gather-gather-scatter of a model of
  // P bytes counts 3 P, DDP's all_reduce P); the trainer reports it per step.
  std::atomic<int64_t> comm_bytes{0};

  // --- the precision policy (precision_services.cpp, accel/precision.h) ---
  // Set by a PRECISION plugin during its create (creating_plugins), read by
  // the host's optimizer and, through get_policy, by the parallel plugins.
  bool creating_plugins = false;
  AccelPrecisionPolicy precision_policy{sizeof(AccelPrecisionPolicy), nullptr, {}, {}, {}, 0};
  std::string precision_policy_owner;  // the plugin that set it; "" = none

  // --- pipeline parallelism (pipeline_plan.cpp) ---
  // The trainer's unit-range execution behind run_forward / run_backward,
  // set only while a train_step hook runs.
  ModelRunner* runner = nullptr;

  // --- tensor parallelism (tensor_parallel_plan.cpp) ---
  // The tensor group's size once the plan's splits resolved (1: none), and
  // the bytes the host's own tensor-parallel collectives moved this step.
  int64_t tensor_parallel_size = 1;
  std::atomic<int64_t> tensor_parallel_bytes{0};

  // --- context parallelism (context_parallel_plan.cpp) ---
  // The context group's size once resolved (1: none), the sub-groups its
  // ring and all-to-all run on (when they are not the context group
  // itself), and the bytes the host's context exchanges sent this step.
  int64_t context_parallel_size = 1;
  std::unique_ptr<comm::ProcessGroup> context_ring_group, context_a2a_group;
  std::atomic<int64_t> context_parallel_bytes{0};

  // --- expert parallelism (expert_parallel_plan.cpp) ---
  // The expert group's size once resolved (1: none), and the bytes the
  // host's token exchanges sent this step.
  int64_t expert_parallel_size = 1;
  std::atomic<int64_t> expert_parallel_bytes{0};

  // --- the parameter gather codec (gather_codec_services.cpp, ABI 1.8) ---
  // The plugin whose hooks implement it (at most one; hooks null: none),
  // set by the hook dispatcher once every plugin is created.
  struct GatherCodecProvider {
    std::string name;
    AccelPlugin* self = nullptr;
    AccelHookGatherCodecQueryFn* query = nullptr;
    AccelHookGatherCodecFn* encode = nullptr;
    AccelHookGatherCodecFn* decode = nullptr;
  };
  GatherCodecProvider gather_codec;
};

// Resolves the mesh the plugins declared (tensor = pipeline = 1 and
// sharding = 1 by default, replica = the rest of the data-parallel ranks)
// into the standard groups.
// Collective over the world: every rank calls it after plan_model. Throws
// std::runtime_error when the mesh does not fit the world.
void resolve_standard_groups(HostContext& context);

// Compares, over each group's ring, the collectives every rank issued
// since the last call (comm_checks.h, host/comm/sequence_check.h): the
// trainer calls it after the step_end hooks of step `step`, on every rank.
// Throws std::runtime_error naming the step, the group and both operations
// when the ranks diverged.
void check_collective_sequences(HostContext& context, int64_t step);

// The services table handed to every plugin: static, immutable, valid for
// the whole process.
const AccelHostServices* host_services();

// Thread-local error of the last failed service call or set_error, for the
// calling thread (accel/status.h's rule). The registry reads it after a hook
// fails, to build "plugin NAME: hook: message".
struct PendingError {
  AccelStatus status = ACCEL_OK;
  std::string message;
};
PendingError take_pending_error();
void set_pending_error(AccelStatus status, std::string message);

}  // namespace accel::runtime

// The opaque handle of accel/version.h, one per loaded plugin.
struct AccelHost {
  accel::runtime::HostContext* context = nullptr;
  std::string plugin_name;  // prefixed to its log lines and errors
  AccelPluginKind kind = ACCEL_PLUGIN_KIND_FORCE_32BIT;  // from the descriptor, once validated
};
