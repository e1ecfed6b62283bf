// N ranks against one rank, for check-plugin (see check_data_parallel.h).
#include "host/app/check_data_parallel.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "host/app/run.h"
#include "host/util/strformat.h"

extern char** environ;

namespace accel::app {
namespace {

namespace fs = std::filesystem;

struct StepMetrics {
  double loss;
  double grad_norm;
};

// The number after "key": in one metrics line; NaN when absent or null.
double field(const std::string& line, const char* key) {
  const std::string tag = std::string("\"") + key + "\":";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  const char* start = line.c_str() + at + tag.size();
  char* end = nullptr;
  const double value = std::strtod(start, &end);
  return end == start ? std::numeric_limits<double>::quiet_NaN() : value;
}

std::vector<StepMetrics> read_metrics(const std::string& path) {
  std::vector<StepMetrics> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) steps.push_back({field(line, "loss"), field(line, "grad_norm")});
  }
  return steps;
}

// This environment minus the variables by which mpirun tells a process which
// job and rank it is (the permission to run as root and to oversubscribe
// stay: the child needs them as much as we did).
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry; ++entry) {
    const std::string var(*entry);
    const bool kept = var.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) == 0 || var.rfind("OMPI_MCA_rmaps_base_oversubscribe", 0) == 0;
    const bool job = var.rfind("OMPI_", 0) == 0 || var.rfind("PMIX_", 0) == 0 || var.rfind("PMI_", 0) == 0;
    if (kept || !job) env.push_back(var);
  }
  return env;
}

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs `argv` with its output in `log`; returns its exit code (128 + signal
// when killed). Throws when it cannot be started.
int run_child(std::vector<std::string> argv, const std::string& log) {
  std::vector<std::string> env = child_environment();
  std::vector<char*> argv_c = c_strings(argv), env_c = c_strings(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int started = ::posix_spawn(&pid, argv_c[0], &actions, nullptr, argv_c.data(), env_c.data());
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(started));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waiting for " + argv[0] + ": " + std::strerror(errno));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last.empty() ? "(no output)" : last;
}

bool close_enough(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::fabs(a - b) <= kDataParallelTolerance * std::max({std::fabs(a), std::fabs(b), 1e-12});
}

// Empty when the runs agree step by step; else the first difference, with
// what it most likely means.
std::string compare(const std::vector<StepMetrics>& many, const std::vector<StepMetrics>& one, int ranks) {
  if (many.empty() || many.size() != one.size()) {
    return strformat("the %d-rank run logged %zu step(s), the one-rank run %zu", ranks, many.size(), one.size());
  }
  for (size_t i = 0; i < many.size(); ++i) {
    if (close_enough(many[i].loss, one[i].loss) && close_enough(many[i].grad_norm, one[i].grad_norm)) continue;
    const double ratio = many[i].grad_norm / one[i].grad_norm;
    const char* meaning = std::fabs(ratio - ranks) < 0.05 * ranks
                              ? "gradients are summed across ranks instead of averaged"
                              : "the ranks do not train one model: gradients are not averaged across ranks";
    return strformat("step %zu at %d ranks: loss %.6g, grad_norm %.6g; on one rank: loss %.6g, grad_norm %.6g "
                     "(x%.3g): %s",
                     i, ranks, many[i].loss, many[i].grad_norm, one[i].loss, one[i].grad_norm, ratio, meaning);
  }
  return "";
}

}  // namespace

DataParallelVerdict check_data_parallel(const std::vector<std::string>& run_args, const std::string& dir,
                                        const comm::MpiSession& mpi) {
  using Outcome = DataParallelVerdict::Outcome;
  const bool under_mpirun = mpi.world_size() > 1;
  const int ranks = under_mpirun ? mpi.world_size() : 2;
  std::vector<std::string> args = run_args;
  args.insert(args.end(), {"--steps", "4", "--batch-size", std::to_string(4 * ranks), "--grad-accum", "1"});
  const std::string many_file = dir + "/data_parallel_ranks.jsonl";
  const std::string one_file = dir + "/data_parallel_one.jsonl";
  const std::string child_log = dir + "/data_parallel_child.log";
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  const std::string mpirun = under_mpirun ? std::string() : find_on_path("mpirun");
  if (!under_mpirun && mpirun.empty()) {
    return {Outcome::skip, "no mpirun on PATH to start 2 ranks; run check-plugin under mpirun -n 2"};
  }

  // This process's run: the N-rank one under mpirun, else the one-rank one.
  std::string failure;
  std::vector<std::string> own = args;
  own.insert(own.end(), {"--metrics-file", under_mpirun ? many_file : one_file});
  try {
    run_accel(own, mpi);
  } catch (const std::exception& e) {
    failure = strformat("the %s run failed: %s", under_mpirun ? (std::to_string(ranks) + "-rank").c_str() : "one-rank",
                        e.what());
  }

  std::string verdict;  // rank 0's, as "P|detail", "F|detail"
  if (mpi.rank() == 0) {
    if (failure.empty()) {
      std::vector<std::string> child;
      if (under_mpirun) {
        child = {self};
      } else {
        child = {mpirun, "-n", std::to_string(ranks), self};
      }
      child.insert(child.end(), args.begin(), args.end());
      child.insert(child.end(), {"--metrics-file", under_mpirun ? one_file : many_file});
      try {
        const int code = run_child(child, child_log);
        if (code != 0) {
          failure = strformat("the %s run failed (exit %d): %s",
                              under_mpirun ? "one-rank" : (std::to_string(ranks) + "-rank").c_str(), code,
                              last_line(child_log).c_str());
        }
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    if (failure.empty()) failure = compare(read_metrics(many_file), read_metrics(one_file), ranks);
    verdict = failure.empty() ? strformat("P|%d ranks train the model one rank trains (4 steps, loss and grad_norm "
                                          "within %g)", ranks, kDataParallelTolerance)
                              : "F|" + failure.substr(0, 3000);
  }
  verdict = mpi.broadcast_from_root(verdict);
  return {verdict.rfind("P|", 0) == 0 ? Outcome::pass : Outcome::fail, verdict.substr(2)};
}

}  // namespace accel::app
