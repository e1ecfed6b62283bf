// RopeScaling to and from JSON (see rope_json.h).
#include "host/checkpoint/rope_json.h"

#include <cmath>
#include <set>
#include <vector>

#include "host/model/model_limits.h"

namespace accel::checkpoint {
namespace {

using Kind = RopeScaling::Kind;
using nlohmann::json;

// The keys each rope_type reads (transformers' _validate_*_rope_parameters).
std::set<std::string> keys_of(Kind kind) {
  switch (kind) {
    case Kind::none: return {};
    case Kind::llama3: return {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    case Kind::linear: return {"factor"};
    // transformers' dynamic scales from max_position_embeddings; an
    // original_max_position_embeddings beside it is not read.
    case Kind::dynamic: return {"factor", "original_max_position_embeddings"};
    case Kind::yarn:
      return {"factor",    "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
              "mscale",    "mscale_all_dim",                    "truncate"};
    case Kind::longrope:
      return {"factor", "original_max_position_embeddings", "attention_factor", "short_factor", "long_factor"};
  }
  return {};
}

std::vector<double> numbers(const sdk::JsonFields& rope, const char* key) {
  std::vector<double> out;
  for (const json& entry : rope.array(key)) {
    if (!entry.is_number() || !std::isfinite(entry.get<double>()) || entry.get<double>() <= 0.0) {
      rope.fail(key, "holds " + sdk::describe(entry) + "; every entry must be a positive number");
    }
    out.push_back(entry.get<double>());
  }
  return out;
}

}  // namespace

json rope_scaling_json(const RopeScaling& r) {
  json j = {{"rope_type", to_string(r.kind)}};
  if (r.kind == Kind::none) return j;
  j["factor"] = r.factor;
  if (r.kind != Kind::linear) j["original_max_position_embeddings"] = r.original_max_position;
  if (r.kind == Kind::llama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  if ((r.kind == Kind::yarn || r.kind == Kind::longrope) && r.attention_factor) {
    j["attention_factor"] = *r.attention_factor;
  }
  if (r.kind == Kind::yarn) {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    if (r.mscale != 0.0) j["mscale"] = r.mscale;
    if (r.mscale_all_dim != 0.0) j["mscale_all_dim"] = r.mscale_all_dim;
    if (!r.truncate) j["truncate"] = false;
  }
  if (r.kind == Kind::longrope) {
    j["short_factor"] = r.short_factor;
    j["long_factor"] = r.long_factor;
  }
  return j;
}

RopeScaling read_rope_scaling(const sdk::JsonFields& rope, const std::string& type, int64_t max_position,
                              std::optional<int64_t> original, std::initializer_list<const char*> also_known) {
  RopeScaling r;
  bool found = false;
  for (Kind kind : {Kind::none, Kind::llama3, Kind::linear, Kind::dynamic, Kind::yarn, Kind::longrope}) {
    if (type == to_string(kind)) {
      r.kind = kind;
      found = true;
    }
  }
  if (!found) {
    rope.fail("rope_type", "is \"" + type + "\"; accel-host builds default, llama3, linear, dynamic, yarn and "
                           "longrope rotary embeddings");
  }
  const std::set<std::string> known = keys_of(r.kind);
  const std::set<std::string> extra(also_known.begin(), also_known.end());
  for (const auto& item : rope.json().items()) {
    if (!known.count(item.key()) && !extra.count(item.key())) {
      rope.fail(item.key(), "is not supported with rope_type " + type + " (transformers' " + type + " reads no such key)");
    }
  }
  if (r.kind == Kind::none) return r;
  const int64_t limit = model::kMaxModelDimension;
  // linear needs no length; transformers' dynamic scales from
  // max_position_embeddings, whatever the object says.
  if (r.kind == Kind::dynamic) {
    r.original_max_position = max_position;
  } else if (r.kind != Kind::linear) {
    r.original_max_position =
        original.value_or(rope.optional_integer("original_max_position_embeddings", 1, limit).value_or(max_position));
  }
  const bool factor_optional = r.kind == Kind::yarn || r.kind == Kind::longrope;
  if (factor_optional && !rope.has_value("factor")) {
    r.factor = static_cast<double>(max_position) / static_cast<double>(r.original_max_position);
  } else {
    r.factor = rope.positive_finite("factor");
  }
  if (r.kind == Kind::llama3) {
    r.low_freq_factor = rope.positive_finite("low_freq_factor");
    r.high_freq_factor = rope.positive_finite("high_freq_factor");
    if (r.high_freq_factor <= r.low_freq_factor) {
      rope.fail("high_freq_factor", "(" + sdk::describe(rope.value("high_freq_factor")) + ") must exceed \"low_freq_factor\" (" +
                                        sdk::describe(rope.value("low_freq_factor")) + ")");
    }
  }
  if (factor_optional && rope.has_value("attention_factor")) {
    r.attention_factor = rope.optional_number("attention_factor", 0.0, 1e9);
  }
  if (r.kind == Kind::yarn) {
    // transformers: `get("beta_fast") or 32` (a 0 is the default too).
    const double fast = rope.optional_number("beta_fast", 0.0, 1e9).value_or(0.0);
    const double slow = rope.optional_number("beta_slow", 0.0, 1e9).value_or(0.0);
    r.beta_fast = fast != 0.0 ? fast : 32.0;
    r.beta_slow = slow != 0.0 ? slow : 1.0;
    r.mscale = rope.optional_number("mscale", -1e9, 1e9).value_or(0.0);
    r.mscale_all_dim = rope.optional_number("mscale_all_dim", -1e9, 1e9).value_or(0.0);
    if (rope.has_value("truncate")) r.truncate = rope.boolean("truncate");
  }
  if (r.kind == Kind::longrope) {
    r.short_factor = numbers(rope, "short_factor");
    r.long_factor = numbers(rope, "long_factor");
  }
  return r;
}

}  // namespace accel::checkpoint
