// accel-host launch's flags (launch_flags.h).
#include "host/cli/launch_flags.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "accel/sdk/json_input.hpp"
#include "host/cli/accelerate_keys.h"
#include "host/cli/options.h"
#include "host/cli/whole_number.h"

namespace accel::cli {
namespace {

const std::map<std::string, std::string> kShortForms = {{"-h", "help"}, {"-q", "quiet"}, {"-t", "tee"},
                                                        {"-m", "module"}};

// Whether `word` reads as a flag (argparse's rule: "-x..." or "--...", not "-1").
bool looks_like_flag(const std::string& word) {
  return word.rfind("--", 0) == 0 || (word.size() >= 2 && word[0] == '-' && std::isalpha(static_cast<unsigned char>(word[1])));
}

int64_t whole_flag(const std::string& flag, const std::string& value, int64_t min, int64_t max) {
  const std::optional<int64_t> number = whole_number(value, min, max);
  if (!number) {
    throw UsageError("accel-host launch: --" + flag + " must be from " + std::to_string(min) + " to " +
                     std::to_string(max) + " (a whole number), got " + sdk::describe(value));
  }
  return *number;
}

// A number of seconds from 0 to `max`, read whole (no trailing text, no nan).
double seconds_flag(const std::string& flag, const std::string& value, double max) {
  char* end = nullptr;
  const double seconds = value.empty() ? -1.0 : std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(seconds >= 0.0 && seconds <= max)) {
    throw UsageError("accel-host launch: --" + flag + " must be from 0 to " + std::to_string(static_cast<int>(max)) +
                     " seconds, got " + sdk::describe(value));
  }
  return seconds;
}

}  // namespace

LaunchFlags parse_launch_flags(const std::vector<std::string>& args) {
  LaunchFlags flags;
  std::vector<std::string> own = args;
  const auto dashes = std::find(own.begin(), own.end(), "--");
  if (dashes != own.end()) {
    flags.training_args.assign(dashes + 1, own.end());
    own.erase(dashes, own.end());
  }
  bool max_restarts_given = false;
  for (size_t i = 0; i < own.size(); ++i) {
    const std::string& word = own[i];
    std::string name;
    std::optional<std::string> inline_value;
    if (kShortForms.count(word)) {
      name = kShortForms.at(word);
    } else if (word.rfind("--", 0) == 0 && word.size() > 2) {
      const size_t equals = word.find('=');
      name = word.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
      if (equals != std::string::npos) inline_value = word.substr(equals + 1);
      std::replace(name.begin(), name.end(), '-', '_');
    } else {
      throw UsageError("accel-host launch: " + sdk::describe(word) +
                       " is not a launch option; training options go after --");
    }
    const AccelerateKey* key = find_accelerate_key(name, nullptr);
    if (key == nullptr) {
      // The word as the user wrote it, quoted and cut (it may hold anything).
      throw UsageError("accel-host launch: " + sdk::describe(word) + " is not a flag of accelerate launch (" +
                       kAccelerateVersion + ") nor of accel-host launch (accel-host launch --help lists them)");
    }
    std::string value = "true";
    if (key->flag == FlagKind::switch_) {
      if (inline_value) throw UsageError("accel-host launch: --" + name + " takes no value");
    } else if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < own.size() && !looks_like_flag(own[i + 1])) {
      value = own[++i];
    } else {
      throw UsageError("accel-host launch: --" + name + " needs a value");
    }
    // One line: the value becomes a word of the printed command (the file's
    // values are held to the same; accelerate_config_fuzz found a flag's).
    if (std::any_of(value.begin(), value.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
      throw UsageError("accel-host launch: --" + name + " must be one line without control characters");
    }
    if (name == "help") {
      flags.help = true;
    } else if (name == "dry_run") {
      flags.dry_run = true;
    } else if (name == "config_file") {
      flags.config_file = value;
    } else if (name == "max_restarts") {
      flags.max_restarts = whole_flag(name, value, 0, 10000);
      max_restarts_given = true;
    } else if (name == "min_ranks") {
      flags.min_ranks = whole_flag(name, value, 1, 1 << 20);
    } else if (name == "restart_backoff") {
      flags.restart_backoff_s = seconds_flag(name, value, 60.0);
    } else if (name == "hostfile") {
      flags.settings["mpirun_hostfile"] = {value, "--hostfile", false};
    } else if (key->flag == FlagKind::append && flags.settings.count(name)) {
      flags.settings[name].value += "," + value;
    } else {
      flags.settings[name] = {value, "--" + name, key->flag == FlagKind::append};
    }
  }
  if (flags.min_ranks && (!max_restarts_given || flags.max_restarts == 0)) {
    throw UsageError("accel-host launch: --min_ranks needs --max_restarts");
  }
  return flags;
}

std::string launch_help() {
  std::string read, refused;
  for (const AccelerateKey* key = accelerate_keys_begin(); key != accelerate_keys_end(); ++key) {
    if (key->flag == FlagKind::none) continue;
    const std::string name = key->name;
    if (name == "hostfile" || name == "dry_run" || name == "min_ranks" || name == "max_restarts" ||
        name == "restart_backoff") {
      continue;
    }
    const std::string flag = std::string("--") + key->name + (key->flag == FlagKind::switch_ ? "" : " V");
    if (key->refusal == nullptr) {
      read += "  " + flag + "\n";
    } else {
      refused += "  " + flag + ": " + key->refusal + "\n";
    }
  }
  return std::string(
             "Usage: accel-host launch [--config_file accelerate.yaml] [flags] -- [training options]\n\n"
             "Starts a job as `accelerate launch` would, from accelerate's config file and launch flags\n"
             "(accelerate ") +
         kAccelerateVersion +
         "), through mpirun or, inside a Slurm allocation, srun. The flags win over the file, the\n"
         "training options over both; docs/launch.md says what each flag and key becomes.\n"
         "  --hostfile F     Open MPI hostfile naming the machines\n"
         "  --dry_run        print the command, run nothing\n"
         "  --max_restarts K restart the job up to K times when it fails, from the newest checkpoint under --save\n"
         "  --min_ranks M    with --max_restarts: restart at the ranks still available, not below M\n"
         "  --restart_backoff S  with --max_restarts: seconds before the first restart of a run of failures,\n"
         "                   doubled for each failure in a row, at most 60 (default 1)\n\n"
         "Read (mapped, or accepted with a note when they change nothing here):\n" +
         read + "\nRefused unless they ask for nothing (their defaults):\n" + refused;
}

}  // namespace accel::cli
