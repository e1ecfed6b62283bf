// `accel-host launch [OPTIONS] -- TRAINING ARGS`: starts a job the way
// `accelerate launch` would, from the same YAML (cli/accelerate_config.h),
// through mpirun (one node, or the machines of a hostfile) or, inside a
// Slurm allocation, srun with a PMI. It prints the command it runs, then
// becomes it (exec), so the job's exit code is the launch's; with
// --max_restarts it stays as the job's supervisor instead.
//
//   --config_file F      the accelerate config (default: accelerate's own
//                        default_config.yaml when it exists)
//   --num_processes N    ranks of the whole job (the YAML's, else Slurm's
//                        task count, else 1)
//   --num_machines M, --machine_rank R, --main_process_ip IP,
//   --mixed_precision P, --gpu_ids IDS, --use_cpu   as accelerate's
//   --hostfile F         Open MPI hostfile naming the machines
//   --dry_run            print the command, run nothing
//   --max_restarts K     restart the job when it fails, from the newest
//                        checkpoint under its --save (app/supervise.h)
//   --min_ranks M        with --max_restarts: restart at the ranks still
//                        available (the hostfile's slots), not below M
// Every option may also be spelled with hyphens (--num-processes), as
// accelerate launch allows.
//
// Runs before MPI is initialised (main.cpp) and never initialises it: the
// ranks it starts do. Preflight, before any rank starts: a hostfile whose
// slots are fewer than the ranks, several machines with neither a hostfile
// nor Slurm, a Slurm that offers no PMI, a world that disagrees with
// Slurm's task count: one line each, exit 2.
//
// Thread-safety: main thread only; does not return on success, unless it
// supervises (then: the job's last exit code).
#pragma once

#include <string>
#include <vector>

namespace accel::app {

int launch_command(const std::vector<std::string>& args);

}  // namespace accel::app
