"""Under a real Slurm: a slurmctld and a slurmd started on this machine for
the suite (tests/slurm/slurm_cluster.sh, Debian's slurm-wlm, one node of 4
CPUs) and stopped after. srun with PMIx and sbatch with mpirun inside give
one process's losses; srun without a PMI is refused on every rank in one
line; and the job scripts users copy (examples/slurm/) survive preemption:
SIGUSR1 mid-run, every rank stops after its step with a checkpoint and exits
75, the script requeues the job, and the requeued run resumes from the
checkpoint and ends on the uninterrupted curve."""
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
        subprocess.run([CLUSTER, "up", cls.cluster_dir], check=True, capture_output=True, text=True, timeout=60)
        cls.addClassCleanup(lambda: shutil.rmtree(cls.cluster_dir, ignore_errors=True))
        cls.addClassCleanup(lambda: subprocess.run([CLUSTER, "down", cls.cluster_dir], capture_output=True))
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

    def submit(self, script, save, metrics, steps, *extra):
        """sbatch SCRIPT with the training options; returns (job id, its log)."""
        out = self.path(f"{script}.out")
        proc = subprocess.run(["sbatch", "--parsable", "-o", out, os.path.join(EXAMPLES, script), *map(str, COMMON),
                               "--steps", str(steps), "--metrics-file", metrics, *map(str, extra)],
                              capture_output=True, text=True, env=dict(self.env, SAVE=save), timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout.strip().split(";")[0], out

    def state(self, job):
        out = self.slurm("squeue", "-h", "-j", job, "-o", "%T %r", check=False).stdout.split()
        return out if out else ["GONE", ""]

    def wait_for(self, predicate, what, seconds=120):
        deadline = time.monotonic() + seconds * TIMEOUT_SCALE
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        self.fail(f"timed out waiting for {what}")

    def preempt_and_resume(self, script, signal_args):
        save, metrics, steps = self.path("ckpt"), self.path("job.jsonl"), 80
        job, out = self.submit(script, save, metrics, steps, "--plugin", "ddp", "--save-every", 20)
        # Signal once the first checkpoint is committed, mid-run.
        self.wait_for(lambda: glob.glob(os.path.join(save, "step_*")), "the first checkpoint")
        self.slurm("scancel", *signal_args, job)
        # The script requeues (exit 75 seen); Slurm holds a requeued job back
        # a while (BeginTime): release it now.
        self.wait_for(lambda: self.state(job)[0] == "PENDING", "the requeue")
        # ... once the node has cleaned up after the first run (a step of the
        # same id launched into a node still completing fails to launch).
        self.wait_for(lambda: self.slurm("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", "an idle node")
        self.slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
        self.wait_for(lambda: self.state(job)[0] == "GONE", "the requeued run to finish", seconds=240)
        with open(out) as f:
            log = f.read()
        self.assertIn("requeueing job", log)
        stops = [int(os.path.basename(p)[5:]) for p in glob.glob(os.path.join(save, "step_*"))]
        self.assertIn(steps, stops, log)
        # A checkpoint at the step the signal stopped, off the save cadence.
        self.assertTrue([s for s in stops if s % 20 != 0 and s < steps], (stops, log))
        # The metrics file holds both runs: every step once, on one curve.
        self.assert_on_the_curve(read_metrics(metrics), steps, f"{script} preempted and requeued")

    def test_a_preempted_srun_job_requeues_and_resumes(self):
        # train.sbatch: accel-host launch -> srun --mpi=pmix; USR1 to the steps.
        self.preempt_and_resume("train.sbatch", ["--signal=USR1"])

    def test_a_preempted_mpirun_job_requeues_and_resumes(self):
        # train_mpirun.sbatch: USR1 to the batch script, which passes it to
        # mpirun, which forwards it to every rank.
        self.preempt_and_resume("train_mpirun.sbatch", ["--signal=USR1", "--batch"])


if __name__ == "__main__":
    unittest.main()
