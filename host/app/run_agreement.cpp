// The start-up agreement on the run's configuration (see run_agreement.h).
#include "host/app/run_agreement.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>

#include "accel/sdk/input_file.hpp"
#include "host/comm/mpi_session.h"
#include "host/plugin/plugin_registry.h"
#include "host/util/agreed_error.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t fnv1a(const char* data, size_t size, uint64_t hash = kFnvOffset) {
  for (size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(data[i]);
    hash *= kFnvPrime;
  }
  return hash;
}

std::string real(double value) { return strformat("%.17g", value); }
std::string whole(int64_t value) { return std::to_string(value); }

// A plugin option's value in a spelling that does not depend on how the
// user wrote it (0.5 and 0.50 agree).
std::string option_text(const runtime::OptionValue& value) {
  if (!value.has_value) return "(unset)";
  switch (value.type) {
    case ACCEL_OPTION_BOOL: return value.as_bool ? "true" : "false";
    case ACCEL_OPTION_INT: return whole(value.as_int);
    case ACCEL_OPTION_DOUBLE: return real(value.as_double);
    default: return value.text;
  }
}

std::string serialise(const Settings& settings) {
  std::string text;
  for (const auto& [key, value] : settings) {
    // Values are single-line by construction; a newline would forge a key.
    std::string clean = value;
    std::replace(clean.begin(), clean.end(), '\n', ' ');
    text += key + "=" + clean + "\n";
  }
  return text.substr(0, kMaxSettingsBytes);
}

Settings parse(const std::string& text) {
  Settings settings;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) settings.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return settings;
}

// "rank 3" / "ranks 1, 2, 5" (at most eight named).
std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) text += strformat(" and %zu more", ranks.size() - 8);
  return text;
}

}  // namespace

std::string data_identity(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  const std::string kind = spec.substr(0, colon);
  // The SDK's rule for inputs: a FIFO named as the data must not stall the
  // agreement (the dataset refuses it later, with its own line).
  sdk::InputFile file;
  try {
    file = sdk::open_input_file(spec.substr(colon + 1));
  } catch (const sdk::InputFileError&) {
    return kind + ": unreadable";
  }
  const int fd = file.fd();
  const auto size = static_cast<int64_t>(file.size());
  constexpr int64_t kWhole = 64ll << 20, kEdge = 1ll << 20;
  uint64_t hash = kFnvOffset;
  std::string buffer;
  const auto hash_range = [&](int64_t offset, int64_t length) {
    buffer.resize(static_cast<size_t>(length));
    int64_t done = 0;
    while (done < length) {
      const ssize_t got = ::pread(fd, buffer.data() + done, static_cast<size_t>(length - done), offset + done);
      if (got <= 0) break;
      done += got;
    }
    hash = fnv1a(buffer.data(), static_cast<size_t>(done), hash);
  };
  std::string identity;
  if (size <= kWhole) {
    hash_range(0, size);
    identity = strformat("%s: %lld bytes, fnv1a64 %016llx", kind.c_str(), static_cast<long long>(size),
                         static_cast<unsigned long long>(hash));
  } else {
    hash_range(0, kEdge);
    hash_range(size - kEdge, kEdge);
    identity = strformat("%s: %lld bytes, fnv1a64 of first and last MiB %016llx", kind.c_str(),
                         static_cast<long long>(size), static_cast<unsigned long long>(hash));
  }
  return identity;
}

Settings run_settings(const RunConfig& c, const model::GptConfig& shape, const plugin::PluginRegistry& registry,
                      const runtime::OptionStore& options, int world_size) {
  const OptimizerOptions& o = c.optimizer;
  Settings s = {
      {"--model", c.model},
      {"--n-layer", whole(shape.n_layer)},
      {"--n-head", whole(shape.n_head)},
      {"--n-embd", whole(shape.n_embd)},
      {"--seq-len", whole(shape.seq_len)},
      {"--vocab-size", whole(shape.vocab_size)},
      {"--device", c.device},
      {"--data (content)", data_identity(c.data)},
      {"--data-order", to_string(c.data_order)},
      {"--eval-every", whole(c.eval.every)},
      {"--eval-steps", whole(c.eval.steps)},
      {"--eval-data (content)", c.eval.data.empty() ? "(none)" : data_identity(c.eval.data)},
      {"--eval-fraction", real(c.eval.fraction)},
      {"--steps", whole(c.steps)},
      {"--batch-size", whole(c.batch_size)},
      {"--grad-accum", whole(c.grad_accum)},
      {"--seed", std::to_string(c.seed)},
      {"--lr", real(o.lr)},
      {"--min-lr", real(o.min_lr)},
      {"--lr-schedule", to_string(o.schedule)},
      {"--warmup-steps", whole(o.warmup_steps)},
      {"--lr-decay-steps", whole(o.decay_steps)},
      {"--beta1", real(o.beta1)},
      {"--beta2", real(o.beta2)},
      {"--eps", real(o.eps)},
      {"--weight-decay", real(o.weight_decay)},
      {"--grad-clip", real(o.grad_clip)},
      {"--mixed-precision", to_string(c.mixed_precision)},
      {"--nonfinite-loss-skips", whole(c.nonfinite_loss_skips)},
      {"--autocast.enabled", c.autocast.enabled ? "true" : "false"},
      {"--autocast.cache_enabled", c.autocast.cache_enabled ? "true" : "false"},
      {"--grad_scaler.enabled", c.grad_scaler.enabled ? "true" : "false"},
      {"--grad_scaler.init_scale", real(c.grad_scaler.init_scale)},
      {"--grad_scaler.growth_factor", real(c.grad_scaler.growth_factor)},
      {"--grad_scaler.backoff_factor", real(c.grad_scaler.backoff_factor)},
      {"--grad_scaler.growth_interval", whole(c.grad_scaler.growth_interval)},
      {"--grad_scaler.hysteresis", whole(c.grad_scaler.hysteresis)},
      {"--grad_scaler.min_scale", real(c.grad_scaler.min_scale)},
      {"--init_process_group.backend", c.comm.backend},
      {"--init_process_group.timeout", real(c.comm.timeout_s)},
      {"--comm-hierarchical-all-reduce", c.comm.hierarchical_all_reduce ? "true" : "false"},
      {"--tensor-parallel-across-nodes", c.comm.tensor_parallel_across_nodes ? "true" : "false"},
      {"--save", c.save_dir},
      {"--save-every", whole(c.save_every)},
      {"--save-async", c.save_async ? "true" : "false"},
      {"--snapshot-every", whole(c.snapshot_every)},
      {"--snapshot-dir", c.snapshot_dir},
      {"--resume", c.resume},
      {"world size", whole(world_size)},
  };
  std::string plugins;
  for (const auto& p : registry.plugins()) {
    plugins += (plugins.empty() ? "" : ", ") + p->name() + " " + p->descriptor().version;
  }
  s.emplace_back("--plugin", plugins.empty() ? "(none)" : plugins);
  // Nodes that installed different builds: the same names and versions, other
  // bytes. Identities are of content, so a path that differs does not matter.
  s.emplace_back("accel-host (binary)", data_identity("file:/proc/self/exe"));
  for (const auto& p : registry.plugins()) {
    s.emplace_back("--plugin " + p->name() + " (file)", data_identity("file:" + p->path().string()));
  }
  for (const auto& p : registry.plugins()) {
    for (const AccelOptionSpec* spec : p->options()) {
      if (spec->flags & ACCEL_OPTION_FLAG_PER_RANK) continue;
      const runtime::OptionValue* value = options.find(p->name(), spec->name);
      s.emplace_back("--" + p->name() + "." + spec->name, value ? option_text(*value) : "(unset)");
    }
  }
  return s;
}

std::string describe_first_difference(const std::vector<Settings>& lists) {
  if (lists.empty()) return "";
  // Keys in rank 0's order, then any only other ranks have.
  std::vector<std::string> keys;
  std::vector<std::map<std::string, std::string>> maps;
  for (const Settings& list : lists) {
    maps.emplace_back(list.begin(), list.end());
    for (const auto& entry : list) {
      if (std::find(keys.begin(), keys.end(), entry.first) == keys.end()) keys.push_back(entry.first);
    }
  }
  for (const std::string& key : keys) {
    // value -> ranks holding it, in order of first appearance.
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (size_t r = 0; r < lists.size(); ++r) {
      const std::map<std::string, std::string>& m = lists[r].empty() ? maps[0] : maps[r];
      const auto it = m.find(key);
      const std::string value = it == m.end() ? "(not set)" : it->second;
      auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
      if (group == groups.end()) group = groups.insert(groups.end(), {value, {}});
      group->second.push_back(static_cast<int>(r));
    }
    if (groups.size() == 1) continue;
    std::string line = "ranks were started with different settings: " + key + " is";
    for (size_t g = 0; g < groups.size(); ++g) {
      line += strformat("%s '%s' on %s", g == 0 ? "" : ",", groups[g].first.c_str(),
                        rank_list(groups[g].second).c_str());
    }
    return line + " (every rank must run the same configuration)";
  }
  return "";
}

void agree_on_run(const Settings& settings, const comm::MpiSession& mpi) {
  const int world = mpi.world_size();
  if (world == 1) return;
  const std::string text = serialise(settings);
  uint64_t mine = fnv1a(text.data(), text.size());
  std::vector<uint64_t> hashes(static_cast<size_t>(world));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  if (std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })) return;

  // Only rank 0 and the ranks that differ from it send their lists; every
  // length is bounded, so the all-gather's size is known and safe.
  const bool sends = mpi.rank() == 0 || mine != hashes[0];
  int length = sends ? static_cast<int>(text.size()) : 0;
  std::vector<int> lengths(static_cast<size_t>(world)), offsets(static_cast<size_t>(world));
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    lengths[r] = std::clamp(lengths[r], 0, static_cast<int>(kMaxSettingsBytes));
    offsets[r] = static_cast<int>(total);
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(text.data(), lengths[static_cast<size_t>(mpi.rank())], MPI_CHAR, all.data(), lengths.data(),
                 offsets.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<Settings> lists(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) lists[r] = parse(all.substr(offsets[r], lengths[r]));
  std::string line = describe_first_difference(lists);
  if (line.empty()) line = "ranks were started with different settings (their digests differ)";
  throw AgreedError(2, line);
}

}  // namespace accel::app
