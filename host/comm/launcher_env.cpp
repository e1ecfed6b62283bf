#include "host/comm/launcher_env.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>

namespace accel::comm {
namespace {

// What from_environment keeps: Open MPI's launcher, Slurm's step, the PMIs.
constexpr const char* kVariables[] = {
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_STEP_ID",
    "PMIX_RANK",            "PMI_RANK",             "PMI_FD",               "PMI_SIZE",
};

}  // namespace

LauncherEnv LauncherEnv::from_environment() {
  LauncherEnv env;
  for (const char* name : kVariables) {
    if (const char* value = std::getenv(name)) env.vars[name] = value;
  }
  return env;
}

std::optional<int64_t> LauncherEnv::number(const char* name) const {
  const auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  // nullopt for text that is not a whole number (then nothing is checked)
  int64_t value = 0;
  const std::string& text = it->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string LauncherEnv::launcher() const {
  if (has("OMPI_COMM_WORLD_SIZE")) return "mpirun";
  if (has("SLURM_STEP_NUM_TASKS")) return "srun";
  return "none";
}

int LauncherEnv::launcher_rank() const {
  const std::optional<int64_t> rank = launcher() == "mpirun" ? number("OMPI_COMM_WORLD_RANK") : number("SLURM_PROCID");
  return rank && *rank >= 0 && *rank <= INT32_MAX ? static_cast<int>(*rank) : 0;
}

std::optional<std::string> LauncherEnv::problem_before_init() const {
  if (launcher() != "srun") return std::nullopt;
  const std::optional<int64_t> tasks = number("SLURM_STEP_NUM_TASKS");
  if (!tasks || *tasks <= 1) return std::nullopt;
  if (has("PMIX_RANK") || has("PMI_RANK") || has("PMI_FD")) return std::nullopt;
  return "srun started " + std::to_string(*tasks) +
         " tasks without a PMI, so each would train alone: launch with srun --mpi=pmix (or --mpi=pmi2; srun "
         "--mpi=list names what this Slurm offers), or with mpirun inside the allocation";
}

std::optional<std::string> LauncherEnv::problem_after_init(int mpi_world_size) const {
  const char* name = launcher() == "mpirun" ? "OMPI_COMM_WORLD_SIZE"
                     : launcher() == "srun" ? "SLURM_STEP_NUM_TASKS"
                                            : nullptr;
  if (name == nullptr) return std::nullopt;
  const std::optional<int64_t> expected = number(name);
  if (!expected || *expected == mpi_world_size) return std::nullopt;
  return std::string(launcher()) + " started " + std::to_string(*expected) + " ranks (" + name + ") but MPI joined " +
         std::to_string(mpi_world_size) + ": the launcher and the MPI library do not belong together (an srun --mpi "
         "plugin this Open MPI does not speak, or another MPI's mpirun)";
}

}  // namespace accel::comm
