#include "host/app/launch.h"

#include <unistd.h>

#include <boost/program_options.hpp>

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
#include "host/cli/options.h"
#include "host/plugin/discovery.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

namespace po = boost::program_options;
using cli::UsageError;

struct LaunchOptions {
  std::string config_file;
  std::optional<int64_t> num_processes, num_machines, machine_rank;
  std::string main_process_ip, mixed_precision, gpu_ids, hostfile;
  bool use_cpu = false;
  bool dry_run = false;
  SupervisorPolicy supervisor;  // --max_restarts, --min_ranks
  std::vector<std::string> training_args;  // after --
};

LaunchOptions parse_launch_options(const std::vector<std::string>& args) {
  LaunchOptions o;
  std::vector<std::string> own = args;
  const auto dashes = std::find(own.begin(), own.end(), "--");
  if (dashes != own.end()) {
    o.training_args.assign(dashes + 1, own.end());
    own.erase(dashes, own.end());
  }
  // accelerate launch takes --num-processes for --num_processes, and so on.
  for (std::string& word : own) {
    if (word.rfind("--", 0) != 0) continue;
    const auto name_end = word.begin() + static_cast<std::ptrdiff_t>(std::min(word.find('='), word.size()));
    std::replace(word.begin() + 2, name_end, '-', '_');
  }
  int64_t processes = 0, machines = 0, machine_rank = -1, max_restarts = 0, min_ranks = 0;
  po::options_description d("accel-host launch [options] -- [training options]");
  d.add_options()
      ("config_file", po::value(&o.config_file), "accelerate config YAML")
      ("num_processes", po::value(&processes), "ranks of the whole job")
      ("num_machines", po::value(&machines), "machines")
      ("machine_rank", po::value(&machine_rank), "this machine's rank")
      ("main_process_ip", po::value(&o.main_process_ip), "machine 0's address")
      ("mixed_precision", po::value(&o.mixed_precision), "no|fp16|bf16|fp8")
      ("gpu_ids", po::value(&o.gpu_ids), "CUDA devices of each machine (all, or 0,1,...)")
      ("use_cpu", po::bool_switch(&o.use_cpu), "train on the CPU")
      ("hostfile", po::value(&o.hostfile), "Open MPI hostfile naming the machines")
      ("dry_run", po::bool_switch(&o.dry_run), "print the command, run nothing")
      ("max_restarts", po::value(&max_restarts),
       "restart the job up to K times when it fails, from the newest checkpoint under its --save (supervise.h)")
      ("min_ranks", po::value(&min_ranks),
       "with --max_restarts: restart at the ranks still available (the hostfile's slots, read again), not below M")
      ("restart_backoff", po::value(&o.supervisor.backoff_s),
       "with --max_restarts: seconds before the first restart, doubled for each failure in a row (at most 60; "
       "default 1)");
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(own).options(d).run();
    for (const po::option& option : parsed.options) {
      if (option.position_key >= 0) {
        throw UsageError("accel-host launch: '" + option.original_tokens.front() +
                         "' is not a launch option; training options go after --");
      }
    }
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string("accel-host launch: ") + e.what());
  }
  if (vm.count("num_processes")) {
    if (processes < 1 || processes > (1 << 20)) throw UsageError("--num_processes must be from 1 to 1048576");
    o.num_processes = processes;
  }
  if (vm.count("num_machines")) {
    if (machines < 1 || machines > (1 << 16)) throw UsageError("--num_machines must be from 1 to 65536");
    o.num_machines = machines;
  }
  if (vm.count("machine_rank")) {
    if (machine_rank < 0) throw UsageError("--machine_rank must be >= 0");
    o.machine_rank = machine_rank;
  }
  if (max_restarts < 0 || max_restarts > 10000) throw UsageError("--max_restarts must be from 0 to 10000");
  if (vm.count("min_ranks") && (min_ranks < 1 || min_ranks > (1 << 20))) {
    throw UsageError("--min_ranks must be from 1 to 1048576");
  }
  if (vm.count("min_ranks") && max_restarts == 0) throw UsageError("--min_ranks needs --max_restarts");
  if (!(o.supervisor.backoff_s >= 0.0 && o.supervisor.backoff_s <= 60.0)) {
    throw UsageError("--restart_backoff must be from 0 to 60 seconds");
  }
  o.supervisor.max_restarts = max_restarts;
  o.supervisor.min_ranks = min_ranks;
  return o;
}

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
      if (word.rfind("slots=", 0) == 0) {
        try {
          here = std::stoll(word.substr(6));
        } catch (const std::exception&) {
          throw UsageError("--hostfile " + path + ": '" + word.substr(0, 40) + "' is not slots=N");
        }
      }
    }
    if (!here) return std::nullopt;
    slots += *here;
  }
  if (!any) throw UsageError("--hostfile " + path + " names no machine");
  return slots;
}

// What `command` prints (stdout; "" when it cannot run).
std::string command_output(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  pclose(pipe);
  return out;
}

// srun's PMI for an Open MPI program: pmix when this Slurm offers it, else pmi2.
std::string slurm_mpi_plugin() {
  const std::string offered = command_output("srun --mpi=list 2>&1");
  if (offered.find("pmix") != std::string::npos) return "pmix";
  if (offered.find("pmi2") != std::string::npos) return "pmi2";
  throw UsageError("srun --mpi=list offers neither pmix nor pmi2: srun cannot hand the ranks to Open MPI (each would "
                   "train alone); install Slurm's PMIx plugin or use mpirun inside the allocation");
}

bool given(const std::vector<std::string>& args, const std::string& option) {
  for (const std::string& arg : args) {
    if (arg == "--" + option || arg.rfind("--" + option + "=", 0) == 0) return true;
  }
  return false;
}

// Whether `args` name plugin `name` (--plugin NAME or --plugin=NAME).
bool names_plugin(const std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "--plugin" && i + 1 < args.size() && args[i + 1] == name) || args[i] == "--plugin=" + name) {
      return true;
    }
  }
  return false;
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
  LaunchOptions o = parse_launch_options(args);
  if (o.config_file.empty()) {
    o.config_file = default_accelerate_config();
    if (!o.config_file.empty()) log::info("accel-host launch: using accelerate's default config " + o.config_file);
  }
  cli::AccelerateConfig config;
  if (!o.config_file.empty()) config = cli::read_accelerate_config(o.config_file);
  for (const std::string& note : config.notes) log::info(o.config_file + ": " + note);

  // The command line wins over the file, as with accelerate launch.
  if (!o.mixed_precision.empty()) {
    std::erase_if(config.options, [](const auto& option) { return option.first == "mixed-precision"; });
    if (o.mixed_precision == "fp8") {
      const bool has_fp8 = std::any_of(config.options.begin(), config.options.end(), [](const auto& option) {
        return option.first == "plugin" && option.second == "fp8";
      });
      if (!has_fp8) config.options.emplace_back("plugin", "fp8");
    } else if (o.mixed_precision == "no" || o.mixed_precision == "fp16" || o.mixed_precision == "bf16") {
      config.options.emplace_back("mixed-precision", o.mixed_precision);
    } else {
      throw UsageError("--mixed_precision must be no, fp16, bf16 or fp8");
    }
  }
  if (o.use_cpu) config.options.emplace_back("device", "cpu");
  if (!o.gpu_ids.empty()) config.gpu_ids = o.gpu_ids;
  if (!o.hostfile.empty()) config.hostfile = o.hostfile;
  if (!o.main_process_ip.empty()) config.main_process_ip = o.main_process_ip;
  const int64_t machines = o.num_machines.value_or(config.num_machines);
  const int64_t machine_rank = o.machine_rank.value_or(config.machine_rank);
  if (machine_rank >= machines) {
    throw UsageError(strformat("machine_rank %lld is not below num_machines %lld", static_cast<long long>(machine_rank),
                               static_cast<long long>(machines)));
  }

  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const char* slurm_tasks = std::getenv("SLURM_NTASKS");
  const bool in_slurm = slurm_job != nullptr && std::getenv("SLURM_STEP_ID") == nullptr;
  int64_t ranks = o.num_processes.value_or(config.num_processes.value_or(0));
  if (ranks == 0) ranks = in_slurm && slurm_tasks != nullptr ? std::atoll(slurm_tasks) : 1;
  if (ranks < 1) throw UsageError("SLURM_NTASKS is not a positive number");

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
  for (const auto& [option, value] : config.options) {
    if (option == "plugin" ? names_plugin(o.training_args, value) : given(o.training_args, option)) continue;
    host_args.push_back("--" + option);
    host_args.push_back(value);
  }
  host_args.insert(host_args.end(), o.training_args.begin(), o.training_args.end());

  const std::string host = (plugin::current_executable_dir() / "accel-host").string();
  // The launcher's command for a world of `world` ranks; a supervised
  // restart resumes from the newest checkpoint.
  const auto command_for = [&](int64_t world, int64_t attempt) {
    std::vector<std::string> command;
    if (in_slurm) {
      if (slurm_tasks != nullptr && std::atoll(slurm_tasks) < world) {
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

  if (o.supervisor.max_restarts > 0) {
    o.supervisor.save_dir = option_value(host_args, "save");
    if (o.supervisor.save_dir.empty()) {
      throw UsageError("--max_restarts needs the job's --save DIR: a restart resumes from its newest checkpoint");
    }
    if (o.supervisor.min_ranks > ranks) {
      throw UsageError(strformat("--min_ranks %lld is more than the job's %lld ranks",
                                 static_cast<long long>(o.supervisor.min_ranks), static_cast<long long>(ranks)));
    }
    if (!o.dry_run) {
      // The ranks still available: the hostfile's slots, read again; one
      // machine or a Slurm allocation keeps its size.
      const auto available = [&]() -> int64_t {
        if (in_slurm || config.hostfile.empty()) return ranks;
        return hostfile_slots(config.hostfile).value_or(ranks);  // no slots=: mpirun counts cores
      };
      return supervise(o.supervisor, ranks, command_for, available);
    }
  }

  std::printf("accel-host launch: %s\n", shell_words(command).c_str());
  std::fflush(stdout);
  if (o.dry_run) return 0;

  std::vector<char*> argv;
  for (std::string& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  throw std::runtime_error(std::string("accel-host launch: cannot run ") + argv[0] + ": " + std::strerror(errno));
}

}  // namespace accel::app
