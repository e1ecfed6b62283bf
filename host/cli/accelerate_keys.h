// accelerate's vocabulary, as Accel treats it: every argument of
// `accelerate launch` and every key its config file can hold (ClusterConfig's
// fields and the keys of its sections), written down from accelerate's
// source (accelerate/commands/launch.py, commands/config/config_args.py and
// cluster.py, version kAccelerateVersion), each either read by the mapping
// (cli/accelerate_config.h) or refused with the reason nothing here can
// honour it. A file key and a flag that accelerate treats as one setting
// share one name, the launch argument's (fsdp_config.offload_params and
// --fsdp_offload_params are both "fsdp_offload_params"), because accelerate
// copies a section's keys onto those arguments before it reads them.
//
// Thread-safety: constant data.
#pragma once

#include <string>

namespace accel::cli {

inline constexpr const char* kAccelerateVersion = "1.15.0";

// How `accelerate launch` takes an argument.
enum class FlagKind {
  none,      // not a flag: the config file's key only
  switch_,   // store_true: --name, no value
  value,     // --name VALUE (or --name=VALUE)
  append,    // --name VALUE, repeatable (a list)
};

struct AccelerateKey {
  const char* name;     // the launch argument's name, or the file key's after accelerate's prefixing
  const char* section;  // ClusterConfig field that holds it in the file ("" top level); nullptr: not in the file
  FlagKind flag;
  // Refused keys only (nullptr: read by the mapping): why nothing here can
  // honour it, and the values that ask for nothing ("|"-separated, "" the
  // empty value or list), which are accepted.
  const char* refusal;
  const char* inert;
};

// The key `name` as the file's `section` holds it ("" top level), or as a
// flag when `section` is nullptr; nullptr when accelerate has no such key there.
const AccelerateKey* find_accelerate_key(const std::string& name, const char* section);

// Every key, for --help and the tests.
const AccelerateKey* accelerate_keys_begin();
const AccelerateKey* accelerate_keys_end();

// Whether `value` is one of `key`'s inert values.
bool is_inert(const AccelerateKey& key, const std::string& value);

// The launch argument a file key of `section` is copied onto, as accelerate's
// launch does (fsdp_config.offload_params -> fsdp_offload_params,
// fp8_config.backend -> fp8_backend, dynamo_config.mode -> dynamo_mode;
// other sections' keys keep their names).
std::string launch_name(const std::string& section, const std::string& key);

}  // namespace accel::cli
