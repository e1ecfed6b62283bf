// One accel-host run from its arguments: load the plugins, parse the full
// command line, then help / version / list, or train (see run.h).
#include "host/app/run.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <new>
#include <stdexcept>

#include "host/app/run_agreement.h"
#include "host/app/snapshot_assembly.h"
#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/hf_checkpoint.h"
#include "host/checkpoint/node_copies.h"
#include "host/checkpoint/snapshot_root.h"
#include "host/cli/options.h"
#include "host/comm/cuda_backend.h"
#include "host/comm/process_group.h"
#include "host/model/gpt_config.h"
#include "host/model/tensor_memory.h"
#include "host/plugin/discovery.h"
#include "host/plugin/hook_dispatch.h"
#include "host/plugin/plugin_error.h"
#include "host/plugin/plugin_list.h"
#include "host/plugin/plugin_options.h"
#include "host/plugin/plugin_registry.h"
#include "host/runtime/host_context.h"
#include "host/train/stop_request.h"
#include "host/train/trainer.h"
#include "host/util/log.h"
#include "host/util/memory_stats.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

using accel::cli::UsageError;

void fill_identity(AccelIdentity& identity, const accel::comm::MpiSession& mpi) {
  identity.struct_size = sizeof(identity);
  identity.rank = mpi.rank();
  identity.world_size = mpi.world_size();
  identity.local_rank = mpi.local_rank();
  identity.local_world_size = mpi.local_world_size();
  identity.node_rank = mpi.node_rank();
  identity.num_nodes = mpi.num_nodes();
  identity.device = DLDevice{kDLCPU, 0};
}

bool reduces_gradients(const accel::plugin::PluginRegistry& registry) {
  for (const auto& p : registry.plugins()) {
    if (p->descriptor().capabilities & ACCEL_CAP_REDUCES_GRADS) return true;
  }
  return false;
}

// A plugin that may split the world into tensor groups or pipeline stages,
// whose ranks read the same micro-batches.
bool has_parallel_plugin(const accel::plugin::PluginRegistry& registry) {
  for (const auto& p : registry.plugins()) {
    if (p->descriptor().kind == ACCEL_PLUGIN_PARALLEL) return true;
  }
  return false;
}

// Every rank loads the same plugins; if any rank fails, all stop (no rank is
// left waiting in a collective for one that exited). With several ranks and
// no parallel strategy named, `ddp` is loaded too: the default data parallel.
void load_plugins_everywhere(accel::plugin::PluginRegistry& registry, accel::cli::PluginRequest request,
                             const std::vector<std::filesystem::path>& dirs, const accel::comm::MpiSession& mpi) {
  std::string error;
  try {
    registry.load(request.plugins, dirs);
    if (mpi.world_size() > 1 && !has_parallel_plugin(registry)) {
      request.plugins.push_back("ddp");
      registry.load(request.plugins, dirs);
    }
    if (mpi.world_size() > 1 && !reduces_gradients(registry)) {
      error = accel::strformat(
          "%d ranks launched, but none of the loaded plugins reduces gradients across ranks (add --plugin ddp)",
          mpi.world_size());
    }
  } catch (const accel::plugin::PluginError& e) {
    error = e.what();
  }
  if (!mpi.all_succeeded(error.empty())) {
    throw UsageError(error.empty() ? "plugin loading failed on another rank" : error);
  }
}

// The model's shape, checked as a usage error: an unknown preset, shapes
// that do not fit together, and shapes that cannot possibly fit in this
// machine's memory (rather than a LibTorch backtrace or a bare bad_alloc
// later). The bound is a lower one (model/gpt_config.h): every rank of the
// node holds a full fp32 replica with gradients and AdamW moments (16 bytes
// a parameter), or, when a plugin shards parameters, at least its 4/world
// share; compared with physical memory when training on the CPU.
model::GptConfig checked_model_shape(const RunConfig& config, const plugin::PluginRegistry& registry,
                                     const comm::MpiSession& mpi) {
  model::GptConfig shape;
  try {
    shape = model::make_gpt_config(config.model, config.model_overrides);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const bool on_cpu = config.device == "cpu" || (config.device == "auto" && !torch::cuda::is_available());
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (!on_cpu || pages <= 0 || page_size <= 0) return shape;
  bool sharded = false;
  for (const auto& p : registry.plugins()) sharded |= (p->descriptor().capabilities & ACCEL_CAP_SHARDS_PARAMS) != 0;
  const double per_parameter = sharded ? 4.0 / mpi.world_size() : 16.0;
  const int64_t micro_batch = std::max<int64_t>(1, config.batch_size / (config.grad_accum * mpi.world_size()));
  const double needed =
      model::minimum_training_bytes(shape, micro_batch, per_parameter) * static_cast<double>(mpi.local_world_size());
  const double memory = static_cast<double>(pages) * static_cast<double>(page_size);
  if (needed > memory) {
    throw UsageError(strformat(
        "--n-layer/--n-embd/--seq-len/--vocab-size: the model (%s) needs at least %.3g GiB on this machine (%d "
        "rank(s), fp32 %s and one micro-batch's logits), more than its %.1f GiB of memory",
        shape.describe().c_str(), needed / 1073741824.0, mpi.local_world_size(),
        sharded ? "parameter shards" : "parameters, gradients and AdamW moments", memory / 1073741824.0));
  }
  return shape;
}

// --config FILE.yaml (an accelerate config): its launch-level settings
// that a rank can still honour. The options it maps to are in the parse.
void use_accelerate_config(const cli::AccelerateConfig& accelerate, const comm::MpiSession& mpi) {
  if (accelerate.num_processes && *accelerate.num_processes != mpi.world_size()) {
    throw UsageError(strformat("%s: num_processes %lld, but this job has %d rank(s) (accel-host launch --config_file "
                               "%s starts it with num_processes)",
                               accelerate.path.c_str(), static_cast<long long>(*accelerate.num_processes),
                               mpi.world_size(), accelerate.path.c_str()));
  }
  // Before the communication layer and CUDA start: both read these once.
  if (!accelerate.gpu_ids.empty() && accelerate.gpu_ids != "all") {
    setenv("CUDA_VISIBLE_DEVICES", accelerate.gpu_ids.c_str(), /*overwrite=*/1);
  }
  if (accelerate.debug) setenv("ACCEL_COMM_VERIFY", "ops", /*overwrite=*/0);
  if (mpi.rank() == 0) {
    for (const std::string& note : accelerate.notes) log::info(accelerate.path + ": " + note);
  }
}

// --resume auto (a job script that is requeued runs the same command line
// each time): the checkpoints under --save when it holds one, else a fresh
// start, from --init-from's weights if given. Checking which of them is
// complete is resume's own work (it falls back past a damaged newest one,
// and fails when none is complete).
// --snapshot-every without --snapshot-dir: a directory in memory named
// after the absolute --save path, so every restart of the job finds it and
// no other job shares it.
void resolve_snapshot_dir(RunConfig& config) {
  if (config.snapshot_every == 0 || !config.snapshot_dir.empty()) return;
  std::error_code error;
  const std::string save = std::filesystem::weakly_canonical(std::filesystem::absolute(config.save_dir), error).string();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a: the same on every rank and every build
  for (const unsigned char c : save) hash = (hash ^ c) * 1099511628211ull;
  config.snapshot_dir = strformat("/dev/shm/accel-snapshots/%016llx", static_cast<unsigned long long>(hash));
}

// A snapshot root is checked against --save before anything is created in
// it (checkpoint/snapshot_root.h), then each node's lowest rank claims its
// node's root for this job: the claim lives as long as the job, and every
// rank stops together when any node's root is refused.
std::optional<checkpoint::SnapshotRootClaim> claim_snapshot_root(const RunConfig& config,
                                                                 const comm::MpiSession& mpi) {
  if (const std::optional<std::string> conflict =
          checkpoint::snapshot_root_conflict(config.snapshot_dir, config.save_dir)) {
    throw UsageError("--snapshot-dir " + config.snapshot_dir + ": " + *conflict);
  }
  check_snapshot_root_is_per_node(config.snapshot_dir, mpi);
  std::string run_id, error;
  if (mpi.rank() == 0) {
    try {
      run_id = checkpoint::job_run_id(config.save_dir);
    } catch (const std::exception& e) {
      error = std::string("--save: cannot record the job's run id: ") + e.what();
    }
  }
  if (!mpi.all_succeeded(error.empty())) throw UsageError(error.empty() ? "--save: refused on rank 0" : error);
  run_id = mpi.broadcast_from_root(run_id);
  std::optional<checkpoint::SnapshotRootClaim> claim;
  if (checkpoint::is_node_leader(*mpi.world_nodes(), mpi.rank())) {
    try {
      claim.emplace(checkpoint::SnapshotRootClaim::claim(config.snapshot_dir, config.save_dir, run_id));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!mpi.all_succeeded(error.empty())) {
    throw UsageError(error.empty() ? "--snapshot-dir " + config.snapshot_dir + " is refused on another node" : error);
  }
  return claim;
}

// The step of the newest committed checkpoint under `root` by its name
// alone (nothing read); -1 when none.
int64_t newest_committed_step(const std::string& root) {
  int64_t newest = -1;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    if (entry.is_symlink(error) || !entry.is_directory(error)) continue;  // never a committed checkpoint
    if (const std::optional<uint64_t> step = checkpoint::checkpoint_step(entry.path().filename().string())) {
      newest = std::max(newest, static_cast<int64_t>(*step));
    }
  }
  return newest;
}

// --snapshot-every: `--resume auto` takes the snapshot when it is newer
// than --save's newest checkpoint and every rank sees the same snapshot
// whole. The nodes first make the newest snapshot they hold between them
// whole on each (snapshot_assembly.h: a node lost with its memory left a
// copy of its files on the next node). Rank 0 proposes, every rank checks,
// all agree (collective over the world): a rank on a node whose memory
// lacks the snapshot's files makes every rank fall back to --save. Returns
// whether the snapshot was taken.
// Every rank makes both calls whatever its options, so ranks whose command
// lines differ reach the run agreement, which names the difference, instead
// of waiting on each other here.
bool resume_from_snapshot(RunConfig& config, const comm::MpiSession& mpi) {
  const bool wanted = config.resume == cli::kResumeAuto && config.snapshot_every > 0;
  // The disk's newest by name: reading a checkpoint to verify it costs what
  // loading it does, and the resume verifies whichever it takes. A damaged
  // newer one on disk then costs the snapshot, never correctness.
  const int64_t saved = wanted ? newest_committed_step(config.save_dir) : -1;
  int64_t snapshot = -1;
  if (mpi.all_succeeded(wanted)) {
    // Rank 0's view of --save, so every rank plans the same assembly.
    const int64_t newer_than = std::stoll(mpi.broadcast_from_root(std::to_string(saved)));
    const int64_t assembled = assemble_newest_snapshot(config.snapshot_dir, newer_than, mpi,
                                                       std::llround(config.comm.timeout_s * 1000.0));
    const std::string dir = config.snapshot_dir + "/step_" + std::to_string(assembled);
    std::string why;
    if (assembled >= 0 && !checkpoint::node_checkpoint_is_whole(dir, &why)) {
      log::warn("--resume auto: " + dir + " is not whole on this node: " + why);
    } else {
      snapshot = assembled;
    }
  }
  const std::string proposal =
      mpi.broadcast_from_root(snapshot >= 0 && snapshot > saved ? std::to_string(snapshot) : std::string("none"));
  const bool agreed = mpi.all_succeeded(proposal != "none" && proposal == std::to_string(snapshot));
  if (proposal == "none") return false;
  if (!agreed) {
    log::warn("--resume auto: the snapshot step_" + proposal + " in " + config.snapshot_dir +
              " is not whole on every rank; resuming from --save");
    return false;
  }
  log::info("--resume auto: the snapshot step_" + proposal + " in " + config.snapshot_dir +
            " is newer than --save's newest checkpoint; resuming from it");
  config.resume = config.snapshot_dir;
  return true;
}

void resolve_resume_auto(RunConfig& config, const comm::MpiSession& mpi) {
  if (resume_from_snapshot(config, mpi)) {
    config.init_from.clear();
    return;
  }
  if (config.resume != cli::kResumeAuto) return;
  std::error_code error;
  bool any = false;
  for (const auto& entry : std::filesystem::directory_iterator(config.save_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos && entry.is_directory(error)) any = true;
  }
  if (!any) {
    log::info("--resume auto: no checkpoint under " + config.save_dir + " yet; starting from step 0");
    config.resume.clear();
    return;
  }
  if (!config.init_from.empty()) {
    log::info("--resume auto: resuming from " + config.save_dir + "; --init-from " + config.init_from +
              " is not read (the checkpoint has the weights)");
    config.init_from.clear();
  }
  config.resume = config.save_dir;
}

// --init-from hf:DIR: the shape comes from the checkpoint's config.json; a
// shape flag that says otherwise is refused naming both (never silently
// overridden either way). Every rank reads the same files, so every rank
// fails alike on a bad one.
void take_shape_from_init_checkpoint(RunConfig& config) {
  if (config.init_from.empty()) return;
  const std::filesystem::path dir = config.init_from.substr(3);
  const checkpoint::HfModelConfig hf = checkpoint::read_hf_config(dir);
  const auto reconcile = [&](std::optional<int64_t>& flag, int64_t value, const char* option, const char* key) {
    if (flag && *flag != value) {
      throw UsageError(strformat("--%s %lld contradicts %s %lld of %s", option, static_cast<long long>(*flag), key,
                                 static_cast<long long>(value), (dir / "config.json").c_str()));
    }
    flag = value;
  };
  ModelOverrides& o = config.model_overrides;
  const bool llama = hf.shape.family == model::ModelFamily::llama;  // (config.json's own key names)
  reconcile(o.n_layer, hf.shape.n_layer, "n-layer", llama ? "num_hidden_layers" : "n_layer");
  reconcile(o.n_head, hf.shape.n_head, "n-head", llama ? "num_attention_heads" : "n_head");
  reconcile(o.n_embd, hf.shape.n_embd, "n-embd", llama ? "hidden_size" : "n_embd");
  // A rotary decoder has no table of positions: --seq-len may pass
  // max_position_embeddings (dynamic and longrope scaling then take their
  // long-sequence frequencies, as transformers does). GPT-2's wpe may not.
  if (llama) {
    if (!o.seq_len) o.seq_len = hf.shape.seq_len;
  } else {
    reconcile(o.seq_len, hf.shape.seq_len, "seq-len", "n_positions");
  }
  reconcile(o.vocab_size, hf.shape.vocab_size, "vocab-size", "vocab_size");
  if (llama) {
    // The family; every dimension comes from config.json.
    config.model = hf.shape.has_experts() ? "moe-tiny" : "llama-tiny";
    reconcile(o.n_kv_head, hf.shape.n_kv_head, "n-kv-head", "num_key_value_heads");
    const bool qwen2_moe = hf.model_type == "qwen2_moe";
    const auto reconcile_flag = [&](std::optional<bool>& flag, bool value, const char* option, const char* key) {
      if (flag && *flag != value) {
        throw UsageError(strformat("--%s %s contradicts %s of %s", option, *flag ? "true" : "false", key,
                                   (dir / "config.json").c_str()));
      }
      flag = value;
    };
    if (hf.shape.has_experts()) {
      reconcile(o.n_experts, hf.shape.n_experts, "n-experts", qwen2_moe ? "num_experts" : "num_local_experts");
      reconcile(o.experts_per_token, hf.shape.experts_per_token, "experts-per-token", "num_experts_per_tok");
      reconcile(o.shared_expert_size, hf.shape.shared_expert_size, "shared-expert-size",
                qwen2_moe ? "shared_expert_intermediate_size" : "a Mixtral's shared expert width");
      reconcile_flag(o.normalize_top_k, hf.shape.normalize_top_k, "normalize-top-k",
                     qwen2_moe ? "norm_topk_prob" : "a Mixtral (its top-k weights renormalised)");
    } else if (o.n_experts && *o.n_experts != 0) {
      throw UsageError(strformat("--n-experts %lld contradicts %s, a dense model", static_cast<long long>(*o.n_experts),
                                 (dir / "config.json").c_str()));
    }
    reconcile_flag(o.qkv_bias, hf.shape.qkv_bias, "qkv-bias",
                   hf.shape.qkv_bias ? "a Qwen2 (q, k and v biases)" : "a Llama or Mixtral (no attention biases)");
    reconcile(o.ffn_size, hf.shape.ffn_size, "ffn-size", qwen2_moe ? "moe_intermediate_size" : "intermediate_size");
    o.rope_theta = hf.shape.rope_theta;
    o.norm_eps = hf.shape.norm_eps;
    // The block's other choices have no flags: config.json's word is final.
    o.head_dim = hf.shape.head_dim;
    o.tie_embeddings = hf.shape.tie_embeddings;
    o.qk_norm = hf.shape.qk_norm;
    o.sliding_window = hf.shape.sliding_window;
    o.rope_scaling = hf.shape.rope_scaling;
    o.block = hf.shape.block;
    o.partial_rotary_factor = hf.shape.partial_rotary_factor;
    o.nope_layers = hf.shape.nope_layers;
    o.embedding_multiplier = hf.shape.embedding_multiplier;
    o.residual_multiplier = hf.shape.residual_multiplier;
    o.logits_scaling = hf.shape.logits_scaling;
    o.attention_multiplier = hf.shape.attention_multiplier;
    o.query_position_scale_beta = hf.shape.query_position_scale_beta;
  }
  config.init_hf_keys = hf.keys;
  for (const std::string& what : hf.ignored) log::warn("--init-from: ignoring " + what);
}

// The one line for an allocation that failed although the shape passed
// checked_model_shape's lower bound.
std::string out_of_memory(const model::GptConfig& shape, const RunConfig& config, const std::string& cause) {
  return strformat("out of memory: the model (%s) with --batch-size %lld does not fit on this rank; reduce the "
                   "model's shape or the batch (%s)",
                   shape.describe().c_str(), static_cast<long long>(config.batch_size), cause.c_str());
}

}  // namespace

int run_accel(const std::vector<std::string>& args, const comm::MpiSession& mpi, bool* training_started) {
  accel::log::init(mpi.rank(), accel::log::Level::info);
  const accel::cli::PluginRequest request = accel::cli::scan_plugin_request(args);
  const auto dirs = accel::plugin::plugin_search_dirs(request.plugin_paths, std::getenv("ACCEL_PLUGIN_PATH"),
                                                      accel::plugin::current_executable_dir());
  // Declared first, destroyed last: plugins' teardown may still use groups.
  std::unique_ptr<accel::comm::ProcessGroup> world;
  accel::runtime::HostContext context;
  fill_identity(context.identity, mpi);
  accel::plugin::PluginRegistry registry(context);
  load_plugins_everywhere(registry, request, dirs, mpi);

  const auto plugin_options = accel::plugin::describe_plugin_options(registry);
  const accel::cli::ParsedCommandLine parsed =
      accel::cli::parse_command_line(args, registry.empty() ? nullptr : &plugin_options);
  switch (parsed.action) {
    case accel::cli::Action::help:
      if (mpi.rank() == 0) std::fputs(parsed.help_text.c_str(), stdout);
      return 0;
    case accel::cli::Action::version:
      if (mpi.rank() == 0) {
        std::printf("accel-host %s (plugin ABI %d.%d, malloc %s)\n", ACCEL_VERSION, ACCEL_ABI_VERSION_MAJOR,
                    ACCEL_ABI_VERSION_MINOR, accel::malloc_memory().allocator);
      }
      return 0;
    case accel::cli::Action::list_plugins:
      if (mpi.rank() == 0) accel::plugin::print_plugin_list(dirs, context, stdout);
      return 0;
    case accel::cli::Action::run:
      break;
  }

  accel::RunConfig config = parsed.config;
  context.tensor_parallel_across_nodes = config.comm.tensor_parallel_across_nodes;
  accel::log::init(mpi.rank(), accel::log::parse_level(config.log_level));
  // LibTorch's CUDA backend loads only where CUDA may be used, before
  // anything asks torch about CUDA (host/comm/cuda_backend.h).
  if (config.device != "cpu") {
    std::string why;
    if (!accel::comm::load_cuda_backend(&why) && config.device == "cuda") {
      throw UsageError("--device cuda: no CUDA device is available on this machine (" + why + ")");
    }
  }
  if (parsed.accelerate) use_accelerate_config(*parsed.accelerate, mpi);
  accel::plugin::fill_option_store(registry, parsed.plugin_values, config, context.options);
  // A parallel plugin's mesh may split the world into groups that read the
  // same micro-batches (tensor, pipeline and context ranks, whichever plugin
  // plans them: fsdp's cp_size and ZeRO's sequence_parallel_size declare no
  // capability bit): only the data group divides the batch, and its size is
  // known once the plans resolve (Trainer checks it then, exit 2 alike).
  accel::cli::validate_for_world(config, has_parallel_plugin(registry) ? 1 : mpi.world_size());
  resolve_snapshot_dir(config);
  // Held until the process ends: a second job on the same root is refused.
  const std::optional<checkpoint::SnapshotRootClaim> snapshot_root =
      mpi.all_succeeded(config.snapshot_every > 0) ? claim_snapshot_root(config, mpi) : std::nullopt;
  // The shape first: a requeued job's command names --init-from, and the
  // checkpoint that --resume auto then takes instead was written for that shape.
  take_shape_from_init_checkpoint(config);
  resolve_resume_auto(config, mpi);
  const accel::model::GptConfig shape = checked_model_shape(config, registry, mpi);
  // Before the first collective of the communication layer: ranks that
  // disagree stop here, all of them, with one line.
  agree_on_run(run_settings(config, shape, registry, context.options, mpi.world_size()), mpi);
  accel::comm::CommOptions comm_options;
  // Whole milliseconds; the range (cli/options.h) keeps this >= 1.
  comm_options.timeout_ms = std::llround(config.comm.timeout_s * 1000.0);
  comm_options.backend = config.comm.backend == "mpi"    ? accel::comm::Backend::mpi
                         : config.comm.backend == "nccl" ? accel::comm::Backend::nccl
                                                         : accel::comm::Backend::auto_select;
  comm_options.world_nodes = mpi.world_nodes();
  comm_options.hierarchical_all_reduce = config.comm.hierarchical_all_reduce;
  world = accel::comm::ProcessGroup::create_world(mpi, comm_options);
  context.world = world.get();
  if (config.threads > 0) at::set_num_threads(config.threads);
  // Before the model's first tensor: the memory ledger counts every tensor
  // byte where it is allocated (host/model/tensor_memory.h).
  accel::record_startup_memory();
  accel::model::install_counting_cpu_allocator();
  for (const auto& p : registry.plugins()) {
    accel::log::info(accel::strformat("plugin %s %s (%s) from %s", p->name().c_str(), p->descriptor().version,
                                      accel::plugin::kind_name(p->descriptor().kind), p->path().c_str()));
  }
  accel::plugin::HookDispatcher hooks(registry, context);
  try {
    accel::train::Trainer trainer(config, mpi.rank(), mpi.world_size(), &hooks, &context);
    if (!config.init_from.empty()) {
      const std::filesystem::path dir = config.init_from.substr(3);
      trainer.start_from_weights(checkpoint::read_hf_weights(dir, shape, config.init_hf_keys));
      accel::log::info("initial weights from " + dir.string());
    }
    const auto started = [training_started] {
      if (training_started) *training_started = true;
    };
    if (trainer.run(started) == accel::train::RunEnd::stopped_by_signal) return accel::train::kExitStoppedToResume;
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(out_of_memory(shape, config, "std::bad_alloc"));
  } catch (const c10::Error& e) {
    // LibTorch's allocators throw c10::Error, with a backtrace: one line.
    const std::string what = e.what_without_backtrace();
    if (what.find("allocate") == std::string::npos) throw;
    throw std::runtime_error(out_of_memory(shape, config, what.substr(0, what.find('\n'))));
  }
  return 0;
}


}  // namespace accel::app
