"""The one way the memory benchmarks measure a run: mpirun starts every rank
under /usr/bin/time, whose %M is the kernel's peak resident set of that rank,
and the per-rank peaks come back in bytes. Imported by bench/fsdp_memory.py
and bench/hf_loading_memory.py."""
import os
import subprocess
import sys

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def run_ranks(build, ranks, host_args, workdir, env_extra=None):
    """mpirun -n RANKS BUILD/bin/accel-host HOST_ARGS, each rank under
    /usr/bin/time; returns (peak RSS per rank in bytes, the CompletedProcess).
    env_extra applies to accel-host alone (an LD_PRELOAD must not reach
    /usr/bin/time or mpirun). Exits with the end of stderr when the run fails."""
    host = os.path.join(build, "bin", "accel-host")
    inner = " ".join([host] + [str(a) for a in host_args])
    exports = " ".join(f"{k}={v}" for k, v in (env_extra or {}).items())
    rank_cmd = f"exec /usr/bin/time -f %M -o {workdir}/rss.$OMPI_COMM_WORLD_RANK env {exports} {inner}"
    cmd = ["mpirun", "-n", str(ranks), "--bind-to", "none", "sh", "-c", rank_cmd]
    done = subprocess.run(cmd, env=dict(os.environ, **MPI_ENV), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    rss = []
    for r in range(ranks):
        with open(f"{workdir}/rss.{r}") as f:
            rss.append(int(f.read().split()[-1]) * 1024)
    return rss, done


def mib(b):
    return f"{b / 2**20:,.0f}"
