"""--save-async: checkpoints written in the background while training goes on.

They are the blocking saves' bytes (the same manifest, file by file, crc32
included), with one process and under a sharding plugin on two ranks; their
costs are in the metrics; and a run killed with SIGKILL at random moments,
with a background write nearly always in flight, leaves every committed
checkpoint whole and resumes from the newest one."""
import json
import os
import random
import signal
import subprocess
import time
import unittest
import zlib

from accel_testing import ACCEL_HOST, MPIRUN, TIMEOUT_SCALE, TempDirMixin, mpirun, read_metrics, run_host

COMMON = ["--model", "gpt-tiny", "--batch-size", 4, "--lr", 3e-3, "--warmup-steps", 2, "--threads", 1]


def manifest_entries(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)["files"]


def verifies(directory):
    """Whether every file the manifest lists has its size and crc32, and
    nothing else is there (atomic_dir.h's verify_manifest, independently)."""
    entries = manifest_entries(directory)
    if sorted(e["file"] for e in entries) != sorted(n for n in os.listdir(directory) if n != "manifest.json"):
        return False
    for e in entries:
        with open(os.path.join(directory, e["file"]), "rb") as f:
            data = f.read()
        if len(data) != e["size"] or zlib.crc32(data) != e["crc32"]:
            return False
    return True


def committed_steps(root):
    return sorted(int(n[len("step_"):]) for n in os.listdir(root) if n.startswith("step_") and n[5:].isdigit())


class AsyncSavesAreTheBlockingSaves(TempDirMixin, unittest.TestCase):
    def compare(self, run, *extra):
        blocking, background = self.path("blocking"), self.path("background")
        args = [*COMMON, *extra, "--steps", 8, "--save-every", 2, "--log-level", "warn"]
        run(*args, "--save", blocking, "--metrics-file", self.path("blocking.jsonl"))
        run(*args, "--save", background, "--save-async", "--metrics-file", self.path("background.jsonl"))
        self.assertEqual(committed_steps(blocking), [2, 4, 6, 8])
        self.assertEqual(committed_steps(background), [2, 4, 6, 8])
        self.assertEqual([n for n in os.listdir(background) if n.endswith(".tmp")], [])
        for step in (2, 4, 6, 8):
            self.assertEqual(manifest_entries(os.path.join(blocking, f"step_{step}")),
                             manifest_entries(os.path.join(background, f"step_{step}")), f"step_{step}")
        a, b = read_metrics(self.path("blocking.jsonl")), read_metrics(self.path("background.jsonl"))
        self.assertEqual([m["loss"] for m in a], [m["loss"] for m in b])
        # Each periodic save says what it cost the training thread; the
        # background ones also what their snapshot holds and, at their
        # commit, how long the write took.
        self.assertEqual([m["step"] for m in a if "ckpt_blocking_ms" in m], [2, 4, 6])
        self.assertEqual([m["step"] for m in b if "ckpt_blocking_ms" in m], [2, 4, 6])
        self.assertTrue(all(m["ckpt_host_bytes"] > 0 for m in b if "ckpt_host_bytes" in m))
        committed = [m["ckpt_committed_step"] for m in b if "ckpt_committed_step" in m]
        self.assertEqual(committed, sorted(committed))
        self.assertTrue(set(committed) <= {2, 4, 6}, committed)
        self.assertTrue(all(m["ckpt_write_ms"] >= 0 for m in b if "ckpt_write_ms" in m))

    def test_one_process(self):
        self.compare(run_host)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_two_ranks_under_fsdp(self):
        self.compare(lambda *args: mpirun(2, "--plugin", "fsdp", *args))

    def test_needs_save(self):
        proc = run_host(*COMMON, "--steps", 1, "--save-async", check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--save-async needs --save DIR", proc.stderr)
        for args, message in [(["--snapshot-every", 2], "--snapshot-every needs --save DIR"),
                              (["--snapshot-dir", self.path("s")], "--snapshot-dir needs --snapshot-every N"),
                              (["--save", self.path("x"), "--snapshot-every", -1], "--snapshot-every -1: must be >= 0")]:
            proc = run_host(*COMMON, "--steps", 1, *args, check=False)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(message, proc.stderr)

    def test_snapshots_live_in_their_own_directory_and_are_removed_at_the_end(self):
        # Every 2 steps into --snapshot-dir, never --save; the run's end
        # removes them (the final save is on --save).
        save, snapshots = self.path("save"), self.path("snapshots")
        run_host(*COMMON, "--steps", 6, "--save", save, "--snapshot-every", 2, "--snapshot-dir", snapshots,
                 "--metrics-file", self.path("m.jsonl"))
        rows = read_metrics(self.path("m.jsonl"))
        self.assertEqual([m["step"] for m in rows if "ckpt_blocking_ms" in m], [2, 4])
        # A commit is reported on the step that saw every write finished, if
        # one did before the next save.
        self.assertTrue({m["ckpt_committed_step"] for m in rows if "ckpt_committed_step" in m} <= {2, 4})
        # With the job's run id, which ties the snapshot root to this job (snapshot_root.h).
        self.assertEqual(sorted(os.listdir(save)), ["accel-job.json", "step_6"])
        self.assertFalse(os.path.exists(snapshots))


class StagingOverlapsTheNextStep(TempDirMixin, unittest.TestCase):
    """A sharding plugin lends its masters and moments to a save
    (ACCEL_CHECKPOINT_PUT_STABLE): a blocking save writes them uncopied, a
    background one copies them on its thread while the next step's forward
    and backward run, and that step's optimizer waits for the copy."""

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_the_optimizer_step_waits_for_the_copy_under_fsdp(self):
        self.compare("fsdp", "--plugin", "fsdp", "--fsdp.state_dict_type", "SHARDED_STATE_DICT")

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_the_optimizer_step_waits_for_the_copy_under_zero3(self):
        self.compare("zero3", "--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3)

    def compare(self, name, *plugin):
        blocking, background = self.path(f"{name}_blocking"), self.path(f"{name}_background")
        args = [*COMMON, *plugin, "--steps", 8, "--save-every", 2, "--log-level", "warn"]
        mpirun(2, *args, "--save", blocking, "--metrics-file", self.path(f"{name}_blocking.jsonl"))
        # Every copy starts 1.5 s late: an optimizer step that did not wait
        # would change the state under it, and the checkpoint would hold the
        # next step's values.
        mpirun(2, *args, "--save", background, "--save-async", "--metrics-file",
               self.path(f"{name}_background.jsonl"), env={"ACCEL_TEST_STAGING_DELAY_MS": "1500"})
        for step in (2, 4, 6, 8):
            self.assertEqual(manifest_entries(os.path.join(blocking, f"step_{step}")),
                             manifest_entries(os.path.join(background, f"step_{step}")), f"step_{step}")
        a, b = read_metrics(self.path(f"{name}_blocking.jsonl")), read_metrics(self.path(f"{name}_background.jsonl"))
        self.assertEqual([m["loss"] for m in a], [m["loss"] for m in b])
        waits = {m["step"]: m["ckpt_staging_wait_ms"] for m in b if "ckpt_staging_wait_ms" in m}
        self.assertEqual(sorted(waits), [3, 5, 7])  # the step after each background save
        self.assertTrue(all(ms > 500 for ms in waits.values()), waits)
        self.assertFalse(any("ckpt_staging_wait_ms" in m for m in a))
        # The blocking saves copied nothing the plugin lent; the background
        # ones hold a copy of it all.
        copied = [m["ckpt_host_bytes"] for m in a if "ckpt_host_bytes" in m]
        held = [m["ckpt_host_bytes"] for m in b if "ckpt_host_bytes" in m]
        self.assertEqual(len(copied), 3)
        self.assertTrue(all(c * 10 < h for c, h in zip(copied, held)), (copied, held))


class SnapshotsGiveWayToCheckpoints(TempDirMixin, unittest.TestCase):
    def test_a_checkpoint_on_disk_removes_the_older_snapshots(self):
        # SIGTERM: the job saves its last step to --save; every snapshot is
        # of that step or older, so none is left to hold memory.
        root, snapshots = self.path("save"), self.path("snapshots")
        proc = subprocess.Popen([ACCEL_HOST, *map(str, [*COMMON, "--steps", 100000, "--save", root,
                                                        "--snapshot-every", 2, "--snapshot-dir", snapshots,
                                                        "--log-level", "warn"])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60 * TIMEOUT_SCALE
        while time.monotonic() < deadline and not (os.path.isdir(snapshots) and committed_steps(snapshots)):
            time.sleep(0.05)
        self.assertTrue(committed_steps(snapshots))
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=60 * TIMEOUT_SCALE), 75, proc.stderr.read())
        self.assertEqual(len(committed_steps(root)), 1)
        self.assertEqual(committed_steps(snapshots), [])


class KilledDuringBackgroundWrites(TempDirMixin, unittest.TestCase):
    """SIGKILL at random moments of a run that saves every step in the
    background (a write nearly always in flight): no committed checkpoint is
    lost or torn, and resume takes the newest."""
    TRIALS = 6

    def test_sigkill_at_random_points(self):
        rng = random.Random(int(os.environ.get("ACCEL_CRASH_SEED", "20261128")))
        # Wider than gpt-tiny, so a write (about 6 MB a checkpoint) takes
        # about as long as a step.
        model = [*COMMON, "--n-embd", 128, "--n-layer", 4]
        for trial in range(self.TRIALS):
            root = self.path(f"trial{trial}")
            proc = subprocess.Popen([ACCEL_HOST, *map(str, [*model, "--steps", 100000, "--save", root,
                                                            "--save-every", 1, "--save-async", "--log-level",
                                                            "warn"])],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            # Wait for a first commit, then kill at a random moment after it.
            deadline = time.monotonic() + 60 * TIMEOUT_SCALE
            while time.monotonic() < deadline and not (os.path.isdir(root) and committed_steps(root)):
                if proc.poll() is not None:
                    self.fail(f"accel-host exited early ({proc.returncode}): {proc.stderr.read()}")
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            steps = committed_steps(root)
            self.assertTrue(steps, f"trial {trial}: nothing committed")
            for step in steps:
                self.assertTrue(verifies(os.path.join(root, f"step_{step}")), f"trial {trial}: step_{step} torn")
            # A save in flight is at most the one after the newest.
            pending = [n for n in os.listdir(root) if n.endswith(".tmp")]
            self.assertLessEqual(len(pending), 1, pending)
            newest = steps[-1]
            resumed = run_host(*model, "--steps", newest + 1, "--save", root, "--resume", "auto",
                               "--log-level", "info")
            self.assertIn(f"resumed from {os.path.join(root, f'step_{newest}')} at step {newest}", resumed.stderr)
            self.assertTrue(verifies(os.path.join(root, f"step_{newest + 1}")))

    def test_sigkill_while_snapshotting_every_step(self):
        # Snapshots commit and then remove the older one: whenever the run
        # dies, one whole snapshot is left (two while a removal was cut
        # short, the newer whole), and --resume auto takes the newest.
        rng = random.Random(int(os.environ.get("ACCEL_CRASH_SEED", "20261128")) + 1)
        model = [*COMMON, "--n-embd", 128, "--n-layer", 4]
        for trial in range(3):
            root, snapshots = self.path(f"save{trial}"), self.path(f"snapshots{trial}")
            job = [*model, "--save", root, "--snapshot-every", 1, "--snapshot-dir", snapshots]
            proc = subprocess.Popen([ACCEL_HOST, *map(str, [*job, "--steps", 100000, "--log-level", "warn"])],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60 * TIMEOUT_SCALE
            while time.monotonic() < deadline and not (os.path.isdir(snapshots) and committed_steps(snapshots)):
                if proc.poll() is not None:
                    self.fail(f"accel-host exited early ({proc.returncode}): {proc.stderr.read()}")
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            steps = committed_steps(snapshots)
            self.assertIn(len(steps), (1, 2), f"trial {trial}: {steps}")
            newest = steps[-1]
            self.assertTrue(verifies(os.path.join(snapshots, f"step_{newest}")), f"trial {trial}: torn")
            resumed = run_host(*job, "--steps", newest + 1, "--resume", "auto", "--log-level", "info")
            self.assertIn(f"resumed from {os.path.join(snapshots, f'step_{newest}')} at step {newest}",
                          resumed.stderr)
            # The completed run saved its last step to --save and gave the memory back.
            self.assertTrue(verifies(os.path.join(root, f"step_{newest + 1}")))
            self.assertFalse(os.path.exists(snapshots))


    def test_a_damaged_snapshot_is_never_resumed(self):
        # A byte of the snapshot flipped after its commit (memory is not
        # immune): --resume auto names it and starts from what --save holds.
        root, snapshots = self.path("save"), self.path("snapshots")
        job = [*COMMON, "--save", root, "--snapshot-every", 2, "--snapshot-dir", snapshots]
        proc = subprocess.Popen([ACCEL_HOST, *map(str, [*job, "--steps", 100000, "--log-level", "warn"])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60 * TIMEOUT_SCALE
        while time.monotonic() < deadline and not (os.path.isdir(snapshots) and committed_steps(snapshots)):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        for step in committed_steps(snapshots):
            state = os.path.join(snapshots, f"step_{step}", "trainer_state.json")
            with open(state, "r+b") as f:
                first = f.read(1)
                f.seek(0)
                f.write(bytes([first[0] ^ 1]))
        resumed = run_host(*job, "--steps", 2, "--resume", "auto", "--log-level", "info")
        self.assertIn("is damaged (crc32 mismatch for trainer_state.json", resumed.stderr)
        self.assertIn("no checkpoint under", resumed.stderr)


def pages(size):
    return -(-size // 4096) * 4096


@unittest.skipUnless(os.geteuid() == 0, "mounting a tmpfs needs root")
class DiskFullDuringBackgroundWrites(TempDirMixin, unittest.TestCase):
    """A save root on a tmpfs that fills up in the middle of the third
    checkpoint, at each of its files in turn: the run ends with one line
    naming the file and ENOSPC, and the two checkpoints before it are whole
    and resume."""

    def run_in_tmpfs(self, size, *args):
        mount = self.path("mnt")
        os.makedirs(mount, exist_ok=True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        try:
            root = os.path.join(mount, "save")
            proc = run_host(*args, "--save", root, check=False)
            return proc, {n: verifies(os.path.join(root, n)) for n in os.listdir(root) if "." not in n}
        finally:
            subprocess.run(["umount", mount], check=True)

    def test_enospc_at_each_file_of_a_background_save(self):
        args = [*COMMON, "--steps", 6, "--save-every", 1, "--save-async", "--log-level", "warn"]
        # One checkpoint's files, measured on the ordinary disk.
        run_host(*COMMON, "--steps", 1, "--save", self.path("probe"), "--log-level", "warn")
        probe = os.path.join(self.path("probe"), "step_1")
        files = [(e["file"], e["size"]) for e in manifest_entries(probe)]
        files.append(("manifest.json", os.path.getsize(os.path.join(probe, "manifest.json"))))
        # The order the saver writes them: the host's safetensors files, trainer_state.json, the manifest.
        order = ["model.safetensors", "optimizer.safetensors", "trainer_state.json", "manifest.json"]
        self.assertEqual(sorted(n for n, _ in files), sorted(order))
        size_of = dict(files)
        whole = sum(pages(size) for size in size_of.values())
        for k, name in enumerate(order):
            before = sum(pages(size_of[n]) for n in order[:k])
            # Two whole checkpoints, the third's files before `name`, and half of `name`.
            limit = 2 * whole + before + max(size_of[name] // 2, 1) // 4096 * 4096
            proc, committed = self.run_in_tmpfs(limit, *args)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            errors = [line for line in proc.stderr.splitlines() if "[error]" in line]
            self.assertEqual(len(errors), 1, proc.stderr)
            self.assertIn("checkpoint", errors[0])
            self.assertIn(name, errors[0])
            self.assertIn("No space left on device", errors[0])
            self.assertEqual(sorted(committed), ["step_1", "step_2"], proc.stderr)
            self.assertTrue(all(committed.values()), committed)

if __name__ == "__main__":
    unittest.main()
