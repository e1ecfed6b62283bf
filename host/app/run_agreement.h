// Every rank of a job must run the same configuration: ranks started with
// different model shapes corrupt memory inside the first collective, and
// ranks with a different batch size, seed, learning rate or precision train
// something nobody asked for without an error. Before the first collective,
// agree_on_run exchanges a digest of the run's canonical settings and, when
// any rank's differs, ends every rank with one line naming the first
// differing setting and the ranks holding each value.
//
// What is compared (docs/kwargs.md, "Settings every rank must share"): the
// model and its resolved shape, device kind, the data's identity (kind,
// size and content hash, not its path), data order, every training,
// optimizer, precision, scaler, autocast and communication option, save /
// resume, the loaded plugins with their versions and every plugin option's
// value (except those flagged ACCEL_OPTION_FLAG_PER_RANK), and the world size. Per-rank by nature and excluded: --metrics-file,
// --log-level, --log-every, --threads, --plugin-path, the --config path
// (its contents are compared through the settings it sets).
//
// The exchange is safe for any input: a fixed-size hash is all-gathered
// first; only when the hashes differ do the ranks whose digest differs from
// rank 0's (and rank 0) all-gather their "key=value" lists, each bounded to
// kMaxSettingsBytes and length-prefixed by an all-gather of the lengths.
//
// Thread-safety: collective over MPI_COMM_WORLD; call from the main thread.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "host/cli/run_config.h"
#include "host/model/gpt_config.h"
#include "host/runtime/host_context.h"

namespace accel::comm {
class MpiSession;
}
namespace accel::plugin {
class PluginRegistry;
}

namespace accel::app {

// One setting as the user knows it: ("--n-embd", "64").
using Settings = std::vector<std::pair<std::string, std::string>>;

inline constexpr size_t kMaxSettingsBytes = 64 * 1024;

// The run's canonical settings, in the order a mismatch is reported.
Settings run_settings(const RunConfig& config, const model::GptConfig& shape,
                      const plugin::PluginRegistry& registry, const runtime::OptionStore& options,
                      int world_size);

// "synthetic", or "tokens: N bytes, content fnv1a64 H" for a file: equal
// files give equal identities wherever they live. Hashes the whole file up
// to 64 MiB, else its size and first and last MiB.
std::string data_identity(const std::string& spec);

// The first setting whose value differs between `lists` (index = rank;
// empty = "same as rank 0"), as one line; "" when none differs.
std::string describe_first_difference(const std::vector<Settings>& lists);

// Collective. Returns when every rank's settings equal rank 0's; otherwise
// throws AgreedError(2) on every rank with describe_first_difference's line.
void agree_on_run(const Settings& settings, const comm::MpiSession& mpi);

}  // namespace accel::app
