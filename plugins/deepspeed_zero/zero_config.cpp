// zero_config.cpp — resolving DeepSpeedPlugin's fields and a DeepSpeed JSON
// config (see zero_config.h).
#include "zero_config.h"

#include <accel/sdk/error.hpp>
#include <accel/sdk/json_input.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

namespace accel::zero {

using json = nlohmann::json;
using sdk::Error;
using sdk::format;

std::string shown_text(const std::string& text, size_t max_as_is) {
  const bool plain = std::none_of(text.begin(), text.end(), [](char ch) {
    const auto byte = static_cast<unsigned char>(ch);
    return byte < 0x20 || byte == 0x7f;
  });
  return plain && text.size() <= max_as_is ? text : sdk::describe(json(text));
}

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

std::string shown(const std::string& text) { return shown_text(text); }

// Whether "auto" is a value for a key: Accelerate (deepspeed_config_process
// and DeepSpeedPlugin's field mapping) fills the batch sizes,
// gradient_clipping, the precision switches, the ZeRO stage, the offload
// devices and paths, the bucket sizes it derives from the model, the
// optimizer's and the scheduler's values; Transformers' Trainer fills betas
// and eps likewise. Anywhere else DeepSpeed would meet the literal "auto"
// and reject it, so it is refused here too.
enum class Auto { filled, refused };

// The JSON config as DeepSpeed reads it: values by dotted path ("a.b"),
// every section on the way an object, each value of the type its key
// takes, "auto" told apart, every key looked at remembered so the rest can
// be named in one warning. Typed reads go through sdk::JsonFields, so the
// messages read `<source>: "<path>" <problem>`.
class Reader {
 public:
  Reader(json root, std::string source) : root_(std::move(root)), source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  // nullptr when absent (or null where DeepSpeed's schema takes null).
  // Marks the key and its sections as understood; a section that is not an
  // object is refused, never read as absent.
  const json* find(const std::string& path) {
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      seen_.insert(path.substr(0, dot));
    }
    seen_.insert(path);
    const json* node = &root_;
    size_t start = 0;
    for (;;) {
      const size_t dot = path.find('.', start);
      const auto it = node->find(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (it == node->end() || (it->is_null() && nullable(path.substr(0, dot)))) return nullptr;
      if (dot == std::string::npos) return &*it;
      (void)sdk::JsonFields(*it, source_, path.substr(0, dot + 1));  // throws unless an object
      node = &*it;
      start = dot + 1;
    }
  }
  // A section: absent, or an object (null too where the schema takes it).
  void section(const std::string& path) {
    const json* v = find(path);
    if (v != nullptr) (void)sdk::JsonFields(*v, source_, path + ".");  // throws unless an object
  }
  static bool is_auto(const json* v) { return v != nullptr && v->is_string() && v->get_ref<const std::string&>() == "auto"; }
  std::string where(const std::string& path) const { return source_ + " " + path; }
  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    refuse(source_ + ": \"" + path + "\" " + problem);
  }

  // A concrete value of the type, nullopt when absent or "auto" (filled by
  // the caller); numbers within [min, max].
  std::optional<double> number(const std::string& path, Auto rule, double min = -std::numeric_limits<double>::max(),
                               double max = std::numeric_limits<double>::max()) {
    const auto [fields, key] = field(path, rule);
    if (!fields) return std::nullopt;
    return fields->number(key.c_str(), min, max);
  }
  // A whole number: a JSON integer, or a number written with an exponent or
  // a fraction of zero (Python writes 1e9 and 2e8 in the published configs,
  // and DeepSpeed's schema takes them).
  std::optional<int64_t> whole(const std::string& path, Auto rule, int64_t min = 0, int64_t max = kMaxWhole) {
    const auto [fields, key] = field(path, rule);
    if (!fields) return std::nullopt;
    const json& v = fields->value(key.c_str());
    if (v.is_number_integer()) return fields->integer(key.c_str(), min, max);
    const double d = fields->number(key.c_str(), static_cast<double>(min), static_cast<double>(max));
    if (d != std::floor(d)) fail(path, "must be a whole number, got " + sdk::describe(v));
    return static_cast<int64_t>(d);
  }
  std::optional<bool> boolean(const std::string& path, Auto rule) {
    const auto [fields, key] = field(path, rule);
    if (!fields) return std::nullopt;
    return fields->boolean(key.c_str());
  }
  std::optional<std::string> text(const std::string& path, Auto rule) {
    const auto [fields, key] = field(path, rule);
    if (!fields) return std::nullopt;
    return fields->string(key.c_str());
  }

  // Every leaf key of the config nobody asked for, by dotted path.
  std::vector<std::string> unknown() const {
    std::vector<std::string> out;
    collect(root_, "", out);
    return out;
  }

  // Far beyond any count or size a config holds, and exact in a double.
  static constexpr int64_t kMaxWhole = int64_t{1} << 53;

 private:
  // The object holding `path`'s last key, read by the rule, and that key;
  // no object when the value is absent or a filled "auto".
  std::pair<std::optional<sdk::JsonFields>, std::string> field(const std::string& path, Auto rule) {
    const json* v = find(path);
    if (v == nullptr) return {std::nullopt, {}};
    if (is_auto(v)) {
      if (rule == Auto::filled) return {std::nullopt, {}};
      fail(path, "is \"auto\", which nothing fills (Accelerate fills \"auto\" only for values it derives from the "
                 "run): write the value");
    }
    const size_t dot = path.rfind('.');
    if (dot == std::string::npos) return {sdk::JsonFields(root_, source_), path};
    const json* parent = find(path.substr(0, dot));
    return {sdk::JsonFields(*parent, source_, path.substr(0, dot + 1)), path.substr(dot + 1)};
  }
  // Keys DeepSpeed's schema declares Optional: null is their absence.
  static bool nullable(const std::string& path) {
    return path == "zero_optimization.offload_optimizer" || path == "zero_optimization.offload_param" ||
           path == "zero_optimization.offload_optimizer.nvme_path" || path == "zero_optimization.offload_param.nvme_path";
  }
  void collect(const json& node, const std::string& prefix, std::vector<std::string>& out) const {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
      if (seen_.count(path) != 0) {
        if (it->is_object() && !is_whole(path)) collect(*it, path, out);  // depth bounded by parse_json
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
  refuse(where + ": " + shown(text) + " is not none, cpu or nvme");
}

std::string text_of(const std::string& value) { return shown(value); }
template <typename T>
std::string text_of(const T& value) {
  std::ostringstream out;
  out << std::boolalpha << value;
  return out.str();
}

// A config value against accel-host's (or a plugin option's) setting: the
// concrete value wins only when it agrees.
template <typename T>
T agree(const std::optional<T>& config, T host, const std::string& config_name, const std::string& host_name) {
  if (!config) return host;
  if (*config != host) {
    refuse(config_name + " " + text_of(*config) + " contradicts " + host_name + " " + text_of(host) +
           " (make them agree, or write \"auto\")");
  }
  return *config;
}

// "auto" filled from accel-host's settings first (Accelerate's
// deepspeed_config_process), then DeepSpeed's _set_batch_related_parameters
// and _batch_assertion on what is given, then the result against the host's
// batch, which is what actually runs.
void resolve_batch(Reader& r, const HostSettings& host, const PluginFields& fields, ZeroConfig& c) {
  // DeepSpeed's dp_world_size: the sequence-parallel ranks share micro-batches.
  const int64_t sp = std::max<int32_t>(1, host.sequence_parallel_size);
  if (const std::optional<int64_t> given = r.whole("sequence_parallel_size", Auto::filled, 1, int64_t{1} << 24)) {
    if (*given != sp) {
      refuse(format("%s: sequence_parallel_size %lld: give --deepspeed_zero.sequence_parallel_size %lld too (it is "
                    "%lld)",
                    r.source().c_str(), static_cast<long long>(*given), static_cast<long long>(*given),
                    static_cast<long long>(sp)));
    }
  }
  const int64_t world = host.world_size / sp;
  const int64_t host_micro = host.batch_size / (host.grad_accum * world);
  const auto value = [&](const char* key, int64_t host_value) -> std::optional<int64_t> {
    const json* v = r.find(key);
    if (v == nullptr) return std::nullopt;
    if (Reader::is_auto(v)) return host_value;
    return r.whole(key, Auto::filled, 1, int64_t{1} << 24);  // products stay far inside int64
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

// fp16's dynamic loss scale against accel-host's scaler (--grad_scaler.*),
// which scales the loss here: each key DeepSpeed's DynamicLossScaler takes
// must agree with the flag that sets the same thing, so the scale follows
// the config. Absent keys leave the host's values.
void resolve_loss_scale(Reader& r, const HostSettings& host, bool fp16) {
  const std::optional<double> loss_scale = r.number("fp16.loss_scale", Auto::refused, 0.0);
  const std::optional<int64_t> power = r.whole("fp16.initial_scale_power", Auto::refused, 0, 126);
  const std::optional<int64_t> window = r.whole("fp16.loss_scale_window", Auto::refused, 1);
  const std::optional<int64_t> hysteresis = r.whole("fp16.hysteresis", Auto::refused, 1);
  const std::optional<double> min_scale = r.number("fp16.min_loss_scale", Auto::refused, 0.0);
  const std::optional<bool> consecutive = r.boolean("fp16.consecutive_hysteresis", Auto::refused);
  (void)r.boolean("fp16.auto_cast", Auto::refused);  // the host's autocast casts the inputs either way
  if (!fp16) return;  // understood; the scaler is off
  if (loss_scale && *loss_scale != 0.0) {
    refuse(r.where("fp16.loss_scale") + format(" %g: a static loss scale is not served; 0 (dynamic, accel-host's "
                                               "--grad_scaler.*) is",
                                               *loss_scale));
  }
  const auto must_match = [&](const char* key, bool agrees, const std::string& config_value, const char* flag,
                              const std::string& host_value, const std::string& wanted) {
    if (agrees) return;
    refuse(r.where(key) + " " + config_value + " contradicts accel-host's " + flag + " " + host_value + " (give " +
           flag + " " + wanted + ", or remove the key)");
  };
  if (power) {
    const double scale = std::ldexp(1.0, static_cast<int>(*power));
    must_match("fp16.initial_scale_power", scale == host.loss_scale_init,
               std::to_string(*power) + format(" (a scale of %.17g)", scale), "--grad_scaler.init_scale",
               format("%.17g", host.loss_scale_init), format("%.17g", scale));
  }
  if (window) {
    must_match("fp16.loss_scale_window", *window == host.loss_scale_growth_interval, std::to_string(*window),
               "--grad_scaler.growth_interval", std::to_string(host.loss_scale_growth_interval),
               std::to_string(*window));
  }
  if (hysteresis) {
    must_match("fp16.hysteresis", *hysteresis == host.loss_scale_hysteresis, std::to_string(*hysteresis),
               "--grad_scaler.hysteresis", std::to_string(host.loss_scale_hysteresis), std::to_string(*hysteresis));
  }
  if (min_scale) {
    must_match("fp16.min_loss_scale", *min_scale == host.loss_scale_min, format("%.17g", *min_scale),
               "--grad_scaler.min_scale", format("%.17g", host.loss_scale_min), format("%.17g", *min_scale));
  }
  if (consecutive && *consecutive) {
    refuse(r.where("fp16.consecutive_hysteresis") +
           " true: not served; the hysteresis refills when the scale grows (DeepSpeed's default, false)");
  }
}

void resolve_precision(Reader& r, const HostSettings& host, ZeroConfig& c) {
  r.section("bf16");
  r.section("fp16");
  r.section("bfloat16");  // DeepSpeed's older name for bf16: read below
  std::optional<bool> bf16 = r.boolean("bf16.enabled", Auto::filled);
  const char* bf16_key = "bf16.enabled";
  if (!bf16 && r.find("bf16") == nullptr) {
    bf16 = r.boolean("bfloat16.enabled", Auto::filled);
    bf16_key = "bfloat16.enabled";
  }
  const std::optional<bool> fp16 = r.boolean("fp16.enabled", Auto::filled);
  if (bf16 && *bf16 != (host.mixed_precision == "bf16")) {
    refuse(r.where(bf16_key) + (*bf16 ? " true" : " false") + " contradicts accel-host's --mixed-precision " +
           host.mixed_precision);
  }
  if (fp16 && *fp16 != (host.mixed_precision == "fp16")) {
    refuse(r.where("fp16.enabled") + (*fp16 ? " true" : " false") + " contradicts accel-host's --mixed-precision " +
           host.mixed_precision);
  }
  (void)r.boolean("bf16.immediate_grad_update", Auto::refused);  // the host's optimizer steps in fp32 either way
  resolve_loss_scale(r, host, host.mixed_precision == "fp16");
  // Stage 3 gathers and reduces in the compute precision, as DeepSpeed
  // keeps bf16/fp16 parameters beside the fp32 partitions; stages 1 and 2
  // leave the parameters to the host (fp32, autocast).
  if (c.stage == 3 && host.mixed_precision == "bf16") c.param_dtype = c.reduce_dtype = DLDataType{kDLBfloat, 16, 1};
}

void resolve_optimizer(Reader& r, const HostSettings& host, ZeroConfig& c) {
  if (r.find("optimizer") == nullptr) return;
  r.section("optimizer");
  r.section("optimizer.params");
  const std::optional<std::string> type = r.text("optimizer.type", Auto::refused);
  if (!type) refuse(r.where("optimizer.type") + ": missing (Adam or AdamW)");
  std::string lower;
  for (char ch : *type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower != "adam" && lower != "adamw") {
    refuse(r.where("optimizer.type") + " " + shown(*type) + ": only Adam and AdamW are served (the sharded AdamW)");
  }
  OptimizerChoice& o = c.optimizer;
  o.from_config = true;
  o.type = *type;
  o.lr = r.number("optimizer.params.lr", Auto::filled, 0.0);
  o.eps = r.number("optimizer.params.eps", Auto::filled, 0.0);
  o.weight_decay = r.number("optimizer.params.weight_decay", Auto::filled, 0.0);
  if (const json* betas = r.find("optimizer.params.betas"); betas != nullptr && !Reader::is_auto(betas)) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number() ||
        !std::isfinite((*betas)[0].get<double>()) || !std::isfinite((*betas)[1].get<double>())) {
      r.fail("optimizer.params.betas", "must be [beta1, beta2], two finite numbers, got " + sdk::describe(*betas));
    }
    o.beta1 = (*betas)[0].get<double>();
    o.beta2 = (*betas)[1].get<double>();
  }
  // Adam's adam_w_mode (default true) is AdamW; L2-coupled Adam only
  // differs from it when it decays.
  const bool w_mode = r.boolean("optimizer.params.adam_w_mode", Auto::refused).value_or(true);
  const double decay = o.weight_decay.value_or(host.weight_decay);
  if (lower == "adam" && !w_mode && decay != 0.0) {
    refuse(r.where("optimizer.params.adam_w_mode") + " false with weight_decay " + format("%g", decay) +
           ": L2-coupled Adam is not served (decoupled AdamW is)");
  }
  if (r.boolean("optimizer.params.bias_correction", Auto::refused).value_or(true) == false) {
    refuse(r.where("optimizer.params.bias_correction") + " false: AdamW without bias correction is not served");
  }
  if (r.boolean("optimizer.params.amsgrad", Auto::refused).value_or(false)) {
    refuse(r.where("optimizer.params.amsgrad") + " true: AMSGrad is not served");
  }
  (void)r.boolean("optimizer.params.torch_adam", Auto::refused);  // the host's kernel either way
  std::string replaced = "lr " + format("%g", o.lr.value_or(host.lr));
  if (o.beta1) replaced += format(", betas (%g, %g)", *o.beta1, *o.beta2);
  if (o.eps) replaced += format(", eps %g", *o.eps);
  replaced += format(", weight_decay %g", decay);
  c.notes.push_back(r.source() + " names optimizer " + shown(*type) + ": its " + replaced +
                    " replace accel-host's optimizer flags (DummyOptim)");
}

void resolve_scheduler(Reader& r, const HostSettings& host, ZeroConfig& c) {
  if (r.find("scheduler") == nullptr) return;
  r.section("scheduler");
  r.section("scheduler.params");
  const std::optional<std::string> type = r.text("scheduler.type", Auto::refused);
  Schedule& s = c.schedule;
  if (!type) refuse(r.where("scheduler.type") + ": missing (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  if (*type == "WarmupLR") {
    s.kind = ScheduleKind::warmup_lr;
  } else if (*type == "WarmupDecayLR") {
    s.kind = ScheduleKind::warmup_decay_lr;
  } else if (*type == "WarmupCosineLR") {
    s.kind = ScheduleKind::warmup_cosine_lr;
  } else {
    refuse(r.where("scheduler.type") + " " + shown(*type) +
           ": unknown scheduler (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  }
  // "auto" as Accelerate fills it: the host's lr range, warmup and horizon.
  s.warmup_min_lr = r.number("scheduler.params.warmup_min_lr", Auto::filled, 0.0).value_or(host.min_lr);
  s.warmup_max_lr =
      r.number("scheduler.params.warmup_max_lr", Auto::filled, 0.0).value_or(c.optimizer.lr.value_or(host.lr));
  s.warmup_num_steps = r.whole("scheduler.params.warmup_num_steps", Auto::filled).value_or(host.warmup_steps);
  s.total_num_steps = r.whole("scheduler.params.total_num_steps", Auto::filled).value_or(host.decay_steps);
  s.warmup_min_ratio = r.number("scheduler.params.warmup_min_ratio", Auto::refused, 0.0, 1.0).value_or(0.0);
  s.cos_min_ratio = r.number("scheduler.params.cos_min_ratio", Auto::refused, 0.0, 1.0).value_or(1e-4);
  const std::string warmup = r.text("scheduler.params.warmup_type", Auto::refused).value_or("log");
  if (warmup != "log" && warmup != "linear") {
    refuse(r.where("scheduler.params.warmup_type") + " " + shown(warmup) + ": log or linear");
  }
  s.warmup_type = warmup == "log" ? WarmupType::log : WarmupType::linear;
  (void)r.whole("scheduler.params.last_batch_iteration", Auto::refused, -1);
  if (s.kind == ScheduleKind::warmup_cosine_lr && s.total_num_steps <= s.warmup_num_steps) {
    refuse(r.where("scheduler.params.total_num_steps") + format(" %lld must exceed warmup_num_steps %lld",
                                                                static_cast<long long>(s.total_num_steps),
                                                                static_cast<long long>(s.warmup_num_steps)));
  }
  c.notes.push_back(r.source() + " names scheduler " + *type + ": it replaces accel-host's learning-rate schedule (" +
                    "DummyScheduler)");
}

void resolve_zero(Reader& r, const PluginFields& f, bool from_file, ZeroConfig& c) {
  r.section("zero_optimization");
  // "auto": Accelerate fills it from DeepSpeedPlugin's zero_stage (2 unless
  // given), as it fills every field the plugin maps onto the config.
  const bool stage_auto = Reader::is_auto(r.find("zero_optimization.stage"));
  const std::optional<int64_t> stage =
      r.whole("zero_optimization.stage", Auto::filled, -Reader::kMaxWhole, Reader::kMaxWhole);
  int64_t resolved = 0;
  if (f.zero_stage) {
    resolved = agree(stage, *f.zero_stage, r.where("zero_optimization.stage"), "--deepspeed_zero.zero_stage");
  } else if (stage) {
    resolved = *stage;
  } else {
    resolved = from_file && !stage_auto ? 0 : 2;  // DeepSpeed's default without the key; the plugin's for "auto"
  }
  if (resolved < 0 || resolved > 3) {
    refuse((f.zero_stage && !stage ? std::string("--deepspeed_zero.zero_stage") : r.where("zero_optimization.stage")) +
           format(" %lld: ZeRO stages are 0, 1, 2 and 3", static_cast<long long>(resolved)));
  }
  c.stage = static_cast<int>(resolved);
  if (stage_auto) {
    c.notes.push_back(r.where("zero_optimization.stage") + " \"auto\": stage " + std::to_string(c.stage) +
                      " (--deepspeed_zero.zero_stage)");
  }

  r.section("zero_optimization.offload_optimizer");
  r.section("zero_optimization.offload_param");
  const auto device = [&](const char* key, const std::optional<std::string>& field, const char* option) {
    std::optional<std::string> text = r.text(key, Auto::filled);
    if (field) text = agree(text, *field, r.where(key), option);
    return text ? parse_device(*text, r.where(key)) : OffloadDevice::none;
  };
  c.offload_optimizer = device("zero_optimization.offload_optimizer.device", f.offload_optimizer_device,
                               "--deepspeed_zero.offload_optimizer_device");
  c.offload_param =
      device("zero_optimization.offload_param.device", f.offload_param_device, "--deepspeed_zero.offload_param_device");
  const auto path = [&](const char* key, const std::optional<std::string>& field, const char* option) {
    std::optional<std::string> text = r.text(key, Auto::filled);
    if (field) text = agree(text, *field, r.where(key), option);
    return text.value_or("");
  };
  c.optimizer_nvme_path = path("zero_optimization.offload_optimizer.nvme_path", f.offload_optimizer_nvme_path,
                               "--deepspeed_zero.offload_optimizer_nvme_path");
  c.param_nvme_path = path("zero_optimization.offload_param.nvme_path", f.offload_param_nvme_path,
                           "--deepspeed_zero.offload_param_nvme_path");
  // NVMe swap buffers of the optimizer's moments (DeepSpeed's default: 4).
  const std::optional<int64_t> buffers =
      r.whole("zero_optimization.offload_optimizer.buffer_count", Auto::refused, 0, Reader::kMaxWhole);
  if (buffers && (*buffers < 2 || *buffers > 64)) {
    refuse(r.where("zero_optimization.offload_optimizer.buffer_count") + " " + std::to_string(*buffers) +
           ": must be 2 to 64 (one buffer steps while the next is read)");
  }
  c.moment_swap_buffers = static_cast<int32_t>(buffers.value_or(4));
  // aio.block_size: DeepSpeed's NVMe request size (default 1 MiB). Here each
  // swap piece (a pair of fp32 moments, 8 bytes per element) is one request
  // of that size, so it also sizes the swap buffers.
  r.section("aio");
  const int64_t block = r.whole("aio.block_size", Auto::refused, 0, Reader::kMaxWhole).value_or(1 << 20);
  if (block < 8 || block % 8 != 0 || block > (int64_t{1} << 30)) {
    refuse(r.where("aio.block_size") + " " + std::to_string(block) +
           ": must be a multiple of 8 bytes, from 8 to 1 GiB (one element's pair of fp32 moments is 8 bytes)");
  }
  c.moment_swap_piece_elements = block / 8;
  // Tuning of DeepSpeed's libaio engine: one I/O thread serves here.
  for (const char* key : {"aio.queue_depth", "aio.thread_count", "aio.intra_op_parallelism"}) {
    (void)r.whole(key, Auto::refused);
  }
  for (const char* key : {"aio.single_submit", "aio.overlap_events", "aio.use_gds"}) (void)r.boolean(key, Auto::refused);
  // Tuning of DeepSpeed's own offload engine.
  for (const char* key :
       {"zero_optimization.offload_optimizer.pin_memory", "zero_optimization.offload_optimizer.fast_init",
        "zero_optimization.offload_optimizer.pipeline_read", "zero_optimization.offload_optimizer.pipeline_write",
        "zero_optimization.offload_optimizer.pipeline", "zero_optimization.offload_param.pin_memory"}) {
    (void)r.boolean(key, Auto::refused);
  }
  (void)r.number("zero_optimization.offload_optimizer.ratio", Auto::refused, 0.0, 1.0);
  for (const char* key : {"zero_optimization.offload_param.buffer_count", "zero_optimization.offload_param.buffer_size",
                          "zero_optimization.offload_param.max_in_cpu"}) {
    (void)r.whole(key, Auto::refused);
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
    return r.whole(key, Auto::refused).value_or(deepspeed_default);
  };
  c.prefetch_bucket_size = sized("zero_optimization.stage3_prefetch_bucket_size", 50000000);
  c.param_persistence_threshold = sized("zero_optimization.stage3_param_persistence_threshold", 100000);
  c.max_live_parameters =
      r.whole("zero_optimization.stage3_max_live_parameters", Auto::refused).value_or(c.max_live_parameters);
  c.max_reuse_distance =
      r.whole("zero_optimization.stage3_max_reuse_distance", Auto::refused).value_or(c.max_reuse_distance);
  std::optional<bool> save16 = r.boolean("zero_optimization.stage3_gather_16bit_weights_on_model_save", Auto::filled);
  if (!save16) save16 = r.boolean("zero_optimization.stage3_gather_fp16_weights_on_model_save", Auto::filled);
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
                          "zero_optimization.allgather_partitions", "zero_optimization.reduce_scatter",
                          "zero_optimization.round_robin_gradients", "zero_optimization.load_from_fp32_weights",
                          "zero_optimization.elastic_checkpoint", "zero_optimization.ignore_unused_parameters"}) {
    (void)r.boolean(key, Auto::refused);
  }
  (void)r.whole("zero_optimization.reduce_bucket_size", Auto::filled);  // Accelerate fills it: h^2
  for (const char* key : {"zero_optimization.allgather_bucket_size", "zero_optimization.sub_group_size"}) {
    (void)r.whole(key, Auto::refused);
  }
  if (r.boolean("zero_optimization.cpu_offload", Auto::refused).value_or(false)) {
    refuse(r.where("zero_optimization.cpu_offload") +
           " true: the deprecated spelling; write offload_optimizer {\"device\": \"cpu\"}");
  }
}

// gradient_clipping: the config's, --deepspeed_zero.gradient_clipping and
// accel-host's --grad-clip name one max norm; whichever are given must
// agree, the first given is the run's (--grad-clip's default otherwise).
// The plugin's clip hook applies it in place of --grad-clip.
double resolve_clipping(Reader& r, const HostSettings& host, const PluginFields& f) {
  const std::optional<double> config = r.number("gradient_clipping", Auto::filled, 0.0);
  std::optional<double> clip = config;
  std::string named = r.where("gradient_clipping");
  if (f.gradient_clipping) {
    clip = agree(clip, *f.gradient_clipping, named, "--deepspeed_zero.gradient_clipping");
    if (!config) named = "--deepspeed_zero.gradient_clipping";
  }
  if (host.max_grad_norm_given || !clip) clip = agree(clip, host.max_grad_norm, named, "accel-host's --grad-clip");
  return *clip;
}

}  // namespace

namespace {

ZeroConfig resolve(const PluginFields& f, const HostSettings& host, const std::string& json_text,
                   const std::string& source) {
  const std::string name = source.empty() ? std::string("the DeepSpeed config") : source;
  // Without a file, the config Accelerate builds from the plugin's fields:
  // the batch sizes "auto".
  json root = {{"train_batch_size", "auto"},
               {"train_micro_batch_size_per_gpu", "auto"},
               {"gradient_accumulation_steps", "auto"}};
  if (!json_text.empty()) {
    root = sdk::parse_json(json_text, name);
    if (!root.is_object()) {
      refuse(name + ": invalid DeepSpeed config: the top level is not a JSON object, got " + sdk::describe(root));
    }
  }
  Reader r(std::move(root), name);
  ZeroConfig c;
  c.mesh = sharding::MeshShape{host.world_size, 1};
  c.limit_all_gathers = false;  // ZeRO-3 bounds gathers by elements (stage3_max_live_parameters)
  c.state_dict_type = sharding::StateDictType::sharded;  // every rank saves its partition, as DeepSpeed does

  resolve_zero(r, f, !json_text.empty(), c);
  c.gradient_clipping = resolve_clipping(r, host, f);
  resolve_precision(r, host, c);
  resolve_optimizer(r, host, c);
  resolve_scheduler(r, host, c);
  c.steps_per_print = r.whole("steps_per_print", Auto::refused).value_or(10);
  c.wall_clock_breakdown = r.boolean("wall_clock_breakdown", Auto::refused).value_or(false);
  for (const char* key : {"zero_allow_untested_optimizer", "prescale_gradients"}) (void)r.boolean(key, Auto::refused);
  (void)r.number("gradient_predivide_factor", Auto::refused);
  r.section("amp");
  if (const std::optional<bool> amp = r.boolean("amp.enabled", Auto::refused); amp && *amp) {
    refuse(r.where("amp.enabled") + " true: NVIDIA Apex AMP is not served (use bf16 or fp16)");
  }
  (void)r.text("amp.opt_level", Auto::refused);

  // Fields that cannot apply here.
  if (!f.transformer_moe_cls_names.empty()) {
    // Accelerate's form: class names separated by commas, spaces allowed.
    std::string class_name;
    for (size_t i = 0; i <= f.transformer_moe_cls_names.size(); ++i) {
      const char ch = i < f.transformer_moe_cls_names.size() ? f.transformer_moe_cls_names[i] : ',';
      if (ch == ',') {
        if (class_name.empty()) {
          refuse("--deepspeed_zero.transformer_moe_cls_names " + shown(f.transformer_moe_cls_names) +
                 ": an empty class name");
        }
        c.moe_leaf_classes.push_back(class_name);
        class_name.clear();
      } else if (ch != ' ') {
        class_name += ch;
      }
    }
  }
  if (f.enable_msamp) {
    refuse(
        "--deepspeed_zero.enable_msamp true: MS-AMP is not available here; FP8 training is the fp8 plugin "
        "(--plugin fp8), which composes with this one");
  }
  if (f.msamp_opt_level) {
    refuse("--deepspeed_zero.msamp_opt_level " + shown(*f.msamp_opt_level) +
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

}  // namespace

ZeroConfig resolve_config(const PluginFields& f, const HostSettings& host, const std::string& json_text,
                          const std::string& source) {
  try {
    return resolve(f, host, json_text, source);
  } catch (const sdk::JsonInputError& e) {
    refuse(e.what());  // the SDK's reader's line, as every other refusal
  }
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
