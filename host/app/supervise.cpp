// The restarting supervisor of accel-host launch (see supervise.h).
#include "host/app/supervise.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <ctime>

#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

// The launcher being waited for, and the signal that asked the job to stop.
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_stop_signal = 0;

// SIGTERM goes on as SIGUSR1: mpirun and srun pass SIGUSR1 to every rank,
// which saves and exits 75, while mpirun answers SIGTERM by killing the
// ranks within a second, with no checkpoint.
int forwarded_as(int signal) { return signal == SIGTERM ? SIGUSR1 : signal; }

void forward_to_child(int signal) {
  g_stop_signal = signal;
  const pid_t child = g_child;
  if (child > 0) ::kill(child, forwarded_as(signal));
}

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGUSR1, SIGHUP};
constexpr int kStoppedBySignal = 75;  // the ranks' exit after a signal's checkpoint
constexpr int kUsageError = 2;
constexpr int kDiverged = 3;        // kExitDiverged (util/agreed_error.h)
constexpr int kFailedAtStartup = 4;  // kExitFailedAtStartup (util/agreed_error.h)
constexpr int kCannotRun = 127;
// An attempt that ran this long failed afresh: the backoff starts over.
constexpr double kBackoffResetAfterS = 600.0;
constexpr double kMaxBackoffS = 60.0;

// Sleeps `seconds`, waking early when a stop signal arrives.
void sleep_unless_stopped(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (g_stop_signal == 0 && std::chrono::steady_clock::now() < until) {
    const double left = std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
    const double nap = std::clamp(left, 0.0, 0.05);
    struct timespec ts{static_cast<time_t>(nap), static_cast<long>((nap - static_cast<double>(static_cast<time_t>(nap))) * 1e9)};
    ::nanosleep(&ts, nullptr);  // a signal cuts it short
  }
}

// Installs forward_to_child for the forwarded signals for its lifetime.
class ForwardSignals {
 public:
  ForwardSignals() {
    struct sigaction action{};
    action.sa_handler = forward_to_child;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &action, &previous_[i]);
  }
  ~ForwardSignals() {
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &previous_[i], nullptr);
  }
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;

 private:
  struct sigaction previous_[std::size(kForwarded)]{};
};

// Starts `command` and waits for it; its exit code (128 + N for signal N).
int run_to_exit(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  std::vector<std::string> words = command;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("accel-host launch: cannot start the job: ") + std::strerror(errno));
  if (pid == 0) {
    // The child takes the default dispositions back before it becomes the launcher.
    for (const int signal : kForwarded) std::signal(signal, SIG_DFL);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "accel-host launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(kCannotRun);
  }
  g_child = pid;
  // A signal that came between the fork and here is passed on now.
  if (g_stop_signal != 0) ::kill(pid, forwarded_as(g_stop_signal));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(std::string("accel-host launch: waitpid: ") + std::strerror(errno));
  }
  g_child = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

double restart_delay_s(double backoff_s, int64_t consecutive_failures) {
  if (backoff_s <= 0.0 || consecutive_failures < 1) return 0.0;
  const int64_t doublings = std::min<int64_t>(consecutive_failures - 1, 30);
  return std::min(kMaxBackoffS, backoff_s * static_cast<double>(int64_t{1} << doublings));
}

std::string shell_words(const std::vector<std::string>& command) {
  std::string line;
  for (const std::string& word : command) {
    std::string shown = word;
    if (word.empty() || word.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;#~") != std::string::npos) {
      shown = "'";
      for (const char c : word) shown += c == '\'' ? std::string("'\\''") : std::string(1, c);
      shown += "'";
    }
    line += (line.empty() ? "" : " ") + shown;
  }
  return line;
}

std::vector<std::string> with_resume_auto(std::vector<std::string> training) {
  for (size_t i = 0; i < training.size();) {
    if (training[i] == "--resume") {
      training.erase(training.begin() + static_cast<std::ptrdiff_t>(i),
                     training.begin() + static_cast<std::ptrdiff_t>(std::min(i + 2, training.size())));
    } else if (training[i].rfind("--resume=", 0) == 0) {
      training.erase(training.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  training.insert(training.end(), {"--resume", "auto"});
  return training;
}

int supervise(const SupervisorPolicy& policy, int64_t ranks, const LaunchCommandFor& command_for,
              const AvailableRanks& available) {
  const ForwardSignals forwarding;
  g_stop_signal = 0;
  int64_t world = ranks;
  int64_t consecutive_failures = 0;
  for (int64_t attempt = 0;; ++attempt) {
    if (g_stop_signal != 0) return kStoppedBySignal;  // asked to stop between two attempts
    const std::vector<std::string> command = command_for(world, attempt);
    if (attempt == 0) {
      std::printf("accel-host launch: %s\n", shell_words(command).c_str());
    } else {
      std::printf("accel-host launch: restart %lld of %lld: %s\n", static_cast<long long>(attempt),
                  static_cast<long long>(policy.max_restarts), shell_words(command).c_str());
    }
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    const int code = run_to_exit(command);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (code == 0) return 0;
    if (g_stop_signal != 0) {
      log::info(strformat("accel-host launch: the job ended (exit %d) after %s; no restart", code,
                          strsignal(g_stop_signal)));
      return code;
    }
    if (code == kStoppedBySignal || code == kUsageError || code == kCannotRun) return code;
    if (code == kDiverged) {
      log::error("accel-host launch: the loss diverged; a restart from the newest checkpoint would repeat it, so "
                 "none follows");
      return code;
    }
    if (code == kFailedAtStartup) {
      log::error("accel-host launch: the job failed on every rank before its first step (its line above says why); "
                 "a restart would fail the same way, so none follows");
      return code;
    }
    if (attempt >= policy.max_restarts) {
      log::error(strformat("accel-host launch: the job failed (exit %d) after %.0f s; all %lld restart(s) used", code,
                           seconds, static_cast<long long>(policy.max_restarts)));
      return code;
    }
    if (policy.min_ranks > 0) {
      const int64_t now = std::min(ranks, available());
      if (now < policy.min_ranks) {
        log::error(strformat("accel-host launch: the job failed (exit %d) and only %lld rank(s) are available, "
                             "fewer than --min_ranks %lld",
                             code, static_cast<long long>(std::max<int64_t>(now, 0)),
                             static_cast<long long>(policy.min_ranks)));
        return code;
      }
      world = now;
    }
    consecutive_failures = seconds >= kBackoffResetAfterS ? 1 : consecutive_failures + 1;
    const double delay = restart_delay_s(policy.backoff_s, consecutive_failures);
    log::warn(strformat("accel-host launch: the job failed (exit %d) after %.0f s; restarting at %lld rank(s) in "
                        "%.1f s from the newest checkpoint under %s",
                        code, seconds, static_cast<long long>(world), delay, policy.save_dir.c_str()));
    sleep_unless_stopped(delay);
  }
}

}  // namespace accel::app
