"""accel-host launch --max_restarts: a job that loses a rank restarts by
itself from its newest checkpoint and finishes; with --min_ranks it restarts
at the ranks still available (the hostfile's slots), and the losses after
the restart equal a run that moved to that world through the same
checkpoint. A signal to the supervisor reaches the ranks and ends the job
without a restart."""
import os
import re
import shutil
import signal
import subprocess
import time
import unittest

from accel_testing import ACCEL_HOST, MPI_ENV, MPIRUN, TIMEOUT_SCALE, TempDirMixin, complete_lines, mpirun, read_metrics

# Long enough (10-50 ms a step) that the kill lands mid-run.
STEPS, EVERY = 40, 4
# --lr-decay-steps: a leg that stops early follows the whole run's schedule.
# Info: the restarted leg says where it resumed (resumed_step).
TINY = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--lr-decay-steps", STEPS, "--threads", 1,
        "--log-level", "info"]


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def resumed_step(test, err):
    """The step the restarted leg resumed at, from its log: the metrics
    cannot tell when the kill fell between a checkpoint and the next step's
    line (nothing repeats then)."""
    steps = set(re.findall(r"resumed from \S+ at step (\d+)", err))
    test.assertEqual(len(steps), 1, err)
    return int(steps.pop())


def last_per_step(rows):
    """A restarted run repeats the steps after its checkpoint: the last line of each step."""
    by_step = {}
    for row in rows:
        by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def lines_by_step(test, rows, resumed_at, steps):
    """The last line of each step 1..steps. A step's checkpoint is committed
    before its metrics line is written, so a kill between the two leaves out
    the line of the step the restart resumed from, and only that one."""
    by_step = {row["step"]: row for row in last_per_step(rows)}
    test.assertLessEqual(set(range(1, steps + 1)) - set(by_step), {resumed_at}, sorted(by_step))
    return by_step


@unittest.skipUnless(MPIRUN, "mpirun not found")
class Supervisor(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        # No accelerate default config from this machine's home.
        self.env = dict(MPI_ENV, HF_HOME=self.path("hf_home"))

    def start(self, *args):
        return subprocess.Popen([ACCEL_HOST, "launch", *map(str, args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env)

    def wait_for_lines(self, proc, metrics, lines):
        deadline = time.monotonic() + 120 * TIMEOUT_SCALE
        while complete_lines(metrics) < lines and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIsNone(proc.poll(), "the job ended before the fault")

    def wait_for_snapshot(self, proc, snapshots, step):
        """Until a snapshot at `step` or later is committed: a background
        write on a loaded machine can take longer than the steps between
        two snapshots, so a count of metrics lines alone does not say one is."""
        def newest():
            names = os.listdir(snapshots) if os.path.isdir(snapshots) else []
            return max((int(n[5:]) for n in names if n.startswith("step_") and "." not in n), default=0)
        deadline = time.monotonic() + 120 * TIMEOUT_SCALE
        while newest() < step and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIsNone(proc.poll(), "the job ended before the fault")
        self.assertGreaterEqual(newest(), step, "no snapshot was committed in time")

    def kill_a_rank(self, supervisor):
        [launcher] = children(supervisor.pid)
        ranks = children(launcher)
        self.assertGreaterEqual(len(ranks), 2, ranks)
        os.kill(ranks[-1], signal.SIGKILL)

    def test_a_killed_rank_restarts_the_job_which_ends_bit_exact(self):
        root, metrics = self.path("save"), self.path("m.jsonl")
        job = [*TINY, "--batch-size", 8, "--steps", STEPS, "--save-every", EVERY, "--plugin", "fsdp"]
        proc = self.start("--num_processes", 2, "--max-restarts", 2, "--", *job, "--save", root,
                          "--metrics-file", metrics)
        self.wait_for_lines(proc, metrics, EVERY * 2 + 1)
        self.kill_a_rank(proc)
        out, err = proc.communicate(timeout=300 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, out + err)
        self.assertIn("restart 1 of 2:", out)
        self.assertIn("--resume auto", out.splitlines()[-1])
        self.assertIn("the job failed (exit", err)
        self.assertIn("rank(s) in 1.0 s from", err)  # --restart_backoff's default before the first restart
        mpirun(2, *job, "--save", self.path("straight"), "--metrics-file", self.path("straight.jsonl"))
        restarted = lines_by_step(self, read_metrics(metrics), resumed_step(self, err), STEPS)
        straight = read_metrics(self.path("straight.jsonl"))
        # Same strategy and world size: the restarted job is the uninterrupted one, to the bit.
        self.assertEqual([restarted[m["step"]]["loss"] for m in straight if m["step"] in restarted],
                         [m["loss"] for m in straight if m["step"] in restarted])

    def test_fewer_slots_restart_at_fewer_ranks_through_the_checkpoint(self):
        root, metrics, hostfile = self.path("save"), self.path("m.jsonl"), self.path("hosts")
        with open(hostfile, "w") as f:
            f.write("localhost slots=3\n")
        # A batch both worlds divide; ZeRO-3 shards over whichever world runs.
        zero3 = [*TINY, "--batch-size", 12, "--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3]
        proc = self.start("--num_processes", 3, "--hostfile", hostfile, "--max_restarts", 1, "--min_ranks", 2, "--",
                          *zero3, "--steps", STEPS, "--save", root, "--save-every", EVERY, "--metrics-file", metrics)
        self.wait_for_lines(proc, metrics, EVERY * 2 + 1)
        with open(hostfile, "w") as f:  # what a health check does when a slot is lost
            f.write("localhost slots=2\n")
        self.kill_a_rank(proc)
        out, err = proc.communicate(timeout=300 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, out + err)
        self.assertIn("restarting at 2 rank(s)", err)
        self.assertIn("mpirun -n 2", out.splitlines()[-1])
        rows = read_metrics(metrics)
        # The restart resumed from a checkpoint written before the kill.
        resumed_at = resumed_step(self, err)
        self.assertEqual(resumed_at % EVERY, 0)
        # The reference: 3 ranks to that checkpoint, then 2 ranks from it.
        ref_root = self.path("ref")
        mpirun(3, *zero3, "--steps", resumed_at, "--save", ref_root, "--metrics-file", self.path("ref.jsonl"))
        mpirun(2, *zero3, "--steps", STEPS, "--save", ref_root, "--resume", ref_root,
               "--metrics-file", self.path("ref.jsonl"))
        restarted, reference = lines_by_step(self, rows, resumed_at, STEPS), read_metrics(self.path("ref.jsonl"))
        self.assertEqual([m["step"] for m in reference], list(range(1, STEPS + 1)))
        for b in reference:
            if b["step"] in restarted:
                self.assertAlmostEqual(restarted[b["step"]]["loss"], b["loss"], delta=1e-5, msg=f"step {b['step']}")

    def snapshot_root(self, save_root):
        """--snapshot-every's default directory for --save `save_root` (app/run.cpp: FNV-1a of the path)."""
        h = 14695981039346656037
        for c in os.path.realpath(save_root).encode():
            h = ((h ^ c) * 1099511628211) % 2 ** 64
        return f"/dev/shm/accel-snapshots/{h:016x}"

    def test_a_killed_rank_restarts_from_the_snapshot_in_memory(self):
        # No checkpoint reaches the disk before the kill (--save-every is past
        # the end): the restart can only come from the snapshot.
        # Long enough (about 50 ms a step) that the kill lands mid-run.
        root, metrics, steps = self.path("save"), self.path("m.jsonl"), 80
        job = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--lr-decay-steps", steps, "--threads", 1,
               "--log-level", "info", "--batch-size", 8, "--steps", steps, "--save-every", 1000,
               "--snapshot-every", 2, "--plugin", "fsdp"]
        snapshots = self.snapshot_root(root)
        self.addCleanup(shutil.rmtree, snapshots, True)
        proc = self.start("--num_processes", 2, "--max-restarts", 2, "--", *job, "--save", root,
                          "--metrics-file", metrics)
        self.wait_for_lines(proc, metrics, 9)
        self.wait_for_snapshot(proc, snapshots, 6)
        self.kill_a_rank(proc)
        # The older snapshots were removed as each newer one committed (two
        # when the kill fell between a commit and that removal).
        kept = sorted(int(n[5:]) for n in os.listdir(snapshots) if "." not in n)
        self.assertTrue(len(kept) == 1 or (len(kept) == 2 and kept[1] - kept[0] == 2), kept)
        self.assertFalse(os.path.exists(root) and [n for n in os.listdir(root) if "." not in n])
        out, err = proc.communicate(timeout=300 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, out + err)
        self.assertIn("restart 1 of 2:", out)
        rows = read_metrics(metrics)
        resumed_at = resumed_step(self, err)
        self.assertEqual(resumed_at % 2, 0)
        self.assertGreaterEqual(resumed_at, 6)
        mpirun(2, *job, "--save", self.path("straight"), "--metrics-file", self.path("straight.jsonl"))
        restarted, straight = last_per_step(rows), read_metrics(self.path("straight.jsonl"))
        self.assertEqual([m["step"] for m in restarted], list(range(1, steps + 1)))
        self.assertEqual([m["loss"] for m in restarted], [m["loss"] for m in straight])
        # The completed run gave the memory back.
        self.assertFalse(os.path.exists(snapshots), os.listdir(snapshots) if os.path.exists(snapshots) else None)

    def test_fewer_slots_restart_at_fewer_ranks_through_the_snapshot(self):
        root, metrics, hostfile = self.path("save"), self.path("m.jsonl"), self.path("hosts")
        with open(hostfile, "w") as f:
            f.write("localhost slots=3\n")
        zero3 = [*TINY, "--batch-size", 12, "--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3]
        snapshots = self.path("snapshots")
        proc = self.start("--num_processes", 3, "--hostfile", hostfile, "--max_restarts", 1, "--min_ranks", 2, "--",
                          *zero3, "--steps", STEPS, "--save", root, "--save-every", 100, "--snapshot-every", 3,
                          "--snapshot-dir", snapshots, "--metrics-file", metrics)
        self.wait_for_lines(proc, metrics, 8)
        self.wait_for_snapshot(proc, snapshots, 6)
        with open(hostfile, "w") as f:
            f.write("localhost slots=2\n")
        self.kill_a_rank(proc)
        out, err = proc.communicate(timeout=300 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, out + err)
        self.assertIn("restarting at 2 rank(s)", err)
        rows = read_metrics(metrics)
        resumed_at = resumed_step(self, err)
        self.assertEqual(resumed_at % 3, 0)
        self.assertGreaterEqual(resumed_at, 6)
        ref_root = self.path("ref")
        mpirun(3, *zero3, "--steps", resumed_at, "--save", ref_root, "--metrics-file", self.path("ref.jsonl"))
        mpirun(2, *zero3, "--steps", STEPS, "--save", ref_root, "--resume", ref_root,
               "--metrics-file", self.path("ref.jsonl"))
        restarted, reference = lines_by_step(self, rows, resumed_at, STEPS), read_metrics(self.path("ref.jsonl"))
        self.assertEqual([m["step"] for m in reference], list(range(1, STEPS + 1)))
        for b in reference:
            if b["step"] in restarted:
                self.assertAlmostEqual(restarted[b["step"]]["loss"], b["loss"], delta=1e-5, msg=f"step {b['step']}")

    def test_a_signal_reaches_the_ranks_and_nothing_restarts(self):
        root, metrics = self.path("save"), self.path("m.jsonl")
        proc = self.start("--num_processes", 2, "--max_restarts", 3, "--", *TINY, "--batch-size", 8, "--steps", 1000,
                          "--save", root, "--metrics-file", metrics)
        self.wait_for_lines(proc, metrics, 3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 75, out + err)
        self.assertNotIn("restart", out)
        self.assertTrue(any(n.startswith("step_") and "." not in n for n in os.listdir(root)))

    def test_failures_a_restart_would_repeat_end_the_job(self):
        # A loss that diverges (resuming the same checkpoint repeats it to
        # the bit: exit 3) and a metrics file rank 0 cannot open (every
        # rank's usage error: exit 2) end the job at once, unrestarted.
        lr = TINY.index("--lr")
        tiny = TINY[:lr] + TINY[lr + 2:]
        diverging = ["--lr", 1e30, "--grad-clip", 0, "--lr-schedule", "constant", "--save-every", 1]
        for job, code in [(diverging, 3), (["--lr", 3e-3, "--metrics-file", self.path("no/such/dir/m.jsonl")], 2)]:
            proc = self.start("--num_processes", 2, "--max_restarts", 3, "--", *tiny, "--batch-size", 8,
                              "--steps", 6, "--save", self.path(f"save{code}"), *job)
            out, err = proc.communicate(timeout=120 * TIMEOUT_SCALE)
            self.assertEqual(proc.returncode, code, out + err)
            self.assertNotIn("restart 1 of", out)
            self.assertNotIn("MPI_ABORT", err)

    def test_a_failure_every_rank_meets_before_its_first_step_is_not_restarted(self):
        # A weight file that is missing (config.json alone): every rank fails
        # at start-up, exit 4, and a restart would fail the same way.
        hf = self.path("hf")
        os.makedirs(hf)
        with open(os.path.join(hf, "config.json"), "w") as f:
            f.write('{"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 64, '
                    '"vocab_size": 256, "architectures": ["GPT2LMHeadModel"]}')
        proc = self.start("--num_processes", 2, "--max_restarts", 3, "--", "--init-from", "hf:" + hf, "--steps", 4,
                          "--batch-size", 8, "--save", self.path("save"))
        out, err = proc.communicate(timeout=120 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 4, out + err)
        self.assertNotIn("restart 1 of", out)
        self.assertIn("a restart would fail the same way", err)
        self.assertNotIn("MPI_ABORT", err)

    def test_a_signal_during_start_up_stops_the_job_for_a_requeue(self):
        # SIGTERM while the ranks are still starting (here: creating a
        # model that takes a while): they record it from their first moment
        # and stop after one step with their checkpoint, exit 75, instead of
        # dying of the SIGUSR1 the supervisor passes on (exit 138).
        root = self.path("save")
        proc = subprocess.Popen([ACCEL_HOST, "launch", "--num_processes", "2", "--max_restarts", "2", "--",
                                 "--model", "gpt-small", "--batch-size", "2", "--seq-len", "64", "--steps", "100",
                                 "--threads", "1", "--save", root, "--log-level", "info"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env)
        # Past the ranks' first log line (they run main), before any step.
        seen = ""
        while "plugin ddp" not in seen:
            line = proc.stdout.readline()
            self.assertTrue(line, "the job ended before it started: " + seen)
            seen += line
        self.assertNotIn("step     1", seen)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 75, seen + out)
        self.assertNotIn("restart 1 of", out)
        self.assertIn("step_1", os.listdir(root))

    def test_usage_errors_are_one_line(self):
        for args, message in [
            (["--max_restarts", 1, "--", *TINY, "--steps", 2], "--max_restarts needs the job's --save DIR"),
            (["--min_ranks", 1, "--", *TINY, "--steps", 2, "--save", "x"], "--min_ranks needs --max_restarts"),
            (["--num_processes", 2, "--max-restarts", 1, "--min-ranks", 3, "--", "--save", "x"],
             "--min_ranks 3 is more than the job's 2 ranks"),
            (["--max_restarts", -1, "--", "--save", "x"], "--max_restarts must be from 0 to 10000"),
            (["--max_restarts", 1, "--restart_backoff", -1, "--", "--save", "x"],
             "--restart_backoff must be from 0 to 60 seconds"),
        ]:
            proc = subprocess.run([ACCEL_HOST, "launch", *map(str, args)], capture_output=True, text=True,
                                  env=self.env, timeout=60)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(message, proc.stderr)


if __name__ == "__main__":
    unittest.main()
