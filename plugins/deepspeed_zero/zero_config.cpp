// zero_config.cpp — resolving DeepSpeedPlugin's fields and a DeepSpeed JSON
// config (see zero_config.h).
#include "zero_config.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

namespace accel::zero {

using json = nlohmann::json;
using sdk::Error;
using sdk::format;

const char* to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::cpu:
      return "cpu";
    case OffloadDevice::nvme:
      return "nvme";
    default:
      return "none";
  }
}

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::warmup_lr:
      return "WarmupLR";
    case ScheduleKind::warmup_decay_lr:
      return "WarmupDecayLR";
    case ScheduleKind::warmup_cosine_lr:
      return "WarmupCosineLR";
    default:
      return "accel-host";
  }
}

namespace {

[[noreturn]] void refuse(const std::string& message) { throw Error(ACCEL_ERROR_INVALID_ARGUMENT, message); }

// The JSON config as DeepSpeed reads it: values by dotted path ("a.b"),
// "auto" told apart, every key looked at remembered so the rest can be
// named in one warning.
class Reader {
 public:
  Reader(json root, std::string source) : root_(std::move(root)), source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  // nullptr when absent. Marks the key (and its parents) as understood.
  const json* find(const std::string& path) {
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      seen_.insert(path.substr(0, dot));
    }
    seen_.insert(path);
    const json* node = &root_;
    size_t start = 0;
    while (start <= path.size()) {
      const size_t dot = std::min(path.find('.', start), path.size());
      const std::string key = path.substr(start, dot - start);
      if (!node->is_object()) return nullptr;
      const auto it = node->find(key);
      if (it == node->end()) return nullptr;
      node = &*it;
      start = dot + 1;
    }
    return node;
  }
  static bool is_auto(const json* v) { return v != nullptr && v->is_string() && v->get<std::string>() == "auto"; }
  std::string where(const std::string& path) const { return source_ + " " + path; }

  // A concrete value of the type, nullopt when absent or "auto".
  std::optional<double> number(const std::string& path) {
    const json* v = find(path);
    if (v == nullptr || is_auto(v)) return std::nullopt;
    if (!v->is_number()) refuse(where(path) + ": expected a number or \"auto\", got " + v->dump());
    const double d = v->get<double>();
    if (!std::isfinite(d)) refuse(where(path) + ": expected a finite number, got " + v->dump());
    return d;
  }
  std::optional<int64_t> integer(const std::string& path) {
    const std::optional<double> d = number(path);
    if (!d) return std::nullopt;
    if (*d != std::floor(*d) || std::fabs(*d) > 9.0e15)
      refuse(where(path) + ": expected a whole number, got " + format("%g", *d));
    return static_cast<int64_t>(*d);
  }
  std::optional<bool> boolean(const std::string& path) {
    const json* v = find(path);
    if (v == nullptr || is_auto(v)) return std::nullopt;
    if (!v->is_boolean()) refuse(where(path) + ": expected true, false or \"auto\", got " + v->dump());
    return v->get<bool>();
  }
  std::optional<std::string> text(const std::string& path) {
    const json* v = find(path);
    if (v == nullptr || is_auto(v)) return std::nullopt;
    if (!v->is_string()) refuse(where(path) + ": expected a string, got " + v->dump());
    return v->get<std::string>();
  }

  // Every leaf key of the config nobody asked for, by dotted path.
  std::vector<std::string> unknown() const {
    std::vector<std::string> out;
    collect(root_, "", out);
    return out;
  }

 private:
  void collect(const json& node, const std::string& prefix, std::vector<std::string>& out) const {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
      if (seen_.count(path) != 0) {
        if (it->is_object() && !is_whole(path)) collect(*it, path, out);
        continue;
      }
      out.push_back(path);
    }
  }
  // Objects understood as a whole (their inside is checked where read).
  static bool is_whole(const std::string& path) { return path == "optimizer.params.betas"; }

  json root_;
  std::string source_;
  std::set<std::string> seen_;
};

OffloadDevice parse_device(const std::string& text, const std::string& where) {
  if (text == "none") return OffloadDevice::none;
  if (text == "cpu") return OffloadDevice::cpu;
  if (text == "nvme") return OffloadDevice::nvme;
  refuse(where + ": " + text + " is not none, cpu or nvme");
}

// A config value against accel-host's (or a plugin option's) setting: the
// concrete value wins only when it agrees.
template <typename T>
T agree(const std::optional<T>& config, T host, const std::string& config_name, const std::string& host_name) {
  if (!config) return host;
  if (*config != host) {
    std::ostringstream a, b;
    a << *config;
    b << host;
    refuse(config_name + " " + a.str() + " contradicts " + host_name + " " + b.str() +
           " (make them agree, or write \"auto\")");
  }
  return *config;
}

// "auto" filled from accel-host's settings first (Accelerate's
// deepspeed_config_process), then DeepSpeed's _set_batch_related_parameters
// and _batch_assertion on what is given, then the result against the host's
// batch, which is what actually runs.
void resolve_batch(Reader& r, const HostSettings& host, const PluginFields& fields, ZeroConfig& c) {
  const int64_t world = host.world_size;
  const int64_t host_micro = host.batch_size / (host.grad_accum * world);
  const auto value = [&](const char* key, int64_t host_value) -> std::optional<int64_t> {
    const json* v = r.find(key);
    if (v == nullptr) return std::nullopt;
    if (Reader::is_auto(v)) return host_value;
    const std::optional<int64_t> n = r.integer(key);
    if (*n <= 0) refuse(r.where(key) + format(" %lld: must be at least 1", static_cast<long long>(*n)));
    return n;
  };
  std::optional<int64_t> batch = value("train_batch_size", host.batch_size);
  std::optional<int64_t> micro = value("train_micro_batch_size_per_gpu", host_micro);
  std::optional<int64_t> gas = value("gradient_accumulation_steps", host.grad_accum);
  if (fields.gradient_accumulation_steps) {
    gas = agree(gas, *fields.gradient_accumulation_steps, r.where("gradient_accumulation_steps"),
                "--deepspeed_zero.gradient_accumulation_steps");
  }
  if (!batch && !micro) micro = host_micro;  // what the host's data loader gives each rank
  if (batch && micro && gas) {
    // all given: asserted below
  } else if (batch && micro) {
    gas = *batch / (*micro * world);
  } else if (batch && gas) {
    micro = *batch / world / *gas;
  } else if (micro && gas) {
    batch = *micro * *gas * world;
  } else if (batch) {
    gas = 1;
    micro = *batch / world;
  } else {
    gas = 1;
    batch = *micro * world;
  }
  if (*batch != *micro * *gas * world || *micro <= 0 || *gas <= 0) {
    refuse(
        format("%s: train_batch_size %lld is not train_micro_batch_size_per_gpu %lld x "
               "gradient_accumulation_steps %lld x world size %d",
               r.source().c_str(), static_cast<long long>(*batch), static_cast<long long>(*micro),
               static_cast<long long>(*gas), static_cast<int>(world)));
  }
  // What the host runs, compared in the order a user fixes it.
  c.gradient_accumulation_steps =
      agree(gas, host.grad_accum, r.where("gradient_accumulation_steps"), "accel-host's --grad-accum");
  c.micro_batch_per_gpu = agree(micro, host_micro, r.where("train_micro_batch_size_per_gpu"),
                                format("accel-host's --batch-size %lld / (--grad-accum %lld x %d ranks) =",
                                       static_cast<long long>(host.batch_size), static_cast<long long>(host.grad_accum),
                                       static_cast<int>(world)));
  c.train_batch_size = agree(batch, host.batch_size, r.where("train_batch_size"), "accel-host's --batch-size");
}

void resolve_precision(Reader& r, const HostSettings& host, ZeroConfig& c) {
  const std::optional<bool> bf16 = r.boolean("bf16.enabled");
  const std::optional<bool> fp16 = r.boolean("fp16.enabled");
  (void)r.find("bf16");
  (void)r.find("fp16");
  if (bf16 && *bf16 != (host.mixed_precision == "bf16")) {
    refuse(r.where("bf16.enabled") + (*bf16 ? " true" : " false") + " contradicts accel-host's --mixed-precision " +
           host.mixed_precision);
  }
  if (fp16 && *fp16 != (host.mixed_precision == "fp16")) {
    refuse(r.where("fp16.enabled") + (*fp16 ? " true" : " false") + " contradicts accel-host's --mixed-precision " +
           host.mixed_precision);
  }
  if (host.mixed_precision == "fp16") {
    // The host's GradScaler (--grad_scaler.*) scales the loss; a static
    // scale it cannot give.
    const std::optional<double> loss_scale = r.number("fp16.loss_scale");
    if (loss_scale && *loss_scale != 0.0) {
      refuse(r.where("fp16.loss_scale") + format(" %g: a static loss scale is not served; 0 (dynamic, the host's "
                                                 "GradScaler, --grad_scaler.*) is",
                                                 *loss_scale));
    }
    for (const char* key : {"fp16.initial_scale_power", "fp16.loss_scale_window", "fp16.hysteresis",
                            "fp16.min_loss_scale", "fp16.auto_cast"}) {
      if (r.find(key) != nullptr) {
        c.notes.push_back(r.where(key) + ": the dynamic loss scale is accel-host's GradScaler's (--grad_scaler.*)");
      }
    }
  } else {
    for (const char* key : {"fp16.loss_scale", "fp16.initial_scale_power", "fp16.loss_scale_window", "fp16.hysteresis",
                            "fp16.min_loss_scale", "fp16.auto_cast"}) {
      (void)r.find(key);  // understood; fp16 is off
    }
  }
  // Stage 3 gathers and reduces in the compute precision, as DeepSpeed
  // keeps bf16/fp16 parameters beside the fp32 partitions; stages 1 and 2
  // leave the parameters to the host (fp32, autocast).
  if (c.stage == 3 && host.mixed_precision == "bf16") c.param_dtype = c.reduce_dtype = DLDataType{kDLBfloat, 16, 1};
}

void resolve_optimizer(Reader& r, const HostSettings& host, ZeroConfig& c) {
  if (r.find("optimizer") == nullptr) return;
  const std::optional<std::string> type = r.text("optimizer.type");
  if (!type) refuse(r.where("optimizer.type") + ": missing (Adam or AdamW)");
  std::string lower;
  for (char ch : *type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower != "adam" && lower != "adamw") {
    refuse(r.where("optimizer.type") + " " + *type + ": only Adam and AdamW are served (the sharded AdamW)");
  }
  OptimizerChoice& o = c.optimizer;
  o.from_config = true;
  o.type = *type;
  o.lr = r.number("optimizer.params.lr");
  o.eps = r.number("optimizer.params.eps");
  o.weight_decay = r.number("optimizer.params.weight_decay");
  if (const json* betas = r.find("optimizer.params.betas"); betas != nullptr && !Reader::is_auto(betas)) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number()) {
      refuse(r.where("optimizer.params.betas") + ": expected [beta1, beta2], got " + betas->dump());
    }
    o.beta1 = (*betas)[0].get<double>();
    o.beta2 = (*betas)[1].get<double>();
  }
  // Adam's adam_w_mode (default true) is AdamW; L2-coupled Adam only
  // differs from it when it decays.
  const bool w_mode = r.boolean("optimizer.params.adam_w_mode").value_or(true);
  const double decay = o.weight_decay.value_or(host.weight_decay);
  if (lower == "adam" && !w_mode && decay != 0.0) {
    refuse(r.where("optimizer.params.adam_w_mode") + " false with weight_decay " + format("%g", decay) +
           ": L2-coupled Adam is not served (decoupled AdamW is)");
  }
  if (r.boolean("optimizer.params.bias_correction").value_or(true) == false) {
    refuse(r.where("optimizer.params.bias_correction") + " false: AdamW without bias correction is not served");
  }
  if (r.boolean("optimizer.params.amsgrad").value_or(false)) {
    refuse(r.where("optimizer.params.amsgrad") + " true: AMSGrad is not served");
  }
  (void)r.find("optimizer.params.torch_adam");  // the host's kernel either way
  std::string replaced = "lr " + format("%g", o.lr.value_or(host.lr));
  if (o.beta1) replaced += format(", betas (%g, %g)", *o.beta1, *o.beta2);
  if (o.eps) replaced += format(", eps %g", *o.eps);
  replaced += format(", weight_decay %g", decay);
  c.notes.push_back(r.source() + " names optimizer " + *type + ": its " + replaced +
                    " replace accel-host's optimizer flags (DummyOptim)");
}

void resolve_scheduler(Reader& r, const HostSettings& host, ZeroConfig& c) {
  if (r.find("scheduler") == nullptr) return;
  const std::optional<std::string> type = r.text("scheduler.type");
  Schedule& s = c.schedule;
  if (!type) refuse(r.where("scheduler.type") + ": missing (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  if (*type == "WarmupLR") {
    s.kind = ScheduleKind::warmup_lr;
  } else if (*type == "WarmupDecayLR") {
    s.kind = ScheduleKind::warmup_decay_lr;
  } else if (*type == "WarmupCosineLR") {
    s.kind = ScheduleKind::warmup_cosine_lr;
  } else {
    refuse(r.where("scheduler.type") + " " + *type + ": unknown scheduler (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  }
  // "auto" as Accelerate fills it: the host's lr range, warmup and horizon.
  s.warmup_min_lr = r.number("scheduler.params.warmup_min_lr").value_or(host.min_lr);
  s.warmup_max_lr = r.number("scheduler.params.warmup_max_lr").value_or(c.optimizer.lr.value_or(host.lr));
  s.warmup_num_steps = r.integer("scheduler.params.warmup_num_steps").value_or(host.warmup_steps);
  s.total_num_steps = r.integer("scheduler.params.total_num_steps").value_or(host.decay_steps);
  s.warmup_min_ratio = r.number("scheduler.params.warmup_min_ratio").value_or(0.0);
  s.cos_min_ratio = r.number("scheduler.params.cos_min_ratio").value_or(1e-4);
  const std::string warmup = r.text("scheduler.params.warmup_type").value_or("log");
  if (warmup != "log" && warmup != "linear")
    refuse(r.where("scheduler.params.warmup_type") + " " + warmup + ": log or linear");
  s.warmup_type = warmup == "log" ? WarmupType::log : WarmupType::linear;
  (void)r.find("scheduler.params.last_batch_iteration");
  if (s.warmup_num_steps < 0 || s.total_num_steps < 0)
    refuse(r.where("scheduler.params") + ": step counts must be >= 0");
  if (s.kind == ScheduleKind::warmup_cosine_lr && s.total_num_steps <= s.warmup_num_steps) {
    refuse(r.where("scheduler.params.total_num_steps") + format(" %lld must exceed warmup_num_steps %lld",
                                                                static_cast<long long>(s.total_num_steps),
                                                                static_cast<long long>(s.warmup_num_steps)));
  }
  c.notes.push_back(r.source() + " names scheduler " + *type + ": it replaces accel-host's learning-rate schedule (" +
                    "DummyScheduler)");
}

void resolve_zero(Reader& r, const PluginFields& f, bool from_file, ZeroConfig& c) {
  const std::optional<int64_t> stage = r.integer("zero_optimization.stage");
  const int64_t resolved = f.zero_stage ? agree(stage, *f.zero_stage, r.where("zero_optimization.stage"),
                                                "--deepspeed_zero.zero_stage")
                                        : stage.value_or(from_file ? 0 : 2);  // DeepSpeed's default; the plugin's
  if (resolved < 0 || resolved > 3) {
    refuse((f.zero_stage && !stage ? std::string("--deepspeed_zero.zero_stage") : r.where("zero_optimization.stage")) +
           format(" %lld: ZeRO stages are 0, 1, 2 and 3", static_cast<long long>(resolved)));
  }
  c.stage = static_cast<int>(resolved);

  const auto device = [&](const char* key, const std::optional<std::string>& field, const char* option) {
    std::optional<std::string> text = r.text(key);
    if (field) text = agree(text, *field, r.where(key), option);
    return text ? parse_device(*text, r.where(key)) : OffloadDevice::none;
  };
  c.offload_optimizer = device("zero_optimization.offload_optimizer.device", f.offload_optimizer_device,
                               "--deepspeed_zero.offload_optimizer_device");
  c.offload_param =
      device("zero_optimization.offload_param.device", f.offload_param_device, "--deepspeed_zero.offload_param_device");
  const auto path = [&](const char* key, const std::optional<std::string>& field, const char* option) {
    std::optional<std::string> text = r.text(key);
    if (field) text = agree(text, *field, r.where(key), option);
    return text.value_or("");
  };
  c.optimizer_nvme_path = path("zero_optimization.offload_optimizer.nvme_path", f.offload_optimizer_nvme_path,
                               "--deepspeed_zero.offload_optimizer_nvme_path");
  c.param_nvme_path = path("zero_optimization.offload_param.nvme_path", f.offload_param_nvme_path,
                           "--deepspeed_zero.offload_param_nvme_path");
  // NVMe swap buffers of the optimizer's moments (DeepSpeed's default: 4).
  const std::optional<int64_t> buffers = r.integer("zero_optimization.offload_optimizer.buffer_count");
  if (buffers && (*buffers < 2 || *buffers > 64)) {
    refuse(r.where("zero_optimization.offload_optimizer.buffer_count") + " " + std::to_string(*buffers) +
           ": must be 2 to 64 (one buffer steps while the next is read)");
  }
  c.moment_swap_buffers = static_cast<int32_t>(buffers.value_or(4));
  // aio.block_size: DeepSpeed's NVMe request size (default 1 MiB). Here each
  // swap piece (a pair of fp32 moments, 8 bytes per element) is one request
  // of that size, so it also sizes the swap buffers.
  const int64_t block = r.integer("aio.block_size").value_or(1 << 20);
  if (block < 8 || block % 8 != 0 || block > (int64_t{1} << 30)) {
    refuse(r.where("aio.block_size") + " " + std::to_string(block) +
           ": must be a multiple of 8 bytes, from 8 to 1 GiB (one element's pair of fp32 moments is 8 bytes)");
  }
  c.moment_swap_piece_elements = block / 8;
  for (const char* key : {"aio.queue_depth", "aio.thread_count", "aio.single_submit", "aio.overlap_events",
                          "aio.use_gds"}) {
    (void)r.find(key);  // tuning of DeepSpeed's libaio engine: one I/O thread serves here
  }
  for (const char* key :
       {"zero_optimization.offload_optimizer.pin_memory",
        "zero_optimization.offload_optimizer.fast_init", "zero_optimization.offload_optimizer.ratio",
        "zero_optimization.offload_optimizer.pipeline_read", "zero_optimization.offload_optimizer.pipeline_write",
        "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.buffer_count",
        "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu"}) {
    (void)r.find(key);  // tuning of DeepSpeed's own offload engine
  }
  if (c.offload_param != OffloadDevice::none && c.stage < 3) {
    refuse(r.where("zero_optimization.offload_param.device") + " " + to_string(c.offload_param) +
           format(" needs zero stage 3 (stage is %d): only stage 3 partitions the parameters", c.stage));
  }
  if (c.offload_optimizer != OffloadDevice::none && c.stage < 1) {
    refuse(r.where("zero_optimization.offload_optimizer.device") + " " + to_string(c.offload_optimizer) +
           " needs zero stage 1 or above: stage 0 has no optimizer partition to offload");
  }
  if (c.offload_optimizer == OffloadDevice::nvme && c.optimizer_nvme_path.empty()) {
    refuse(r.where("zero_optimization.offload_optimizer.nvme_path") + ": required with device nvme");
  }
  if (c.offload_param == OffloadDevice::nvme && c.param_nvme_path.empty()) {
    refuse(r.where("zero_optimization.offload_param.nvme_path") + ": required with device nvme");
  }

  // Stage-3 sizes: absent, DeepSpeed's defaults; "auto", Accelerate's fill
  // from the model's hidden size h (prefetch 0.9 h^2, persistence 10 h),
  // resolved when the model is planned (-1 until then).
  const auto sized = [&](const char* key, int64_t deepspeed_default) -> int64_t {
    if (Reader::is_auto(r.find(key))) return -1;  // filled from the model when planning
    return r.integer(key).value_or(deepspeed_default);
  };
  c.prefetch_bucket_size = sized("zero_optimization.stage3_prefetch_bucket_size", 50000000);
  c.param_persistence_threshold = sized("zero_optimization.stage3_param_persistence_threshold", 100000);
  c.max_live_parameters = r.integer("zero_optimization.stage3_max_live_parameters").value_or(c.max_live_parameters);
  c.max_reuse_distance = r.integer("zero_optimization.stage3_max_reuse_distance").value_or(c.max_reuse_distance);
  for (const char* key :
       {"zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold",
        "zero_optimization.stage3_max_live_parameters", "zero_optimization.stage3_max_reuse_distance"}) {
    const json* v = r.find(key);
    if (v != nullptr && v->is_number() && v->get<double>() < 0) refuse(r.where(key) + ": must be >= 0");
  }
  std::optional<bool> save16 = r.boolean("zero_optimization.stage3_gather_16bit_weights_on_model_save");
  if (!save16) save16 = r.boolean("zero_optimization.stage3_gather_fp16_weights_on_model_save");
  if (f.zero3_save_16bit_model) {
    save16 =
        agree(save16, *f.zero3_save_16bit_model, r.where("zero_optimization.stage3_gather_16bit_weights_on_model_save"),
              "--deepspeed_zero.zero3_save_16bit_model");
  }
  c.save_16bit_model = save16.value_or(false);
  // Understood, and what they tune holds here anyway: collectives are
  // asynchronous per unit (overlap_comm), gradients land in one flat shard
  // per unit (contiguous_gradients), reductions are reduce-scatters.
  for (const char* key : {"zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients",
                          "zero_optimization.reduce_bucket_size", "zero_optimization.allgather_bucket_size",
                          "zero_optimization.allgather_partitions", "zero_optimization.reduce_scatter",
                          "zero_optimization.round_robin_gradients", "zero_optimization.sub_group_size",
                          "zero_optimization.load_from_fp32_weights", "zero_optimization.elastic_checkpoint",
                          "zero_optimization.ignore_unused_parameters", "zero_optimization.cpu_offload"}) {
    (void)r.find(key);
  }
  if (r.boolean("zero_optimization.cpu_offload").value_or(false)) {
    refuse(r.where("zero_optimization.cpu_offload") +
           " true: the deprecated spelling; write offload_optimizer {\"device\": \"cpu\"}");
  }
}

}  // namespace

ZeroConfig resolve_config(const PluginFields& f, const HostSettings& host, const std::string& json_text,
                          const std::string& source) {
  // Without a file, the config Accelerate builds from the plugin's fields:
  // the batch sizes "auto".
  json root = {{"train_batch_size", "auto"},
               {"train_micro_batch_size_per_gpu", "auto"},
               {"gradient_accumulation_steps", "auto"}};
  if (!json_text.empty()) {
    try {
      root = json::parse(json_text);
    } catch (const json::parse_error& e) {
      // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
      std::string what = e.what();
      const size_t at = what.find("] ");
      refuse(source + ": invalid JSON: " + (at == std::string::npos ? what : what.substr(at + 2)));
    }
    if (!root.is_object()) refuse(source + ": invalid DeepSpeed config: the top level is not a JSON object");
  }
  Reader r(std::move(root), source.empty() ? std::string("the DeepSpeed config") : source);
  ZeroConfig c;
  c.mesh = sharding::MeshShape{host.world_size, 1};
  c.limit_all_gathers = false;  // ZeRO-3 bounds gathers by elements (stage3_max_live_parameters)
  c.state_dict_type = sharding::StateDictType::sharded;  // every rank saves its partition, as DeepSpeed does

  resolve_zero(r, f, !json_text.empty(), c);
  const std::optional<double> clip = r.number("gradient_clipping");
  c.gradient_clipping =
      f.gradient_clipping
          ? agree(clip, *f.gradient_clipping, r.where("gradient_clipping"), "--deepspeed_zero.gradient_clipping")
          : agree(clip, host.max_grad_norm, r.where("gradient_clipping"), "accel-host's --grad-clip");
  resolve_precision(r, host, c);
  resolve_optimizer(r, host, c);
  resolve_scheduler(r, host, c);
  c.steps_per_print = r.integer("steps_per_print").value_or(10);
  c.wall_clock_breakdown = r.boolean("wall_clock_breakdown").value_or(false);
  for (const char* key : {"zero_allow_untested_optimizer", "prescale_gradients", "gradient_predivide_factor"}) {
    (void)r.find(key);
  }
  if (const std::optional<bool> amp = r.boolean("amp.enabled"); amp && *amp) {
    refuse(r.where("amp.enabled") + " true: NVIDIA Apex AMP is not served (use bf16 or fp16)");
  }
  (void)r.find("amp");
  (void)r.find("amp.opt_level");

  // Fields that cannot apply here.
  if (!f.transformer_moe_cls_names.empty()) {
    refuse("--deepspeed_zero.transformer_moe_cls_names " + f.transformer_moe_cls_names +
           ": the model has no mixture-of-experts units to shard as experts");
  }
  if (f.enable_msamp) {
    refuse(
        "--deepspeed_zero.enable_msamp true: MS-AMP is not available here; FP8 training is the fp8 plugin "
        "(--plugin fp8), which composes with this one");
  }
  if (f.msamp_opt_level) {
    refuse("--deepspeed_zero.msamp_opt_level " + *f.msamp_opt_level +
           ": only meaningful with enable_msamp, "
           "which is not available here");
  }
  if (c.save_16bit_model && c.stage != 3) {
    c.notes.push_back("zero3_save_16bit_model applies to stage 3 only; ignored at stage " + std::to_string(c.stage));
    c.save_16bit_model = false;
  }
  if (host.mixed_precision == "fp16") c.model_16bit_dtype = DLDataType{kDLFloat, 16, 1};
  if (f.zero3_init_flag && *f.zero3_init_flag && c.stage != 3) {
    c.notes.push_back("zero3_init_flag applies to stage 3 only (each rank initialises only its partitions there)");
  }
  // zero.Init: each rank fills only its partitions (init_range), reading
  // only their bytes of --init-from's files; false materialises each unit
  // whole, one at a time, and cuts the slice.
  c.init_shard_slices = c.stage == 3 && f.zero3_init_flag.value_or(true);
  resolve_batch(r, host, f, c);  // last: its contradictions are what a user fixes after the rest
  // NVMe offload steps on the host, as cpu offload does, with the moments in
  // the swap file.
  c.cpu_offload = c.offload_optimizer != OffloadDevice::none || c.offload_param != OffloadDevice::none;
  if (c.offload_optimizer == OffloadDevice::nvme) c.moment_swap_dir = c.optimizer_nvme_path;
  if (c.offload_param == OffloadDevice::nvme) {
    // ZeRO-Infinity: each fp32 master partition lives in the swap file
    // beside its moments (one read and one write per piece serve the step).
    c.swap_masters = true;
    if (c.offload_optimizer != OffloadDevice::nvme) {
      c.moment_swap_dir = c.param_nvme_path;
      c.notes.push_back("offload_param device nvme: the AdamW moments share the parameter partitions' swap file in " +
                        c.param_nvme_path + " (offload_optimizer device " + to_string(c.offload_optimizer) +
                        " would keep them in memory)");
    } else if (c.param_nvme_path != c.optimizer_nvme_path) {
      c.notes.push_back("offload_param device nvme: the parameter partitions share the optimizer's swap file in " +
                        c.optimizer_nvme_path + ", beside their moments (not " + c.param_nvme_path + ")");
    }
  }
  c.unknown_keys = r.unknown();
  return c;
}

std::string to_json(const ZeroConfig& c) {
  json j;
  j["zero_stage"] = c.stage;
  j["train_batch_size"] = c.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.micro_batch_per_gpu;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["gradient_clipping"] = c.gradient_clipping;
  j["offload_optimizer_device"] = to_string(c.offload_optimizer);
  j["offload_param_device"] = to_string(c.offload_param);
  j["stage3_prefetch_bucket_size"] = c.prefetch_bucket_size;
  j["stage3_param_persistence_threshold"] = c.param_persistence_threshold;
  j["stage3_max_live_parameters"] = c.max_live_parameters;
  j["stage3_max_reuse_distance"] = c.max_reuse_distance;
  j["scheduler"] = to_string(c.schedule.kind);
  j["optimizer"] = c.optimizer.from_config ? c.optimizer.type : "accel-host";
  return j.dump();
}

}  // namespace accel::zero
