// LauncherEnv: which launcher started a rank, and the start-ups refused
// before training (host/comm/launcher_env.h). The real launchers are run by
// tests/python/test_preemption.py (mpirun) and the Slurm tests.
#include "host/comm/launcher_env.h"

#include <gtest/gtest.h>

namespace accel::comm {
namespace {

LauncherEnv env(std::map<std::string, std::string> vars) { return LauncherEnv{std::move(vars)}; }

TEST(LauncherEnv, ByHandIsTheEmbeddedDefaultAndNeedsNothing) {
  const LauncherEnv none = env({});
  EXPECT_EQ(none.launcher(), "none");
  EXPECT_EQ(none.launcher_rank(), 0);
  EXPECT_FALSE(none.problem_before_init());
  EXPECT_FALSE(none.problem_after_init(1));
}

TEST(LauncherEnv, MpirunsCountMustBeMpis) {
  const LauncherEnv mpirun = env({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                                  {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"}});
  // mpirun inside a Slurm allocation: its daemons' step variables are not the ranks'.
  EXPECT_EQ(mpirun.launcher(), "mpirun");
  EXPECT_EQ(mpirun.launcher_rank(), 3);
  EXPECT_FALSE(mpirun.problem_before_init());
  EXPECT_FALSE(mpirun.problem_after_init(4));
  const auto problem = mpirun.problem_after_init(1);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("mpirun started 4 ranks (OMPI_COMM_WORLD_SIZE) but MPI joined 1"), std::string::npos)
      << *problem;
}

TEST(LauncherEnv, SrunWithoutAPmiIsRefusedBeforeInit) {
  const LauncherEnv alone = env({{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(alone.launcher(), "srun");
  EXPECT_EQ(alone.launcher_rank(), 5);
  const auto problem = alone.problem_before_init();
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->find("srun started 8 tasks without a PMI, so each would train alone: launch with srun "
                          "--mpi=pmix"),
            0u)
      << *problem;
  EXPECT_EQ(problem->find('\n'), std::string::npos);
}

TEST(LauncherEnv, SrunWithAPmiMustAgreeWithMpi) {
  for (const char* pmi : {"PMIX_RANK", "PMI_RANK", "PMI_FD"}) {
    const LauncherEnv srun = env({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"}, {pmi, "1"}});
    EXPECT_FALSE(srun.problem_before_init()) << pmi;
    EXPECT_FALSE(srun.problem_after_init(2)) << pmi;
    ASSERT_TRUE(srun.problem_after_init(1)) << pmi;
  }
  // One task needs no PMI; a count that is not a number checks nothing.
  EXPECT_FALSE(env({{"SLURM_STEP_NUM_TASKS", "1"}}).problem_before_init());
  EXPECT_FALSE(env({{"SLURM_STEP_NUM_TASKS", "2x"}}).problem_before_init());
  EXPECT_FALSE(env({{"SLURM_STEP_NUM_TASKS", "2x"}}).problem_after_init(1));
  EXPECT_EQ(env({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "-4"}}).launcher_rank(), 0);
}

}  // namespace
}  // namespace accel::comm
