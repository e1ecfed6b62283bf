"""Under a real Slurm: a slurmctld and a slurmd started on this machine for
the suite (tests/slurm/slurm_cluster.sh, Debian's slurm-wlm, one node of 4
CPUs) and stopped after. srun with PMIx and sbatch with mpirun inside give
one process's losses; srun without a PMI is refused on every rank in one
line; and the job scripts users copy (examples/slurm/) survive preemption:
SIGUSR1 mid-run, every rank stops after its step with a checkpoint and exits
75, the script requeues the job, and (the srun script) the requeued run
resumes from the checkpoint and ends on the uninterrupted curve; a rank
killed inside the allocation is restarted there by the supervisor the
script runs (--max_restarts), and the job ends on the same curve."""
import glob
import os
import shutil
import subprocess
import time
import unittest

from accel_testing import ACCEL_HOST, MPI_ENV, TIMEOUT_SCALE, TempDirMixin, read_metrics, run_host

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CLUSTER = os.path.join(ROOT, "tests", "slurm", "slurm_cluster.sh")
EXAMPLES = os.path.join(ROOT, "examples", "slurm")
COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1,
          "--batch-size", 8]


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("slurmctld") and shutil.which("mpirun"),
                     "needs root, Debian's slurm-wlm (scripts/install-deps.sh installs it) and mpirun")
class UnderSlurm(TempDirMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster_dir = os.path.join("/tmp", f"accel-slurm-{os.getpid()}")
        # Cleanups first: a start that fails half-way (slurmctld up, slurmd
        # not) still stops what it started.
        cls.addClassCleanup(lambda: shutil.rmtree(cls.cluster_dir, ignore_errors=True))
        cls.addClassCleanup(lambda: subprocess.run([CLUSTER, "down", cls.cluster_dir], capture_output=True))
        subprocess.run([CLUSTER, "up", cls.cluster_dir], check=True, capture_output=True, text=True, timeout=60)
        cls.env = dict(MPI_ENV, SLURM_CONF=os.path.join(cls.cluster_dir, "slurm.conf"), ACCEL_HOST=ACCEL_HOST)

    def slurm(self, *args, timeout=120, check=True):
        proc = subprocess.run([*map(str, args)], capture_output=True, text=True, env=self.env,
                              timeout=timeout * TIMEOUT_SCALE)
        if check:
            self.assertEqual(proc.returncode, 0, f"{args}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def one_process(self, steps):
        path = self.path("one.jsonl")
        if not os.path.exists(path):
            run_host(*COMMON, "--steps", steps, "--metrics-file", path)
        return read_metrics(path)

    def assert_on_the_curve(self, rows, steps, what):
        reference = self.one_process(steps)
        self.assertEqual([r["step"] for r in rows], list(range(1, steps + 1)), what)
        for x, y in zip(reference, rows):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (what, x["step"], x["loss"], y["loss"]))

    def test_srun_with_pmix_equals_one_process(self):
        path = self.path("srun.jsonl")
        self.slurm("srun", "--mpi=pmix", "-n", 4, ACCEL_HOST, *COMMON, "--plugin", "ddp", "--steps", 5,
                   "--metrics-file", path)
        self.assert_on_the_curve(read_metrics(path), 5, "srun --mpi=pmix")

    def test_srun_without_a_pmi_is_refused_on_every_rank(self):
        proc = self.slurm("srun", "--mpi=none", "-n", 2, ACCEL_HOST, *COMMON, "--steps", 1, check=False)
        self.assertNotEqual(proc.returncode, 0)
        lines = [l for l in proc.stderr.splitlines() if "started 2 tasks without a PMI" in l]
        self.assertEqual(len(lines), 2, proc.stderr)  # one line per rank, none trained alone
        self.assertIn("--mpi=pmix", lines[0])

    def submit(self, script, save, metrics, steps, *extra, env=None):
        """sbatch SCRIPT with the training options; returns (job id, its log)."""
        out = self.path(f"{script}.out")
        proc = subprocess.run(["sbatch", "--parsable", "-o", out, os.path.join(EXAMPLES, script), *map(str, COMMON),
                               "--steps", str(steps), "--metrics-file", metrics, *map(str, extra)],
                              capture_output=True, text=True, env=dict(self.env, SAVE=save, **(env or {})),
                              timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout.strip().split(";")[0], out

    def state(self, job):
        """The job's JobState as scontrol reports it (it keeps finished jobs
        for MinJobAge, 300 s); "UNKNOWN" when the controller did not answer
        (a busy slurmctld can time out: never read that as finished)."""
        proc = self.slurm("scontrol", "show", "job", "-o", job, check=False)
        for field in proc.stdout.split():
            if field.startswith("JobState="):
                return field[len("JobState="):]
        return "UNKNOWN"

    def wait_for(self, predicate, what, seconds=120, job=None):
        deadline = time.monotonic() + seconds * TIMEOUT_SCALE
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        detail = self.slurm("scontrol", "show", "job", job, check=False).stdout if job else ""
        self.fail(f"timed out waiting for {what}\n{detail}")

    def preempt(self, script, signal_args):
        """Submits SCRIPT, signals it once its first checkpoint is committed,
        and waits until the script has requeued the job. Returns (job, log
        path, checkpoint dir, metrics path, steps)."""
        save, metrics, steps = self.path("ckpt"), self.path("job.jsonl"), 80
        job, out = self.submit(script, save, metrics, steps, "--plugin", "ddp", "--save-every", 20)
        self.wait_for(lambda: glob.glob(os.path.join(save, "step_*")), "the first checkpoint", job=job)
        self.slurm("scancel", *signal_args, job)
        self.wait_for(lambda: self.state(job) == "PENDING", "the requeue", job=job)
        with open(out) as f:
            self.assertIn("requeueing job", f.read())
        # A checkpoint at the step the signal stopped: the last step the run
        # wrote a metrics line for (which may fall on the save cadence too).
        stops = [int(os.path.basename(p)[5:]) for p in glob.glob(os.path.join(save, "step_*"))
                 if "." not in os.path.basename(p)]
        self.assertEqual(max(stops), read_metrics(metrics)[-1]["step"], stops)
        return job, out, save, metrics, steps

    def test_a_preempted_srun_job_requeues_and_resumes(self):
        # train.sbatch: accel-host launch -> srun --mpi=pmix; USR1 to the
        # steps. The requeued job starts when Slurm's hold of a requeued job
        # ends (BeginTime, about two minutes): releasing it earlier raced
        # slurmd's cleanup of the first run's steps.
        job, out, save, metrics, steps = self.preempt("train.sbatch", ["--signal=USR1"])
        finished = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
        self.wait_for(lambda: self.state(job) in finished, "the requeued run to finish", seconds=400, job=job)
        with open(out) as f:
            log = f.read()
        self.assertEqual(self.state(job), "COMPLETED", log)
        self.assertTrue(os.path.isdir(os.path.join(save, f"step_{steps}")), log)
        # The metrics file holds both runs: every step once, on one curve.
        self.assert_on_the_curve(read_metrics(metrics), steps, "preempted and requeued")

    @staticmethod
    def ranks_of(metrics):
        """The accel-host ranks writing METRICS (not the supervisor, srun or the batch script)."""
        ranks = []
        for pid in subprocess.run(["pgrep", "-f", metrics], capture_output=True, text=True).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except FileNotFoundError:
                continue
            if os.path.basename(argv[0]) == b"accel-host" and argv[1:2] != [b"launch"]:
                ranks.append(int(pid))
        return sorted(ranks)

    def test_a_killed_rank_restarts_inside_the_allocation(self):
        # train.sbatch runs accel-host launch --max_restarts: a rank killed
        # mid-run ends the step (the others time out in their next
        # collective), and the supervisor starts srun again in the same
        # allocation from the newest checkpoint; no requeue.
        save, metrics, steps = self.path("ckpt"), self.path("job.jsonl"), 60
        job, out = self.submit("train.sbatch", save, metrics, steps, "--plugin", "ddp", "--save-every", 10,
                               "--init_process_group.timeout", 5, env={"MAX_RESTARTS": "1"})
        self.wait_for(lambda: glob.glob(os.path.join(save, "step_*")), "the first checkpoint", job=job)
        ranks = self.ranks_of(metrics)
        self.assertEqual(len(ranks), 4, ranks)
        os.kill(ranks[-1], 9)
        finished = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
        self.wait_for(lambda: self.state(job) in finished, "the restarted run to finish", seconds=300, job=job)
        with open(out) as f:
            log = f.read()
        self.assertEqual(self.state(job), "COMPLETED", log)
        self.assertIn("restart 1 of 1", log)
        self.assertNotIn("requeueing", log)
        # The restarted run repeats the steps after its checkpoint: the last line of each.
        by_step = {row["step"]: row for row in read_metrics(metrics)}
        self.assert_on_the_curve([by_step[s] for s in sorted(by_step)], steps, "killed and restarted")

    def test_a_preempted_mpirun_job_checkpoints_and_requeues(self):
        # train_mpirun.sbatch: USR1 to the batch script, which passes it to
        # mpirun, which forwards it to every rank; they stop with a
        # checkpoint and 75, and the script requeues. (The requeued run is
        # the srun case's; this one is cancelled.)
        job, _, _, _, _ = self.preempt("train_mpirun.sbatch", ["--signal=USR1", "--batch"])
        self.slurm("scancel", job)


if __name__ == "__main__":
    unittest.main()
