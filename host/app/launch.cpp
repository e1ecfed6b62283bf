#include "host/app/launch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "accel/sdk/input_file.hpp"
#include "host/app/supervise.h"
#include "host/cli/accelerate_config.h"
#include "host/cli/launch_flags.h"
#include "host/cli/options.h"
#include "host/cli/whole_number.h"
#include "host/plugin/discovery.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

using cli::UsageError;

// accelerate's default config: $HF_HOME/accelerate/default_config.yaml, HF_HOME
// defaulting to $XDG_CACHE_HOME/huggingface, that to ~/.cache.
std::string default_accelerate_config() {
  std::filesystem::path hf_home;
  if (const char* home = std::getenv("HF_HOME")) {
    hf_home = home;
  } else if (const char* cache = std::getenv("XDG_CACHE_HOME")) {
    hf_home = std::filesystem::path(cache) / "huggingface";
  } else if (const char* user = std::getenv("HOME")) {
    hf_home = std::filesystem::path(user) / ".cache" / "huggingface";
  } else {
    return {};
  }
  const std::filesystem::path file = hf_home / "accelerate" / "default_config.yaml";
  std::error_code error;
  return std::filesystem::is_regular_file(file, error) ? file.string() : std::string();
}

// Open MPI hostfile slots, when every line names them ("host slots=N"); nullopt
// when a line leaves them to mpirun (which then counts the machine's cores).
constexpr int64_t kMaxSlots = 1 << 20;  // a job's rank bound (--num_processes)

std::optional<int64_t> hostfile_slots(const std::string& path) {
  std::string text;
  try {
    text = sdk::read_input_file(path, 1u << 20, "--hostfile");
  } catch (const sdk::InputFileError& e) {
    throw UsageError(e.what());
  }
  std::istringstream lines(text);
  std::string line;
  int64_t slots = 0;
  bool any = false;
  while (std::getline(lines, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    any = true;
    std::optional<int64_t> here;
    while (words >> word) {
      if (word.rfind("slots=", 0) != 0) continue;
      // The same checked reading as every launch number: "2abc", "-4" and
      // 2^63-1 are refused, so the sum below cannot overflow.
      here = cli::whole_number(word.substr(6), 1, kMaxSlots);
      if (!here) {
        throw UsageError("--hostfile " + path + ": '" + word.substr(0, 40) + "' is not slots=N with N from 1 to " +
                         std::to_string(kMaxSlots));
      }
    }
    if (!here) return std::nullopt;
    slots += *here;
  }
  if (!any) throw UsageError("--hostfile " + path + " names no machine");
  return slots;
}

// What `command` prints (stdout and, redirected, stderr) and its exit status
// (-1 when it cannot be started or did not exit normally).
struct CommandResult {
  std::string output;
  int status = -1;
};

CommandResult run_for_output(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) result.output += buffer;
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.status = WEXITSTATUS(status);
  return result;
}

// srun's PMI for an Open MPI program: pmix when this Slurm offers it, else
// pmi2. A `srun --mpi=list` that fails says nothing about the plugins: it
// is reported as the failure it is, with srun's own first line.
std::string slurm_mpi_plugin() {
  const CommandResult offered = run_for_output("srun --mpi=list 2>&1");
  if (offered.status != 0) {
    std::string said = offered.output.substr(0, offered.output.find('\n'));
    if (said.size() > 200) said = said.substr(0, 200) + "...";
    throw UsageError(strformat("srun --mpi=list failed (%s)%s%s: cannot ask this Slurm which PMI it offers",
                               offered.status == 127  ? "srun not found, exit 127"
                               : offered.status == -1 ? "it did not exit normally"
                                                      : ("exit " + std::to_string(offered.status)).c_str(),
                               said.empty() ? "" : ": ", said.c_str()));
  }
  if (offered.output.find("pmix") != std::string::npos) return "pmix";
  if (offered.output.find("pmi2") != std::string::npos) return "pmi2";
  throw UsageError("srun --mpi=list offers neither pmix nor pmi2: srun cannot hand the ranks to Open MPI (each would "
                   "train alone); install Slurm's PMIx plugin or use mpirun inside the allocation");
}

// The value of `--option V` or `--option=V` in `args` (the last one given), or "".
std::string option_value(const std::vector<std::string>& args, const std::string& option) {
  std::string value;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--" + option && i + 1 < args.size()) value = args[i + 1];
    if (args[i].rfind("--" + option + "=", 0) == 0) value = args[i].substr(option.size() + 3);
  }
  return value;
}

}  // namespace

int launch_command(const std::vector<std::string>& args) {
  const cli::LaunchFlags flags = cli::parse_launch_flags(args);
  if (flags.help) {
    std::printf("%s", cli::launch_help().c_str());
    return 0;
  }
  std::string config_file = flags.config_file;
  if (config_file.empty()) {
    config_file = default_accelerate_config();
    if (!config_file.empty()) log::info("accel-host launch: using accelerate's default config " + config_file);
  }
  // The file, the flags over it, one mapping (cli/accelerate_config.h).
  cli::AccelerateSettings file;
  if (!config_file.empty()) file = cli::read_accelerate_settings(cli::read_accelerate_file(config_file), config_file);
  const cli::AccelerateConfig config =
      cli::map_accelerate_settings(file, flags.settings, !config_file.empty(), config_file);
  for (const std::string& note : config.notes) log::info((config_file.empty() ? "" : config_file + ": ") + note);

  SupervisorPolicy supervisor;
  supervisor.max_restarts = flags.max_restarts;
  supervisor.min_ranks = flags.min_ranks.value_or(0);
  supervisor.backoff_s = flags.restart_backoff_s;
  const int64_t machines = config.num_machines;
  const int64_t machine_rank = config.machine_rank;
  if (machine_rank >= machines) {
    throw UsageError(strformat("machine_rank %lld is not below num_machines %lld", static_cast<long long>(machine_rank),
                               static_cast<long long>(machines)));
  }

  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const char* slurm_tasks = std::getenv("SLURM_NTASKS");
  const bool in_slurm = slurm_job != nullptr && std::getenv("SLURM_STEP_ID") == nullptr;
  std::optional<int64_t> slurm_task_count;
  if (in_slurm && slurm_tasks != nullptr) {
    slurm_task_count = cli::whole_number(slurm_tasks, 1, 1 << 20);
    if (!slurm_task_count) throw UsageError(std::string("SLURM_NTASKS '") + slurm_tasks + "' is not a task count");
  }
  const int64_t ranks = config.num_processes.value_or(slurm_task_count.value_or(1));

  if (machine_rank != 0 && !in_slurm) {
    // accelerate launch runs on every machine; mpirun starts every rank
    // from the first one.
    log::info(strformat("accel-host launch: machine_rank %lld: mpirun on machine 0 starts the ranks of every "
                        "machine through its hostfile; nothing to start here",
                        static_cast<long long>(machine_rank)));
    return 0;
  }

  // The training arguments: the user's own win over the config's.
  std::vector<std::string> host_args;
  for (const auto& [option, value] : config.kept_under(flags.training_args)) {
    host_args.push_back("--" + option);
    host_args.push_back(value);
  }
  host_args.insert(host_args.end(), flags.training_args.begin(), flags.training_args.end());

  const std::string host = (plugin::current_executable_dir() / "accel-host").string();
  // The launcher's command for a world of `world` ranks; a supervised
  // restart resumes from the newest checkpoint.
  const auto command_for = [&](int64_t world, int64_t attempt) {
    std::vector<std::string> command;
    if (in_slurm) {
      if (slurm_task_count && *slurm_task_count < world) {
        throw UsageError(strformat("num_processes %lld is more than this Slurm allocation's %s task(s)",
                                   static_cast<long long>(world), slurm_tasks));
      }
      // --kill-on-bad-exit=0 (also over a site default): Accel's ranks agree on a failure
      // themselves, and a stop on a signal ends every rank with 75 after the
      // checkpoint; srun's kill on the first rank's 75 sent SIGTERM to ranks still
      // finishing, whose second signal kills at once (tests/python/test_slurm.py).
      command = {"srun", "--mpi=" + slurm_mpi_plugin(), "--ntasks", std::to_string(world), "--kill-on-bad-exit=0"};
      if (!config.gpu_ids.empty() && config.gpu_ids != "all") {
        command.push_back("--export=ALL,CUDA_VISIBLE_DEVICES=" + config.gpu_ids);
      }
      if (config.debug) setenv("ACCEL_COMM_VERIFY", "ops", 0);
    } else {
      if (machines > 1 && config.hostfile.empty()) {
        throw UsageError(strformat("num_machines %lld: name the machines in a hostfile (--hostfile, or "
                                   "mpirun_config.mpirun_hostfile), or launch inside a Slurm allocation",
                                   static_cast<long long>(machines)));
      }
      command = {"mpirun", "-n", std::to_string(world)};
      if (!config.hostfile.empty()) {
        const std::optional<int64_t> slots = hostfile_slots(config.hostfile);
        const char* oversubscribe = std::getenv("OMPI_MCA_rmaps_base_oversubscribe");
        const bool may_oversubscribe = oversubscribe != nullptr && std::strcmp(oversubscribe, "1") == 0;
        if (slots && *slots < world && !may_oversubscribe) {
          throw UsageError(strformat("--hostfile %s has %lld slot(s) for %lld ranks", config.hostfile.c_str(),
                                     static_cast<long long>(*slots), static_cast<long long>(world)));
        }
        command.insert(command.end(), {"--hostfile", config.hostfile});
      }
      command.insert(command.end(), {"--bind-to", config.cpu_affinity ? "numa" : "none"});
      if (!config.gpu_ids.empty() && config.gpu_ids != "all") {
        command.insert(command.end(), {"-x", "CUDA_VISIBLE_DEVICES=" + config.gpu_ids});
      }
      if (config.debug) command.insert(command.end(), {"-x", "ACCEL_COMM_VERIFY=ops"});
    }
    command.push_back(host);
    const std::vector<std::string> training = attempt == 0 ? host_args : with_resume_auto(host_args);
    command.insert(command.end(), training.begin(), training.end());
    return command;
  };
  std::vector<std::string> command = command_for(ranks, 0);

  if (supervisor.max_restarts > 0) {
    supervisor.save_dir = option_value(host_args, "save");
    if (supervisor.save_dir.empty()) {
      throw UsageError("--max_restarts needs the job's --save DIR: a restart resumes from its newest checkpoint");
    }
    if (supervisor.min_ranks > ranks) {
      throw UsageError(strformat("--min_ranks %lld is more than the job's %lld ranks",
                                 static_cast<long long>(supervisor.min_ranks), static_cast<long long>(ranks)));
    }
    if (!flags.dry_run) {
      // The ranks still available: the hostfile's slots, read again; one
      // machine or a Slurm allocation keeps its size.
      const auto available = [&]() -> int64_t {
        if (in_slurm || config.hostfile.empty()) return ranks;
        return hostfile_slots(config.hostfile).value_or(ranks);  // no slots=: mpirun counts cores
      };
      return supervise(supervisor, ranks, command_for, available);
    }
  }

  std::printf("accel-host launch: %s\n", shell_words(command).c_str());
  std::fflush(stdout);
  if (flags.dry_run) return 0;

  std::vector<char*> argv;
  for (std::string& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  throw std::runtime_error(std::string("accel-host launch: cannot run ") + argv[0] + ": " + std::strerror(errno));
}

}  // namespace accel::app
