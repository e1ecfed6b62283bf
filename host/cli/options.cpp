// Boost.Program_options definitions for accel-host (see options.h).
//
// Naming: run options are kebab-case (--batch-size); option groups that mirror
// an Accelerate Kwargs handler use its section and field names
// (--grad_scaler.init_scale, or [grad_scaler] init_scale=... in --config), the
// same shape plugin options take (--fsdp.sharding_strategy).
#include "host/cli/options.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "accel/sdk/input_file.hpp"
#include "host/cli/model_presets.h"
#include "host/util/strformat.h"

namespace po = boost::program_options;

namespace accel {

const char* to_string(DataOrder order) {
  return order == DataOrder::shuffled ? "shuffled" : "sequential";
}
const char* to_string(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::constant: return "constant";
    case LrScheduleKind::linear: return "linear";
    case LrScheduleKind::cosine: return "cosine";
  }
  return "?";
}
const char* to_string(MixedPrecision precision) {
  switch (precision) {
    case MixedPrecision::no: return "no";
    case MixedPrecision::bf16: return "bf16";
    case MixedPrecision::fp16: return "fp16";
  }
  return "?";
}

}  // namespace accel

namespace accel::cli {
namespace {

template <typename Enum>
Enum parse_choice(const std::string& option, const std::string& value,
                  std::initializer_list<std::pair<const char*, Enum>> choices) {
  std::string allowed;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    allowed += allowed.empty() ? name : std::string(", ") + name;
  }
  throw UsageError(strformat("--%s: '%s' is not one of: %s", option.c_str(), value.c_str(),
                             allowed.c_str()));
}

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

// Boost reads "inf", "nan" and "1e999" into a double without complaint;
// no hyperparameter of a run means anything there.
void require_finite(const char* option, double value) {
  require(std::isfinite(value), strformat("--%s: %g is not a finite number", option, value));
}

// Boost.Program_options builds its error messages by replacing placeholders
// ("%value%", ...) with the user's text until none is left: a token that
// itself holds the placeholder it replaces loops forever (found by
// tests/fuzz/cli_fuzz: `--grad%canonical_option%-accum 1` hung the host).
// No option name or value of a run needs them, so text holding one is
// refused before Boost sees it.
void refuse_message_placeholders(const std::string& text, const std::string& where) {
  // Every key Boost 1.74 substitutes (errors.hpp and errors.cpp).
  static constexpr const char* kPlaceholders[] = {"%option%",         "%value%",  "%canonical_option%",
                                                  "%original_token%", "%prefix%", "%invalid_line%"};
  for (const char* placeholder : kPlaceholders) {
    if (text.find(placeholder) != std::string::npos) {
      throw UsageError(where + " contains '" + placeholder +
                       "', which accel-host does not accept in options (it is its parser's message placeholder)");
    }
  }
}

void refuse_message_placeholders(const std::vector<std::string>& args) {
  for (const std::string& arg : args) refuse_message_placeholders(arg, "argument '" + arg + "'");
}

// --config must name a readable regular file, opened by the SDK's rule for
// inputs: a directory would read as nothing (silently dropping every
// option) and a FIFO would block. The text is read whole (and checked like
// the arguments) before parsing.
// A .yaml or .yml file is the config `accelerate config` writes: read by
// cli/accelerate_config.h and parsed as the options it maps to, passed as
// words (never as INI text, where a '#' inside a value would start a
// comment), less the settings the command line `args` gives (replaced
// whole: AccelerateConfig::kept_under), and stored after the command line,
// which so wins; `accelerate`, when given, receives what was read.
po::parsed_options config_file_options(const std::string& path, const std::vector<std::string>& args,
                                       const po::options_description& description, bool allow_unregistered,
                                       std::optional<AccelerateConfig>* accelerate = nullptr) {
  if (is_yaml_config(path)) {
    AccelerateConfig config = read_accelerate_config(path);
    std::vector<std::string> words;
    for (const auto& [name, value] : config.kept_under(args)) words.push_back("--" + name + "=" + value);
    refuse_message_placeholders(words);
    if (accelerate != nullptr) *accelerate = std::move(config);
    po::command_line_parser parser(words);
    parser.options(description);
    if (allow_unregistered) parser.allow_unregistered();
    return parser.run();
  }
  constexpr uint64_t kMaxConfigBytes = 16ull << 20;  // key=value lines; far larger is not a config
  std::string text;
  try {
    text = sdk::read_input_file(path, kMaxConfigBytes, "--config");
  } catch (const sdk::InputFileError& error) {
    throw UsageError(error.what());
  }
  refuse_message_placeholders(text, "--config '" + path + "'");
  std::istringstream file(text);
  return po::parse_config_file(file, description, allow_unregistered);
}

// accel-host takes options only (subcommands are dispatched before parsing):
// a stray word is a typo, never something to ignore.
void refuse_positionals(const po::parsed_options& parsed) {
  for (const po::option& option : parsed.options) {
    if (option.position_key < 0) continue;
    const std::string word = option.value.empty() ? option.string_key : option.value.front();
    throw UsageError("unexpected argument '" + word + "': accel-host takes --options only (subcommands: " +
                     std::string(kSubcommands) + ")");
  }
}

struct RawStrings {
  std::string data_order = "shuffled";
  std::string schedule = "cosine";
  std::string mixed_precision = "no";
  std::string config_file;
  int64_t n_layer = 0, n_head = 0, n_embd = 0, seq_len = 0, vocab_size = 0, n_kv_head = 0, ffn_size = 0;
  int64_t n_experts = 0, experts_per_token = 0, shared_expert_size = 0;
  bool normalize_top_k = true;
  bool qkv_bias = false;
};

// The numbers behind integer_option_ranges (see options.h for the products
// they keep in int64).
constexpr int64_t kMaxSteps = 1'000'000'000;     // steps, intervals, counts of steps
constexpr int64_t kMaxBatch = int64_t{1} << 20;  // sequences per step, micro-steps
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // n-embd, and head counts that divide it
constexpr int64_t kMaxLayers = int64_t{1} << 14;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxFfn = int64_t{1} << 22;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxThreads = 65536;

// Whether a parsed integer option lies in `range`, whatever integer type
// Boost stored it as (int, int64_t, uint64_t); *text is the value as given.
bool integer_in_range(const boost::any& value, const IntegerOptionRange& range, std::string* text) {
  if (const auto* v = boost::any_cast<uint64_t>(&value)) {
    *text = std::to_string(*v);
    // Every maximum is >= 0, so a value up to it converts exactly.
    return *v <= static_cast<uint64_t>(range.max) && static_cast<int64_t>(*v) >= range.min;
  }
  int64_t number = 0;
  if (const auto* v = boost::any_cast<int64_t>(&value)) {
    number = *v;
  } else if (const auto* v = boost::any_cast<int>(&value)) {
    number = *v;
  } else {
    throw std::logic_error(std::string("--") + range.option + " is not stored as an integer");
  }
  *text = std::to_string(number);
  return number >= range.min && number <= range.max;
}

// Every integer option given (or defaulted) lies in its range.
void require_integer_ranges(const po::variables_map& vm) {
  for (const IntegerOptionRange& range : integer_option_ranges()) {
    if (!vm.count(range.option)) continue;
    std::string text;
    const bool in_range = integer_in_range(vm[range.option].value(), range, &text);  // fills text first
    require(in_range,
            strformat("--%s %s: must be >= %lld and <= %lld", range.option, text.c_str(),
                      static_cast<long long>(range.min), static_cast<long long>(range.max)));
  }
}

po::options_description run_options(RunConfig& c, RawStrings& raw) {
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("version", "print the version and exit")
      ("list-plugins", "list every plugin found on the search path and exit")
      ("config", po::value(&raw.config_file)->value_name("FILE"),
       "read options from FILE (key=value lines, [section] per plugin or kwargs group)")
      ("plugin", po::value(&c.plugins)->composing()->value_name("NAME"),
       "load strategy plugin NAME (repeatable)")
      ("plugin-path", po::value(&c.plugin_paths)->composing()->value_name("DIR"),
       "extra directory to search for plugins (repeatable)")
      ("log-level", po::value(&c.log_level)->default_value(c.log_level),
       "trace|debug|info|warn|error|off")
      ("log-every", po::value(&c.log_every)->default_value(c.log_every),
       "print a progress line every N steps")
      ("threads", po::value(&c.threads)->default_value(c.threads),
       "intra-op CPU threads (0: LibTorch's default)")
      ("comm-hierarchical-all-reduce",
       po::value(&c.comm.hierarchical_all_reduce)->default_value(c.comm.hierarchical_all_reduce),
       "true|false: all_reduce large buffers across nodes as reduce-scatter in the node, all_reduce across "
       "nodes, all_gather in the node (groups with the same number of ranks on every node)")
      ("tensor-parallel-across-nodes", po::bool_switch(&c.comm.tensor_parallel_across_nodes),
       "accept tensor-parallel groups that span nodes (refused otherwise: they all-reduce activations in "
       "every layer)");

  po::options_description model("Model");
  model.add_options()
      ("model", po::value(&c.model)->default_value(c.model),
       model_preset_list("|").c_str())
      ("device", po::value(&c.device)->default_value(c.device),
       "auto|cpu|cuda: auto trains on cuda:<local rank> when CUDA is available, else on the CPU")
      ("n-layer", po::value(&raw.n_layer), "override: transformer blocks")
      ("n-head", po::value(&raw.n_head), "override: attention heads")
      ("n-embd", po::value(&raw.n_embd), "override: embedding width")
      ("seq-len", po::value(&raw.seq_len), "override: sequence length")
      ("vocab-size", po::value(&raw.vocab_size), "override: vocabulary size")
      ("n-kv-head", po::value(&raw.n_kv_head), "override (llama): key/value heads, n-head a multiple")
      ("ffn-size", po::value(&raw.ffn_size), "override (llama): SwiGLU hidden width (each expert's, with experts)")
      ("n-experts", po::value(&raw.n_experts),
       "override (llama): experts in every block's MLP, a mixture of experts (Mixtral); 0: a dense MLP")
      ("experts-per-token", po::value(&raw.experts_per_token), "override (moe): experts each token takes (top k)")
      ("shared-expert-size", po::value(&raw.shared_expert_size),
       "override (moe): a shared SwiGLU expert of this width every token goes through, scaled by a sigmoid gate "
       "(Qwen2-MoE's shared_expert_intermediate_size); 0: none")
      ("qkv-bias", po::value(&raw.qkv_bias),
       "override (llama): biases on the q, k and v projections (Qwen2's and Qwen2-MoE's attention; from "
       "--init-from's config.json otherwise)")
      ("normalize-top-k", po::value(&raw.normalize_top_k),
       "override (moe): renormalise the k chosen routing weights to sum 1 (Mixtral: true; Qwen2-MoE's "
       "norm_topk_prob)")
      ("moe-capacity-factor", po::value(&c.moe.capacity_factor)->default_value(c.moe.capacity_factor),
       "moe: each expert takes at most factor x tokens x k / experts assignments, the rest dropped and counted; "
       "0: dropless")
      ("moe-aux-loss-coef", po::value(&c.moe.aux_loss_coef)->default_value(c.moe.aux_loss_coef),
       "moe: the load-balancing loss's weight in the loss (transformers' router_aux_loss_coef); 0: off")
      ("moe-z-loss-coef", po::value(&c.moe.z_loss_coef)->default_value(c.moe.z_loss_coef),
       "moe: the router z-loss's weight in the loss (ST-MoE); 0: off");

  po::options_description data("Data");
  data.add_options()
      ("data", po::value(&c.data)->default_value(c.data),
       "synthetic | text:PATH (bytes as tokens) | tokens:PATH (llm.c .bin, uint16 or uint32, or flat uint16) | "
       "megatron:PREFIX (Megatron-LM's PREFIX.bin + PREFIX.idx)")
      ("data-order", po::value(&raw.data_order)->default_value(raw.data_order),
       "shuffled (seeded, per epoch) | sequential (batch k is the k-th contiguous slice)");

  po::options_description eval("Evaluation");
  eval.add_options()
      ("eval-every", po::value(&c.eval.every)->default_value(c.eval.every),
       "evaluate every N optimizer steps and after the last (0: never)")
      ("eval-steps", po::value(&c.eval.steps)->default_value(c.eval.steps),
       "global batches of held-out windows per evaluation")
      ("eval-data", po::value(&c.eval.data)->value_name("SPEC"),
       "held-out data: text:PATH | tokens:PATH | megatron:PREFIX (default: the last --eval-fraction of --data's "
       "windows)")
      ("eval-fraction", po::value(&c.eval.fraction)->default_value(c.eval.fraction),
       "share of --data's windows held out for evaluation when --eval-data is not given");

  po::options_description train("Training");
  train.add_options()
      ("steps", po::value(&c.steps)->default_value(c.steps), "total optimizer steps of the run")
      ("batch-size", po::value(&c.batch_size)->default_value(c.batch_size),
       "global sequences per optimizer step (split across ranks and micro-steps)")
      ("grad-accum", po::value(&c.grad_accum)->default_value(c.grad_accum),
       "micro-steps accumulated per optimizer step")
      ("seed", po::value(&c.seed)->default_value(c.seed), "seed of weights and data order")
      ("lr", po::value(&c.optimizer.lr)->default_value(c.optimizer.lr), "peak learning rate")
      ("min-lr", po::value(&c.optimizer.min_lr)->default_value(c.optimizer.min_lr),
       "learning rate at the end of a linear/cosine decay")
      ("lr-schedule", po::value(&raw.schedule)->default_value(raw.schedule),
       "constant|linear|cosine (after warmup)")
      ("warmup-steps", po::value(&c.optimizer.warmup_steps)->default_value(c.optimizer.warmup_steps),
       "linear warmup steps")
      ("lr-decay-steps", po::value(&c.optimizer.decay_steps)->default_value(c.optimizer.decay_steps),
       "steps over which linear/cosine decay runs (0: --steps)")
      ("beta1", po::value(&c.optimizer.beta1)->default_value(c.optimizer.beta1), "AdamW beta1")
      ("beta2", po::value(&c.optimizer.beta2)->default_value(c.optimizer.beta2), "AdamW beta2")
      ("eps", po::value(&c.optimizer.eps)->default_value(c.optimizer.eps), "AdamW epsilon")
      ("weight-decay", po::value(&c.optimizer.weight_decay)->default_value(c.optimizer.weight_decay),
       "AdamW decoupled weight decay (not applied to biases, norms)")
      ("grad-clip", po::value(&c.optimizer.grad_clip)->default_value(c.optimizer.grad_clip),
       "clip the global gradient norm to this (0: off)")
      ("mixed-precision", po::value(&raw.mixed_precision)->default_value(raw.mixed_precision),
       "no|bf16|fp16 (autocast; fp16 adds the dynamic loss scaler)")
      ("fused-kernels", po::value(&c.fused_kernels)->default_value(c.fused_kernels),
       "on a CUDA device, the model's residual add + norm, SwiGLU, rotary and loss as fused kernels (false: ATen's "
       "composition, for comparison; the CPU always takes it)")
      ("nonfinite-loss-skips", po::value(&c.nonfinite_loss_skips)->default_value(c.nonfinite_loss_skips),
       "steps whose global loss is NaN/inf that are skipped (no update) before the run stops (0: stop at the first)");

  po::options_description scaler("GradScalerKwargs ([grad_scaler] in --config)");
  scaler.add_options()
      ("grad_scaler.enabled", po::value(&c.grad_scaler.enabled)->default_value(c.grad_scaler.enabled),
       "use the loss scaler with fp16")
      ("grad_scaler.init_scale", po::value(&c.grad_scaler.init_scale)->default_value(c.grad_scaler.init_scale),
       "initial loss scale")
      ("grad_scaler.growth_factor",
       po::value(&c.grad_scaler.growth_factor)->default_value(c.grad_scaler.growth_factor),
       "scale multiplier after growth_interval finite steps")
      ("grad_scaler.backoff_factor",
       po::value(&c.grad_scaler.backoff_factor)->default_value(c.grad_scaler.backoff_factor),
       "scale multiplier after a step with inf/nan gradients")
      ("grad_scaler.growth_interval",
       po::value(&c.grad_scaler.growth_interval)->default_value(c.grad_scaler.growth_interval),
       "finite steps between growths")
      ("grad_scaler.hysteresis", po::value(&c.grad_scaler.hysteresis)->default_value(c.grad_scaler.hysteresis),
       "overflowing steps that back off the scale only at the Nth since the last growth (DeepSpeed's "
       "fp16.hysteresis; 1: every one)")
      ("grad_scaler.min_scale", po::value(&c.grad_scaler.min_scale)->default_value(c.grad_scaler.min_scale),
       "the scale never backs off below this (DeepSpeed's fp16.min_loss_scale; 0: no floor)");

  po::options_description autocast("AutocastKwargs ([autocast] in --config)");
  autocast.add_options()
      ("autocast.enabled", po::value(&c.autocast.enabled)->default_value(c.autocast.enabled),
       "run the forward under autocast when --mixed-precision is bf16/fp16")
      ("autocast.cache_enabled", po::value(&c.autocast.cache_enabled)->default_value(c.autocast.cache_enabled),
       "cache weight casts within an autocast region");

  po::options_description process_group("InitProcessGroupKwargs ([init_process_group] in --config)");
  process_group.add_options()
      ("init_process_group.backend", po::value(&c.comm.backend)->default_value(c.comm.backend),
       "auto|mpi|nccl: auto moves CUDA tensors over NCCL, CPU tensors over MPI")
      ("init_process_group.timeout", po::value(&c.comm.timeout_s)->default_value(c.comm.timeout_s),
       "seconds before a collective that has not completed fails every rank (0.001 to 604800, whole ms)");

  po::options_description io("Checkpoints and metrics");
  io.add_options()
      ("save", po::value(&c.save_dir)->value_name("DIR"),
       "save root: checkpoints go to DIR/step_N (atomically); on SIGTERM or SIGUSR1 every rank finishes the step "
       "in hand, saves, and exits 75")
      ("save-every", po::value(&c.save_every)->default_value(c.save_every),
       "save every N steps (0: only at the end)")
      ("save-async", po::bool_switch(&c.save_async),
       "periodic saves copy the state to host memory at the step's end and write their files in the background "
       "while training goes on (same atomic commit, one save in flight); the final save and a signal's stay "
       "blocking")
      ("snapshot-every", po::value(&c.snapshot_every)->default_value(c.snapshot_every),
       "every N steps, also save in the background to --snapshot-dir, in memory, keeping the newest only: a "
       "restart (`--resume auto`) resumes from it when it is newer than --save's newest (0: never)")
      ("snapshot-dir", po::value(&c.snapshot_dir)->value_name("DIR"),
       "where --snapshot-every saves, on each node (default /dev/shm/accel-snapshots/<hash of --save>; "
       "across nodes each rank's files are also copied to the next node); removed when the run completes")
      ("resume", po::value(&c.resume)->value_name("DIR|auto"),
       "resume from a checkpoint directory, or the newest complete one in a save root; auto: the newest under "
       "--save when there is one, else start afresh (a requeued job's command line; see --save)")
      ("init-from", po::value(&c.init_from)->value_name("hf:DIR"),
       "start from a Hugging Face transformers GPT-2 checkpoint (config.json + model.safetensors): its shape "
       "and weights")
      ("metrics-file", po::value(&c.metrics_file)->value_name("PATH"),
       "append one JSON line per optimizer step (rank 0)")
      ("tensorboard-dir", po::value(&c.tensorboard_dir)->value_name("DIR"),
       "write the per-step metrics as TensorBoard scalars into DIR (rank 0)");

  po::options_description all("accel-host options");
  all.add(general).add(model).add(data).add(eval).add(train).add(autocast).add(scaler).add(process_group).add(io);
  return all;
}

void validate(const RunConfig& c) {
  const std::pair<const char*, double> reals[] = {
      {"lr", c.optimizer.lr},
      {"min-lr", c.optimizer.min_lr},
      {"beta1", c.optimizer.beta1},
      {"beta2", c.optimizer.beta2},
      {"eps", c.optimizer.eps},
      {"weight-decay", c.optimizer.weight_decay},
      {"grad-clip", c.optimizer.grad_clip},
      {"grad_scaler.init_scale", c.grad_scaler.init_scale},
      {"grad_scaler.growth_factor", c.grad_scaler.growth_factor},
      {"grad_scaler.backoff_factor", c.grad_scaler.backoff_factor},
      {"grad_scaler.min_scale", c.grad_scaler.min_scale},
      {"init_process_group.timeout", c.comm.timeout_s},
      {"moe-capacity-factor", c.moe.capacity_factor},
      {"moe-aux-loss-coef", c.moe.aux_loss_coef},
      {"moe-z-loss-coef", c.moe.z_loss_coef},
  };
  for (const auto& [option, value] : reals) require_finite(option, value);
  // Integer options' bounds: require_integer_ranges, before this.
  require(c.optimizer.lr > 0, "--lr must be > 0");
  require(c.optimizer.min_lr >= 0 && c.optimizer.min_lr <= c.optimizer.lr,
          "--min-lr must lie in [0, --lr]");
  require(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1, "--beta1 must lie in [0, 1)");
  require(c.optimizer.beta2 >= 0 && c.optimizer.beta2 < 1, "--beta2 must lie in [0, 1)");
  require(c.optimizer.eps > 0, "--eps must be > 0");
  require(c.optimizer.weight_decay >= 0, "--weight-decay must be >= 0");
  require(c.optimizer.grad_clip >= 0, "--grad-clip must be >= 0");
  require(c.moe.capacity_factor >= 0, "--moe-capacity-factor must be >= 0");
  require(c.moe.aux_loss_coef >= 0, "--moe-aux-loss-coef must be >= 0");
  require(c.moe.z_loss_coef >= 0, "--moe-z-loss-coef must be >= 0");
  require(c.save_every == 0 || !c.save_dir.empty(), "--save-every needs --save DIR");
  require(!c.save_async || !c.save_dir.empty(), "--save-async needs --save DIR");
  require(c.snapshot_every == 0 || !c.save_dir.empty(),
          "--snapshot-every needs --save DIR (a restart looks under both)");
  require(c.snapshot_dir.empty() || c.snapshot_every > 0, "--snapshot-dir needs --snapshot-every N");
  require(c.grad_scaler.init_scale > 0, "--grad_scaler.init_scale must be > 0");
  require(c.grad_scaler.growth_factor > 1, "--grad_scaler.growth_factor must be > 1");
  require(c.grad_scaler.backoff_factor > 0 && c.grad_scaler.backoff_factor < 1,
          "--grad_scaler.backoff_factor must lie in (0, 1)");
  require(c.grad_scaler.growth_interval > 0, "--grad_scaler.growth_interval must be > 0");
  require(c.grad_scaler.min_scale >= 0 && c.grad_scaler.min_scale <= c.grad_scaler.init_scale,
          "--grad_scaler.min_scale must lie in [0, --grad_scaler.init_scale]");
  require(c.comm.backend == "auto" || c.comm.backend == "mpi" || c.comm.backend == "nccl",
          "--init_process_group.backend: '" + c.comm.backend + "' is not one of: auto, mpi, nccl");
  require(c.comm.timeout_s >= kMinTimeoutSeconds && c.comm.timeout_s <= kMaxTimeoutSeconds,
          strformat("--init_process_group.timeout: %g s is outside [%g, %g] seconds", c.comm.timeout_s,
                    kMinTimeoutSeconds, kMaxTimeoutSeconds));
  static constexpr const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
  require(std::find(std::begin(kLevels), std::end(kLevels), c.log_level) != std::end(kLevels),
          "--log-level: '" + c.log_level + "' is not one of: trace, debug, info, warn, error, off");
  require(is_model_preset(c.model), "--model: '" + c.model + "' is not one of: " + model_preset_list());
  require(c.device == "auto" || c.device == "cpu" || c.device == "cuda",
          "--device: '" + c.device + "' is not one of: auto, cpu, cuda");
  require(c.init_from.empty() || (c.init_from.rfind("hf:", 0) == 0 && c.init_from.size() > 3),
          "--init-from: '" + c.init_from + "' is not hf:DIR");
  require(c.resume != kResumeAuto || !c.save_dir.empty(), "--resume auto needs --save DIR (where it looks)");
  require(c.init_from.empty() || c.resume.empty() || c.resume == kResumeAuto,
          "--init-from and --resume both set the starting weights; a resumed run keeps its checkpoint's");
  const auto is_file_data = [](const std::string& d) {
    return d.rfind("text:", 0) == 0 || d.rfind("tokens:", 0) == 0 || d.rfind("megatron:", 0) == 0;
  };
  require(c.data == "synthetic" || is_file_data(c.data),
          "--data: '" + c.data + "' is not synthetic, text:PATH, tokens:PATH or megatron:PREFIX");
  require(c.eval.fraction > 0.0 && c.eval.fraction < 1.0,
          strformat("--eval-fraction must be in (0, 1), got %g", c.eval.fraction));
  require(c.eval.data.empty() || c.eval.every > 0, "--eval-data is given but --eval-every is 0: nothing would read it");
  require(c.eval.data.empty() || is_file_data(c.eval.data),
          "--eval-data: '" + c.eval.data + "' is not text:PATH, tokens:PATH or megatron:PREFIX" +
              (c.eval.data == "synthetic" ? " (synthetic evaluation holds out --data's last --eval-fraction: leave "
                                            "--eval-data out)"
                                          : ""));
}

}  // namespace

const std::vector<IntegerOptionRange>& integer_option_ranges() {
  static const std::vector<IntegerOptionRange> ranges = {
      {"log-every", 1, kMaxSteps},
      {"threads", 0, kMaxThreads},
      {"n-layer", 1, kMaxLayers},
      {"n-head", 1, kMaxWidth},
      {"n-embd", 1, kMaxWidth},
      {"seq-len", 1, kMaxSeqLen},
      {"vocab-size", 2, kMaxVocab},
      {"n-kv-head", 1, kMaxWidth},
      {"ffn-size", 1, kMaxFfn},
      {"n-experts", 0, kMaxExperts},
      {"experts-per-token", 1, kMaxExperts},
      {"shared-expert-size", 0, kMaxFfn},
      {"eval-every", 0, kMaxSteps},
      {"eval-steps", 1, kMaxSteps},
      {"steps", 0, kMaxSteps},
      {"batch-size", 1, kMaxBatch},
      {"grad-accum", 1, kMaxBatch},
      // Plugins read it as the INT option train.seed: int64's positive half.
      {"seed", 0, INT64_MAX},
      {"warmup-steps", 0, kMaxSteps},
      {"lr-decay-steps", 0, kMaxSteps},
      {"nonfinite-loss-skips", 0, kMaxSteps},
      {"grad_scaler.growth_interval", 1, kMaxSteps},
      {"grad_scaler.hysteresis", 1, kMaxSteps},
      {"save-every", 0, kMaxSteps},
      {"snapshot-every", 0, kMaxSteps},
  };
  return ranges;
}

po::options_description describe_run_options() {
  static RunConfig unread_config;
  static RawStrings unread_raw;
  return run_options(unread_config, unread_raw);
}

PluginRequest scan_plugin_request(const std::vector<std::string>& args) {
  refuse_message_placeholders(args);
  PluginRequest request;
  po::options_description wanted;
  std::string config_file;
  wanted.add_options()
      ("plugin", po::value(&request.plugins)->composing())
      ("plugin-path", po::value(&request.plugin_paths)->composing())
      ("config", po::value(&config_file));
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(wanted).allow_unregistered().run(), vm);
    if (vm.count("config")) {
      po::store(config_file_options(vm["config"].as<std::string>(), args, wanted, /*allow_unregistered=*/true), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  return request;
}

ParsedCommandLine parse_command_line(const std::vector<std::string>& args,
                                     const po::options_description* plugin_options) {
  refuse_message_placeholders(args);
  ParsedCommandLine parsed;
  RunConfig& c = parsed.config;
  RawStrings raw;
  po::options_description description = run_options(c, raw);
  if (plugin_options) description.add(*plugin_options);

  po::variables_map vm;
  try {
    const po::parsed_options given = po::command_line_parser(args).options(description).run();
    refuse_positionals(given);
    po::store(given, vm);
    if (vm.count("config")) {
      po::store(config_file_options(vm["config"].as<std::string>(), args, description, /*allow_unregistered=*/false,
                                    &parsed.accelerate),
                vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (plugin_options) {
    for (const auto& option : plugin_options->options()) {
      const std::string& key = option->long_name();
      if (vm.count(key) && !vm[key].defaulted()) parsed.plugin_values[key] = vm[key].as<std::string>();
    }
  }

  if (vm.count("help")) {
    std::ostringstream out;
    out << "Usage: accel-host [options]\n       mpirun -n N accel-host [options]\n       accel-host COMMAND ...\n\n"
        << "Commands:\n"
        << "  launch [flags] -- [options]        start a job as `accelerate launch` would (accel-host launch --help)\n"
        << "  check-plugin PATH [options]        check a plugin .so against the ABI contract on a tiny model\n"
        << "  merge-weights CHECKPOINT OUTPUT    one model.safetensors from a sharded checkpoint\n"
        << "  export-hf CHECKPOINT OUTPUT_DIR    a Hugging Face model directory from a checkpoint\n"
        << "  generate CHECKPOINT --prompt TEXT  sample a continuation from a checkpoint (--tokenizer DIR: as text)\n\n"
        << description;
    parsed.action = Action::help;
    parsed.help_text = out.str();
    return parsed;
  }
  if (vm.count("version")) {
    parsed.action = Action::version;
    return parsed;
  }
  if (vm.count("list-plugins")) {
    parsed.action = Action::list_plugins;
    return parsed;
  }

  require_integer_ranges(vm);
  c.data_order = parse_choice<DataOrder>("data-order", raw.data_order,
                                         {{"shuffled", DataOrder::shuffled},
                                          {"sequential", DataOrder::sequential}});
  c.optimizer.schedule = parse_choice<LrScheduleKind>(
      "lr-schedule", raw.schedule,
      {{"constant", LrScheduleKind::constant},
       {"linear", LrScheduleKind::linear},
       {"cosine", LrScheduleKind::cosine}});
  c.mixed_precision = parse_choice<MixedPrecision>(
      "mixed-precision", raw.mixed_precision,
      {{"no", MixedPrecision::no}, {"bf16", MixedPrecision::bf16}, {"fp16", MixedPrecision::fp16}});
  if (vm.count("n-layer")) c.model_overrides.n_layer = raw.n_layer;
  if (vm.count("n-head")) c.model_overrides.n_head = raw.n_head;
  if (vm.count("n-embd")) c.model_overrides.n_embd = raw.n_embd;
  if (vm.count("seq-len")) c.model_overrides.seq_len = raw.seq_len;
  if (vm.count("vocab-size")) c.model_overrides.vocab_size = raw.vocab_size;
  if (vm.count("n-kv-head")) c.model_overrides.n_kv_head = raw.n_kv_head;
  if (vm.count("ffn-size")) c.model_overrides.ffn_size = raw.ffn_size;
  if (vm.count("n-experts")) c.model_overrides.n_experts = raw.n_experts;
  if (vm.count("experts-per-token")) c.model_overrides.experts_per_token = raw.experts_per_token;
  if (vm.count("shared-expert-size")) c.model_overrides.shared_expert_size = raw.shared_expert_size;
  if (vm.count("normalize-top-k")) c.model_overrides.normalize_top_k = raw.normalize_top_k;
  if (vm.count("qkv-bias")) c.model_overrides.qkv_bias = raw.qkv_bias;
  // The checkpoint's config.json gives the architecture: a preset beside it
  // would be silently ignored. Shape overrides are checked against it later.
  c.optimizer.grad_clip_given = !vm["grad-clip"].defaulted();
  require(c.init_from.empty() || vm["model"].defaulted(),
          "--model and --init-from both choose the model; drop --model (the shape comes from " + c.init_from + ")");
  validate(c);
  return parsed;
}

void validate_for_world(const RunConfig& c, int data_parallel_size) {
  // Overflow (a huge --grad-accum) cannot split any batch; unchecked it was UB.
  int64_t parts = 0;
  require(!__builtin_mul_overflow(c.grad_accum, int64_t{data_parallel_size}, &parts) && c.batch_size % parts == 0,
          strformat("--batch-size %lld does not split evenly into %d rank(s) x %lld micro-step(s)",
                    static_cast<long long>(c.batch_size), data_parallel_size,
                    static_cast<long long>(c.grad_accum)));
}

}  // namespace accel::cli
