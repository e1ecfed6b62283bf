// libFuzzer target for accel-host's command line and --config file parser
// (host/cli/options.h, through its public API only). The input is split in
// two at the first 0xFF byte: before it, the text of a config file (passed
// as --config when the input has a 0xFF); after it (or the whole input),
// command-line arguments separated by NUL bytes. Properties checked:
//   1. scan_plugin_request, parse_command_line (with a plugin options
//      section for odd-sized inputs, without for even-sized ones) and
//      validate_for_world throw cli::UsageError or
//      nothing: any other exception escapes and libFuzzer reports a crash
//      (main() would exit 1 with a poor message instead of 2 naming the
//      option);
//   2. an accepted run configuration has the invariants the trainer relies
//      on (positive steps, batch, accumulation, log interval).
// Build: clang with -DACCEL_FUZZ=ON (tests/fuzz/CMakeLists.txt); run:
//   ./cli_fuzz -dict=tests/fuzz/cli.dict -max_total_time=60 tests/fuzz/corpus_cli
#include <unistd.h>

#include <boost/program_options.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "host/cli/options.h"

namespace {

namespace po = boost::program_options;

void require(bool condition) {
  if (!condition) std::abort();
}

// A plugin's option section as plugin/plugin_options.h builds it: string
// values under "NAME.option" keys.
const po::options_description& plugin_section() {
  static const po::options_description section = [] {
    po::options_description d("fuzz plugin");
    d.add_options()("fuzz.mode", po::value<std::string>()->default_value("a"), "")(
        "fuzz.level", po::value<std::string>(), "");
    return d;
  }();
  return section;
}

// One config file per process, rewritten for every input.
const std::string& config_path() {
  static const std::string path = "/tmp/accel_cli_fuzz_" + std::to_string(::getpid()) + ".conf";
  return path;
}

// `with_plugin`: parse as if a plugin with options were loaded (one parse
// per input, chosen by the input, keeps the executions cheap).
void parse_everything(const std::vector<std::string>& args, bool with_plugin) {
  try {
    accel::cli::scan_plugin_request(args);
  } catch (const accel::cli::UsageError&) {
  }
  try {
    const accel::cli::ParsedCommandLine parsed =
        accel::cli::parse_command_line(args, with_plugin ? &plugin_section() : nullptr);
    if (parsed.action != accel::cli::Action::run) return;
    const accel::RunConfig& c = parsed.config;
    require(c.steps >= 0 && c.batch_size > 0 && c.grad_accum > 0 && c.log_every > 0);
    for (int world : {1, 3}) {
      try {
        accel::cli::validate_for_world(c, world);
      } catch (const accel::cli::UsageError&) {
      }
    }
  } catch (const accel::cli::UsageError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\xff');
  std::vector<std::string> args;
  const std::string arg_text = split == std::string::npos ? input : input.substr(split + 1);
  size_t start = 0;
  while (start <= arg_text.size() && !arg_text.empty()) {
    const size_t end = arg_text.find('\0', start);
    args.push_back(arg_text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (split != std::string::npos) {
    std::FILE* f = std::fopen(config_path().c_str(), "wb");
    if (f == nullptr) std::abort();
    std::fwrite(input.data(), 1, split, f);
    std::fclose(f);
    args.push_back("--config");
    args.push_back(config_path());
  }
  parse_everything(args, size % 2 == 1);
  return 0;
}
