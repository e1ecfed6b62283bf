// Which launcher started this process, read from its environment before
// MPI_Init, and the start-ups that cannot work, refused in one line before
// any rank trains.
//
// mpirun (Open MPI's launcher, on one node or from a hostfile, also inside
// a Slurm allocation) puts OMPI_COMM_WORLD_SIZE into every rank's
// environment and MPI agrees with it by construction. srun starts the ranks
// itself (SLURM_STEP_NUM_TASKS, SLURM_PROCID) and hands them to MPI through
// a PMI: PMIx (`srun --mpi=pmix`: PMIX_RANK) or PMI-2 (`--mpi=pmi2`:
// PMI_RANK / PMI_FD). Without one, Open MPI starts every task as a singleton:
// N processes that each believe they are the whole job and train alone.
//
// Thread-safety: plain values; from_environment reads getenv, so it runs
// before other threads start (main, before MPI_Init).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace accel::comm {

struct LauncherEnv {
  // The variables below, as the process found them (absent: not set).
  std::map<std::string, std::string> vars;

  // The launcher's variables of this process's environment.
  static LauncherEnv from_environment();

  // "mpirun", "srun" or "none" (started by hand: the embedded default).
  std::string launcher() const;

  // The rank the launcher gave this process (0 when none did): what a line
  // printed before MPI_Init is tagged with.
  int launcher_rank() const;

  // Before MPI_Init: the one line saying why this start-up cannot work (srun
  // with several tasks and no PMI), or nullopt.
  std::optional<std::string> problem_before_init() const;

  // After MPI_Init: the one line when MPI's world disagrees with the
  // launcher's count of ranks, or nullopt.
  std::optional<std::string> problem_after_init(int mpi_world_size) const;

 private:
  std::optional<int64_t> number(const char* name) const;
  bool has(const char* name) const { return vars.count(name) != 0; }
};

}  // namespace accel::comm
