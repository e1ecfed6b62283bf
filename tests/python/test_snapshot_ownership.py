"""Accel deletes only what it created and resumes only what it can prove
(issue 50, items 1-4 and 16): a --snapshot-dir is refused when it is,
contains or lies inside --save, or holds files that are not Accel's; a
snapshot root belongs to one job, and a second job is refused while the
first runs and after it died; the end of a run removes only its own files;
a step directory is never trusted by its name alone; and a snapshot that
does not fit suspends snapshots instead of ending the run."""
import os
import shutil
import signal
import subprocess
import time
import unittest

from accel_testing import ACCEL_HOST, TIMEOUT_SCALE, TempDirMixin, error_lines, read_metrics, run_host

COMMON = ["--model", "gpt-tiny", "--batch-size", 4, "--lr", 3e-3, "--warmup-steps", 2, "--threads", 1]
# Slow enough (a few ms a step) that a test acts while it runs.
LONG = ["--model", "gpt-tiny", "--n-embd", 128, "--n-layer", 4, "--batch-size", 4, "--threads", 1]


def committed_steps(root):
    return sorted(int(n[5:]) for n in os.listdir(root) if n.startswith("step_") and n[5:].isdigit())


class SnapshotRoots(TempDirMixin, unittest.TestCase):
    def refused(self, *args):
        proc = run_host(*args, check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        [line] = error_lines(proc.stderr)
        return line

    def start_long_job(self, save, snapshots, *extra):
        proc = subprocess.Popen([ACCEL_HOST, *map(str, [*LONG, "--save", save, "--snapshot-every", 2,
                                                        "--snapshot-dir", snapshots, "--steps", 100000,
                                                        "--log-level", "warn", *extra])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60 * TIMEOUT_SCALE
        while time.monotonic() < deadline and not (os.path.isdir(snapshots) and committed_steps(snapshots)):
            if proc.poll() is not None:
                self.fail(f"the job exited early ({proc.returncode}): {proc.stderr.read()}")
            time.sleep(0.05)
        self.assertTrue(committed_steps(snapshots), "no snapshot in time")
        return proc

    def test_the_save_directory_and_anything_above_or_inside_it_are_refused(self):
        save = self.path("work/save")
        run_host(*COMMON, "--steps", 4, "--save-every", 1, "--save", save)
        before = sorted(os.listdir(save))
        os.makedirs(self.path("work/notes"))
        for root, why in [(save, "it is the --save directory"),
                          (self.path("work"), "it contains the --save directory"),
                          (os.path.join(save, "snaps"), "it lies inside the --save directory")]:
            line = self.refused(*COMMON, "--steps", 8, "--save", save, "--snapshot-every", 1, "--snapshot-dir", root)
            self.assertIn(why, line)
            # Nothing lost, nothing made.
            self.assertEqual(sorted(os.listdir(save)), before)
            self.assertEqual(sorted(os.listdir(self.path("work"))), ["notes", "save"])

    def test_a_root_holding_files_of_someone_else_is_refused_and_left_alone(self):
        snapshots = self.path("shm")
        os.makedirs(os.path.join(snapshots, "data"))
        with open(os.path.join(snapshots, "notes.txt"), "w") as f:
            f.write("mine")
        line = self.refused(*COMMON, "--steps", 4, "--save", self.path("save"), "--snapshot-every", 1,
                            "--snapshot-dir", snapshots)
        self.assertIn("is not a file Accel writes there", line)
        self.assertEqual(sorted(os.listdir(snapshots)), ["data", "notes.txt"])

    def test_a_second_job_is_refused_while_the_first_runs_and_after_it_died(self):
        snapshots, first, second = self.path("shm"), self.path("save_a"), self.path("save_b")
        proc = self.start_long_job(first, snapshots)
        try:
            # Running: refused whatever its --save (the same one too: two
            # writers would prune each other's step_N.tmp).
            for save in (second, first):
                line = self.refused(*COMMON, "--steps", 4, "--save", save, "--snapshot-every", 1,
                                    "--snapshot-dir", snapshots)
                self.assertIn("another job is using it now", line)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
        held = committed_steps(snapshots)
        self.assertTrue(held)
        # Dead: its snapshot is still its own, never another job's to resume or delete.
        line = self.refused(*COMMON, "--steps", 4, "--save", second, "--snapshot-every", 1,
                            "--snapshot-dir", snapshots)
        self.assertIn("it holds the snapshots of the job whose --save is " + os.path.realpath(first), line)
        self.assertEqual(committed_steps(snapshots), held)
        # The job itself resumes it, and its end gives the memory back.
        resumed = run_host(*LONG, "--save", first, "--snapshot-every", 2, "--snapshot-dir", snapshots,
                           "--steps", held[-1] + 1, "--resume", "auto", "--log-level", "info")
        self.assertIn(f"at step {held[-1]}", resumed.stderr)
        self.assertFalse(os.path.exists(snapshots))

    def test_a_snapshot_outlives_its_save_directory_only_as_a_refusal(self):
        # The job's --save was wiped and the job started afresh with the same
        # paths: the old snapshot is of an earlier job, never resumed.
        save, snapshots = self.path("save"), self.path("shm")
        proc = self.start_long_job(save, snapshots)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        shutil.rmtree(save)
        line = self.refused(*LONG, "--steps", 4, "--save", save, "--snapshot-every", 2, "--snapshot-dir", snapshots,
                            "--resume", "auto")
        self.assertIn("an earlier job with the same --save", line)
        self.assertTrue(committed_steps(snapshots))

    def test_a_file_dropped_into_a_root_stays_and_refuses_the_next_start(self):
        save, snapshots = self.path("save"), self.path("shm")
        proc = self.start_long_job(save, snapshots)
        # Dropped in while the job runs: not Accel's, so it stays.
        with open(os.path.join(snapshots, "theirs.txt"), "w") as f:
            f.write("keep")
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        done = run_host(*LONG, "--save", save, "--snapshot-every", 2, "--snapshot-dir", snapshots, "--steps", 1,
                        "--resume", "auto", check=False)
        # The root now holds a file that is not Accel's: refused at start.
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("'theirs.txt' is not a file Accel writes there", done.stderr)
        self.assertTrue(os.path.exists(os.path.join(snapshots, "theirs.txt")))
        self.assertTrue(committed_steps(snapshots))


class StepDirectoriesAreNotTrustedByTheirName(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.save = self.path("save")
        run_host(*COMMON, "--steps", 8, "--save-every", 4, "--save", self.save)
        self.assertEqual(committed_steps(self.save), [4, 8])

    def resume_auto(self):
        return run_host(*COMMON, "--steps", 9, "--save", self.save, "--resume", "auto", "--log-level", "info")

    def test_a_symlink_named_step_8_is_passed_over(self):
        step_8 = os.path.join(self.save, "step_8")
        shutil.rmtree(step_8)
        os.symlink(os.path.join(self.save, "step_4"), step_8)
        proc = self.resume_auto()
        self.assertIn("step_8: a symbolic link, not a checkpoint directory", proc.stderr)
        self.assertIn("at step 4", proc.stderr)

    def test_a_copy_of_step_4_named_step_8_is_passed_over_and_refused_when_named(self):
        step_8 = os.path.join(self.save, "step_8")
        shutil.rmtree(step_8)
        shutil.copytree(os.path.join(self.save, "step_4"), step_8)
        proc = self.resume_auto()
        self.assertIn("its trainer_state.json is of step 4, not the step its name says", proc.stderr)
        self.assertIn("at step 4", proc.stderr)
        # Named outright, it is refused: nothing to fall back to. Every rank
        # failed before a step: exit 4.
        shutil.rmtree(os.path.join(self.save, "step_9"))
        named = run_host(*COMMON, "--steps", 9, "--save", self.path("other"), "--resume", step_8, check=False)
        self.assertEqual(named.returncode, 4, named.stderr)
        self.assertIn("trainer_state.json is of step 4", error_lines(named.stderr)[0])

    def test_a_step_directory_that_is_not_a_checkpoint_is_never_replaced(self):
        # A save to step_12 finds a directory of someone else's there: the
        # save fails naming it, and its files stay.
        mine = os.path.join(self.save, "step_12")
        os.makedirs(mine)
        with open(os.path.join(mine, "results.csv"), "w") as f:
            f.write("precious")
        proc = run_host(*COMMON, "--steps", 12, "--save", self.save, "--resume", "auto", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("is not a checkpoint Accel committed", proc.stderr)
        self.assertEqual(os.listdir(mine), ["results.csv"])


@unittest.skipUnless(os.geteuid() == 0, "mounting a tmpfs needs root")
class SnapshotsThatDoNotFit(TempDirMixin, unittest.TestCase):
    def test_a_full_snapshot_root_suspends_snapshots_and_training_goes_on(self):
        # Docker's 64 MiB /dev/shm against a model that needs more: here a
        # 64 KiB tmpfs against gpt-tiny's snapshot.
        mount = self.path("shm")
        os.makedirs(mount)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mount],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        try:
            snapshots, save = os.path.join(mount, "snaps"), self.path("save")
            proc = run_host(*COMMON, "--steps", 8, "--save", save, "--save-every", 6, "--snapshot-every", 2,
                            "--snapshot-dir", snapshots, "--metrics-file", self.path("m.jsonl"), check=False)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(proc.stderr.count("snapshots are suspended for the rest of this run"), 1, proc.stderr)
            self.assertIn("No space left on device", proc.stderr)
            self.assertEqual([m["step"] for m in read_metrics(self.path("m.jsonl"))], list(range(1, 9)))
            self.assertEqual(committed_steps(save), [6, 8])
            # No half-written snapshot holds the memory; the root is gone with the run.
            self.assertEqual(os.listdir(mount), [])
        finally:
            subprocess.run(["umount", mount], check=True)


if __name__ == "__main__":
    unittest.main()
