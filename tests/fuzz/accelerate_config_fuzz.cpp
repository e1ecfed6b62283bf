// libFuzzer target for accelerate's config file and launch flags as
// `accel-host launch` reads them (host/cli/accelerate_config.h,
// launch_flags.h, safe_yaml.h): the YAML reader with PyYAML's semantics,
// the launch-flag parser and the one mapping. The input is split at the
// first 0xFF byte: before it, the YAML text; after it, launch arguments
// separated by NUL bytes (a "--" among them starts the training options).
// Properties checked:
//   1. reading, parsing and mapping throw cli::UsageError or nothing: any
//      other exception (a std::logic_error is the mapping's own "a setting
//      read by nothing") escapes and libFuzzer reports a crash;
//   2. a refusal is one bounded line;
//   3. an accepted mapping gives options whose names are non-empty and
//      whose values hold no control character (each becomes a word of the
//      printed command and of accel-host's command line), ranks and
//      machines within their bounds, and what the training options leave
//      standing is a subset of it.
// Build: clang with -DACCEL_FUZZ=ON (tests/fuzz/CMakeLists.txt); run:
//   ./accelerate_config_fuzz -dict=tests/fuzz/accelerate.dict -max_len=1024 tests/fuzz/corpus_accelerate_config
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "host/cli/accelerate_config.h"
#include "host/cli/launch_flags.h"
#include "host/cli/options.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

void check_line(const std::string& line) {
  require(line.find('\n') == std::string::npos);
  require(line.size() < 4096);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\xff');
  const std::string yaml = input.substr(0, split);
  std::vector<std::string> args;
  if (split != std::string::npos) {
    const std::string words = input.substr(split + 1);
    size_t start = 0;
    while (start <= words.size()) {
      const size_t end = std::min(words.find('\0', start), words.size());
      args.push_back(words.substr(start, end - start));
      start = end + 1;
    }
  }
  try {
    const accel::cli::LaunchFlags flags = accel::cli::parse_launch_flags(args);
    const accel::cli::AccelerateSettings file = accel::cli::read_accelerate_settings(yaml, "f.yaml");
    const accel::cli::AccelerateConfig config =
        accel::cli::map_accelerate_settings(file, flags.settings, /*file_given=*/true, "f.yaml");
    for (const accel::cli::MappedOption& option : config.options) {
      require(!option.name.empty());
      require(std::none_of(option.value.begin(), option.value.end(), [](unsigned char c) { return c < 0x20; }));
    }
    require(config.num_processes.value_or(1) >= 1 && config.num_processes.value_or(1) <= (1 << 20));
    require(config.machine_rank >= 0 && config.machine_rank < config.num_machines);
    const auto all = config.pairs();
    for (const auto& kept : config.kept_under(flags.training_args)) {
      require(std::find(all.begin(), all.end(), kept) != all.end());
    }
    for (const std::string& note : config.notes) check_line(note);
  } catch (const accel::cli::UsageError& e) {
    check_line(e.what());
  }
  return 0;
}
