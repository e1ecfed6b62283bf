"""How jobs start and stop (issue 33). Preemption: SIGTERM or SIGUSR1 makes
every rank finish the step in hand after the same step, write a complete
checkpoint under --save and exit 75; the same command line with `--resume
auto` then goes on from it, bit-exact with a run that was never stopped.
Preflight: a start-up that cannot work is one line before any rank trains."""
import os
import signal
import subprocess
import time
import unittest

from accel_testing import ACCEL_HOST, MPI_ENV, MPIRUN, TempDirMixin, error_lines, read_metrics, run_host

STOPPED = 75  # train/stop_request.h: kExitStoppedToResume
# --lr-decay-steps fixes the schedule's horizon, so a step's loss does not
# depend on --steps and legs of different lengths follow one curve.
COMMON = ["--model", "gpt-tiny", "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 3, "--threads", 1,
          "--lr-decay-steps", 400, "--log-level", "info"]
LONG = 400  # far more steps than pass before the signal lands


def complete_lines(path):
    """The metrics lines written so far (a line being written is left out)."""
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.endswith("\n"))


def checkpoints(root):
    return sorted(int(n[5:]) for n in os.listdir(root) if n.startswith("step_") and "." not in n)


class StopOnSignal(TempDirMixin, unittest.TestCase):
    def signal_after(self, argv, metrics, steps, deliver, env=None):
        """Starts argv, waits for `steps` metrics lines, calls deliver(proc),
        and returns (returncode, stderr)."""
        proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        deadline = time.monotonic() + 120
        while complete_lines(metrics) < steps and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIsNone(proc.poll(), "the run ended before the signal")
        deliver(proc)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err

    def test_sigterm_saves_and_resume_auto_goes_on_bit_exact(self):
        save, metrics = self.path("save"), self.path("m.jsonl")
        # The first leg is a requeued job's first run: --resume auto with
        # nothing under --save starts afresh.
        code, err = self.signal_after([ACCEL_HOST, *COMMON, "--steps", LONG, "--save", save, "--resume", "auto",
                                       "--metrics-file", metrics], metrics, 3,
                                      lambda proc: proc.send_signal(signal.SIGTERM))
        self.assertIn("--resume auto: no checkpoint under", err)
        self.assertEqual(code, STOPPED, err)
        [stopped] = checkpoints(save)
        self.assertGreaterEqual(stopped, 3)
        self.assertLess(stopped, LONG)
        self.assertIn(f"step {stopped}: stopped on SIGTERM; the checkpoint is written", err)
        self.assertEqual(complete_lines(metrics), stopped)

        end = stopped + 2
        run_host(*COMMON, "--steps", end, "--save", save, "--resume", "auto", "--metrics-file", metrics)
        run_host(*COMMON, "--steps", end, "--metrics-file", self.path("straight.jsonl"))
        resumed, straight = read_metrics(metrics), read_metrics(self.path("straight.jsonl"))
        self.assertEqual([m["step"] for m in resumed], list(range(1, end + 1)))
        self.assertEqual([m["loss"] for m in resumed], [m["loss"] for m in straight])

    def test_without_save_it_stops_and_says_nothing_can_resume(self):
        metrics = self.path("m.jsonl")
        code, err = self.signal_after([ACCEL_HOST, *COMMON, "--steps", LONG, "--metrics-file", metrics], metrics, 2,
                                      lambda proc: proc.send_signal(signal.SIGUSR1))
        self.assertEqual(code, STOPPED, err)
        self.assertIn("stopped on SIGUSR1; without --save there is nothing to resume from", err)

    def test_resume_auto_needs_save(self):
        proc = run_host(*COMMON, "--steps", 1, "--resume", "auto", check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        [line] = error_lines(proc.stderr)
        self.assertIn("--resume auto needs --save DIR (where it looks)", line)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class StopOnSignalAcrossRanks(TempDirMixin, unittest.TestCase):
    """Every rank stops after the same step, whichever rank was signalled."""

    def run_ranks(self, deliver):
        save, metrics = self.path("save"), self.path("m.jsonl")
        host = " ".join(f"'{a}'" for a in [ACCEL_HOST, *COMMON, "--steps", LONG, "--save", save,
                                             "--metrics-file", metrics])
        # Each rank records its pid, so one rank alone can be signalled.
        rank_cmd = f"echo $$ > {self.tmp}/pid.$OMPI_COMM_WORLD_RANK; exec {host}"
        proc = subprocess.Popen([MPIRUN, "-n", "2", "sh", "-c", rank_cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=MPI_ENV)
        deadline = time.monotonic() + 120
        while complete_lines(metrics) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIsNone(proc.poll(), "the run ended before the signal")
        deliver(proc)
        _, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, STOPPED, err)
        [stopped] = checkpoints(save)
        self.assertEqual(complete_lines(metrics), stopped)
        self.assertTrue(os.path.exists(os.path.join(save, f"step_{stopped}", "manifest.json")))
        self.assertEqual(error_lines(err), [], err)
        return err

    def test_sigusr1_to_mpirun_reaches_every_rank(self):
        err = self.run_ranks(lambda proc: proc.send_signal(signal.SIGUSR1))
        self.assertIn("stopped on SIGUSR1; the checkpoint is written", err)

    def test_sigterm_to_rank_1_alone_stops_rank_0_too(self):
        def signal_rank_1(_):
            with open(self.path("pid.1")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        err = self.run_ranks(signal_rank_1)
        # Rank 0 reports, and it was not the one signalled.
        self.assertIn("stopped because another rank was asked to stop; the checkpoint is written", err)


class Preflight(unittest.TestCase):
    def test_srun_without_a_pmi_is_refused_on_every_task(self):
        # What each task of `srun -n 2 accel-host` sees when Slurm has no
        # PMI plugin in the step: Slurm's variables and none of a PMI's.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
        env.update(SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="1", SLURM_STEP_ID="0")
        proc = subprocess.run([ACCEL_HOST, *map(str, COMMON), "--steps", "1"], capture_output=True, text=True, env=env,
                              timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        [line] = error_lines(proc.stderr)
        self.assertIn("[rank 1]", line)
        self.assertIn("srun started 2 tasks without a PMI, so each would train alone: launch with srun --mpi=pmix",
                      line)


if __name__ == "__main__":
    unittest.main()
