// libFuzzer target for the deepspeed_zero plugin's DeepSpeed config reader:
// resolve_config on the input as the JSON text, under two host settings
// (fp16 on 4 ranks with every plugin field given, bf16 on 1 rank with none),
// so the fp16 and bf16 paths, the batch rule and the agreement checks all
// see every input. Torch-free: the reader is built from plugins/deepspeed_zero
// against the ABI and SDK headers alone. Properties checked:
//   1. resolve_config throws accel::sdk::Error or nothing (any other
//      exception escapes and libFuzzer reports it as a crash; a stack
//      overflow or sanitizer report likewise);
//   2. a refusal, an info note and a shown unknown key are each one line of
//      bounded length (no message repeats a whole input value; found a
//      JSON "\n" quoted as written, seed newline_in_value.json);
//   3. an accepted config is consistent: stage 0-3, the batch rule holds,
//      clipping finite and >= 0, and to_json serialises it.
// Build: clang with -DACCEL_FUZZ=ON (tests/fuzz/CMakeLists.txt); run:
//   ./ds_config_fuzz -dict=tests/fuzz/json.dict -max_len=2048 tests/fuzz/corpus_ds_config
#include <accel/sdk/error.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "deepspeed_zero/zero_config.h"

namespace {

using accel::zero::HostSettings;
using accel::zero::PluginFields;
using accel::zero::ZeroConfig;

void require(bool condition) {
  if (!condition) std::abort();
}

// Longer than any refusal the reader writes (a key path, two values cut to
// 40 characters, a path given on the command line, the reason).
constexpr size_t kMaxMessage = 1024;

void check(const PluginFields& fields, const HostSettings& host, const std::string& text) {
  ZeroConfig c;
  try {
    c = accel::zero::resolve_config(fields, host, text, "hf_ds_config fuzz.json");
  } catch (const accel::sdk::Error& e) {
    const std::string what = e.what();
    require(what.find('\n') == std::string::npos && what.size() <= kMaxMessage);
    return;
  }
  require(c.stage >= 0 && c.stage <= 3);
  require(c.micro_batch_per_gpu > 0 && c.gradient_accumulation_steps > 0);
  require(c.train_batch_size == c.micro_batch_per_gpu * c.gradient_accumulation_steps * host.world_size);
  require(std::isfinite(c.gradient_clipping) && c.gradient_clipping >= 0);
  require(c.moment_swap_buffers >= 2 && c.moment_swap_piece_elements >= 1);
  require(!accel::zero::to_json(c).empty());
  for (const std::string& note : c.notes) require(note.find('\n') == std::string::npos && note.size() <= kMaxMessage);
  for (const std::string& key : c.unknown_keys) {
    const std::string shown = accel::zero::shown_text(key);
    // describe() keeps 40 characters, each escaped to at most 6 ("\u0000").
    require(shown.find('\n') == std::string::npos && shown.size() <= 300);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  HostSettings fp16;
  fp16.world_size = 4;
  fp16.batch_size = 16;
  fp16.grad_accum = 2;
  fp16.mixed_precision = "fp16";
  fp16.max_grad_norm_given = true;
  PluginFields given;
  given.hf_ds_config = "fuzz.json";
  given.gradient_accumulation_steps = 2;
  given.gradient_clipping = 1.0;
  given.zero_stage = 3;
  given.offload_optimizer_device = "cpu";
  given.offload_param_device = "cpu";
  given.zero3_save_16bit_model = true;
  check(given, fp16, text);

  HostSettings bf16;
  bf16.world_size = 1;
  bf16.batch_size = 8;
  bf16.grad_accum = 1;
  bf16.mixed_precision = "bf16";
  PluginFields none;
  none.hf_ds_config = "fuzz.json";
  check(none, bf16, text);
  return 0;
}
