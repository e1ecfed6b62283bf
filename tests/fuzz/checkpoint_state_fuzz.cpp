// libFuzzer target for the two JSON files resume trusts before anything
// else: trainer_state.json (parse_trainer_state) and manifest.json
// (parse_manifest). Every input goes through both. Properties checked:
//   1. each parser throws CheckpointError or nothing (any other exception
//      escapes and libFuzzer reports it as a crash);
//   2. an accepted trainer state is in range (the invariants the trainer
//      relies on: step >= 0, 0 <= optimizer_steps <= step, loss scale finite
//      and > 0, positive model dimensions and world size), and writing it
//      and parsing it again gives the same state;
//   3. an accepted manifest lists distinct plain file names.
// Build: clang with -DACCEL_FUZZ=ON (tests/fuzz/CMakeLists.txt); run:
//   ./checkpoint_state_fuzz -dict=tests/fuzz/json.dict -max_total_time=60 tests/fuzz/corpus_checkpoint_state
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/trainer_state.h"

namespace {

using accel::checkpoint::CheckpointError;
using accel::checkpoint::TrainerState;

void require(bool condition) {
  if (!condition) std::abort();
}

bool same(const TrainerState& a, const TrainerState& b) {
  return a.step == b.step && a.optimizer_steps == b.optimizer_steps && a.data_position == b.data_position &&
         a.data_seed == b.data_seed && a.loss_scale == b.loss_scale &&
         a.loss_scale_growth_tracker == b.loss_scale_growth_tracker && a.model == b.model && a.plugins == b.plugins &&
         a.world_size == b.world_size;
}

void check_trainer_state(std::string_view text) {
  TrainerState s;
  try {
    s = accel::checkpoint::parse_trainer_state(text, "fuzz/trainer_state.json");
  } catch (const CheckpointError&) {
    return;
  }
  require(s.step >= 0 && s.optimizer_steps >= 0 && s.optimizer_steps <= s.step && s.data_position >= 0);
  require(std::isfinite(s.loss_scale) && s.loss_scale > 0 && s.loss_scale_growth_tracker >= 0);
  require(s.model.n_layer > 0 && s.model.n_head > 0 && s.model.n_embd > 0 && s.model.seq_len > 0 &&
          s.model.vocab_size > 0 && s.world_size >= 1);
  const TrainerState again =
      accel::checkpoint::parse_trainer_state(accel::checkpoint::trainer_state_json(s), "fuzz/rewritten");
  require(same(s, again));
}

void check_manifest(std::string_view text) {
  accel::checkpoint::Manifest manifest;
  try {
    manifest = accel::checkpoint::parse_manifest(text, "fuzz/manifest.json");
  } catch (const CheckpointError&) {
    return;
  }
  std::set<std::string> names;
  for (const accel::checkpoint::ManifestEntry& entry : manifest.files) {
    require(!entry.file.empty() && entry.file != "." && entry.file != ".." &&
            entry.file.find('/') == std::string::npos && entry.file.find('\0') == std::string::npos &&
            entry.file != accel::checkpoint::kManifestFileName);
    require(names.insert(entry.file).second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_trainer_state(text);
  check_manifest(text);
  return 0;
}
